"""A module map's fit as a model card records it (:class:`RecordedMapFit`): the ``fit-module-map``
options that made the map from events simulated on the fly, read into the library's settings, so
the library refits the map without the command line (``partgnn pretrained NAME --make-map`` and
:func:`~partgnn.data.module_map.pretrained_maps.make_map` do).

The options are the command's own (:data:`RECORDED_OPTIONS`; a test checks them against
``partgnn fit-module-map``'s), with its defaults; ``--out`` and the number of ``--workers`` are
the caller's.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass

from partgnn.data.module_map.doublets import SimulatedRun
from partgnn.data.module_map.fit_files import (
    FittedMap,
    MapFit,
    SimulatedEvents,
    fit_module_map_file,
)
from partgnn.errors import InputError

#: The ``fit-module-map`` options a card records, with the command's defaults.
RECORDED_OPTIONS: dict[str, object] = {
    "--simulate": [],
    "--pileup": 200.0,
    "--pt-min": 0.0,
    "--max-vertex-radius": None,
    "--window": "minmax",
    "--width": 0.0,
    "--window-precision": "float64",
    "--floor": [0.0],
    "--triplets": False,
    "--triplet-floor": 0.0,
    "--module-planes": True,
    "--field-profile": True,
    "--secondaries": True,
    "--geometry": None,
    "--workers": 1,
}


@dataclass(frozen=True)
class RecordedMapFit:
    """A module map's fit on simulated events, as a card records it.

    Attributes:
        arguments: The ``fit-module-map`` options as recorded (what a user can run).
        simulated: The events simulated on the fly (its workers are the card's, 1 unless it records
            more; :meth:`refit` takes the caller's).
        fit: Which doublets the map learns from, and its windows.
        geometry: The detector (``None``: partgnn's TrackML detector).
    """

    arguments: tuple[str, ...]
    simulated: SimulatedEvents
    fit: MapFit
    geometry: str | None = None

    @classmethod
    def parse(cls, arguments: Sequence[str], *, where: str) -> RecordedMapFit:
        """The fit ``fit-module-map ARGUMENTS`` runs (as a card records them).

        Raises:
            InputError: Options the command does not take, or values it refuses (one line
                naming ``where``).
        """
        arguments = tuple(str(argument) for argument in arguments)
        try:
            args = _parser().parse_args(list(arguments))
        except (argparse.ArgumentError, SystemExit) as err:
            raise InputError(
                f"{where}: fit-module-map {' '.join(arguments)}: not its options ({err})"
            ) from None
        numbers = (args.pileup, args.pt_min, args.width, args.triplet_floor, *args.floor)
        if any(value < 0 for value in numbers) or (args.max_vertex_radius or 0) < 0:
            raise InputError(f"{where}: fit-module-map {' '.join(arguments)}: a negative value")
        simulated, fit = map_fit_of(args)
        return cls(arguments=arguments, simulated=simulated, fit=fit, geometry=args.geometry)

    def refit(self, out: str | os.PathLike[str], *, workers: int = 1) -> FittedMap:
        """Fits the map again into ``out``, simulating on ``workers`` processes (the map is the
        same for any number)."""
        simulated = dataclasses.replace(self.simulated, workers=workers)
        return fit_module_map_file(out, simulated=simulated, geometry=self.geometry, fit=self.fit)


def map_fit_of(args: argparse.Namespace) -> tuple[SimulatedEvents, MapFit]:
    """The simulated events and the fit that ``fit-module-map``'s options (parsed, as the command
    or :func:`_parser` names them) say: one reading for the command and the cards."""
    simulated = SimulatedEvents(
        [SimulatedRun.parse(text) for text in args.simulate], pileup=args.pileup,
        workers=args.workers, module_planes=args.module_planes,
        field_profile=args.field_profile, secondaries=args.secondaries,
    )  # fmt: skip
    fit = MapFit(
        pt_min=args.pt_min, triplets=args.triplets, max_vertex_radius=args.max_vertex_radius,
        window=args.window, width=args.width, floor=args.floor,
        triplet_floor=args.triplet_floor, precision=args.window_precision,
    )  # fmt: skip
    return simulated, fit


def _parser() -> argparse.ArgumentParser:
    """A parser of :data:`RECORDED_OPTIONS` (types and defaults as the command's)."""
    parser = argparse.ArgumentParser(prog="fit-module-map", add_help=False, exit_on_error=False)
    parser.add_argument("--simulate", action="append", default=[])
    for option in ("--pileup", "--pt-min", "--width", "--triplet-floor"):
        parser.add_argument(option, type=float, default=RECORDED_OPTIONS[option])
    parser.add_argument("--max-vertex-radius", type=float, default=None)
    parser.add_argument("--window", choices=("minmax", "rms"), default="minmax")
    parser.add_argument("--window-precision", choices=("float64", "float32"), default="float64")
    parser.add_argument("--floor", type=float, nargs="+", default=[0.0])
    parser.add_argument("--triplets", action="store_true")
    for option in ("--module-planes", "--field-profile", "--secondaries"):
        parser.add_argument(option, action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--geometry", default=None)
    parser.add_argument("--workers", type=int, default=1)  # the caller's: see RecordedMapFit.refit
    return parser
