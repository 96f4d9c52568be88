"""Worker for tests/test_ddp.py, launched by `torchrun` / `accelerate launch`:
`python tests/_ddp_helpers.py RECIPE.yaml [pretrain args...]` runs `zh-bert pretrain` unchanged, except:

- the dataset rows each rank draws per step are appended to OUT_DIR/indices-rank{R}.jsonl (disjointness);
- ZH_BERT_TEST_FULL_DISK=R@STEP makes rank R's write of its RNG file at checkpoint STEP fail (ENOSPC);

Masking is the stock loader's: each sequence is masked with an RNG keyed by its position in the global
sample stream, so 1 process × 4 micro-batches and 2 processes × 2 see the very same masked sequences and
their updates can be compared parameter by parameter.

The process ends with os._exit after flushing: under gloo, a normal interpreter exit aborts about one run
in three ("terminate called without an active exception").
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def _patch_loader() -> None:
    from zh_bert.train.data import ShardLoader

    original = ShardLoader.next_numpy
    log_dir = os.environ.get("ZH_BERT_TEST_INDEX_DIR")

    def next_numpy(self):
        epoch, position = self.epoch, self.position
        out = original(self)
        if log_dir:
            with open(Path(log_dir) / f"indices-rank{self.rank}.jsonl", "a") as f:
                f.write(json.dumps({"epoch": epoch, "position": position,
                                    "rows": [int(i) for i in self.last_indices]}) + "\n")
        return out

    ShardLoader.next_numpy = next_numpy


def _patch_full_disk() -> None:
    """ZH_BERT_TEST_FULL_DISK=R@STEP: on rank R, writing the RNG file of the checkpoint of STEP fails as on a
    full disk (the other ranks' writes succeed)."""
    want = os.environ.get("ZH_BERT_TEST_FULL_DISK")
    if not want:
        return
    import errno

    import torch

    rank, step = want.split("@")
    real_save = torch.save

    def save(obj, f, *a, **kw):
        name = str(getattr(f, "name", f))   # the layer's temp file handle: `.rng-rankR.pt.tmp-PID`
        if Path(name).name.lstrip(".").startswith(f"rng-rank{rank}.pt") and f".step-{int(step):07d}.tmp" in name:
            raise OSError(errno.ENOSPC, "No space left on device", name)
        return real_save(obj, f, *a, **kw)

    torch.save = save


if __name__ == "__main__":
    _patch_loader()
    _patch_full_disk()
    from zh_bert.cli import main

    rc = main(["pretrain", *sys.argv[1:]])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)
