"""Event graphs: edges and features from an event's hits, and the columns a model reads."""
