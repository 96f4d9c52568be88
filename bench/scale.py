"""Scale benchmark: `zh-bert clean --dedup minhash` and `zh-bert shard` through `--executor local` on synthetic
Chinese corpora of 100 MB, 300 MB and 1 GB, against the in-process commands run on the same corpus.

    python -m bench.scale [--sizes 100,300,1000] [--baseline-sizes 100] [--tasks 16] [--workers 2]
                          [--work-dir /tmp/zh-bert-scale] [--keep] [--skip-shard] [--json OUT.json]
    python -m bench.scale --quick    # every path on a 1 MB corpus, 2 tasks, in a temp work dir (a smoke test)

Per size: bench/scale_corpus.py writes the corpus (random draws of sentences from corpora/sample/, with planted
exact and near duplicates at 5-gram Jaccard 0.85-0.95 across task boundaries; reused from --work-dir when
there), then each command runs as a subprocess (`python -m zh_bert`, this checkout):
    zh-bert clean INPUT -o OUTDIR --dedup minhash --executor local --tasks T --workers W
    zh-bert shard OUTDIR --tokenizer TOK -o SHARDDIR --executor local --tasks T --workers W
and at --baseline-sizes the in-process `clean -o OUT.jsonl --workers W` and `shard OUT.jsonl`. Measured:
wall seconds, CPU seconds (all reaped descendants), MB/s (input bytes / wall: the corpus for clean, the
cleaned JSONL for shard), MB/s per core (/ W), the ratio to the in-process command at the same size (or the
nearest measured size, marked *), the peak RSS of every process of the tree (psutil, polled every 0.1 s, max
per pid; reported: the largest process, the command's own process, its largest descendant, and the tree's
largest sum at one instant), and for clean the dedup recall and precision on the planted pairs.
TOK is built once with `zh-bert vocab --kind char` on the bundled sample. Prints a markdown table with the
command, date and machine line; writes everything to --json (default WORK_DIR/scale.json).
"""

from __future__ import annotations

import datetime
import json
import os
import re
import resource
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from bench import REPO
from bench.cli import comma_floats, parse
from bench.scale_corpus import SAMPLE, CorpusSpec, dedup_quality, generate, output_files, sentence_pool
from bench.timing import machine
from zh_bert.core.config import option
from zh_bert.core.fileio import claim_dir, claim_file, open_for_write, read_json, remove_scratch, scratch_dir, write_text

WORK_MARKER = ".zh-bert-scale-work"
COMMANDS = ("python -m bench.scale", "python bench/scale.py")   # a record's command: this module's, or its script's
POLL_S = 0.1


@dataclass
class Options:
    sizes: list[float] = option(default_factory=lambda: [100.0, 300.0, 1000.0], type=comma_floats, nargs=None,
                                metavar="MB,MB", help="corpus sizes in MB (comma-separated)")
    baseline_sizes: Optional[list[float]] = option(None, type=comma_floats, nargs=None, metavar="MB,MB",
                                                   help="sizes at which the in-process clean and shard run too "
                                                   "(default: the smallest size)")
    tasks: int = option(16)
    workers: int = option(2)
    seed: int = option(0)
    work_dir: str = option("/tmp/zh-bert-scale")
    keep: bool = option(False, help="keep corpora and outputs (else deleted after each size)")
    skip_shard: bool = option(False)
    json: Optional[str] = option(None, help="results file (default: WORK_DIR/scale.json)")
    quick: bool = option(False, help="a smoke test: 1 MB, baseline at 1 MB, 2 tasks, in a fresh temp work dir "
                         "(removed)")


def zh_bert(*args: str) -> list[str]:
    """A zh-bert command line running this checkout's package."""
    return [sys.executable, "-m", "zh_bert", *args]


