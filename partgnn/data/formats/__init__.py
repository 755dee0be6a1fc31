"""The field's files: TrackML CSV events with their cells, and acorn's graphs."""
