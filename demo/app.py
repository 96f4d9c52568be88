"""zh-bert cloze demo: the same app as `zh-bert demo`, runnable as a Hugging Face Space or `python demo/app.py`.

Models: command-line arguments, else $ZH_BERT_MODELS (comma-separated model folders, run dirs or catalog aliases
such as `uer-tiny`, `bert-base-chinese`), else the README's tiny run (runs/tiny-cpu/final), else `uer-tiny` from the
Hub. On a Space, put the `zh_bert/` package folder next to this file (see demo/README.md).
"""

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]  # zh_bert/ beside app.py (Space) or in the checkout above it
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

from zh_bert.release.demo import DEFAULT_RUN, build_app, default_models, serve  # noqa: E402
from zh_bert.train.rundir import is_model_dir  # noqa: E402

requested = sys.argv[1:] or [m for m in os.environ.get("ZH_BERT_MODELS", "").split(",") if m]
models = default_models(requested) if requested or is_model_dir(DEFAULT_RUN) else ["uer-tiny"]
demo = build_app(models)

if __name__ == "__main__":
    on_space = bool(os.environ.get("SPACE_ID"))
    serve(demo, host="0.0.0.0" if on_space else os.environ.get("ZH_BERT_HOST", "127.0.0.1"),
          port=int(os.environ.get("PORT", 7860)))
