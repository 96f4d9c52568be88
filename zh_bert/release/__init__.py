"""Sharing checkpoints: `publish` (Hub + model card), `download`, `models` (catalog), `demo` (Gradio cloze)."""
