"""One rule for every output: a command replaces a file of the kind it writes and says so;
anything else at its output (a user's text file, a hand-written report, another kind of
partgnn file) is refused in one line, exit 2, untouched, unless ``--overwrite`` is given."""

from __future__ import annotations

from pathlib import Path

import pytest

from partgnn.cli.main import main
from tests.metrics.test_report import _final, make_run

#: A file partgnn did not write.
MINE = b"a user's file\n"


def _replaced_after_refusal(argv: list[str], out: Path, capsys) -> str:
    """Runs ``argv`` with a user's file at ``out`` (refused, untouched), then with
    ``--overwrite`` (written); then again without (its own output: replaced); returns the
    first refusal's line."""
    out.write_bytes(MINE)
    assert main(argv) == 2
    refusal = capsys.readouterr().err.strip()
    assert "\n" not in refusal and refusal.startswith(f"partgnn: error: {out}: exists"), refusal
    assert "--overwrite" in refusal
    assert out.read_bytes() == MINE
    assert main([*argv, "--overwrite"]) == 0
    assert "--overwrite)" in capsys.readouterr().err
    assert out.read_bytes() != MINE
    assert main(argv) == 0
    said = capsys.readouterr().err
    assert "replacing" in said and out.name in said and "--overwrite" not in said, said
    return refusal


def test_build_graphs(tiny_pipeline: Path, tmp_path: Path, capsys):
    out = tmp_path / "u.h5"
    refusal = _replaced_after_refusal(
        ["build-graphs", str(tiny_pipeline / "events.h5"), "--pt-min", "1", "--out", str(out)],
        out, capsys,
    )  # fmt: skip
    assert "(a file partgnn did not write); build-graphs replaces only a partgnn-graphs" in refusal


def test_build_graphs_over_an_events_file_needs_overwrite(tiny_pipeline: Path, tmp_path, capsys):
    events = tmp_path / "events-copy.h5"
    events.write_bytes((tiny_pipeline / "events.h5").read_bytes())
    argv = ["build-graphs", str(tiny_pipeline / "events.h5"), "--out", str(events)]
    assert main(argv) == 2
    assert "exists (a partgnn-events file)" in capsys.readouterr().err
    assert events.read_bytes() == (tiny_pipeline / "events.h5").read_bytes()


def test_infer_and_evaluate(tiny_pipeline: Path, tmp_path: Path, capsys):
    graphs, scores = tiny_pipeline / "graphs.h5", tmp_path / "scores.h5"
    _replaced_after_refusal(
        ["infer", "--checkpoint", "pretrained:trackml-pt1", "--graphs", str(graphs), "--out",
         str(scores), "--device", "cpu"], scores, capsys,
    )  # fmt: skip
    report = tmp_path / "evaluation.json"
    _replaced_after_refusal(
        ["evaluate", str(scores), "--graphs", str(graphs), "--out", str(report)], report, capsys
    )


def test_inspect_plot(tiny_pipeline: Path, tmp_path: Path, capsys):
    shards = tmp_path / "shards"
    assert main(["partition", str(tiny_pipeline / "graphs.h5"), "--parts", "2", "--out",
                 str(shards)]) == 0  # fmt: skip
    capsys.readouterr()
    plot = tmp_path / "event.png"
    _replaced_after_refusal(["inspect", str(shards), "--plot", str(plot)], plot, capsys)


def test_compare(tmp_path: Path, capsys):
    halo = make_run(
        tmp_path / "halo", mode="halo", world_size=2, final=_final(0.9, 0.8, 0.8, 0.95, 0.2)
    )
    out = tmp_path / "cmp"
    out.mkdir()
    (out / "notes.txt").write_bytes(MINE)  # another file in the folder: never touched
    report = out / "report.md"
    _replaced_after_refusal(["compare", str(halo), "--out", str(out)], report, capsys)
    assert (out / "notes.txt").read_bytes() == MINE
    (out / "loss.png").write_bytes(MINE)  # a plot of the user's own
    assert main(["compare", str(halo), "--out", str(out)]) == 2
    assert "loss.png: exists (a file partgnn did not write)" in capsys.readouterr().err
    assert (out / "loss.png").read_bytes() == MINE
    assert main(["compare", str(halo), "--out", str(out / "notes.txt")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"partgnn: error: {out / 'notes.txt'}: exists and is not a folder; compare " \
        "writes a folder there"  # fmt: skip


def test_import_trackml_replaces_only_an_import(sample_dir: Path, tiny_pipeline: Path,
                                                tmp_path: Path, capsys):  # fmt: skip
    out = tmp_path / "sample.h5"
    refusal = _replaced_after_refusal(
        ["import-trackml", str(sample_dir), "--out", str(out)], out, capsys
    )
    assert "replaces only a partgnn-events file imported from TrackML" in refusal
    simulated = tmp_path / "simulated.h5"
    simulated.write_bytes((tiny_pipeline / "events.h5").read_bytes())
    assert main(["import-trackml", str(sample_dir), "--out", str(simulated)]) == 2
    assert "exists (a partgnn-events file)" in capsys.readouterr().err


def test_a_folder_at_a_file_output_is_refused(tiny_pipeline: Path, tmp_path: Path, capsys):
    out = tmp_path / "folder.h5"
    out.mkdir()
    argv = ["build-graphs", str(tiny_pipeline / "events.h5"), "--out", str(out), "--overwrite"]
    assert main(argv) == 2
    assert capsys.readouterr().err.strip() == (
        f"partgnn: error: {out}: is a folder; give the path of the file to write"
    )


@pytest.mark.parametrize("kind_name", ["GRAPHS", "SCORES", "EVALUATION", "PLOT", "REPORT"])
def test_a_kind_does_not_take_another_kinds_file(tiny_pipeline: Path, kind_name: str):
    from partgnn.data.files import output_kinds

    kind = getattr(output_kinds, kind_name)
    assert not kind.recognises(tiny_pipeline / "events.h5")
    assert output_kinds.EVENTS.recognises(tiny_pipeline / "events.h5")
    assert not output_kinds.TRACKML_EVENTS.recognises(tiny_pipeline / "events.h5")
