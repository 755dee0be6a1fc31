"""``partgnn evaluate --plots``: what each plot draws is the evaluation's own counts, binned:
the points are k / n per bin with the binomial error, and the bins add up to the target edges,
target particles and candidate tracks the printed numbers count."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from partgnn.cli.main import main
from partgnn.data.detector.geometry import default_geometry
from partgnn.data.files.h5_files import file_sha256
from partgnn.data.files.output_kinds import PLOT
from partgnn.data.files.writers import write_graphs, write_scores
from partgnn.data.graphs.graph_builder import GraphBuildConfig, build_event_graph
from partgnn.data.simulation.simulate import SimulationConfig, simulate_event
from partgnn.metrics.efficiency_tallies import binned_rate
from partgnn.metrics.report.efficiency_plots import PLOTTED_FILE

RATE_PLOTS = ("edge_efficiency_pt.png", "edge_efficiency_eta.png", "track_efficiency_pt.png",
              "track_efficiency_eta.png", "impure_rate_eta.png")  # fmt: skip


@pytest.fixture(scope="module")
def scored(tmp_path_factory) -> dict[str, Path]:
    """Three pile-up-5 events, their graphs and scores that are truth blurred by noise (some
    target edges lost, some false edges kept)."""
    folder = tmp_path_factory.mktemp("plots")
    geometry = default_geometry()
    built = [
        build_event_graph(simulate_event(geometry, SimulationConfig(pileup=5), event_id=i,
                                         seed=3), geometry, GraphBuildConfig(pt_min=0.5))
        for i in range(3)
    ]  # fmt: skip
    graphs = folder / "graphs.h5"
    write_graphs(graphs, ((g, q.to_dict()) for g, q in built))
    generator = np.random.default_rng(0)
    scores = folder / "scores.h5"
    rows = []
    for graph, _ in built:
        y, noise = graph.y.numpy(), generator.random(graph.y.shape[0])
        rows.append((int(graph.event_id), np.where(y > 0.5, 0.3 + 0.7 * noise, 0.6 * noise)))
    write_scores(scores, rows, provenance={"source_sha256": file_sha256(graphs)})
    return {"graphs": graphs, "scores": scores, "folder": folder}


def test_the_plots_draw_the_evaluations_counts(scored, tmp_path: Path, capsys):
    plots, numbers = tmp_path / "plots", tmp_path / "eval.json"
    assert main(["evaluate", str(scored["scores"]), "--graphs", str(scored["graphs"]),
                 "--pt-min", "0.5", "--out", str(numbers), "--plots", str(plots)]) == 0  # fmt: skip
    assert f"plots -> {plots}/" in capsys.readouterr().out
    result = json.loads(numbers.read_text())
    drawn = json.loads((plots / PLOTTED_FILE).read_text())
    for name in (*RATE_PLOTS, "edge_efficiency_rz.png"):
        assert PLOT.recognises(plots / name), name  # a PNG partgnn drew
    for name in RATE_PLOTS:
        plot = drawn[name]
        k, n = np.array(plot["passed"]), np.array(plot["total"])
        shown = n > 0
        # the drawn points are k / n with the binomial error, bin by bin
        y = np.array([math.nan if v is None else v for v in plot["y"]])
        assert np.allclose(y[shown], k[shown] / n[shown])
        assert np.isnan(y[~shown]).all()
        p = k[shown] / n[shown]
        yerr = np.array(plot["yerr"])
        assert len(yerr) == int(shown.sum())
        assert np.allclose(yerr, np.sqrt(p * (1 - p) / n[shown]))
    track, edge = result["track"], result["edge"]
    # the bins add up to what the evaluation counted
    for name in ("track_efficiency_pt.png", "track_efficiency_eta.png"):
        k, n = sum(drawn[name]["passed"]), sum(drawn[name]["total"])
        assert (k, n) == (track["n_reconstructed_targets"], track["n_target_particles"])
    impure = drawn["impure_rate_eta.png"]
    assert sum(impure["total"]) == track["n_tracks"] > 0
    assert sum(impure["passed"]) == track["n_impure_tracks"]
    for name in ("edge_efficiency_pt.png", "edge_efficiency_eta.png"):
        k, n = sum(drawn[name]["passed"]), sum(drawn[name]["total"])
        # (the evaluation's efficiency is the events' mean; the bins pool their edges)
        assert (k, n) == (edge["n_target_selected"], edge["n_target_edges"])
        assert 0 < k < n  # the noise lost some: the plot is not all ones
    cells = drawn["edge_efficiency_rz.png"]
    assert sum(map(sum, cells["total"])) == sum(drawn["edge_efficiency_pt.png"]["total"])
    for row_k, row_n, row_e in zip(cells["passed"], cells["total"], cells["efficiency"],
                                   strict=True):  # fmt: skip
        for k, n, e in zip(row_k, row_n, row_e, strict=True):
            assert (e is None) == (n == 0) and (e is None or e == pytest.approx(k / n))


def test_the_plots_folder_is_replaced_whole_and_only_when_it_holds_plots(scored, tmp_path, capsys):
    plots = tmp_path / "plots"
    argv = ["evaluate", str(scored["scores"]), "--graphs", str(scored["graphs"]), "--plots",
            str(plots)]  # fmt: skip
    assert main(argv) == 0 and main(argv) == 0  # its own plots are replaced
    (plots / "notes.txt").write_text("mine")
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "notes.txt" in err and (plots / "notes.txt").exists()


def test_a_binned_rate_counts_every_value_and_its_error_is_binomial():
    values = np.array([-10.0, 0.1, 0.2, 0.6, 5.0])
    passed = np.array([True, False, True, True, False])
    rate = binned_rate(values, passed, np.array([0.0, 0.5, 1.0]))
    assert rate.total.tolist() == [3, 2] and rate.passed.tolist() == [2, 1]  # beyond: outer bins
    assert np.allclose(rate.rate, [2 / 3, 0.5])
    assert np.allclose(rate.error, [math.sqrt(2 / 3 / 3 / 3), math.sqrt(0.25 / 2)])
