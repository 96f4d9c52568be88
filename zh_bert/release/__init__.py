"""Sharing checkpoints: `publish` (Hub + model card), `demo` (Gradio cloze)."""
