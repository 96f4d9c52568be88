"""One prepared command that measures what docs/hardware.md otherwise estimates, on one GPU in <= 8 minutes.

Sections (each measured in this run, or marked skipped/failed with its reason): the device and its measured
fp32/TF32/fp16/bf16 matmul peak; training tokens/s of `base` and `small` at seq 128 in every precision beside
the transformers Trainer on the same model and batches (useful-FLOP utilisation against that peak, and against
`zh-bert plan`'s datasheet figure); `zh-bert plan`'s memory model against torch.cuda.max_memory_allocated;
fp16 + loss scaling against fp32 from the same init; kill -9 + `--resume auto` of a real pretrain process;
and, as its own invocation (`--science`), the equal-FLOPs objective grid on real Chinese text, fine-tuned on
ChnSentiCorp and TNEWS. Writes gpu_proof.json and gpu_proof.md under --out (a --science run into the same
--out adds its section to them).

    python -m bench.gpu_proof --prepare runs/gpu-proof-data                  # on a CPU machine, once
    python -m bench.gpu_proof --data runs/gpu-proof-data --out OUT          # on the GPU: ~8 min
    python -m bench.gpu_proof --science --data runs/gpu-proof-data --out OUT  # on the GPU, its own command
    python -m bench.gpu_proof --device cpu --quick --out DIR     # every section at toy size (a smoke test)

The GPU side needs only torch, transformers, accelerate, tokenizers, safetensors, numpy, scipy, pyyaml,
matplotlib and tensorboard (no jieba, opencc, datatrove or gradio), no network, and runs from the repository
root with PYTHONPATH=. ; --prepare builds everything that needs more (tokenizers, shards) into DIR.

The parts: `data` (--prepare, and reading a prepared DIR), `measure` (device, throughput, memory), `train`
(fp16 vs fp32, kill + resume, --science), `report` (gpu_proof.md from gpu_proof.json); this module holds the
options, the run's context, the sections' order and budget, and the report files' ownership.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import re
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal, Optional

from bench import REPO
from bench.cli import parse
from bench.gpu_proof.data import SCIENCE_CORPUS, ProofError, prepare, read_manifest, unpack
from zh_bert.core.config import option
from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import claim_dir, open_append, read_json, remove_scratch, scratch_dir, write_text

WORK_MARKER = ".gpu-proof-work"   # a --work dir of gpu_proof's own (with only WORK_NAMES in it): may be replaced
WORK_NAMES = {WORK_MARKER, "data", "fp16", "resume", "science", "prepared", "gpu_proof.log", "science.log"}
REPORT_FILES = ("gpu_proof.json", "gpu_proof.md")
COMMAND = "python -m bench.gpu_proof"
WRITTEN_BY = "bench.gpu_proof"  # gpu_proof.json's marker; gpu_proof.md ends with `_with_marker`'s line
WRITERS = (WRITTEN_BY, "bench/gpu_proof.py")   # its marker, and its reports' from before it was a package
MD_MARKER = re.compile(r"\n<!-- written by (?:bench\.gpu_proof|bench/gpu_proof\.py) from gpu_proof\.json \(sha256 "
                       r"([0-9a-f]{64}) of the text above\); an edited copy is never overwritten -->\n\Z")

MAIN = ("device", "throughput", "memory", "fp16_vs_fp32", "resume")
SECTIONS = MAIN + ("science",)
NEEDS_S = {"device": 20, "throughput": 150, "memory": 90, "fp16_vs_fp32": 60, "resume": 90, "science": 60}
BUDGET_S = {"main": 480, "science": 540}   # one GPU command may run 10 minutes: room to write the report
WORK = REPO / "runs" / "gpu-proof-work"    # full runs: kept, so a rerun reuses unpacked data and finished runs


@dataclass
class Options:
    prepare: Optional[str] = option(None, metavar="DIR", help="build the inputs (tokenizers, packed shards) into a "
                                    "new DIR and exit; runs where zh-bert is fully installed")
    corpus: Optional[str] = option(None, metavar="PATH", help=f"--prepare: the science corpus (default "
                                   f"{SCIENCE_CORPUS})")
    data: Optional[str] = option(None, metavar="DIR", help="a DIR built by --prepare (--quick without it prepares a "
                                 "toy one)")
    out: Optional[str] = option(None, metavar="DIR", help="where gpu_proof.json and gpu_proof.md go")
    device: Literal["auto", "cpu", "cuda"] = option("auto")
    science: bool = option(False, help="run the objective grid alone (its own GPU command)")
    sections: Optional[str] = option(None, metavar="A,B", help=f"run only these ({','.join(SECTIONS)}), e.g. to "
                                     f"rerun one that failed; the report in --out keeps the others")
    quick: bool = option(False, help="every section at toy size (with --prepare: a toy DIR)")
    work: Optional[str] = option(None, metavar="DIR", help=f"scratch: unpacked shards, run dirs (default "
                                 f"{WORK.relative_to(REPO)}; --quick: a temp dir, removed)")
    budget_s: Optional[float] = option(None, help=f"time budget; sections that would overrun it are skipped "
                                       f"(default {BUDGET_S['main']} s, --science {BUDGET_S['science']} s, --quick "
                                       f"none)")
    science_tokens: float = option(100e6, help="tokens of the science run that sees the fewest (ELECTRA at equal "
                                   "FLOPs)")
    science_set: list[str] = option(default_factory=list, action="append", metavar="KEY=VALUE",
                                    help="extra `zh-bert ablate --set` for the grid (recipe or spec keys), repeatable")


@dataclass
class Context:
    """What every section reads: the device, the size (quick or not), the prepared data, the time left."""
    device: object
    quick: bool
    work: Path
    data: Path
    manifest: dict
    out: Path
    report: dict
    budget_s: float
    science_tokens: float = 100e6
    science_set: dict = field(default_factory=dict)
    peaks: dict = field(default_factory=dict)
    headline: str = ""
    t0: float = field(default_factory=time.time)
    _datasets: dict = field(default_factory=dict)

    @property
    def device_capability(self) -> tuple:
        import torch

        return tuple(torch.cuda.get_device_capability(self.device)) if self.device.type == "cuda" else (0, 0)

    def has_time(self, need_s: float) -> bool:
        return time.time() - self.t0 + need_s <= self.budget_s

    def dataset(self, name: str) -> tuple[Path, Path]:
        if name not in self._datasets:
            self._datasets[name] = unpack(self.data, self.manifest, name, self.work)
        return self._datasets[name]

    def fresh_dir(self, name: str) -> Path:
        path = self.work / name
        remove_scratch(path)   # under the claimed work dir
        path.mkdir(parents=True)
        return path

    def log(self, msg: str) -> None:
        """Progress on the console, also while a section redirects stdout into its own log."""
        print(msg, file=sys.__stdout__ or sys.stdout, flush=True)

    def quiet(self, msg: str) -> None:
        with open_append(self.work / "gpu_proof.log") as f:
            f.write(msg + "\n")

    def save_partial(self, name: str, data: dict) -> None:
        """A long section's results so far, in the report files: a command killed at its time limit still
        leaves them."""
        self.report["sections"][name] = {"status": "partial", "invocation": len(self.report["invocations"]) - 1,
                                         **data}
        write_report(self.report, self.out)


def check_args(args) -> dict:
    """Every refusal before anything is written; returns what the run needs."""
    if args.prepare:
        if args.data or args.science or args.out:
            raise ProofError("--prepare only builds DIR; run the proof afterwards with --data DIR --out OUT")
        if Path(args.prepare).exists():
            raise ProofError(f"--prepare {args.prepare} exists; give a new directory")
        if args.corpus and not (Path(args.corpus) / "SOURCE.md").is_file():
            raise ProofError(f"--corpus {args.corpus}: not a zh_real_text-style corpus dir (no SOURCE.md)")
        return {}
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        raise ProofError("--device cuda: this machine has no CUDA GPU (torch.cuda.is_available() is False); "
                         "use --device cpu --quick here")
    device = torch.device("cuda" if args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
                          else "cpu")
    if args.out is None and not args.quick:
        raise ProofError("--out DIR is required (where gpu_proof.json and gpu_proof.md go)")
    if args.out and Path(args.out).exists() and not Path(args.out).is_dir():
        raise ProofError(f"--out {args.out} exists and is not a directory")
    if not args.science_tokens > 0:
        raise ProofError(f"--science-tokens must be positive, got {args.science_tokens}")
    unknown = [n for n in (args.sections or "").split(",") if n and n not in SECTIONS]
    if unknown:
        raise ProofError(f"--sections {unknown[0]}: not a section ({', '.join(SECTIONS)})")
    bad = [s for s in args.science_set if "=" not in s]
    if bad:
        raise ProofError(f"--science-set {bad[0]}: expected KEY=VALUE")
    manifest = None
    if args.data:
        manifest = read_manifest(Path(args.data))
        if manifest["quick"] and not args.quick:
            raise ProofError(f"--data {args.data} was prepared with --quick (toy size); prepare a full one for a "
                             f"full run, or add --quick")
        if "science" in chosen(args) and not manifest["datasets"].get("science"):
            raise ProofError(f"--science: --data {args.data} holds no prepared science corpus "
                             f"({manifest.get('note') or 'prepared without it'})")
    elif not args.quick:
        raise ProofError("--data DIR is required: build it on a CPU machine with --prepare DIR")
    if device.type == "cpu" and not args.quick:
        raise ProofError("the full proof is sized for one GPU (base and large models, 100M-token runs: hours on a "
                         "CPU); add --quick for every section at toy size")
    return {"device": device, "manifest": manifest}


def chosen(args) -> tuple:
    """The sections this invocation runs: --sections; else --science (with the device it ran on); else the
    main ones, and with --quick all of them."""
    if args.sections:
        return tuple(n for n in SECTIONS if n in args.sections.split(","))
    if args.science:
        return ("device", "science")
    return SECTIONS if args.quick else MAIN


def run_section(ctx: Context, name: str) -> dict:
    """One section: its figures, or the reason it has none (time budget, an error: the others still run)."""
    from bench.gpu_proof.measure import device_section, memory_section, throughput_section
    from bench.gpu_proof.train import fp16_section, resume_section, science_section

    fn = {"device": device_section, "throughput": throughput_section, "memory": memory_section,
          "fp16_vs_fp32": fp16_section, "resume": resume_section, "science": science_section}[name]
    head = {"invocation": len(ctx.report["invocations"]) - 1}
    if not ctx.quick and not ctx.has_time(NEEDS_S[name]):
        left = ctx.budget_s - (time.time() - ctx.t0)
        return {**head, "status": "skipped", "reason": f"time budget: {left:.0f} s left of {ctx.budget_s:.0f}, "
                f"the section needs ~{NEEDS_S[name]} s"}
    t0, ctx.headline = time.time(), ""
    try:
        data = fn(ctx)
        status = "measured" if not (name == "science" and not data.get("complete")) else "partial"
        out = {**head, "status": status, "headline": ctx.headline, **data}
    except Exception as e:   # a failed section is a finding; the next ones still run
        out = {**head, "status": "failed", "error": f"{type(e).__name__}: {str(e)[:1000]}",
               "traceback": traceback.format_exc()[-3000:]}
    finally:
        _release(ctx)
    out["seconds"] = round(time.time() - t0, 1)
    return out


def _release(ctx: Context) -> None:
    gc.collect()
    if ctx.device.type == "cuda":
        import torch

        torch.cuda.empty_cache()


def new_report(out: Path, device_name: str, quick: bool) -> dict:
    """The report to add to: OUT/gpu_proof.json of an earlier invocation on the same device and size (so
    --science joins the main run), else a new one."""
    old = _our_json(out / "gpu_proof.json")
    if old and old.get("device_name") == device_name and old.get("quick") == quick:
        old.pop("written_by", None)
        return old
    return {"gpu_proof": 1, "device_name": device_name, "quick": quick, "invocations": [],
            "sections": {name: {"status": "not run", "reason": "not run yet: " + (
                "its own invocation, --science" if name == "science" else "the main invocation (without --science)")}
                for name in SECTIONS}}


def write_report(report: dict, out: Path) -> None:
    """gpu_proof.json and gpu_proof.md, each atomic and each carrying gpu_proof's marker (the JSON's format
    field, the Markdown's last line): OUT was claimed before any work (`claim_outputs`), and a later run
    replaces them only while they still carry it."""
    from bench.gpu_proof.report import render

    for name, text in (("gpu_proof.json", json.dumps({**report, "written_by": WRITTEN_BY}, indent=1,
                                                     ensure_ascii=False, default=str)),
                       ("gpu_proof.md", _with_marker(render(report)))):
        write_text(out / name, text if name.endswith(".md") else text + "\n")


def _with_marker(md: str) -> str:
    """`md` and its last line: the marker with the sha256 of the text above it, so that a copy the user
    edited anywhere no longer passes as gpu_proof's."""
    h = hashlib.sha256(md.encode("utf-8")).hexdigest()
    return (f"{md}\n<!-- written by {WRITTEN_BY} from gpu_proof.json (sha256 {h} of the text above); an "
            f"edited copy is never overwritten -->\n")


