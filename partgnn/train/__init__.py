"""Training: configs, the trainer (modes full / halo / naive / ddp), checkpoints, run logs."""