def shown(cmd: list[str]) -> str:
    """The command as a user types it."""
    return "zh-bert " + shlex.join(cmd[3:]) if cmd[1:3] == ["-m", "zh_bert"] else shlex.join(cmd)


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def measure(cmd: list[str], log: Path) -> dict:
    """Run `cmd`, polling the RSS of its whole process tree; wall/CPU seconds and peak RSS (MB) per role."""
    import psutil

    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    peak: dict[int, int] = {}
    tree_peak, cpu0, t0 = 0, _children_cpu(), time.perf_counter()
    with open_for_write(log) as out:
        proc = psutil.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO)
        while proc.poll() is None:
            total = 0
            try:
                procs = [proc] + proc.children(recursive=True)
            except psutil.Error:
                procs = [proc]
            for p in procs:
                try:
                    rss = p.memory_info().rss
                except psutil.Error:
                    continue
                total += rss
                peak[p.pid] = max(peak.get(p.pid, 0), rss)
            tree_peak = max(tree_peak, total)
            time.sleep(POLL_S)
    wall, cpu = time.perf_counter() - t0, _children_cpu() - cpu0
    mb = 1 / 2**20
    kids = [v for k, v in peak.items() if k != proc.pid]
    return {"command": shown(cmd), "rc": proc.returncode, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
            "processes": len(peak), "peak_rss_mb": round(max(peak.values(), default=0) * mb, 1),
            "peak_rss_main_mb": round(peak.get(proc.pid, 0) * mb, 1),
            "peak_rss_child_mb": round(max(kids, default=0) * mb, 1),
            "peak_rss_tree_mb": round(tree_peak * mb, 1),
            "peak_rss_per_process_mb": sorted((round(v * mb, 1) for v in peak.values()), reverse=True),
            "log": str(log)}


