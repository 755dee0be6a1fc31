"""What to simulate: the settings of :func:`~partgnn.data.simulation.simulate.simulate_event`,
checked when made, with the defaults that reproduce the real TrackML sample event."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

from partgnn.errors import InputError

#: Switches added after events had been simulated: recorded only when on (a record without
#: them is of events simulated with them off).
_RECORDED_WHEN_ON = ("module_planes", "field_profile", "secondaries")
#: The realism switches off: the ideal detector, the default simulation before issue 50
#: (``SimulationConfig(**IDEAL_DETECTOR)`` makes the events of a record made then).
IDEAL_DETECTOR: dict[str, bool] = dict.fromkeys(_RECORDED_WHEN_ON, False)
#: Settings of the secondaries, recorded only with them.
_SECONDARY_SETTINGS = (
    "interaction_length",
    "secondary_multiplicity",
    "secondary_pt_rel",
    "secondary_proton_fraction",
    "primary_share",
    "kshort_per_charged",
    "lambda_per_charged",
)


@dataclass(frozen=True)
class SimulationConfig:
    """What to simulate.

    Attributes:
        pileup: Number of proton-proton collisions per event (a whole number >= 1); each has its
            own vertex drawn from the beam spot.
        particles_per_pileup: Mean number of charged particles per collision within
            ``|eta| < eta_max``; the count per collision is Poisson. With ``secondaries``, only
            ``primary_share`` of them are made as primaries: interactions and decays make the
            rest (:attr:`primaries_per_pileup`).
        eta_max: Particles are generated uniformly in pseudorapidity ``[-eta_max, eta_max]``.
        pt_min: Smallest transverse momentum generated [GeV].
        pt_scale: ``p0`` of the transverse momentum spectrum [GeV] (see ``pt_power``).
        pt_power: ``m`` of the spectrum: the fraction of particles above ``pt`` falls as
            ``(1 + pt / p0) ** -m`` (truncated at ``pt_min``). The defaults reproduce the real
            TrackML sample event: pT percentiles 10/50/90/99% of about 0.14/0.35/1.2/3.3 GeV.
        kaon_fraction: Fraction of particles that are charged kaons (the rest: pions, protons).
        proton_fraction: Fraction of particles that are (anti-)protons. The defaults follow the
            real sample event (79% pions, 7% kaons, 14% protons).
        beam_spot_sigma: Gaussian spread of each collision vertex in ``(x, y, z)`` [mm].
        noise_fraction: Expected fraction of noise hits among all hits (real sample: 15%).
        multiple_scattering: Whether each crossed layer deflects the track (Highland formula).
        resolution_scale: Multiplies every layer's hit resolution; 0 gives perfect hits.
        efficiency: Hit efficiency for every layer; ``None`` uses each layer's own.
        module_size: Size ``(along r*phi, along z or r)`` [mm] of the pseudo modules that
            number the hits (``module_id``) when the geometry has no module table
            (:attr:`~partgnn.data.detector.geometry.DetectorGeometry.modules`; the default TrackML
            geometry has one: hits carry the real detector's module ids); see
            :func:`~partgnn.data.simulation.digitisation.grid_module_ids`.
        overlap_scale: Multiplies every layer's probability of a second hit on an overlapping
            module (:attr:`~partgnn.data.detector.geometry.Layer.overlap`, measured on the real
            sample); 0 turns overlapping modules off. With ``module_planes`` it is the probability
            of keeping each further module a track crosses on one layer (at most 1).
        module_planes: Hits lie on the detector's module planes, where the track crosses them
            (a geometry with a module table, such as the default TrackML one): each crossing of
            a layer leaves a hit on every module the track passes through, so overlaps follow
            from the modules' layout (the layers' ``overlap`` probabilities are not used), and
            the resolution smears the hit within its module's plane (u, v). Off: hits on the
            layers' ideal cylinders and disks (the default before issue 50, as for the next two
            switches: the three are on by default since the shipped models were trained with
            them).
        field_profile: Tracks bend in the geometry's measured field ``Bz(|z|)``
            (:attr:`~partgnn.data.detector.geometry.DetectorGeometry.field_profile`; the default
            TrackML geometry has the real detector's) instead of its uniform ``b_field``.
        secondaries: Hadrons interact inelastically in the layers' material and emit charged
            secondaries (:mod:`~partgnn.data.simulation.secondaries`), and neutral strange hadrons
            decay into charged pairs (:mod:`~partgnn.data.simulation.decays`); off: primaries only,
            never stopped.
        interaction_length: The layers' material per nuclear interaction length, in radiation
            lengths (an interaction's probability is ``1 - exp(-t / interaction_length)`` for
            ``t`` radiation lengths traversed; silicon alone 4.96, the default an effective
            value for the material the geometry does not list, issue 50).
        secondary_multiplicity: Mean number of charged secondaries per interaction (Poisson).
        secondary_pt_rel: Mean transverse momentum of a secondary relative to its parent's
            direction [GeV] (exponential).
        secondary_proton_fraction: Fraction of secondaries that are knocked-out protons (the
            rest: pions of either charge).
        primary_share: With ``secondaries``, the share of ``particles_per_pileup`` made as
            primaries (fitted so that the particles with hits, primaries and secondaries
            together, number what the real sample's do, issue 50).
        kshort_per_charged: K0S made per charged primary (Poisson per collision).
        lambda_per_charged: Lambdas and anti-Lambdas (together) made per charged primary.
    """

    pileup: float = 200.0
    particles_per_pileup: float = 50.0
    eta_max: float = 4.0
    pt_min: float = 0.1
    pt_scale: float = 1.0
    pt_power: float = 3.4
    kaon_fraction: float = 0.07
    proton_fraction: float = 0.14
    beam_spot_sigma: tuple[float, float, float] = (0.015, 0.015, 55.0)
    noise_fraction: float = 0.15
    multiple_scattering: bool = True
    resolution_scale: float = 1.0
    efficiency: float | None = None
    module_size: tuple[float, float] = (30.0, 80.0)
    overlap_scale: float = 1.0
    module_planes: bool = True
    field_profile: bool = True
    secondaries: bool = True
    interaction_length: float = 1.8
    secondary_multiplicity: float = 1.5
    secondary_pt_rel: float = 0.3
    secondary_proton_fraction: float = 0.4
    primary_share: float = 0.71
    kshort_per_charged: float = 0.05
    lambda_per_charged: float = 0.04

    def __post_init__(self) -> None:
        # Accept lists (YAML, JSON) for the tuple fields, so configs round-trip through JSON.
        object.__setattr__(self, "beam_spot_sigma", tuple(float(s) for s in self.beam_spot_sigma))
        object.__setattr__(self, "module_size", tuple(float(s) for s in self.module_size))
        problems = [
            (self.pileup < 1 or self.pileup != int(self.pileup), "pileup", "a whole number >= 1"),
            # The upper bound keeps the per-collision particle number within its id bits.
            (
                not 0 < self.particles_per_pileup <= 1e6,
                "particles_per_pileup",
                "in (0, 1e6]",
            ),
            (not self.eta_max > 0, "eta_max", "> 0"),
            (not self.pt_min > 0, "pt_min", "> 0"),
            (not self.pt_scale > 0, "pt_scale", "> 0"),
            (not self.pt_power > 0, "pt_power", "> 0"),
            (not 0 <= self.kaon_fraction <= 1, "kaon_fraction", "in [0, 1]"),
            (not 0 <= self.proton_fraction <= 1, "proton_fraction", "in [0, 1]"),
            (
                self.kaon_fraction + self.proton_fraction > 1,
                "kaon_fraction + proton_fraction",
                "<= 1",
            ),
            (
                len(self.beam_spot_sigma) != 3 or min(self.beam_spot_sigma) < 0,
                "beam_spot_sigma",
                "three values >= 0",
            ),
            (not 0 <= self.noise_fraction < 1, "noise_fraction", "in [0, 1)"),
            (not self.resolution_scale >= 0, "resolution_scale", ">= 0"),
            (
                self.efficiency is not None and not 0 <= self.efficiency <= 1,
                "efficiency",
                "None or in [0, 1]",
            ),
            (
                len(self.module_size) != 2 or not min(self.module_size) > 0,
                "module_size",
                "two values > 0",
            ),
            (not 0 <= self.overlap_scale <= 10, "overlap_scale", "in [0, 10]"),
            (
                not 0 < self.secondary_multiplicity <= 100,
                "secondary_multiplicity",
                "in (0, 100]",
            ),
            (not self.secondary_pt_rel > 0, "secondary_pt_rel", "> 0"),
            (not self.interaction_length > 0, "interaction_length", "> 0"),
            (not 0 < self.primary_share <= 1, "primary_share", "in (0, 1]"),
            (not 0 <= self.kshort_per_charged <= 10, "kshort_per_charged", "in [0, 10]"),
            (not 0 <= self.lambda_per_charged <= 10, "lambda_per_charged", "in [0, 10]"),
            (
                not 0 <= self.secondary_proton_fraction <= 1,
                "secondary_proton_fraction",
                "in [0, 1]",
            ),
            (
                self.module_planes and self.overlap_scale > 1,
                "overlap_scale",
                "in [0, 1] with module_planes (the probability of keeping each further module)",
            ),
        ]
        for bad, name, expected in problems:
            if bad:
                value = getattr(self, name, None)
                got = f" (got {value!r})" if value is not None else ""
                raise InputError(f"simulation config: {name} must be {expected}{got}")

    @property
    def primaries_per_pileup(self) -> float:
        """Mean number of primary particles per collision: ``particles_per_pileup``, times
        ``primary_share`` with ``secondaries``."""
        return self.particles_per_pileup * (self.primary_share if self.secondaries else 1.0)

    def to_json(self) -> str:
        """The configuration as a JSON object (sorted keys), for provenance attributes
        (``module_planes``, ``field_profile`` and ``secondaries`` with its settings only when on:
        events simulated before them keep their record)."""
        fields = dataclasses.asdict(self)
        for name in _RECORDED_WHEN_ON:
            if not fields[name]:
                del fields[name]
        if not self.secondaries:
            for name in _SECONDARY_SETTINGS:
                del fields[name]
        return json.dumps(fields, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> SimulationConfig:
        """The configuration a :meth:`to_json` record describes: a realism switch the record
        does not name was off (recorded only when on; records made before the switches)."""
        return cls(**{**IDEAL_DETECTOR, **json.loads(text)})
