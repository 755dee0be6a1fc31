"""Simulated events: particles, their propagation, decays and interactions, hits and cells."""
