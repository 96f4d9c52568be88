"""Figures that compare checkpoints: `eval`, `finetune` and `ablate`."""
