"""Options that several commands take, each declared once (type, default, help): a command's config shares one
with `config.option_of(Shared, name, ...)`, writing there only what it changes (its default, what its help says
the option does there)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from zh_bert.core.config import option


@dataclass
class Shared:
    force: bool = option(False, help="replace an earlier output of zh-bert (only what its manifest lists)")
    json: bool = option(False, help="machine-readable output (JSON)")
    quiet: bool = option(False, flags=("-q",), help="no progress bar or summary")
    workers: Optional[int] = option(None, help="worker processes (default: number of cores)")
    dry_run: bool = option(False, help="show what would be done; do nothing")
    seed: int = option(42, help="random seed")
    batch_size: int = option(32, help="examples per forward pass (does not change the figures)")
    max_docs: Optional[int] = option(None, help="use only the first N documents")
    only: list[str] = option(default_factory=list, action="append", metavar="NAME",
                             help="run only these (repeatable)")
    set: list[str] = option(default_factory=list, action="append", metavar="KEY=VALUE",
                            help="override one recipe key (repeatable), e.g. --set max_steps=40")
    endpoint: str | None = option(None, help="Hub endpoint or mirror (default: $HF_ENDPOINT or huggingface.co)")
    revision: str | None = option(None, help="branch, tag or commit (default: main; ModelScope: master)")
    host: str = option("127.0.0.1", help="interface to bind (127.0.0.1: this machine only)")
    port: int = option(0, bounds=(0, 65535), help="port to serve on (0: any free port)")
    predictions: Optional[str] = option(None, metavar="DIR", help="write the test predictions in the official "
                                                                  "scorer's format")


