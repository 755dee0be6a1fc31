"""Modes are owned by their strategies: each declares its facts once, and the config checks,
the world size, the memory plan, the footprint, resume, scoring, the run's summary and the
report's findings read them. A toy mode defined here, in one class, is taken by all of them."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import partgnn.train.strategies as strategies_module
from partgnn.data.files.storage import ScoresFile
from partgnn.distributed.process_group import destroy_distributed, init_distributed
from partgnn.errors import InputError
from partgnn.metrics.report import load_run
from partgnn.metrics.report.findings import findings
from partgnn.partition.event_split import PartitionOptions
from partgnn.partition.shard_writer import write_shards
from partgnn.train.config.config_file import load_config
from partgnn.train.inference import run_inference
from partgnn.train.items.shard_sources import NaiveSource
from partgnn.train.modes import ModeFacts
from partgnn.train.planning.footprint import random_train_item
from partgnn.train.planning.rank_memory import ItemSize, rank_shapes
from partgnn.train.run_directory.training_checkpoint import TrainingCheckpoint
from partgnn.train.strategies import (
    STRATEGIES,
    NaiveStrategy,
    Strategy,
    mode_facts,
    strategy_class,
    trained_mode,
)
from partgnn.train.trainer import Trainer
from partgnn.train.world_size import check_world_size
from tests.train.conftest import write_config


def _table_rows() -> dict[str, list[str]]:
    """The rows of the mode table in :mod:`partgnn.train.strategies`'s docstring."""
    rows = {}
    for line in strategies_module.__doc__.splitlines():
        match = re.match(r"``(\w+)``\s+(.*)", line)
        if match:
            cells = re.split(r"\s{2,}", match.group(2).strip())
            rows[match.group(1)] = cells
    return rows


def test_the_mode_table_says_what_the_strategies_declare():
    rows = _table_rows()
    assert list(rows) == list(STRATEGIES)
    yes = {True: "yes", False: "no"}
    for name, strategy in STRATEGIES.items():
        facts = strategy.facts
        holds, exchange, exact, groups, one, loss = rows[name][:6]
        assert (holds, exchange, exact, groups, one, loss) == (
            facts.holds,
            yes[facts.exchanges],
            yes[facts.exact],
            yes[facts.graph_groups],
            yes[facts.one_process],
            facts.loss_over,
        ), name


def test_a_mode_is_defined_once():
    with pytest.raises(TypeError, match="mode 'halo' is defined twice"):

        class AnotherHalo(NaiveStrategy):
            facts = dataclasses.replace(NaiveStrategy.facts, name="halo")

    assert STRATEGIES["halo"].__name__ == "HaloStrategy"


def test_an_unknown_mode_is_one_line_naming_the_known_ones():
    with pytest.raises(InputError) as caught:
        strategy_class("pipeline", "run.yaml")
    assert str(caught.value) == (
        "run.yaml: mode must be one of full, ddp, halo, naive, overlapping (got 'pipeline')"
    )


def test_a_naive_config_on_shards_with_a_margin_trains_overlapping_sectors(
    dataset, tmp_path, capsys
):
    shards = tmp_path / "margin1"
    write_shards(
        dataset["graphs"], shards, PartitionOptions(n_parts=2, method="phi", margin=1),
        progress=False,
    )  # fmt: skip
    config = load_config(None, ["mode=naive", f"data.shards={shards}"])
    assert trained_mode(config) == "overlapping"
    notice = capsys.readouterr().err.strip().splitlines()
    assert len(notice) == 1 and "mode overlapping names it" in notice[0], notice
    plain = load_config(None, ["mode=naive", f"data.shards={dataset['phi2']}"])
    assert trained_mode(plain) == "naive" and capsys.readouterr().err == ""
    assert mode_facts("overlap").name == "overlapping"  # the name summaries recorded before


