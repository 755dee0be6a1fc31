"""Allows ``python -m partgnn ...`` (and ``torchrun -m partgnn ...``)."""

from partgnn.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main())
