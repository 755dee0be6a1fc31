"""Partitioning of event graphs: partitioners, halo plans, naive sectors, shards on disk."""
