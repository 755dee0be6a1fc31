"""Distributed core: process groups, differentiable halo exchange, communication accounting."""
