#!/usr/bin/env python3
"""A stand-in for Slurm's `sbatch`, `srun`, `scontrol` and `squeue` that runs submitted job scripts on this
machine, so the job scripts datatrove's `SlurmPipelineExecutor` generates are executed for real.

`sbatch [--export=ALL,K=V] [--dependency=afterok:ID,...] SCRIPT`: runs SCRIPT once per index of its
`#SBATCH --array=A-B` (sequentially, before returning, so dependencies are always satisfied in order),
with SLURM_ARRAY_TASK_ID, SLURM_JOB_ID, SLURM_NODELIST set and output to its `#SBATCH --output` file;
a job that depends (afterok) on a failed one does not run. Job ids and failures live in $SLURM_STUB_STATE.
Installed by symlinking this file under each command's name (the name decides the behaviour).
"""

import os
import re
import subprocess
import sys
from pathlib import Path

STATE = Path(os.environ.get("SLURM_STUB_STATE", "/tmp/slurm-stub"))


def _next_id() -> int:
    STATE.mkdir(parents=True, exist_ok=True)
    counter = STATE / "last_id"
    job = int(counter.read_text()) + 1 if counter.exists() else 1000
    counter.write_text(str(job))
    return job


def sbatch(args: list[str]) -> int:
    env, deps, script = dict(os.environ), [], None
    for a in args:
        if a.startswith("--export="):
            for kv in a.split("=", 1)[1].split(",")[1:]:
                k, _, v = kv.partition("=")
                env[k] = v
        elif a.startswith("--dependency="):
            deps = a.split("=", 1)[1].split(",")
        else:
            script = a
    text = Path(script).read_text()
    job = _next_id()
    failed = {line for line in (STATE / "failed").read_text().split()} if (STATE / "failed").exists() else set()
    if any(d.startswith("afterok:") and d.split(":", 1)[1] in failed for d in deps):
        (STATE / "failed").open("a").write(f"{job}\n")
        print(f"Submitted batch job {job}")
        return 0
    m = re.search(r"^#SBATCH --array=(\d+)-(\d+)", text, re.M)
    lo, hi = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
    out = re.search(r"^#SBATCH --output=(\S+)", text, re.M)
    ok = True
    for i in range(lo, hi + 1):
        env.update(SLURM_ARRAY_TASK_ID=str(i), SLURM_JOB_ID=str(job), SLURM_ARRAY_JOB_ID=str(job),
                   SLURM_NODELIST="localhost")
        log = out.group(1).replace("%A", str(job)).replace("%a", str(i)) if out else os.devnull
        Path(log).parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as f:
            ok &= subprocess.run(["bash", script], env=env, stdout=f, stderr=subprocess.STDOUT).returncode == 0
    if not ok:
        with open(STATE / "failed", "a") as f:
            f.write(f"{job}\n")
    (STATE / "submitted").open("a").write(f"{job} {script}\n")
    print(f"Submitted batch job {job}")
    return 0


def srun(args: list[str]) -> int:
    i = 0
    while i < len(args) and args[i].startswith("-"):
        i += 2 if args[i] in ("-n", "-N", "-c") else 1
    os.execvp(args[i], args[i:])


def main() -> int:
    name, args = Path(sys.argv[0]).name, sys.argv[1:]
    if name == "sbatch":
        return sbatch(args)
    if name == "srun":
        return srun(args)
    if name == "scontrol":
        if args[:2] == ["show", "hostnames"]:
            print("localhost")
        return 0
    if name == "squeue":
        print("JOBID PARTITION NAME USER ST TIME NODES NODELIST(REASON)")
        return 0
    print(f"slurm_stub: unknown command {name}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
