"""Bad input is one line naming the file or option, exit status 2, and nothing written: the
cases a new user's second afternoon found (issue 67) that ended in an exception's name."""

from __future__ import annotations

from pathlib import Path

import pytest

from partgnn.cli.main import main
from tests.train.conftest import write_config


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("partgnn: error: "), err
    return err.removeprefix("partgnn: error: ")


def test_a_truncated_or_missing_module_map_is_one_line(tiny_pipeline: Path, tmp_path, capsys):
    from partgnn.resources import pretrained_dir

    truncated = tmp_path / "t.npz"
    truncated.write_bytes((pretrained_dir() / "trackml-full.map.npz").read_bytes()[:5_000_000])
    events, out = tiny_pipeline / "events.h5", tmp_path / "g.h5"
    for given, said in (
        (truncated, f"{truncated}: not a module-map file (not a whole .npz archive"),
        (tmp_path / "nomap.npz", f"{tmp_path / 'nomap.npz'}: module map not found"),
    ):
        argv = ["build-graphs", str(events), "--method", "module-map", "--map", str(given)]
        assert main([*argv, "--out", str(out)]) == 2
        assert _one_line(capsys).startswith(said)
        assert not out.exists()


def test_a_damaged_map_in_the_cache_says_how_to_refit(tiny_pipeline, tmp_path, capsys,
                                                      monkeypatch):  # fmt: skip
    from partgnn.data.module_map import pretrained_maps

    cache = tmp_path / "cache"
    monkeypatch.setenv("PARTGNN_CACHE", str(cache))
    monkeypatch.setattr(
        pretrained_maps, "shipped_map_path", lambda spec, construction=None: tmp_path / "none.npz"
    )
    made = pretrained_maps.map_path("pretrained:trackml-full")
    made.parent.mkdir(parents=True)
    made.write_bytes(b"PK\x03\x04 a truncated zip")
    argv = ["build-graphs", str(tiny_pipeline / "events.h5"), "--method", "module-map",
            "--map", "pretrained:trackml-full", "--out", str(tmp_path / "g.h5")]  # fmt: skip
    assert main(argv) == 2
    assert _one_line(capsys).endswith(
        "; remove it to refit: partgnn pretrained pretrained:trackml-full --make-map"
    )
    assert main(["pretrained", "trackml-full", "--make-map"]) == 2
    assert "remove it to refit" in _one_line(capsys)


def test_destinations_under_proc_are_one_line(tiny_pipeline: Path, tmp_path, capsys,
                                              monkeypatch):  # fmt: skip
    nowhere = Path("/proc/partgnn-nowhere")
    events, graphs = tiny_pipeline / "events.h5", tiny_pipeline / "graphs.h5"
    config = write_config(tmp_path / "c.yaml", data={"graphs": str(graphs)},
                          run={"dir": str(nowhere / "run")})  # fmt: skip
    assert main(["train", "--config", str(config)]) == 2
    assert _one_line(capsys) == f"{nowhere / 'run'}: cannot write here (No such file or directory)"
    assert main(["pretrained", "trackml-pt1", "--evaluate", str(events), "--work",
                 str(nowhere / "w")]) == 2  # fmt: skip
    assert _one_line(capsys).startswith(f"{nowhere / 'w'}: cannot write here")
    monkeypatch.setenv("PARTGNN_CACHE", str(nowhere))
    monkeypatch.setattr(
        "partgnn.data.module_map.pretrained_maps.shipped_map_path",
        lambda spec, construction=None: tmp_path / "none.npz",
    )
    assert main(["pretrained", "trackml-full", "--make-map"]) == 2
    assert _one_line(capsys).startswith(f"{nowhere / 'maps'}: cannot write here")


def test_a_file_below_a_file_names_the_file(tiny_pipeline: Path, capsys):
    events = tiny_pipeline / "events.h5"
    out = events / "sub" / "g.h5"
    assert main(["build-graphs", str(events), "--out", str(out)]) == 2
    assert _one_line(capsys) == f"{out}: cannot write here ({events} is a file, not a folder)"


def test_a_plot_of_an_unknown_format_is_refused_before_printing(tiny_pipeline, tmp_path, capsys):
    shards = tmp_path / "shards"
    assert main(["partition", str(tiny_pipeline / "graphs.h5"), "--parts", "2", "--out",
                 str(shards)]) == 0  # fmt: skip
    capsys.readouterr()
    plot = tmp_path / "plot.txt"
    assert main(["inspect", str(shards), "--plot", str(plot)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and not plot.exists()
    assert captured.err.strip() == (
        f"partgnn: error: {plot}: a plot is written as .png, .pdf, .svg; name the file so"
    )


@pytest.mark.parametrize("seed", ["18446744073709551616", "-1"])
def test_a_seed_out_of_range_is_a_usage_error(tmp_path: Path, capsys, seed: str):
    out = tmp_path / "e.h5"
    with pytest.raises(SystemExit) as exit_:
        main(["simulate", "--events", "1", "--pileup", "1", "--seed", seed, "--out", str(out)])
    assert exit_.value.code == 2 and not out.exists()
    assert "argument --seed: must be an integer in [0, 2**63 - 1]" in capsys.readouterr().err


def test_resume_without_a_run_leaves_no_folder(tiny_pipeline: Path, tmp_path: Path, capsys):
    run = tmp_path / "new" / "run"
    config = write_config(tmp_path / "c.yaml", data={"graphs": str(tiny_pipeline / "graphs.h5")},
                          run={"dir": str(run)})  # fmt: skip
    assert main(["train", "--config", str(config), "--resume"]) == 2
    assert _one_line(capsys) == f"{run / 'checkpoints' / 'last.pt'}: checkpoint not found"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.yaml"]


def test_set_errors_name_the_set(tiny_pipeline: Path, tmp_path: Path, capsys):
    config = write_config(tmp_path / "c.yaml", data={"graphs": str(tiny_pipeline / "graphs.h5")},
                          run={"dir": str(tmp_path / "run")})  # fmt: skip
    for override, said in (
        ("optim.lr=abc", "--set optim.lr=abc: optim.lr must be a number (got 'abc')"),
        ("model.hidden=-3", "--set model.hidden=-3: model.hidden must be >= 1 (got -3)"),
        ("optim.nothing=1", "--set optim.nothing=1: unknown field optim.nothing (known: "),
    ):
        assert main(["train", "--config", str(config), "--set", override]) == 2
        assert _one_line(capsys).startswith(said)
    assert main(["train", "--config", str(config), "--set", "model.steps=2",
                 "--set", "data.graphs=missing.h5"]) == 2  # fmt: skip
    assert _one_line(capsys) == "missing.h5: file not found"


def test_event_ids_from_a_billion_on_sort_as_numbers(tmp_path: Path):
    from partgnn.data.files.storage import EventFile

    out = tmp_path / "e.h5"
    assert main(["simulate", "--events", "2", "--pileup", "1", "--first-event-id", "999999999",
                 "--out", str(out)]) == 0  # fmt: skip
    with EventFile(out) as events:
        assert events.event_ids == [999_999_999, 1_000_000_000]
