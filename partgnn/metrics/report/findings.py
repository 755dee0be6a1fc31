"""What the comparison finds, in sentences computed from the runs' numbers.

Every metric on which a sector strategy (naive or overlapping) is better than halo exchange or
the full graph, or cheaper, is named: a comparison that favours naive on some metric says so.
"""

from __future__ import annotations

import math

from partgnn.metrics.edge_counts import EdgeRates
from partgnn.metrics.report.runs import NAN, RunRecord
from partgnn.metrics.report.text import close, fmt, percent


def findings(runs: list[RunRecord]) -> list[str]:
    """Sentences that answer the report's question from the numbers.

    The runs' recorded mode facts say which is which: a sector run's mode loses cut edges
    (naive, overlapping sectors); its reference is an exact run on several ranks (halo) of the
    same P, else any such, else an exact run on one process (full): what the sectors lose on
    boundary edges, over all edges and on tracks that span sectors, what they win (every metric
    on which the sector run is better is named), and what each costs in step time, memory,
    bytes and replicated work. Every exact run on several ranks is also checked against one on
    one process (they should agree: the exchange is exact).
    """
    sectors = [r for r in runs if r.mode.loses_cut_edges]
    halo = [r for r in runs if r.mode.exact and not r.mode.one_process]
    full = [r for r in runs if r.mode.exact and r.mode.one_process]
    sentences = []
    for run in sectors:
        reference = _reference(run, halo, full)
        if reference is None:
            continue
        sentences += _sectors_vs_reference(run, reference)
    if full:
        sentences += [_halo_vs_full(run, full[0]) for run in halo]
    if not sentences:
        sentences.append(
            "No sectors-vs-halo comparison: it needs a naive or overlap run and a halo or full "
            f"run (modes here: {', '.join(sorted({r.mode.name for r in runs}))})."
        )
    return sentences


def _reference(run: RunRecord, halo: list[RunRecord], full: list[RunRecord]) -> RunRecord | None:
    same_p = [h for h in halo if h.group_size == run.group_size]
    for candidates in (same_p, halo, full):
        if candidates:
            return candidates[0]
    return None


def _who(run: RunRecord) -> str:
    what = _capital(run.mode.phrase)
    if run.sector_margin > 0:
        what += f" of {run.sector_margin} hops"
    return f"{what} (`{run.name}`, P={run.group_size})"


def _edge_figures(sector: RunRecord, ref: RunRecord) -> tuple[EdgeRates, EdgeRates, str]:
    """Both runs' edge figures and where they come from: the events ``partgnn evaluate`` scored
    (evaluation.json) when both runs have them, else the last validation of training
    (metrics.csv, score cut 0.5: efficiencies and purity only); with a phrase saying which."""
    if (
        sector.evaluation is not None
        and ref.evaluation is not None
        and not any(math.isnan(run.edge.efficiency) for run in (sector.evaluation, ref.evaluation))
    ):
        cuts = [fmt(run.cut, ".4g") for run in (sector.evaluation, ref.evaluation)]
        cuts = [c for c in cuts if c != "n/a"]
        at = ""
        if len(cuts) == 2:  # each run scored at its own cut (e.g. chosen on its validation)
            at = f" (cut {cuts[0]})" if cuts[0] == cuts[1] else f" (cuts {cuts[0]} and {cuts[1]})"
        return sector.evaluation.edge, ref.evaluation.edge, f"of the evaluated events{at}"
    mine, theirs = (
        EdgeRates(
            efficiency=run.final("val_efficiency"),
            purity=run.final("val_purity"),
            boundary_efficiency=run.final("val_boundary_efficiency"),
            interior_efficiency=run.final("val_interior_efficiency"),
            boundary_true_edges=run.boundary_true_edges,
        )
        for run in (sector, ref)
    )
    return mine, theirs, "in the validation set"


