"""The partition and inspect sub-commands, run as a user would."""

import dataclasses
from pathlib import Path

import pytest

from partgnn.cli.main import main


@pytest.fixture(scope="module")
def graphs_file(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("cli-partition")
    events, graphs = folder / "events.h5", folder / "graphs.h5"
    assert (
        main(["simulate", "--events", "2", "--pileup", "5", "--seed", "2", "--out", str(events)])
        == 0
    )
    assert main(["build-graphs", str(events), "--out", str(graphs), "--pt-min", "0.5"]) == 0
    return graphs


def test_partition_then_inspect_with_plot(graphs_file: Path, tmp_path: Path, capsys):
    out = tmp_path / "shards"
    code = main(
        [
            "partition",
            str(graphs_file),
            "--parts",
            "4",
            "--method",
            "phieta",
            "--grid",
            "2x2",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "true-edge cut fraction" in printed and "wrote 4 shards of 2 events" in printed
    plot = tmp_path / "partition.png"
    assert main(["inspect", str(out), "--event", "1", "--plot", str(plot)]) == 0
    printed = capsys.readouterr().out
    assert "event 1:" in printed and "bytes/exch" in printed
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_partition_replaces_its_own_output_but_never_a_users_file(
    graphs_file: Path, tmp_path: Path, capsys
):
    out = tmp_path / "shards"
    argv = ["partition", str(graphs_file), "--parts", "2", "--out", str(out)]
    assert main(argv) == 0
    assert main(argv) == 0  # a shard directory partition wrote is replaced
    plot = out / "partition.png"
    assert main(["inspect", str(out), "--plot", str(plot)]) == 0
    (out / "notes").mkdir()
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"partgnn: error: {out}: holds what partition did not write (notes/, partition.png), "
        "which replacing the folder would delete: move it out, or choose another --out"
    )
    assert plot.read_bytes()[:4] == b"\x89PNG" and (out / "notes").is_dir()
    assert main(["inspect", str(out)]) == 0  # the shards are still there, untouched


def test_inspect_errors_are_one_line(graphs_file: Path, tmp_path: Path, capsys):
    out = tmp_path / "shards"
    assert main(["partition", str(graphs_file), "--parts", "2", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["inspect", str(out), "--event", "42"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"partgnn: error: {out}: no event 42 (events: 0, 1)"
    assert main(["inspect", str(tmp_path / "nowhere")]) == 2
    assert "shard directory not found" in capsys.readouterr().err
    (out / "part-00001.h5").unlink()  # inspect without --plot notices it too
    assert main(["inspect", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("partgnn: error: ") and "part-00001.h5" in err and "\n" not in err, err
    assert main(["inspect", str(tmp_path / "nowhere")]) == 2
    assert "shard directory not found" in capsys.readouterr().err
    with pytest.raises(SystemExit) as usage_error:
        main(["partition", str(graphs_file), "--parts", "0", "--out", str(tmp_path / "z")])
    assert usage_error.value.code == 2
    assert "argument --parts: must be >= 1 (got 0)" in capsys.readouterr().err
    assert not (tmp_path / "z").exists()


def test_parts_left_empty_are_warned_about():
    from partgnn.cli.partition_commands import empty_parts_warning
    from partgnn.partition.shard_meta import EventPartition, ShardMeta, SourceGraphs

    def event(event_id: int, owned: list[int]) -> EventPartition:
        zeros = [0] * len(owned)
        return EventPartition(
            event_id=event_id, n_parts=len(owned), n_nodes=sum(owned), n_edges=0,
            owned_nodes=owned, halo_nodes=zeros, halo_ratio=[0.0] * len(owned),
            local_edges=zeros, neighbours=zeros, send_rows=zeros, hidden=64,
            bytes_per_exchange=zeros,
        )  # fmt: skip

    rows = [event(3, [10, 0, 5, 0]), event(4, [5, 5, 5, 5]), event(5, [20, 0, 0, 0])]
    meta = ShardMeta(
        method="metis", n_parts=4, seed=0, margin=0, run_id="r", source=SourceGraphs("g", "0"),
        event_ids=[3, 4, 5], per_event=rows,
    )  # fmt: skip
    assert empty_parts_warning(meta) == (
        "2 of 3 events leave parts without nodes (event 5: 3 of 4 parts empty); their ranks "
        "idle on those events - use fewer parts"
    )
    assert empty_parts_warning(dataclasses.replace(meta, per_event=rows[1:2])) is None


@pytest.mark.parametrize(
    "option, value",
    [("--parts", "0"), ("--margin", "-1"), ("--workers", "0"), ("--hidden", "0")],
)
def test_out_of_range_partition_options_are_usage_errors(option, value, capsys):
    from partgnn.cli.main import build_parser

    with pytest.raises(SystemExit) as stopped:
        build_parser().parse_args(
            ["partition", "g.h5", "--parts", "2", "--out", "o", option, value]
        )
    assert stopped.value.code == 2
    assert f"argument {option}: must be >= " in capsys.readouterr().err


@pytest.mark.parametrize(
    ("cut", "what"),
    [(["--phi-slope-max", "0"], "no edges (no hit pair passes the cuts)"),
     (["--pt-min", "1000"], "no nodes (no hit passes the cuts)")],
)  # fmt: skip
def test_graphs_without_edges_warn_when_built_and_are_not_partitioned(
    graphs_file: Path, tmp_path: Path, capsys, cut: list[str], what: str
):
    events, empty = graphs_file.parent / "events.h5", tmp_path / "empty.h5"
    assert main(["build-graphs", str(events), "--out", str(empty), *cut]) == 0
    warning = capsys.readouterr().err.strip().splitlines()[-1]
    assert warning == (
        f"partgnn: warning: {empty}: 2 of 2 graphs have {what}: event 0, 1; nothing to train "
        "or score there: check the cuts"
    )
    out = tmp_path / "shards"
    assert main(["partition", str(empty), "--parts", "2", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"partgnn: error: {empty}: no event has an edge (2 events, ")
    assert err.endswith("nothing to partition; build the graphs again with cuts that select hit "
                        "pairs") and not out.exists()  # fmt: skip
