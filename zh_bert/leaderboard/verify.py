"""`zh-bert leaderboard verify MODEL`: re-run the suite on a model and compare with what its card or run claims.

The record it writes holds everything a re-run needs (the suite's options, seeds, data sha256, versions, the
machine) and the entries themselves, so `build` marks each claim verified or mismatch, and `publish
--with-verification` can put the record beside the card for anyone to re-run. A model that needs
`trust_remote_code` is refused before anything of it is downloaded beyond its JSON files: zh-bert never runs a
repo's code.
"""

from __future__ import annotations

from importlib.metadata import version
import dataclasses
import datetime
import json
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from zh_bert.core.config import config_from_args, option, option_of
from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import FINAL, VERIFICATION_FILE, claim_file, read_json, scratch_dir, write_json
from zh_bert.core.hardware import machine_line
from zh_bert.core.options import Shared
from zh_bert.evaluation.eval_results import CheckpointArgs
from zh_bert.evaluation.heads import option_classes
from zh_bert.evaluation.loop import FinetuneConfig
from zh_bert.evaluation.suite.protocol import SuiteArgs, SuiteConfig, head_options, pooling_notes, run_suite
from zh_bert.evaluation.suite.report import report_lines, suite_entries
from zh_bert.hub.download import local_model, refuse_model_code
from zh_bert.leaderboard.record import RECORD_SCHEMA, TOLERANCE, cell, columns, scores_of
from zh_bert.leaderboard.sources import Model, folder_model, hub_model, kind_of, weights_sha256
from zh_bert.train.rundir import find_run_dir


@dataclass
class VerifyArgs:
    ckpt: str = option_of(CheckpointArgs, "ckpt", help="a run, a model folder, a catalog alias or a Hub id (ORG/NAME)")
    output: Optional[str] = option(None, flags=("-o",), metavar="RECORD.json",
                                   help=f"the verification record (default: RUN/{VERIFICATION_FILE} for a run, "
                                        f"else verifications/NAME.json)")
    tolerance: float = option(TOLERANCE, help="points within which a claimed figure counts as verified")
    endpoint: str | None = option_of(Shared, "endpoint")
    revision: str | None = option_of(Shared, "revision")

    def __post_init__(self):
        if not 0 <= self.tolerance < 100:
            raise ZhBertError(f"--tolerance must be in [0, 100) points, got {self.tolerance}")


def default_output(model: str) -> Path:
    path = Path(model)
    run = find_run_dir(path) if path.exists() else None
    if run:
        return run / VERIFICATION_FILE
    return Path("verifications") / (model.removeprefix("hub:").strip("/").replace("/", "--") + ".json")


def _is_ours(path: Path) -> bool:
    try:
        return read_json(path).get("schema") == RECORD_SCHEMA
    except (ZhBertError, AttributeError):
        return False


def refuse_remote_code(model: str, endpoint: str | None, revision: str | None) -> None:
    """One line before any weights move: a model whose config or tokenizer names its own code is not run
    (`hub.download.refuse_model_code`, the check `local_model` makes for every loading command)."""
    refuse_model_code(model, endpoint, revision)


def claims_of(model: str, endpoint: str | None, revision: str | None, scratch: Path) -> Model:
    """The model as `build` sees it: its claims and identity, before the suite runs."""
    if kind_of(model) == "hub":
        return hub_model(model, scratch, endpoint, revision)
    return folder_model(model)


def compare(claims: list[dict], entries: list[dict], tolerance: float) -> list[dict]:
    claimed, verified = scores_of(claims), scores_of(entries)
    return [{"column": c.key, **cell(claimed.get(c.key), verified.get(c.key), c.split, tolerance)}
            for c in columns() if c.key in verified]


def verify(args: VerifyArgs, suite: SuiteArgs, cfg: FinetuneConfig, opts: dict | None = None,
           log=print) -> tuple[dict, Path]:
    refuse_remote_code(args.ckpt, args.endpoint, args.revision)
    out = Path(args.output) if args.output else default_output(args.ckpt)
    claim_file(out, ours=_is_ours, flag="-o", what="a verification record zh-bert wrote")
    with scratch_dir("zh-bert-verify-") as scratch:
        known = claims_of(args.ckpt, args.endpoint, args.revision, scratch)
    folder = local_model(args.ckpt, endpoint=args.endpoint, revision=args.revision, log=log)
    t0 = time.perf_counter()
    opts = head_options(suite, opts)
    for note in pooling_notes(folder, suite, cfg):
        log(note)
    res = run_suite(folder, suite, cfg, opts, log=log)
    wall = round(time.perf_counter() - t0, 1)
    log("\n".join(report_lines(res)))
    entries = suite_entries(res)
    weights = weights_sha256(Path(folder) / FINAL) or weights_sha256(Path(folder))
    import torch
    import transformers

    record = {
        "schema": RECORD_SCHEMA,
        "model": {"id": known.id, "source": known.source, "revision": args.revision, "weights_sha256": weights},
        "zh_bert_version": version("zh-bert"), "protocols": res["protocols"], "method": res["method"],
        "seeds": suite.seed_list(), "data_sha256": {k: r.get("data_sha256") for k, r in res["pretrained"].items()},
        "suite_args": dataclasses.asdict(suite), "finetune_config": dataclasses.asdict(cfg),
        "head_options": {cls.__name__: dataclasses.asdict(o) for cls, o in opts.items()},
        "hardware": machine_line(), "software": {"python": platform.python_version(), "torch": torch.__version__,
                                                 "transformers": transformers.__version__},
        "wall_s": wall, "date": datetime.date.today().isoformat(),
        "command": "zh-bert leaderboard verify " + " ".join(sys.argv[3:] if len(sys.argv) > 3 else [args.ckpt]),
        "tolerance": args.tolerance, "entries": entries,
        "comparison": compare(known.claims, entries, args.tolerance),
    }
    write_json(out, record)
    return record, out


def comparison_lines(record: dict) -> list[str]:
    marks = {"verified": "verified", "self-reported": "", "mismatch": "MISMATCH"}
    lines = [f"{'column':<18} {'claimed':>9} {'re-run':>9}  status"]
    for c in record["comparison"]:
        claimed = f"{c['claimed']:.2f}" if c["claimed"] is not None else "-"
        lines.append(f"{c['column']:<18} {claimed:>9} {c['verified']:>9.2f}  "
                     f"{marks[c['status']] or 'verified (nothing claimed)'}")
    return lines


def main_verify(args) -> int:
    vargs, suite, cfg = (config_from_args(c, args) for c in (VerifyArgs, SuiteArgs, SuiteConfig))
    opts = {cls: config_from_args(cls, args) for cls in option_classes("suite")}
    if not suite.lrs and cfg.lr != FinetuneConfig.lr:     # `--lr X` alone: a grid of one rate, as eval suite
        suite = dataclasses.replace(suite, lrs=[cfg.lr])
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    record, out = verify(vargs, suite, cfg, opts, log=lambda m: print(m, flush=True))
    print("\n".join(comparison_lines(record)), flush=True)
    print(f"verification record: {out}", flush=True)
    print(json.dumps({k: record[k] for k in ("model", "comparison", "wall_s")}, ensure_ascii=False), flush=True)
    return 0
