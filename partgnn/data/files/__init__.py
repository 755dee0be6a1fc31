"""partgnn's files: HDF5 events, graphs and scores, and writing any output atomically."""
