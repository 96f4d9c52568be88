"""The process settings `zh-bert pretrain` makes on a CPU, each against its absence, on the main recipe.

`keep_freed_memory` (glibc keeps freed blocks up to 32 MiB instead of unmapping or trimming them) against
glibc's defaults, and the OpenMP wait policy `pretrain` picks on an idle machine (ACTIVE) against PASSIVE.
Each run is `recipes/tiny-cpu.yaml` for --steps steps in a fresh process (the settings are per process),
data cached once up front; the variants alternate so that drift in a shared machine's speed hits all alike.
Prints median tokens/s and minor page faults per variant and the ratio against the baseline (glibc defaults,
ACTIVE). The arithmetic is the same in every variant: the printed final losses must agree.

    python -m bench.cpu_runtime --steps 300 --repeat 3
    python -m bench.cpu_runtime --quick      # every variant for a few steps on 400 sample documents (a smoke test)
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench import REPO
from bench.cli import parse
from bench.timing import machine
from zh_bert.core.config import option
from zh_bert.core.fileio import parse_json, scratch_dir, write_text


@dataclass
class Options:
    steps: int = option(300, help="training steps per run")
    repeat: int = option(3, help="runs per variant (median)")
    every: int = option(100, help="validate and checkpoint every N steps, as the recipe does every 1000 (0 = never)")
    recipe: str = option(str(REPO / "recipes" / "tiny-cpu.yaml"))
    quick: bool = option(False, help="a smoke test: 3 steps per variant, one repeat, on the first 200 lines of "
                         "each sample file")

CHILD = """
import json, resource, sys
import zh_bert.train.pretrain as pretrain
if sys.argv[1] == "default":
    pretrain.keep_freed_memory = lambda: "unchanged: benchmark baseline"
out = sys.argv[2]
assert pretrain.main([sys.argv[3], "--set", "out_dir=" + out] + [a for kv in sys.argv[4:] for a in ("--set", kv)]) == 0
run = json.load(open(out + "/run.json", encoding="utf-8"))
print("RESULT", json.dumps({"tokens_per_s": run["tokens_per_s"], "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt,
                            "loss": run["final_validation"]["mlm_loss"], "malloc": run["hardware"]["malloc"]}))
"""

VARIANTS = {   # name -> (malloc mode, OMP_WAIT_POLICY)
    "glibc defaults, ACTIVE (baseline)": ("default", "ACTIVE"),
    "keep_freed_memory, ACTIVE (what pretrain does when idle)": ("kept", "ACTIVE"),
    "keep_freed_memory, PASSIVE": ("kept", "PASSIVE"),
}


def run_one(mode: str, policy: str, recipe: str, sets: list[str], tmp: Path) -> dict:
    """One pretrain run in a fresh process; `sets` are recipe overrides (KEY=VALUE). Its out_dir is a new
    path inside a fresh temp folder (pretrain refuses a folder it did not write)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
    env["OMP_WAIT_POLICY"] = policy
    out = str(Path(tempfile.mkdtemp(dir=tmp)) / "run")
    p = subprocess.run([sys.executable, "-c", CHILD, mode, out, recipe, *sets], env=env, cwd=REPO,
                       capture_output=True, text=True)
    if p.returncode:
        sys.exit(p.stderr[-2000:])
    return parse_json(next(l for l in p.stdout.splitlines() if l.startswith("RESULT"))[7:], "the run's RESULT line")


def quick_corpus(tmp: Path, lines: int) -> str:
    """The first `lines` non-empty lines of each sample file the recipe trains on, as one text file."""
    out = tmp / "quick.txt"
    keep = []
    for name in ("zhwiki_sampled.txt", "CLUECorpusSmall_sampled.txt"):
        text = (REPO / "corpora" / "sample" / name).read_text(encoding="utf-8")
        keep += [l for l in text.split("\n") if l.strip()][:lines]
    write_text(out, "\n".join(keep) + "\n")
    return str(out)


def main(argv: list[str] | None = None) -> int:
    args = parse(Options, "cpu_runtime", __doc__, argv)
    print(machine())
    with scratch_dir("zh-bert-bench-") as d:
        tmp, sets = Path(d), ["data_cache=" + str(Path(d) / "cache")]
        if args.quick:   # the first variant's run cleans, builds the vocab and shards
            args.steps, args.repeat, args.every = 3, 1, 0
            sets += ["data=" + quick_corpus(tmp, 200), "valid_docs=20", "eval_batches=2", "warmup_steps=1"]
        else:            # clean, vocab and shard once, untimed
            run_one("kept", "ACTIVE", args.recipe, sets + ["max_steps=1", "eval_every=0", "save_every=0"], tmp)
        sets += [f"max_steps={args.steps}", f"eval_every={args.every}", f"save_every={args.every}"]
        got = {name: [] for name in VARIANTS}
        for _ in range(args.repeat):
            for name, (mode, policy) in VARIANTS.items():
                got[name].append(run_one(mode, policy, args.recipe, sets, tmp))
    base = statistics.median(r["tokens_per_s"] for r in got[next(iter(VARIANTS))])
    for name, rows in got.items():
        tps = statistics.median(r["tokens_per_s"] for r in rows)
        print(f"{name:58s} {tps:8.0f} tokens/s ({', '.join('%.0f' % r['tokens_per_s'] for r in rows)})  "
              f"{tps / base:.2f}x  minor faults {statistics.median(r['faults'] for r in rows) / 1e6:.2f} M  "
              f"val loss {rows[0]['loss']:.6f}  [{rows[0]['malloc']}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
