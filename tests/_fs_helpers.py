"""A real small file system for full-disk and read-only tests: a tmpfs mounted by the test (root only; the
test is skipped elsewhere), so a command meets the errors the kernel and the libraries really raise there,
not a patched call."""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path
from typing import Iterator

import pytest


@contextlib.contextmanager
def tmpfs(d: Path, options: str) -> Iterator[Path]:
    """Mount a tmpfs with `options` (e.g. `size=2m`, `size=1m,ro`) at `d`; unmount it afterwards. The unmount
    fails while a command left a file open there (it would hold its space): the test fails too."""
    d.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(d)],
                                           capture_output=True).returncode != 0:
        pytest.skip(f"mounting a tmpfs ({options}) needs root")
    try:
        yield d
    finally:
        busy = subprocess.run(["umount", str(d)], capture_output=True).returncode != 0
        if busy:
            subprocess.run(["umount", "-l", str(d)], check=False)
        assert not busy, f"a file was left open on {d}"
