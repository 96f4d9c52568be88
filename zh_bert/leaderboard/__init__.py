"""`zh-bert leaderboard build|verify|serve`: Chinese encoders side by side under one protocol, each figure
marked verified (re-run here), self-reported or mismatch.

  build SOURCES... -o BOARD/   runs, model folders, catalog aliases, Hub ids, verification records -> board
  verify MODEL                 re-run the suite on MODEL, compare with its claims, write a verification record
  serve BOARD/                 the board in a browser (127.0.0.1)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from zh_bert.core.config import build_parser as derive_parser
from zh_bert.core.config import config_from_args, option, option_of
from zh_bert.core.options import Shared
from zh_bert.evaluation.heads import option_classes
from zh_bert.evaluation.loop import FinetuneConfig
from zh_bert.evaluation.suite.protocol import SuiteArgs, SuiteConfig
from zh_bert.leaderboard.record import TOLERANCE
from zh_bert.leaderboard.verify import VerifyArgs, main_verify


@dataclass
class BuildArgs:
    sources: list[str] = option(positional=True, metavar="SOURCE",
                                help="a run, a model folder, a verification record, a catalog alias or ORG/NAME")
    output: str = option(flags=("-o",), metavar="BOARD", help="the board folder (board.json, board.md, "
                                                                         "index.html)")
    tolerance: float = option_of(VerifyArgs, "tolerance")
    no_contamination: bool = option(False, help="skip scanning a run's corpus for benchmark test text")
    endpoint: str | None = option_of(Shared, "endpoint")


def build_parser():
    from zh_bert.leaderboard.serve import ServeArgs

    return derive_parser("zh-bert leaderboard", __doc__.split("\n\n")[0], subcommands={
        "build": ("a board from runs, model folders, Hub cards and verification records", (BuildArgs,)),
        "verify": ("re-run the suite on a model and compare with its claims", (VerifyArgs, SuiteArgs,
                                                                                SuiteConfig,
                                                                                *option_classes("suite"))),
        "serve": ("the board in a browser", (ServeArgs,))})


def main_build(args) -> int:
    from zh_bert.leaderboard.board import build_board, claim_board, write_board

    cfg = config_from_args(BuildArgs, args)
    claim_board(cfg.output, cfg.sources)
    board = build_board(cfg.sources, endpoint=cfg.endpoint, tolerance=cfg.tolerance,
                        with_contamination=not cfg.no_contamination, log=lambda m: print(m, flush=True))
    out = write_board(board, cfg.output)
    marks = [s["status"] for r in board["rows"] for s in r["scores"].values()]
    notes = sum(len(n["claims"]) + n["more"] or 1 for r in board["rows"] for n in r["notes"])
    print(f"{len(board['rows'])} models, {len(marks)} figures: {marks.count('verified')} verified, "
          f"{marks.count('self-reported')} self-reported, {marks.count('mismatch')} mismatch; {notes} not shown "
          f"(see the notes) -> {Path(out) / 'index.html'}", flush=True)
    return 0


def main_serve(args) -> int:
    from zh_bert.leaderboard.serve import ServeArgs, serve_command

    return serve_command(config_from_args(ServeArgs, args))


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    return {"build": main_build, "verify": main_verify, "serve": main_serve}[args.command](args)


__all__ = ["BuildArgs", "main", "build_parser", "TOLERANCE"]