def test_overlapping_sectors_need_shards_with_a_margin(dataset, tmp_path):
    config = load_config(
        write_config(
            tmp_path / "o.yaml", mode="overlapping", data={"shards": str(dataset["phi1"])},
            run={"dir": str(tmp_path / "run")},
        )
    )  # fmt: skip
    context = init_distributed(device="cpu", timeout_s=60)
    try:
        with pytest.raises(InputError, match="overlapping sectors need shards written with a"):
            Trainer(config, context)
    finally:
        destroy_distributed(context)


class ToyStrategy(Strategy):
    """A mode defined in one place: each rank its sector alone, as naive, under its own name."""

    facts = ModeFacts(
        name="toy", phrase="toy sectors", holds="sector", exchanges=False, exact=False,
        loss_over="sector",
    )  # fmt: skip

    def make_source(self) -> NaiveSource:
        from partgnn.partition.shard_reader import ShardDirectory

        shards = ShardDirectory(self.config.data.shards, world_size=self.context.group_size)
        return NaiveSource(shards, self.context, self.config.loss.edge_weights())


# Defined at import; the registry forgets it after this module's tests.
_TOY = STRATEGIES.pop("toy")


@pytest.fixture
def toy_mode() -> Iterator[type[Strategy]]:
    STRATEGIES["toy"] = _TOY
    try:
        yield _TOY
    finally:
        del STRATEGIES["toy"]


@pytest.mark.slow
def test_a_toy_mode_in_one_class_is_taken_everywhere(toy_mode, dataset, tmp_path):
    # Config checks: a shard-reading mode needs data.shards.
    with pytest.raises(InputError, match=r"data\.shards is needed in mode toy"):
        load_config(None, ["mode=toy"])
    run_dir = tmp_path / "toy"
    path = write_config(
        tmp_path / "toy.yaml", mode="toy", data={"shards": str(dataset["phi1"])},
        optim={"max_steps": 2}, run={"dir": str(run_dir)},
    )  # fmt: skip
    config = load_config(path)
    # World size: the shards' P; the memory plan: sector shapes, counted positions, no exchange.
    assert check_world_size(config) == 1
    whole = dataclasses.replace(config, mode="full")
    assert ItemSize.of(config, 4, 7).per_edge == ItemSize.of(whole, 4, 7).per_edge + 8
    assert len(rank_shapes(config)) == 1
    item = random_train_item(
        config, 4, 7, torch.device("cpu"), 50, 200, torch.Generator().manual_seed(0)
    )
    assert item.exchange is None
    # Training: the summary and the checkpoint's trajectory name the mode.
    context = init_distributed(device="cpu", timeout_s=60)
    try:
        summary = Trainer(config, context).fit()
        checkpoint = run_dir / "checkpoints" / "last.pt"
        assert TrainingCheckpoint.load(checkpoint).trajectory["mode"] == "toy"
        # Scoring computes what the mode trains on.
        scores = tmp_path / "scores.h5"
        run_inference(checkpoint, scores, context, shards=dataset["phi1"], mode="toy")
    finally:
        destroy_distributed(context)
    assert summary.mode == "toy" and summary.recorded_mode.loses_cut_edges
    with ScoresFile(scores) as scores_file:
        assert scores_file.attrs["mode"] == "toy"
    # The report reads the facts the run recorded.
    run = load_run(run_dir)
    assert (run.mode.name, run.mode.phrase, run.mode.exact) == ("toy", "toy sectors", False)
    assert "modes here: toy" in findings([run])[0]


def test_the_summary_records_the_facts_the_report_reads():
    for strategy in STRATEGIES.values():
        record = strategy.facts.as_record()
        assert record["name"] == strategy.facts.name
        assert record["reads_shards"] == strategy.facts.reads_shards


def test_scores_of_a_mode_name_its_data(dataset, tmp_path):
    context = init_distributed(device="cpu", timeout_s=60)
    try:
        with pytest.raises(InputError, match=r"^infer --mode halo scores the events of --shards"):
            run_inference(Path("x.pt"), tmp_path / "s.h5", context, graphs=dataset["graphs"],
                          mode="halo")  # fmt: skip
    finally:
        destroy_distributed(context)
