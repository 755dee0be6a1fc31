"""Metrics: edge efficiency and purity (overall, boundary, interior), reduced across ranks."""