def _report_is_ours(path: Path) -> bool:
    """`path` (gpu_proof.json or .md) is one gpu_proof wrote: the JSON with its format fields; the Markdown
    unchanged since: its marker line holds the sha256 of the text above it (one written before the marker
    existed: exactly what `render` makes of the JSON beside it)."""
    if path.name == "gpu_proof.json":
        return _our_json(path) is not None
    return _md_is_ours(path, _our_json(path.with_name("gpu_proof.json")))


def _our_json(path: Path) -> dict | None:
    """The report in `path` if it is a gpu_proof.json gpu_proof wrote (its format fields), else None."""
    r = read_json(path, default=None)
    ok = isinstance(r, dict) and r.get("gpu_proof") == 1 and r.get("written_by", WRITTEN_BY) in WRITERS \
        and isinstance(r.get("invocations"), list) and isinstance(r.get("sections"), dict) and "device_name" in r
    return r if ok else None


def _md_is_ours(path: Path, report: dict | None) -> bool:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    m = MD_MARKER.search(text)
    if m:
        return hashlib.sha256(text[:m.start()].encode("utf-8")).hexdigest() == m.group(1)
    if report is None or "written_by" in report:
        return False
    from bench.gpu_proof.report import render

    try:
        return text == render(report) + "\n"
    except Exception:   # a JSON an older render cannot read: not provably ours
        return False


