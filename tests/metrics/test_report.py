"""The comparison report on tiny hand-written run directories whose numbers are known."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from PIL import Image

from partgnn.errors import InputError
from partgnn.metrics.epoch_metrics import EpochMetrics
from partgnn.metrics.report import REPORT_NAME, load_run, write_comparison
from partgnn.metrics.run_summary import RunSummary
from partgnn.train.run_directory.run_log import RunLog
from partgnn.train.strategies import STRATEGIES

NAN = float("nan")


#: The counts every evaluation's track figures hold (the tests' figures are the rates).
TRACK_COUNTS = {"n_target_particles": 40, "n_reconstructed_targets": 36, "n_tracks": 40,
                "n_matched_tracks": 36, "n_fake_tracks": 4, "n_duplicate_tracks": 2}  # fmt: skip


def make_run(
    directory: Path,
    *,
    mode: str,
    world_size: int,
    final: dict[str, float],
    step_times: tuple[float, ...] = (0.02, 0.02),
    memory: tuple[float, ...] = (100.0,),
    bytes_sent: int = 0,
    boundary_true_edges: float = 40.0,
    evaluation: dict | None = None,
    extra_summary: dict | None = None,
    recorded_facts: bool = True,
) -> Path:
    """A run directory as ``partgnn train`` writes it (through RunLog), one row per step time
    (``recorded_facts=False``: as partgnn wrote it before summaries recorded the mode's facts).

    ``final`` holds the last row's ``val_*`` metrics (keys without the prefix); earlier rows have
    a higher loss and lower efficiency, so only the last row gives the final numbers.
    """
    log = RunLog(directory, tensorboard=False)
    log.write_config({"mode": mode, "run": {"dir": str(directory), "device": "cpu"}})
    rows = len(step_times)
    row: dict = {}
    for k, step_time in enumerate(step_times):
        late = k == rows - 1
        row = {
            "epoch": k,
            "step": 10 * (k + 1),
            "lr": 0.001,
            "train_loss": 0.6 - 0.1 * k,
            "step_time_s": step_time,
            "peak_memory_mb_max": max(memory),
            "peak_memory_mb_per_rank": list(memory),
            "bytes_exchanged": bytes_sent * (k + 1) // rows,
            **{f"val_{key}": v if late else v * 0.5 for key, v in final.items()},
        }
        log.metrics(EpochMetrics.of_row(row, "make_run"))
    content = {
        "mode": mode,
        **({"mode_facts": STRATEGIES[mode].facts.as_record()} if recorded_facts else {}),
        "world_size": world_size,
        # partgnn before 2026-12-02 called the group size graph_parallel_size.
        "group_size" if recorded_facts else "graph_parallel_size": (
            world_size if STRATEGIES[mode].facts.reads_shards else 1
        ),
        "steps": 10 * rows,
        "epochs": rows,
        "parameters": 1234,
        "wall_time_s": 1.5,
        "final": {**row, "val_boundary_true_edges": boundary_true_edges},
        "communication": {"bytes_sent": bytes_sent, "bytes_received": bytes_sent},
        **(extra_summary or {}),
    }
    if recorded_facts:
        log.summary(RunSummary.of_json(content, "make_run"))
    else:  # as partgnn wrote it then
        (directory / "summary.json").write_text(json.dumps(content))
    log.close()
    if evaluation is not None:
        (directory / "evaluation.json").write_text(json.dumps(evaluation))
    return directory


def _final(eff: float, purity: float, boundary: float, interior: float, loss: float) -> dict:
    return {
        "loss": loss,
        "efficiency": eff,
        "purity": purity,
        "boundary_efficiency": boundary,
        "boundary_purity": 0.7,
        "interior_efficiency": interior,
        "interior_purity": 0.8,
    }


@pytest.fixture
def runs(tmp_path: Path) -> dict[str, Path]:
    """full (1 rank), halo and naive (P = 2); naive finds 0.25 of the boundary edges, halo 0.8."""
    root = tmp_path / "runs"
    return {
        "full": make_run(
            root / "full",
            mode="full",
            world_size=1,
            final=_final(0.94, 0.80, 0.80, 0.95, 0.2),
            memory=(500.0,),
        ),
        "halo": make_run(
            root / "halo",
            mode="halo",
            world_size=2,
            final=_final(0.94, 0.80, 0.80, 0.95, 0.2),
            step_times=(0.03, 0.03),
            memory=(300.0, 280.0),
            bytes_sent=4_000_000,
        ),
        "naive": make_run(
            root / "naive",
            mode="naive",
            world_size=2,
            final=_final(0.90, 0.85, 0.25, 0.95, 0.3),
            step_times=(0.010, 0.012, 0.040),  # median 12 ms: one slow epoch does not count
            memory=(290.0, 270.0),
        ),
    }


def _linked_images(report: Path) -> list[Path]:
    return [
        report.parent / link for link in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", report.read_text())
    ]


def test_report_has_table_rows_and_valid_pngs(runs: dict[str, Path], tmp_path: Path):
    out = tmp_path / "report" / "nested"
    report = write_comparison(list(runs.values()), out)
    assert report == out / REPORT_NAME
    text = report.read_text()
    assert (
        "| full | full | 1 | 20 | 0.2000 | 0.9400 | 0.8000 | 0.8000 | 0.9500 | 20.0 | 500 | 0.00 |"
        in text
    )
    assert (
        "| halo | halo | 2 | 20 | 0.2000 | 0.9400 | 0.8000 | 0.8000 | 0.9500 | 30.0 | 300 | 4.00 |"
        in text
    )
    naive = "| naive | naive | 2 | 30 | 0.3000 | 0.9000 | 0.8500 | 0.2500 | 0.9500 | 12.0 | 290 |"
    assert f"{naive} 0.00 |" in text
    assert "track eff." not in text  # no run was evaluated
    images = _linked_images(report)
    assert {p.name for p in images} == {
        "loss.png",
        "efficiency_purity.png",
        "boundary_interior.png",
        "memory.png",
        "cost.png",
    }
    for image in images:
        with Image.open(image) as png:
            assert png.format == "PNG" and png.width > 400 and png.height > 300
            png.verify()
    # Only the report and its plots: no temporary files left behind.
    assert sorted(p.name for p in out.iterdir()) == sorted([REPORT_NAME, *(p.name for p in images)])


def test_naive_vs_halo_sentence_has_the_numbers(runs: dict[str, Path], tmp_path: Path):
    text = write_comparison(list(runs.values()), tmp_path / "out").read_text()
    # (0.8 - 0.25) / 0.8 = 68.75 % of what halo finds.
    assert (
        "Naive sectorisation (`naive`, P=2) loses 68.8% of the boundary true edges that halo "
        "exchange (`halo`) finds (boundary-edge efficiency 0.250 vs 0.800, of 40 boundary true "
        "edges in the validation set)." in text
    )
    assert "step time 30.0 vs 12.0 ms (2.50x)" in text
    assert "4.00 MB exchanged (0.200 MB per step)" in text
    assert "the loss is confined to the edges the sectors cut" in text
    assert "Halo exchange (`halo`, P=2) and the full graph (`full`) agree" in text


def test_naive_against_full_when_there_is_no_halo(runs: dict[str, Path], tmp_path: Path):
    text = write_comparison([runs["full"], runs["naive"]], tmp_path / "out").read_text()
    assert "loses 68.8% of the boundary true edges that the full graph (`full`) finds" in text


def test_no_comparison_text_without_a_naive_run(runs: dict[str, Path], tmp_path: Path):
    text = write_comparison([runs["halo"]], tmp_path / "out").read_text()
    assert "boundary true edges that" not in text
    assert "No sectors-vs-halo comparison" in text


def test_nan_is_printed_as_na(tmp_path: Path):
    run = make_run(
        tmp_path / "naive",
        mode="naive",
        world_size=2,
        final=_final(0.9, NAN, NAN, 0.95, 0.3),
        step_times=(NAN, NAN),
    )
    text = write_comparison([run], tmp_path / "out").read_text()
    assert (
        "| naive | naive | 2 | 20 | 0.3000 | 0.9000 | n/a | n/a | 0.9500 | n/a | 100 | 0.00 |"
        in text
    )
    assert not re.search(r"\bnan\b", text, re.IGNORECASE)


def test_evaluation_json_adds_track_efficiency(runs: dict[str, Path], tmp_path: Path):
    evaluation = {
        "edge": {"efficiency": 0.91, "purity": 0.8, "auc": 0.97, "boundary_efficiency": 0.9},
        "track": {**TRACK_COUNTS, "efficiency": 0.875, "fake_rate": 0.1, "duplicate_rate": 0.05},
    }
    (runs["halo"] / "evaluation.json").write_text(json.dumps(evaluation))
    report = write_comparison(list(runs.values()), tmp_path / "out")
    text = report.read_text()
    assert "track eff." in text
    assert "| halo | halo | 2 | 20 | 0.2000 | 0.9400 | 0.8000 | 0.8000 | 0.9500 | 0.8750 |" in text
    assert "| full | full | 1 | 20 | 0.2000 | 0.9400 | 0.8000 | 0.8000 | 0.9500 | n/a |" in text
    # The evaluation table: only evaluated runs; keys the file lacks are n/a.
    assert (
        "| halo | 0.9100 | 0.8000 | 0.9700 | 0.9000 | n/a | n/a | 0.8750 | n/a | n/a | 0.1000 "
        "| 0.0500 | n/a |" in text
    )
    assert (report.parent / "tracks.png").exists()
    assert "tracks.png" in {p.name for p in _linked_images(report)}


def test_names_default_to_directories_and_are_made_unique(tmp_path: Path):
    final = _final(0.9, 0.8, 0.5, 0.95, 0.3)
    a = make_run(tmp_path / "p2" / "halo", mode="halo", world_size=2, final=final)
    b = make_run(tmp_path / "p4" / "halo", mode="halo", world_size=4, final=final)
    text = write_comparison([a, b, a], tmp_path / "out").read_text()
    for name in ("p2/halo", "p4/halo", "p2/halo-2"):
        assert f"| {name} | halo |" in text
    text = write_comparison([a, b], tmp_path / "out", names=["two", "four"]).read_text()
    assert "| two | halo | 2 |" in text and "| four | halo | 4 |" in text


@pytest.mark.parametrize(
    ("names", "message"),
    [
        (["only-one"], "--names gives 1 names for 2 runs"),
        (["same", "same"], "--names: names must be unique (got same same)"),
    ],
)
def test_names_that_do_not_fit(runs: dict[str, Path], tmp_path: Path, names, message):
    with pytest.raises(InputError, match=re.escape(message)):
        write_comparison([runs["full"], runs["halo"]], tmp_path / "out", names=names)


def _break_metrics(run: Path, text: str) -> None:
    (run / "metrics.csv").write_text(text)


@pytest.mark.parametrize(
    ("damage", "file", "message"),
    [
        (lambda r: (r / "metrics.csv").unlink(), "metrics.csv", "not found"),
        (lambda r: (r / "summary.json").unlink(), "summary.json", "not found"),
        (lambda r: _break_metrics(r, ""), "metrics.csv", "empty file"),
        (lambda r: _break_metrics(r, "a,b\n1,2\n"), "metrics.csv", "missing column(s) epoch"),
        (
            lambda r: _break_metrics(r, "epoch,step,train_loss,val_loss\n"),
            "metrics.csv",
            "no evaluation rows",
        ),
        (
            lambda r: _break_metrics(r, "epoch,step,train_loss,val_loss\n0,10,abc,0.1\n"),
            "metrics.csv",
            "line 2: train_loss is not a number ('abc')",
        ),
        (
            lambda r: _break_metrics(r, "epoch,step,train_loss,val_loss\n0,10,0.2\n"),
            "metrics.csv",
            "line 2 has another number of fields than the header",
        ),
        (lambda r: (r / "summary.json").write_text("{"), "summary.json", "not valid JSON"),
        (
            lambda r: (r / "summary.json").write_text("[1]"),
            "summary.json",
            "expected a JSON object",
        ),
        (lambda r: (r / "summary.json").write_text("{}"), "summary.json", "no known 'mode'"),
        (lambda r: (r / "evaluation.json").write_text("nan?"), "evaluation.json", "not valid JSON"),
    ],
)
def test_broken_run_directories_give_one_line_naming_the_file(
    runs: dict[str, Path], tmp_path: Path, damage, file, message
):
    damage(runs["naive"])
    out = tmp_path / "out"
    with pytest.raises(InputError) as caught:
        write_comparison(list(runs.values()), out)
    text = str(caught.value)
    assert "\n" not in text
    assert text.startswith(str(runs["naive"] / file)) and message in text
    assert not (out / REPORT_NAME).exists()


def test_missing_run_directory(tmp_path: Path):
    with pytest.raises(InputError, match="run directory not found"):
        write_comparison([tmp_path / "nowhere"], tmp_path / "out")
    with pytest.raises(InputError, match="at least one run"):
        write_comparison([], tmp_path / "out")


def test_load_run_reads_what_the_trainer_writes(runs: dict[str, Path]):
    run = load_run(runs["halo"])
    assert (run.name, run.mode.name, run.world_size, run.steps, run.device) == (
        "halo",
        "halo",
        2,
        20,
        "cpu",
    )
    assert run.memory_per_rank == [300.0, 280.0]
    assert run.bytes_sent == 4_000_000
    assert math.isclose(run.final("val_boundary_efficiency"), 0.8)
    assert run.history["val_loss"].tolist() == [0.1, 0.2]
    assert run.evaluation is None


def test_overlap_run_is_named_and_its_wins_and_costs_are_said(
    runs: dict[str, Path], tmp_path: Path
):
    # Overlapping sectors of 5 hops: exact on boundary edges (as halo), faster per step and
    # without exchange, but 60 % more edges computed; its tracks spanning sectors are as good.
    track = {**TRACK_COUNTS, "efficiency": 0.95, "spanning_efficiency": 0.9,
             "contained_efficiency": 0.97, "n_spanning_targets": 20}  # fmt: skip
    workload = {"replicated_node_fraction": 0.5, "replicated_edge_fraction": 0.6}
    overlap = make_run(
        tmp_path / "runs" / "overlap",
        mode="naive",
        world_size=2,
        final=_final(0.95, 0.80, 0.85, 0.95, 0.2),
        step_times=(0.02, 0.02),
        memory=(350.0, 340.0),
        evaluation={"edge": {}, "track": {**track, "fake_rate": 0.02}},
        extra_summary={"strategy": "overlap", "sector_margin": 5, "workload": workload},
        recorded_facts=False,  # a summary of partgnn before overlapping sectors were a mode
    )
    halo_workload = {"replicated_node_fraction": 0.05, "replicated_edge_fraction": 0.02}
    summary = json.loads((runs["halo"] / "summary.json").read_text())
    summary["workload"] = halo_workload
    (runs["halo"] / "summary.json").write_text(json.dumps(summary))
    (runs["halo"] / "evaluation.json").write_text(
        json.dumps({"edge": {}, "track": {**track, "spanning_efficiency": 0.92, "fake_rate": 0.03}})
    )
    text = write_comparison([runs["halo"], overlap], tmp_path / "out").read_text()
    assert "| overlap | overlapping k=5 | 2 |" in text
    assert "| +50.0% | +60.0% |" in text and "| +5.0% | +2.0% |" in text
    assert "Overlapping sectors of 5 hops (`overlap`, P=2) finds more boundary true" in text
    assert "overall edge efficiency, boundary" not in text
    assert (
        "overlap is better than halo (by more than 0.001) on: overall edge efficiency, fake rate."
        in text
    )
    assert "the loss is confined" not in text
    assert "for the 20 particles whose hits span several sectors 0.9000 vs 0.9200" in text
    assert "overlap is cheaper than halo in: step time, bytes exchanged." in text


def test_edge_findings_read_the_evaluated_events_when_both_runs_have_them(
    runs: dict[str, Path], tmp_path: Path
):
    """Runs scored by ``partgnn evaluate`` (e.g. a model trained elsewhere, scored by each
    strategy) are compared on the scored events, not on their own training's validation."""

    def evaluation(boundary: float, overall: float) -> dict:
        edge = {"efficiency": overall, "boundary_efficiency": boundary,
                "interior_efficiency": 0.9, "purity": 0.95, "boundary_true_edges": 470}  # fmt: skip
        return {"cut": 0.6537, "edge": edge, "track": {**TRACK_COUNTS, "efficiency": 0.99}}

    for name, figures in (("naive", (0.0, 0.88)), ("halo", (0.7, 0.9))):
        (runs[name] / "evaluation.json").write_text(json.dumps(evaluation(*figures)))
    text = write_comparison([runs["halo"], runs["naive"]], tmp_path / "out").read_text()
    assert (
        "loses 100.0% of the boundary true edges that halo exchange (`halo`) finds "
        "(boundary-edge efficiency 0.000 vs 0.700, of 470 boundary true edges of the evaluated "
        "events (cut 0.6537))." in text
    )
    assert (
        "Overall edge efficiency 0.8800 vs 0.9000 and interior-edge efficiency 0.9000 vs "
        "0.9000 (naive vs halo, edges of the evaluated events (cut 0.6537)): the loss is "
        "confined to the edges the sectors cut." in text
    )
    # Each at its own cut: both named.
    (runs["halo"] / "evaluation.json").write_text(json.dumps({**evaluation(0.7, 0.9), "cut": 0.5}))
    text = write_comparison([runs["halo"], runs["naive"]], tmp_path / "out1").read_text()
    assert "of the evaluated events (cuts 0.6537 and 0.5))." in text
    # One run without evaluated edges: both read their validation, as before.
    (runs["halo"] / "evaluation.json").unlink()
    text = write_comparison([runs["halo"], runs["naive"]], tmp_path / "out2").read_text()
    assert "of 40 boundary true edges in the validation set" in text
