"""Module maps: fitting one from events, its file, applying it, the shipped models' maps."""