def has_executor(command: str) -> bool:
    """Whether this checkout's `zh-bert COMMAND` takes --executor."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    res = subprocess.run(zh_bert(command, "--help"), capture_output=True, text=True, env=env, cwd=REPO)
    return "--executor" in res.stdout


def tokenizer(work: Path) -> Path:
    """A char tokenizer dir built once from the bundled sample (every character of the corpus is in it)."""
    tok = work / "tok"
    if not (tok / "zh_bert_vocab.json").is_file():
        cmd = zh_bert("vocab", str(SAMPLE / "CLUECorpusSmall_sampled.txt"), str(SAMPLE / "zhwiki_sampled.txt"),
                      "-o", str(tok), "--kind", "char", "--force", "-q")
        r = measure(cmd, work / "vocab.log")
        if r["rc"]:
            sys.exit(f"vocab failed (rc {r['rc']}), see {r['log']}")
    return tok


def text_bytes(out: Path) -> int:
    """Uncompressed bytes of a clean output (what shard reads)."""
    import gzip

    total = 0
    for p in output_files(out):
        if p.name.endswith(".gz"):
            with gzip.open(p, "rb") as f:
                total += sum(len(b) for b in iter(lambda: f.read(1 << 22), b""))
        else:
            total += p.stat().st_size
    return total


def clean_report(out: Path) -> dict:
    path = out / "report.json" if out.is_dir() else out.with_name(out.name[:-len(".jsonl")] + ".report.json")
    return read_json(path)


def run_path(name: str, cmd: list[str], in_mb: float, args, logdir: Path, corpus: Path | None = None,
             out: Path | None = None) -> dict:
    """One measured command; for clean (corpus given), the dedup quality of its output."""
    print(f"  {name}: {shown(cmd)}", flush=True)
    r = measure(cmd, logdir / f"{name.replace(' ', '_')}.log")
    r.update(path=name, input_mb=round(in_mb, 2), mb_per_s=round(in_mb / r["wall_s"], 3),
             mb_per_s_per_core=round(in_mb / r["wall_s"] / args.workers, 3),
             mb_per_cpu_s=round(in_mb / max(r["cpu_s"], 1e-9), 3))
    if r["rc"]:
        print(f"    FAILED rc {r['rc']}; log: {r['log']}\n" + Path(r["log"]).read_text(errors="replace")[-2000:],
              flush=True)
        return r
    if corpus is not None:
        r["report"] = {k: v for k, v in clean_report(out).items() if k in
                       ("docs_in", "docs_out", "filtered", "duplicates", "seconds", "mb_per_s")}
        r["quality"] = dedup_quality(corpus, out, clean_report(out))
    q = r.get("quality", {})
    print(f"    {r['wall_s']} s, {r['mb_per_s']} MB/s, peak RSS {r['peak_rss_mb']} MB (main "
          f"{r['peak_rss_main_mb']}, child {r['peak_rss_child_mb']}, {r['processes']} processes)"
          + (f", recall {q['recall']}, precision {q['precision']}" if q else ""), flush=True)
    return r


def run_size(size: float, args, tok: Path, pool, executor: dict) -> dict:
    """Generate the corpus of `size` MB and run every selected path on it."""
    work = Path(args.work_dir)
    corpus, runs = work / f"corpus-{size:g}MB", []
    t0 = time.perf_counter()
    truth = generate(CorpusSpec(size_mb=size, tasks=args.tasks, seed=args.seed), corpus, args.workers, pool)
    summary = {k: v for k, v in truth.items() if k != "planted"}
    print(f"\n## {size:g} MB: {truth['docs']:,} docs, {truth['bytes'] / 1e6:.1f} MB, {truth['exact']} exact + "
          f"{truth['near']} near planted (Jaccard {truth['near_jaccard']}), random pairs {truth['random_pair_jaccard']}"
          f"; corpus ready in {time.perf_counter() - t0:.1f} s", flush=True)
    out, logs = work / f"out-{size:g}MB", work / "logs" / f"{size:g}MB"
    remove_scratch(out)
    out.mkdir(parents=True)
    logs.mkdir(parents=True, exist_ok=True)
    mb, w, t = truth["bytes"] / 1e6, str(args.workers), str(args.tasks)
    baseline = size in args.baseline_sizes
    inproc, outdir = out / "inproc.jsonl", out / "clean"
    if baseline:
        runs.append(run_path("clean in-process", zh_bert("clean", str(corpus / "input"), "-o", str(inproc),
                             "--dedup", "minhash", "--workers", w, "-q"), mb, args, logs, corpus, inproc))
    if executor["clean"]:
        runs.append(run_path("clean executor", zh_bert("clean", str(corpus / "input"), "-o", str(outdir), "--dedup",
                             "minhash", "--executor", "local", "--tasks", t, "--workers", w, "-q"),
                             mb, args, logs, corpus, outdir))
    if not args.skip_shard:
        if executor["shard"] and outdir.is_dir() and runs[-1]["rc"] == 0:
            runs.append(run_path("shard executor", zh_bert("shard", str(outdir), "--tokenizer", str(tok), "-o",
                                 str(out / "shards"), "--executor", "local", "--tasks", t, "--workers", w),
                                 text_bytes(outdir) / 1e6, args, logs))
        if baseline and inproc.is_file():
            runs.append(run_path("shard in-process", zh_bert("shard", str(inproc), "--tokenizer", str(tok), "-o",
                                 str(out / "shards-inproc"), "--workers", w), text_bytes(inproc) / 1e6, args, logs))
    if not args.keep:
        remove_scratch(out)
        remove_scratch(corpus)
    return {"size_mb": size, "corpus": summary, "runs": runs}


def ratios(results: list[dict]) -> None:
    """Each executor run's MB/s (and MB per CPU-second, steadier on a shared machine) over the in-process run
    of the same command at the same size, else at the nearest size measured (marked with *)."""
    base = {}
    for res in results:
        for r in res["runs"]:
            if r["path"].endswith("in-process") and r["rc"] == 0:
                base[(r["path"].split()[0], res["size_mb"])] = r
    for res in results:
        for r in res["runs"]:
            cmd = r["path"].split()[0]
            sizes = [s for (c, s) in base if c == cmd]
            if r["path"].endswith("in-process") or r["rc"] or not sizes:
                continue
            near = min(sizes, key=lambda s: (abs(s - res["size_mb"]), s))
            b = base[(cmd, near)]
            r.update(ratio_to_in_process=round(r["mb_per_s"] / b["mb_per_s"], 3),
                     cpu_ratio_to_in_process=round(r["mb_per_cpu_s"] / b["mb_per_cpu_s"], 3), ratio_at_size_mb=near)


def table(results: list[dict]) -> str:
    rows = ["| size | path | wall s | CPU s | MB/s | MB/s per core | MB per CPU-s | × in-process (wall / CPU) | peak RSS, largest "
            "process (main / child) | processes | recall | precision |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for res in results:
        for r in res["runs"]:
            q = r.get("quality", {})
            ratio = r.get("ratio_to_in_process")
            ratio = "–" if ratio is None else f"{ratio:.2f} / {r['cpu_ratio_to_in_process']:.2f}" + ("" if r["ratio_at_size_mb"] == res["size_mb"]
                                                                 else f"* ({r['ratio_at_size_mb']:g} MB)")
            rss = f"{r['peak_rss_mb']:.0f} MB ({r['peak_rss_main_mb']:.0f} / {r['peak_rss_child_mb']:.0f})"
            rows.append(f"| {res['size_mb']:g} MB | {r['path']}{'' if r['rc'] == 0 else ' (FAILED)'} | "
                        f"{r['wall_s']:.1f} | {r['cpu_s']:.1f} | {r['mb_per_s']:.2f} | {r['mb_per_s_per_core']:.2f} | {r['mb_per_cpu_s']:.2f} | {ratio} | {rss} | "
                        f"{r['processes']} | {q.get('recall', '–')} | {q.get('precision', '–')} |")
    return "\n".join(rows)


def memory_growth(results: list[dict]) -> list[str]:
    """Per path: the largest process's peak RSS at the smallest and largest size (flat = within 20%)."""
    lines = []
    for path in dict.fromkeys(r["path"] for res in results for r in res["runs"]):
        seen = [(res["size_mb"], r["peak_rss_mb"]) for res in results for r in res["runs"]
                if r["path"] == path and r["rc"] == 0]
        if len(seen) > 1:
            (s0, m0), (s1, m1) = min(seen), max(seen)
            lines.append(f"{path}: largest process {m0:.0f} MB at {s0:g} MB → {m1:.0f} MB at {s1:g} MB "
                         f"({100 * (m1 / m0 - 1):+.0f}%)")
    return lines


