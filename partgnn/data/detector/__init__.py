"""The detector: its geometry, real modules, neighbouring layers and magnetic field."""
