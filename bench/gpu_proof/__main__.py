"""`python -m bench.gpu_proof`: see bench/gpu_proof/__init__.py."""

from bench.gpu_proof import main

raise SystemExit(main())
