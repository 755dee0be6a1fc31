"""Run configs: their sections, reading and checking a file, acorn's translated."""
