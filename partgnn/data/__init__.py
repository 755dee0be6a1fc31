"""Data: the detector, simulated and read events, module maps, event graphs and their files."""
