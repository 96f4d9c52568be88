"""Does a shorter main recipe give a worse checkpoint? `recipes/tiny-cpu.yaml` pretrained for each of --steps
(same recipe otherwise: the linear schedule ends at max_steps), then fine-tuned on ChnSentiCorp (full train
split, lr 2e-3, 3 epochs, mean pooling, seq-len 128) with --seeds seeds, beside random init of the same config.
Prints validation MLM accuracy and test accuracy mean ± std per length; the baseline is the recipe's own length.

    python -m bench.main_recipe_length --steps 5000 3750 --seeds 3 --data SHARDDIR --tokenizer TOKDIR

On a GPU the pretraining runs in fp32 (`--precision fp32`) so it computes what a CPU without bf16 computes.
`--quick`: 4 and 2 steps on 200 lines per sample file, one seed, one epoch of fine-tuning on 64 of every 20th
ChnSentiCorp example of each split, everything in a temp folder (a smoke test; its accuracies mean nothing).
"""

from __future__ import annotations

import json
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from bench import REPO
from bench.cli import parse
from bench.timing import machine
from zh_bert.core.config import option
from zh_bert.core.fileio import claim_dir, scratch_dir, write_text


@dataclass
class Options:
    steps: list[int] = option(default_factory=lambda: [5000, 3750], help="pretraining lengths (max_steps), the "
                              "first one the baseline")
    seeds: int = option(3, help="fine-tuning seeds per length")
    data: Optional[str] = option(None, help="SHARDDIR built by the recipe (default: the recipe's raw corpus)")
    tokenizer: Optional[str] = option(None, help="TOKDIR of --data")
    precision: str = option("fp32", help="pretraining precision")
    out: str = option("runs/recipe-length", help="folder of the steps-N run dirs")
    quick: bool = option(False, help="toy size in a temp folder: a smoke test")


def main(argv: list[str] | None = None) -> int:
    args = parse(Options, "main_recipe_length", __doc__, argv)
    if not args.quick:
        from zh_bert.core.errors import ZhBertError

        try:   # before any work: --out holds only this bench's steps-N run dirs (pretrain checks each itself)
            claim_dir(args.out, flag="--out", what="a folder of bench/main_recipe_length.py",
                      legacy=lambda name, is_dir: is_dir and re.fullmatch(r"steps-\d+", name) is not None,
                      proof=lambda p: any((d / "run.json").is_file() for d in Path(p).glob("steps-*")))
        except ZhBertError as e:
            print(f"main_recipe_length: error: {e}", file=sys.stderr)
            return 2
        return measure(args, {}, dict(lr=2e-3, epochs=3, pooling="mean", seq_len=128))
    with scratch_dir("zh-bert-bench-") as tmp:
        args.steps, args.seeds, args.out = [4, 2], 1, f"{tmp}/runs"
        corpus = Path(tmp) / "quick.txt"
        lines = [l for name in ("zhwiki_sampled.txt", "CLUECorpusSmall_sampled.txt")
                 for l in (REPO / "corpora" / "sample" / name).read_text(encoding="utf-8").split("\n")[:200] if l.strip()]
        write_text(corpus, "\n".join(lines) + "\n")
        recipe = {"valid_docs": 20, "eval_batches": 2, "warmup_steps": 1, "data_cache": f"{tmp}/cache"}
        if not args.data:
            recipe["data"] = str(corpus)
        return measure(args, recipe, dict(lr=2e-3, epochs=1, pooling="mean", seq_len=64, max_train=64), every=20)


def measure(args, recipe: dict, ft: dict, every: int = 1) -> int:
    """Pretrain for each length (recipe overrides `recipe`), fine-tune each with `ft` on every `every`-th
    example of each split, print the table."""
    import dataclasses

    from zh_bert.evaluation.heads.classify import run_classifier
    from zh_bert.evaluation.loop import FinetuneConfig
    from zh_bert.train.pretrain import train
    from zh_bert.train.recipe import load_recipe
    from zh_bert.evaluation.tasks.classification import load_task

    task = load_task("chnsenticorp")
    task = dataclasses.replace(task, train=task.train[::every], dev=task.dev[::every],
                               test=task.test[::every] if task.test else task.test)
    seeds = list(range(42, 42 + args.seeds))
    print(f"machine: {machine()}", flush=True)
    rows = []
    for steps in args.steps:
        over = {**recipe, "max_steps": steps, "out_dir": f"{args.out}/steps-{steps}", "precision": args.precision,
                "save_every": 0}
        if args.data:
            over.update(data=args.data, tokenizer=args.tokenizer)
        t0 = time.perf_counter()
        summary = train(load_recipe(REPO / "recipes" / "tiny-cpu.yaml", over), log=lambda *a: None)
        wall = time.perf_counter() - t0
        res = run_classifier(over["out_dir"], task, FinetuneConfig(**ft), seeds, log=lambda m: None).summary()
        rows.append((f"{steps} steps ({summary['tokens_seen'] / 1e6:.1f}M tokens)", summary, res, wall))
        print(json.dumps({"steps": steps, "val": summary["final_validation"], "tokens_per_s": summary["tokens_per_s"],
                          "wall_s": round(wall, 1), "finetune": {k: res[k] for k in res if "acc" in k}}), flush=True)
    rand = run_classifier(f"{args.out}/steps-{args.steps[0]}", task, FinetuneConfig(**ft, random_init=True), seeds,
                          log=lambda m: None).summary()
    print(f"\n{'pretraining':<28} {'val mlm acc':>11} {'test acc (mean ± std)':>24} {'dev acc':>18}")
    for name, summary, res, _ in rows:
        print(f"{name:<28} {summary['final_validation']['mlm_acc']:>11.4f} "
              f"{res['test_acc'] * 100:>15.1f} ± {res.get('test_acc_std', 0) * 100:.1f}   "
              f"{res['dev_acc'] * 100:>9.1f} ± {res.get('dev_acc_std', 0) * 100:.1f}")
    print(f"{'random init':<28} {'-':>11} {rand['test_acc'] * 100:>15.1f} ± {rand.get('test_acc_std', 0) * 100:.1f}   "
          f"{rand['dev_acc'] * 100:>9.1f} ± {rand.get('dev_acc_std', 0) * 100:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