def parse_args(argv: list[str] | None = None) -> Options:
    """The options, --quick's sizes and the default --baseline-sizes filled in."""
    args = parse(Options, "scale", __doc__, argv)
    if args.quick:
        args.sizes, args.baseline_sizes, args.tasks, args.keep = [1.0], [1.0], 2, False
    if args.baseline_sizes is None:
        args.baseline_sizes = [min(args.sizes)]
    return args


def main(argv: list[str] | None = None) -> None:
    from zh_bert.core.errors import ZhBertError

    args = parse_args(argv)
    try:
        if args.quick:
            with scratch_dir("zh-bert-scale-quick-") as tmp:
                args.work_dir = str(tmp)
                return run(args, argv)
        return run(args, argv)
    except ZhBertError as e:   # a refused --work-dir / --json, a full or read-only disk: one line
        print(f"scale: error: {e}", file=sys.stderr)
        sys.exit(2)


def _work_name(name: str, is_dir: bool) -> bool:
    """The entries bench/scale.py makes in its --work-dir (the only ones a claimed work dir may hold)."""
    return name in (WORK_MARKER, "scale.json", "vocab.log") or is_dir and (
        name in ("tok", "logs") or re.fullmatch(r"\.?(corpus|out)-[\d.]+MB(\.tmp.*|\.old-\d+)?", name) is not None)


def _is_work_dir(work: Path) -> bool:
    """A --work-dir bench/scale.py made: its marker, or (made before the marker) its tokenizer or record."""
    return (work / WORK_MARKER).is_file() or (work / "tok" / "zh_bert_vocab.json").is_file() \
        or _is_record(work / "scale.json")


def _is_record(path: Path) -> bool:
    rec = read_json(path, default=None)
    return isinstance(rec, dict) and str(rec.get("command", "")).startswith(COMMANDS) \
        and "results" in rec


def run(args: Options, argv: list[str] | None = None) -> None:
    """Every size, then the table, the memory growth lines and the JSON record."""
    work = Path(args.work_dir)
    path = Path(args.json or work / "scale.json")
    # before any work: the work dir is a user's folder never (its corpora and runs are replaced), nor is --json
    claim_dir(work, flag="--work-dir", legacy=_work_name, proof=_is_work_dir, what="a work dir of bench/scale.py")
    claim_file(path, flag="--json", ours=_is_record, what="a record of bench/scale.py")
    write_text(work / WORK_MARKER, "bench/scale.py work dir (generated corpora, runs, logs): safe to delete\n")
    command = f"{COMMANDS[0]} " + shlex.join(sys.argv[1:] if argv is None else argv)
    date = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    executor = {c: has_executor(c) for c in ("clean", "shard")}
    missing = [c for c, ok in executor.items() if not ok]
    if missing:
        print(f"note: this checkout's {' and '.join(missing)} has no --executor: those runs are skipped", flush=True)
    tok = tokenizer(work) if not args.skip_shard else None
    pool = sentence_pool()
    results = [run_size(size, args, tok, pool, executor) for size in args.sizes]
    ratios(results)
    text = "\n".join([table(results), ""] + memory_growth(results))
    record = {"command": command, "date": date, "machine": machine(), "cores": os.cpu_count(),
              "args": vars(args), "executor_available": executor, "results": results}
    write_text(path, json.dumps(record, ensure_ascii=False, indent=1))
    print(f"\n{text}\n\ncommand: {command}\ndate: {date}\nmachine: {machine()}\n"
          f"tasks {args.tasks}, workers {args.workers}; MB/s per core = MB/s / workers; results: {path}")
    failed = [r["command"] for res in results for r in res["runs"] if r["rc"]]
    if failed:
        sys.exit(f"{len(failed)} command(s) failed, first: {failed[0]} (logs under {work / 'logs'})")


if __name__ == "__main__":
    main()