def _sectors_vs_reference(sector: RunRecord, ref: RunRecord) -> list[str]:
    mine, theirs, where = _edge_figures(sector, ref)
    x, y = mine.boundary_efficiency, theirs.boundary_efficiency
    who = _who(sector)
    vs = f"{ref.mode.phrase} (`{ref.name}`)"
    edges = ""
    n_boundary = mine.boundary_true_edges
    if not math.isnan(n_boundary) and n_boundary > 0:
        edges = f", of {n_boundary:.0f} boundary true edges {where}"
    if math.isnan(x) or math.isnan(y) or y <= 0:
        sentences = [
            f"{who}: boundary-edge efficiency {fmt(x, '.3f')} vs {fmt(y, '.3f')} for {vs} "
            f"(edges {where}; no loss fraction: a boundary efficiency is not defined)."
        ]
    elif x < y - SAME_WITHIN:
        # Relative to what the reference finds: the boundary true edges halo exchange recovers.
        sentences = [
            f"{who} loses {100.0 * (y - x) / y:.1f}% of the boundary true edges that {vs} "
            f"finds (boundary-edge efficiency {x:.3f} vs {y:.3f}{edges})."
        ]
    elif x > y + SAME_WITHIN:
        sentences = [
            f"{who} finds more boundary true edges than {vs}: boundary-edge efficiency "
            f"{x:.4f} vs {y:.4f}{edges}; {sector.name} wins on boundary edges."
        ]
    else:
        sentences = [
            f"{who} finds as many boundary true edges as {vs} (boundary-edge efficiency "
            f"{x:.4f} vs {y:.4f}{edges}, within {SAME_WITHIN:g})."
        ]
    overall = (
        f"Overall edge efficiency {fmt(mine.efficiency, '.4f')} vs "
        f"{fmt(theirs.efficiency, '.4f')} and interior-edge efficiency "
        f"{fmt(mine.interior_efficiency, '.4f')} vs "
        f"{fmt(theirs.interior_efficiency, '.4f')} ({sector.name} vs {ref.name}, edges "
        f"{where})"
    )
    if (
        close(mine.interior_efficiency, theirs.interior_efficiency)
        and mine.efficiency < theirs.efficiency
    ):
        overall += ": the loss is confined to the edges the sectors cut"
    sentences.append(overall + ".")
    quality = [
        ("overall edge efficiency", mine.efficiency, theirs.efficiency),
        ("edge purity", mine.purity, theirs.purity),
        ("interior-edge efficiency", mine.interior_efficiency, theirs.interior_efficiency),
    ]
    track = (
        lambda e: e.track.efficiency,
        lambda e: e.track.spanning_efficiency,
        lambda e: e.track.contained_efficiency,
    )
    t_sector = [sector.evaluated(figure) for figure in track]
    t_ref = [ref.evaluated(figure) for figure in track]
    if not (math.isnan(t_sector[0]) or math.isnan(t_ref[0])):
        text = f"Track efficiency {t_sector[0]:.4f} ({sector.name}) vs {t_ref[0]:.4f} ({ref.name})"
        if not (math.isnan(t_sector[1]) or math.isnan(t_ref[1])):
            n_spanning = sector.evaluated(lambda e: e.track.n_spanning_targets)
            text += (
                f"; for the {fmt(n_spanning, '.0f')} particles whose hits span several sectors "
                f"{t_sector[1]:.4f} vs "
                f"{t_ref[1]:.4f}, for particles inside one sector "
                f"{fmt(t_sector[2], '.4f')} vs {fmt(t_ref[2], '.4f')}"
            )
        sentences.append(text + ".")
        quality += [
            ("track efficiency", t_sector[0], t_ref[0]),
            ("spanning-track efficiency", t_sector[1], t_ref[1]),
            ("contained-track efficiency", t_sector[2], t_ref[2]),
        ]
        fake = [run.evaluated(lambda e: e.track.fake_rate) for run in (sector, ref)]
        quality.append(("fake rate", -fake[0], -fake[1]))
    known = [(name, a, b) for name, a, b in quality if not (math.isnan(a) or math.isnan(b))]
    wins = [name for name, a, b in known if a > b + SAME_WITHIN]
    if wins:
        sentences.append(
            f"{sector.name} is better than {ref.name} (by more than {SAME_WITHIN:g}) on: "
            f"{', '.join(wins)}."
        )
    cost = (
        f"Cost of {ref.name} over {sector.name}: step time {fmt(ref.step_time_ms, '.1f')} vs "
        f"{fmt(sector.step_time_ms, '.1f')} ms"
    )
    ratio = ref.step_time_ms / sector.step_time_ms if sector.step_time_ms > 0 else NAN
    if not math.isnan(ratio):
        cost += f" ({ratio:.2f}x)"
    cost += (
        f", peak memory per rank {fmt(ref.peak_memory_mb, '.0f')} vs "
        f"{fmt(sector.peak_memory_mb, '.0f')} MB, {fmt(ref.mb_exchanged, '.2f')} MB exchanged"
    )
    if ref.steps > 0 and not math.isnan(ref.mb_exchanged):
        cost += f" ({ref.mb_exchanged / ref.steps:.3f} MB per step)"
    cost += f" vs {fmt(sector.mb_exchanged, '.2f')} MB"
    if not (math.isnan(sector.replicated_edges) or math.isnan(ref.replicated_edges)):
        cost += (
            f"; replicated nodes {percent(ref.replicated_nodes)} vs "
            f"{percent(sector.replicated_nodes)} and edges {percent(ref.replicated_edges)} vs "
            f"{percent(sector.replicated_edges)} of the owned ones"
        )
    sentences.append(cost + ".")
    cheaper = [
        name
        for name, a, b in (
            ("step time", sector.step_time_ms, ref.step_time_ms),
            ("peak memory per rank", sector.peak_memory_mb, ref.peak_memory_mb),
            ("bytes exchanged", sector.mb_exchanged, ref.mb_exchanged),
            ("replicated edges", sector.replicated_edges, ref.replicated_edges),
        )
        if not (math.isnan(a) or math.isnan(b)) and a < b
    ]
    if cheaper:
        sentences.append(f"{sector.name} is cheaper than {ref.name} in: {', '.join(cheaper)}.")
    return sentences


#: Rates closer than this count as equal in the findings (differences below it are noise of one
#: run, e.g. one particle in a few hundred).
SAME_WITHIN = 0.001


def _halo_vs_full(halo: RunRecord, full: RunRecord) -> str:
    loss_h, loss_f = halo.final("val_loss"), full.final("val_loss")
    agree = "agree" if close(loss_h, loss_f, tolerance=1e-3) else "differ"
    return (
        f"{_capital(halo.mode.phrase)} (`{halo.name}`, P={halo.group_size}) and "
        f"{full.mode.phrase} (`{full.name}`) {agree}: "
        f"final val loss {fmt(loss_h, '.4f')} vs {fmt(loss_f, '.4f')}, edge efficiency "
        f"{fmt(halo.final('val_efficiency'), '.4f')} vs "
        f"{fmt(full.final('val_efficiency'), '.4f')}; peak memory per rank "
        f"{fmt(halo.peak_memory_mb, '.0f')} vs "
        f"{fmt(full.peak_memory_mb, '.0f')} MB."
    )


def _capital(phrase: str) -> str:
    """``phrase`` with a capital first letter, to begin a sentence."""
    return phrase[:1].upper() + phrase[1:]
