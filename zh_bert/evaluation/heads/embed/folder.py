"""The embedder as a sentence-transformers folder: what `finetune --save DIR` writes for the embed head, and how
`zh-bert embed` reads one back.

The layout every sentence-transformers version since 2.x reads as it is (6.x writes a newer one and loads this one
with the same vectors): the stock encoder at the root (config.json in both transformers majors' keys,
model.safetensors, the tokenizer files and vocab.txt), `modules.json` naming three modules (Transformer, Pooling,
Normalize), `sentence_bert_config.json` (the max length), `1_Pooling/config.json`, and
`config_sentence_transformers.json` with the similarity function (cosine). No custom code: `SentenceTransformer(DIR)`
loads it, and `AutoModel` / `AutoTokenizer` load the encoder alone. A README.md model card carries the figures in
the model-index convention of MTEB's cards (task type STS, the dataset, split test, metric cosine_spearman x100).
"""

from __future__ import annotations

from pathlib import Path

from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import (atomic_dir, copy_file, read_json, read_object, save_pretrained, write_json,
                                 write_text)
from zh_bert.evaluation.heads.embed.pooling import Pooling, pooling_of_st
from zh_bert.train.arch import of_config

MODULES = "modules.json"
POOLING_CONFIG = "1_Pooling/config.json"
NORMALIZE = "2_Normalize"
MAX_SEQ_LEN = 1 << 20
#: what sentence-transformers reads from the folder (classic module paths, which its 6.x maps to the new ones)
MODULE_ROWS = ({"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
               {"idx": 2, "name": "2", "path": NORMALIZE, "type": "sentence_transformers.models.Normalize"})


def is_st_folder(folder: Path) -> bool:
    return (Path(folder) / MODULES).is_file()


def st_pooling(folder: Path) -> Pooling:
    """The pooling a sentence-transformers folder declares, refused in one line when zh-bert cannot reproduce it
    (a Dense layer after pooling, max or last-token pooling)."""
    modules = read_json(Path(folder) / MODULES)
    kinds = [m.get("type", "") if isinstance(m, dict) else "" for m in modules] if isinstance(modules, list) else []
    extra = [k for k in kinds if not k.rsplit(".", 1)[-1].lower().startswith(("transformer", "pooling", "normalize"))]
    if extra or not any("ooling" in k for k in kinds):
        raise ZhBertError(f"{folder / MODULES}: modules {', '.join(k.rsplit('.', 1)[-1] for k in kinds) or 'none'}: "
                          f"zh-bert reads a Transformer, a Pooling and a Normalize module only")
    config = read_json(Path(folder) / POOLING_CONFIG, default={})
    pooling = pooling_of_st(config if isinstance(config, dict) else {})
    if pooling is None:
        raise ZhBertError(f"{folder / POOLING_CONFIG}: a pooling zh-bert does not compute (it computes mean and cls)")
    return pooling


def st_seq_len(folder: Path) -> int | None:
    """The max length a sentence-transformers folder declares, what `SentenceTransformer(DIR)` cuts texts at:
    `max_seq_length` in `sentence_bert_config.json` (5.x and earlier), else the tokenizer's `model_max_length`
    (where 6.x keeps it); None for another folder or a tokenizer without a real limit (its 1e30 placeholder)."""
    folder = Path(folder)
    if not is_st_folder(folder):
        return None
    config = folder / "sentence_bert_config.json"
    if config.is_file():
        record = read_object(config, what="sentence-transformers' config")
        if record.raw("max_seq_length") is not None:
            return record.integer("max_seq_length", lo=1, hi=MAX_SEQ_LEN)
    tokenizer = folder / "tokenizer_config.json"
    if not tokenizer.is_file():
        return None
    limit = read_object(tokenizer, what="the tokenizer's config").raw("model_max_length")
    return limit if type(limit) is int and 1 <= limit <= MAX_SEQ_LEN else None


def card(name: str, base: str, pooling: Pooling, seq_len: int, trained: str, results: list[dict]) -> str:
    """README.md: metadata, the model-index (MTEB's convention), what it is and how to use it."""
    lines = ["---", "language:", "- zh", "library_name: sentence-transformers", "pipeline_tag: sentence-similarity",
             "tags:", "- sentence-transformers", "- sentence-similarity", "- feature-extraction", "- zh-bert",
             f"base_model: {base}" if base.count("/") == 1 and not Path(base).exists() else "", "model-index:",
             f"- name: {name}", "  results:"]
    lines = [x for x in lines if x]
    for r in results:
        lines += ["  - task:", "      type: STS", "    dataset:", f"      type: {r['dataset_type']}",
                  f"      name: {r['dataset_name']}", "      config: default", f"      split: {r['split']}",
                  "    metrics:", "    - type: cosine_spearman", f"      value: {r['value']:.2f}",
                  "    - type: main_score", f"      value: {r['value']:.2f}"]
    if not results:
        lines += ["  - {}"]
    lines += ["---", "", f"# {name}", "",
              f"A Chinese sentence embedder made with zh-bert from `{base}`: {trained}. Sentences become one vector each "
              f"({pooling.name} pooling of the encoder's tokens, L2-normalised); compare them by cosine. Texts longer "
              f"than {seq_len} tokens are cut.", ""]
    if results:
        lines += ["| set | split | Spearman x100 |", "|---|---|---|"]
        lines += [f"| {r['dataset_name']} | {r['split']} | {r['value']:.2f} |" for r in results]
        lines.append("")
    lines += ["```python", "from sentence_transformers import SentenceTransformer", "",
              f'model = SentenceTransformer("{name}")',
              'vectors = model.encode(["今天天气很好", "今天是个晴天"], normalize_embeddings=True)',
              "print(vectors[0] @ vectors[1])", "```", "",
              f"Or with zh-bert: `zh-bert embed {name} texts.txt -o vectors.npy`.", ""]
    return "\n".join(lines)


def save_embedder(model, tok, ckpt_dir: Path, out: Path, pooling: Pooling, seq_len: int, card_text: str,
                  log=print) -> None:
    """The encoder as a sentence-transformers folder at `out` (claimed before training; replaced whole)."""
    config = pooling.st_config(model.config.hidden_size)
    if config is None:
        raise ZhBertError(f"--save with --pooling {pooling.name}: sentence-transformers has no such pooling; train "
                          f"with --pooling mean or cls to save")
    with atomic_dir(out, overwrite=True) as tmp:
        save_pretrained(model, tmp, safe_serialization=True)
        of_config(model.config).save_config(tmp)
        save_pretrained(tok, tmp)
        if (Path(ckpt_dir) / "vocab.txt").is_file():
            copy_file(Path(ckpt_dir) / "vocab.txt", tmp / "vocab.txt")
        write_json(tmp / MODULES, list(MODULE_ROWS))
        write_json(tmp / "sentence_bert_config.json", {"max_seq_length": seq_len, "do_lower_case": False})
        write_json(tmp / "config_sentence_transformers.json", {"prompts": {}, "default_prompt_name": None,
                                                                "similarity_fn_name": "cosine"})
        write_json(tmp / POOLING_CONFIG, config)
        write_json(tmp / NORMALIZE / "config.json", {})
        write_text(tmp / "README.md", card_text)
    log(f"saved the embedder to {out} (a sentence-transformers folder: SentenceTransformer({str(out)!r}))")
