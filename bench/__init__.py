"""zh-bert's benchmarks: each times one stage against a baseline run in the same process, on the same input,
and prints the ratio (compare ratios from one run, not absolute figures across machines or runs).

Every benchmark is a module run from the repository root, and takes `--quick` (each section at toy size, a
smoke test whose figures mean nothing) and `--help`:

    python -m bench.train_throughput --quick
    python -m bench.clean_throughput --repeat 3
    python -m bench.gpu_proof --device cpu --quick --out DIR     # the one prepared GPU measurement (a package)

Its options are the `option` fields of one dataclass, `Options`, from which `bench.cli` derives the command
line the way `zh_bert.core.config` does for every `zh-bert` command. Shared helpers are modules here too:
`bench.cli` (that parser), `bench.timing` (medians of wall and CPU seconds, the machine line), and
`bench.scale_corpus` (the synthetic corpus of `bench.scale`). Every file a benchmark writes goes through
`zh_bert.core.fileio`. The list, baselines and results: docs/benchmarks.md.
"""

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent   # the checkout: corpora/, recipes/, tests/data/
