"""Pretraining: the recipe, masking, the model variants, the training loop, checkpoints and the run dir."""
