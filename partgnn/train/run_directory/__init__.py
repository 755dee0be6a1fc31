"""A run directory: checkpoints, logs, lock, resuming and what may be resumed."""
