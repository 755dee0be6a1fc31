"""Planning a run before it starts: per-rank memory and step times."""