def _is_report_dir(out: Path) -> bool:
    """OUT holds only a report gpu_proof wrote (every report file present carries its marker)."""
    present = [out / n for n in REPORT_FILES if os.path.lexists(out / n)]
    return bool(present) and all(p.is_file() and not p.is_symlink() and _report_is_ours(p) for p in present)


def _is_work_dir(work: Path) -> bool:
    """A --work dir gpu_proof made: its marker, or (before the marker) the log every run writes there."""
    return (work / WORK_MARKER).is_file() or (work / "gpu_proof.log").is_file()


def claim_outputs(args, work: Path | None) -> None:
    """--out, --work and --prepare through zh-bert's ownership layer, before any work (nothing is written
    here): a user's gpu_proof.md/json (or any other file) in --out is never replaced, a --work dir is
    gpu_proof's only when it carries its marker and only its names, and none of them is the current
    directory, an input, or the other."""
    if args.prepare:
        claim_dir(Path(args.prepare), inputs=[args.corpus], flag="--prepare", what="a new directory for the prepared data")
        return
    if args.out:
        claim_dir(Path(args.out), inputs=[args.data], flag="--out", what="a report folder of gpu_proof's",
                  proof=_is_report_dir,
                  legacy=lambda name, is_dir: not is_dir and name in REPORT_FILES)
    if work is not None:
        if args.out and (Path(args.out).resolve() in (work.resolve(), *work.resolve().parents)
                         or work.resolve() in Path(args.out).resolve().parents):
            raise ProofError(f"--work {work} and --out {args.out} overlap; give them folders apart")
        claim_dir(work, inputs=[args.data], flag="--work", what="a work folder of gpu_proof's", proof=_is_work_dir,
                  legacy=lambda name, is_dir: name in WORK_NAMES)


