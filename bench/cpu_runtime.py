"""The process settings `zh-bert pretrain` makes on a CPU, each against its absence, on the main recipe.

`keep_freed_memory` (glibc keeps freed blocks up to 32 MiB instead of unmapping or trimming them) against
glibc's defaults, and the OpenMP wait policy `pretrain` picks on an idle machine (ACTIVE) against PASSIVE.
Each run is `recipes/tiny-cpu.yaml` for --steps steps in a fresh process (the settings are per process),
data cached once up front; the variants alternate so that drift in a shared machine's speed hits all alike.
Prints median tokens/s and minor page faults per variant and the ratio against the baseline (glibc defaults,
ACTIVE). The arithmetic is the same in every variant: the printed final losses must agree.

    python bench/cpu_runtime.py --steps 300 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from _timing import machine  # noqa: E402

CHILD = """
import json, resource, sys
import zh_bert.pretrain as pretrain
if sys.argv[1] == "default":
    pretrain.keep_freed_memory = lambda: "unchanged: benchmark baseline"
out = sys.argv[2]
assert pretrain.main([sys.argv[3], "--set", "out_dir=" + out, "--set", "data_cache=" + sys.argv[4],
                      "--set", "max_steps=" + sys.argv[5], "--set", "eval_every=" + sys.argv[6], "--set", "save_every=" + sys.argv[6]]) == 0
run = json.load(open(out + "/run.json", encoding="utf-8"))
print("RESULT", json.dumps({"tokens_per_s": run["tokens_per_s"], "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt,
                            "loss": run["final_validation"]["mlm_loss"], "malloc": run["hardware"]["malloc"]}))
"""

VARIANTS = {   # name -> (malloc mode, OMP_WAIT_POLICY)
    "glibc defaults, ACTIVE (baseline)": ("default", "ACTIVE"),
    "keep_freed_memory, ACTIVE (what pretrain does when idle)": ("kept", "ACTIVE"),
    "keep_freed_memory, PASSIVE": ("kept", "PASSIVE"),
}


def run_one(mode: str, policy: str, recipe: str, cache: str, steps: int, every: int, tmp: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
    env["OMP_WAIT_POLICY"] = policy
    out = tempfile.mkdtemp(dir=tmp)
    p = subprocess.run([sys.executable, "-c", CHILD, mode, out, recipe, cache, str(steps), str(every)], env=env, cwd=REPO,
                       capture_output=True, text=True)
    if p.returncode:
        sys.exit(p.stderr[-2000:])
    return json.loads(next(l for l in p.stdout.splitlines() if l.startswith("RESULT"))[7:])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--every", type=int, default=100,
                    help="validate and checkpoint every N steps, as the recipe does every 1000 (0 = never)")
    ap.add_argument("--recipe", default=str(REPO / "recipes" / "tiny-cpu.yaml"))
    args = ap.parse_args()
    print(machine())
    with tempfile.TemporaryDirectory() as d:
        tmp, cache = Path(d), str(Path(d) / "cache")
        run_one("kept", "ACTIVE", args.recipe, cache, 1, 0, tmp)   # clean, vocab and shard once
        got = {name: [] for name in VARIANTS}
        for _ in range(args.repeat):
            for name, (mode, policy) in VARIANTS.items():
                got[name].append(run_one(mode, policy, args.recipe, cache, args.steps, args.every, tmp))
    base = statistics.median(r["tokens_per_s"] for r in got[next(iter(VARIANTS))])
    for name, rows in got.items():
        tps = statistics.median(r["tokens_per_s"] for r in rows)
        print(f"{name:58s} {tps:8.0f} tokens/s ({', '.join('%.0f' % r['tokens_per_s'] for r in rows)})  "
              f"{tps / base:.2f}x  minor faults {statistics.median(r['faults'] for r in rows) / 1e6:.2f} M  "
              f"val loss {rows[0]['loss']:.6f}  [{rows[0]['malloc']}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