def main(argv: list[str] | None = None) -> int:
    from zh_bert.core.hardware import omp_wait_policy

    # before torch loads (OpenMP reads it once), as `zh-bert pretrain` does: spinning threads on a shared CPU
    # made a tiny step 15x slower here; the subprocesses inherit it
    os.environ.setdefault("OMP_WAIT_POLICY", omp_wait_policy())
    args = parse(Options, "gpu_proof", __doc__, argv)   # a bad option: `gpu_proof: error: ...`, exit 2
    try:
        return _main(args, argv)
    except (ProofError, ZhBertError) as e:
        print(f"gpu_proof: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:   # a full or read-only disk outside the layer's writes (a folder to create)
        where = f"{e.filename}: " if e.filename else ""
        print(f"gpu_proof: error: {where}cannot write ({e.strerror or e}); nothing was changed", file=sys.stderr)
        return 2


def _main(args, argv) -> int:
    plan = check_args(args)
    command = f"{COMMAND} " + " ".join(sys.argv[1:] if argv is None else argv)
    temp_work = args.work is None and args.quick
    claim_outputs(args, None if temp_work or args.prepare else Path(args.work or WORK))
    if args.prepare:
        m = prepare(Path(args.prepare), args.quick, args.corpus, command)
        print(f"prepared {args.prepare}: {m['bytes'] / 2**20:.1f} MiB in {m['seconds']:.0f} s; it travels beside the "
              f"checkout to the GPU machine (--data {args.prepare})")
        return 0
    if temp_work:
        with scratch_dir("gpu-proof-") as work:
            return _run(args, plan, work, command, made_work=True)
    return _run(args, plan, Path(args.work or WORK), command, made_work=False)


def _run(args, plan: dict, work: Path, command: str, made_work: bool) -> int:
    import torch

    device, manifest, data = plan["device"], plan["manifest"], Path(args.data) if args.data else None
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="gpu-proof-out-"))
    if not args.out:
        claim_dir(out, flag="--out")   # a new temp folder of its own (--out was claimed by `claim_outputs`)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    report = new_report(out, name, args.quick)
    names = chosen(args)
    budget = args.budget_s or (float("inf") if args.quick else BUDGET_S["science" if "science" in names else "main"])
    report["invocations"].append({"command": command, "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                                  "device": name, "sections": list(names), "data": None})
    write_report(report, out)   # before any work: a read-only or full OUT is refused here, nothing else written
    if not made_work:
        work.mkdir(parents=True, exist_ok=True)
        write_text(work / WORK_MARKER, f"{COMMAND} work dir (unpacked data, finished runs): safe to delete\n")
    if data is None:   # --quick without --data: a toy DIR of its own
        data = work / "prepared"
        if not (data / "manifest.json").is_file():
            prepare(data, True, None, command + " (its own toy --prepare)", log=lambda m: None)
        manifest = read_manifest(data)
    report["invocations"][-1]["data"] = {k: manifest.get(k) for k in ("created", "quick", "command", "bytes", "note")}
    ctx = Context(device, args.quick, work, data, manifest, out, report, budget, args.science_tokens,
                  dict(s.split("=", 1) for s in args.science_set))
    for section in names:
        report["sections"][section] = run_section(ctx, section)
        r = report["sections"][section]
        print(f"section {section}: {r['status']} ({r['seconds']} s): "
              f"{r.get('headline') or r.get('reason') or r.get('error', '')}", flush=True)
        write_report(report, out)
    report["invocations"][-1]["wall_s"] = round(time.time() - ctx.t0, 1)
    write_report(report, out)
    failed = [s for s in names if report["sections"][s]["status"] == "failed"]
    print(f"wrote {out / 'gpu_proof.json'} and {out / 'gpu_proof.md'} in {time.time() - ctx.t0:.0f} s"
          + (f"; failed: {', '.join(failed)}" if failed else ""), flush=True)
    return 1 if failed else 0
