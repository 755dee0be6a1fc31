"""``partgnn config from-acorn``: acorn's GNN stage configuration (the schema of its
examples/CTD_2023/gnn_train.yaml, written here) becomes a partgnn run config that trains the
same model family on the same inputs, one line per key not honoured; keys acorn's stage does not
have, and values partgnn cannot train, are refused in one line with nothing written."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from partgnn.cli.main import main
from partgnn.errors import InputError
from partgnn.train.config.acorn_config import translate_acorn_config
from partgnn.train.config.config_file import load_config

#: An InteractionGNN2 configuration of acorn's CTD 2023 schema (small numbers).
CLUSTERS = [f"cluster_{q}_{i}" for i in (1, 2) for q in ("r", "phi", "z", "eta")]
ACORN = {
    "stage": "edge_classifier",
    "model": "InteractionGNN2",
    "input_dir": "DATA/module_map/",
    "stage_dir": "DATA/gnn/",
    "project": "CTD",
    "accelerator": "cpu",
    "devices": 1,
    "nodes": 1,
    "data_split": [6, 2, 2],
    "dataset_class": "GraphDataset",
    "undirected": False,
    "weighting": [
        {"weight": 0.1, "conditions": {"y": False}},
        {"weight": 0.0, "conditions": {"y": True}},
        {
            "weight": 1.0,
            "conditions": {
                "y": True,
                "pt": [1000, math.inf],
                "nhits": [3, math.inf],
                "primary": True,
            },
        },
    ],
    "edge_cut": 0.5,
    "node_features": ["r", "phi", "z", "eta", *CLUSTERS],
    "node_scales": [1000.0, 3.14159265359, 1000.0, 1.0] * 3,
    "edge_features": ["dr", "dphi", "dz", "deta", "phislope", "rphislope"],
    "hidden": 16,
    "n_graph_iters": 2,
    **{f"n_{w}_{p}_layers": 3 for w in ("node", "edge") for p in ("encoder", "net", "decoder")},
    "layernorm": False,
    "output_layer_norm": False,
    "batchnorm": True,
    "output_batch_norm": False,
    "bn_track_running_stats": False,
    "hidden_activation": "ReLU",
    "output_activation": "ReLU",
    "edge_output_transform_final_activation": None,
    "concat": True,
    "node_net_recurrent": False,
    "edge_net_recurrent": False,
    "in_out_diff_agg": True,
    "checkpointing": True,
    "warmup": 2,
    "lr": 0.0005,
    "min_lr": 0.000005,
    "factor": 0.9,
    "patience": 3,
    "max_epochs": 4,
}


def test_the_ctd_schema_translates_key_by_key():
    translation = translate_acorn_config(ACORN, where="gnn_train.yaml")
    config = translation.config
    assert config["model"] == {
        "hidden": 16, "steps": 2, "mlp_layers": 3, "layer_norm": False, "batch_norm": True,
        "activation": "relu", "concat_initial": True, "shared_weights": False,
        "recompute": True, "residual": False,
    }  # fmt: skip
    nodes = config["data"]["node_features"]
    assert [next(iter(c)) for c in nodes] == ["r", "phi", "z", "eta", *CLUSTERS]
    assert nodes[4] == {"cluster_r_1": 1000.0} and nodes[1] == {"phi": 3.14159265359}
    # acorn computes edge features from the scaled node features
    s_phi = 3.14159265359
    assert config["data"]["edge_features"] == [
        {"dr": 1000.0}, {"dphi": s_phi}, {"dz": 1000.0}, {"deta": 1.0},
        {"phi_slope": s_phi / 1000.0}, {"rphi_slope": s_phi},
    ]  # fmt: skip
    assert config["data"]["val_events"] == 2
    # weights relative to a fake edge's 0.1: targets 10, other true edges 0; pT in GeV
    assert config["loss"] == {"pos_weight": 10.0, "target_pt": 1.0, "nontarget_weight": 0.0}
    # warmup and patience are epochs: steps of the 6 training events
    assert config["optim"] == {
        "lr": 0.0005, "epochs": 4, "weight_decay": 0.01, "grad_clip": None, "schedule": "step",
        "decay_factor": 0.9, "decay_steps": 18, "warmup_steps": 12,
    }  # fmt: skip
    assert config["run"] == {"dir": "DATA/gnn/", "device": "cpu"}
    notes = "\n".join(translation.notes)
    for key in ("input_dir:", "edge_cut:", "weighting[2].conditions.nhits", "primary",
                "min_lr:", "amsgrad", "phislope:"):  # fmt: skip
        assert key in notes, key
    assert "in_out_diff_agg" not in notes and "hidden:" not in notes  # honoured


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"hiden": 8}, "hiden: not a setting of acorn's GNN stage partgnn knows"),
        ({"model": "GravNet"}, "model 'GravNet': partgnn trains an Interaction Network"),
        ({"hidden_activation": "Mish"}, "hidden_activation: 'Mish': partgnn has ReLU"),
        ({"node_scales": [1000.0]}, "node_scales: one scale for each of the 12 node_features"),
        ({"node_scales": [0.0] * 12}, "node_scales: the scale of r is 0"),
        ({"weighting": [{"weight": 0.0, "conditions": {"y": False}}]},
         "weighting: fake edges (y False) weigh 0"),
        ({"data_split": [6, 2]}, "data_split: [training, validation, testing] counts"),
        ({"hidden": 0}, "hidden: must be a whole number >= 1"),
    ],
)  # fmt: skip
def test_what_cannot_be_trained_is_refused_in_one_line(change: dict, said: str):
    with pytest.raises(InputError, match=r"^gnn_train\.yaml: ") as error:
        translate_acorn_config({**ACORN, **change}, where="gnn_train.yaml")
    assert said in str(error.value) and "\n" not in str(error.value), str(error.value)


def test_interaction_gnn_of_the_first_examples():
    """acorn's InteractionGNN (its Example_1 schema): shared networks unless told, GeV pT, an
    aggregation partgnn has not (noted, sum_max taken), no weighting (every edge 1)."""
    acorn = {
        "stage": "edge_classifier", "model": "InteractionGNN", "data_split": [80, 10, 10],
        "node_features": ["r", "phi", "z"], "node_scales": [1000, 3.14, 1000], "hidden": 32,
        "n_graph_iters": 4, "nb_node_layer": 2, "nb_edge_layer": 2, "layernorm": True,
        "batchnorm": False, "aggregation": ["sum", "mean", "max", "std"],
        "hidden_activation": "SiLU", "output_activation": "Tanh", "warmup": 0, "lr": 0.001,
        "factor": 0.9, "patience": 10, "max_epochs": 5,
    }  # fmt: skip
    translation = translate_acorn_config(acorn, where="e1.yaml", pt_unit="GeV")
    model = translation.config["model"]
    assert model["shared_weights"] is True and model["aggregation"] == "sum_max"
    assert model["layer_norm"] is True and model["mlp_layers"] == 2
    assert "loss" not in translation.config or translation.config["loss"] == {}
    assert translation.config["optim"]["warmup_steps"] == 0
    assert translation.config["optim"]["decay_steps"] == 800
    notes = "\n".join(translation.notes)
    assert "aggregation ['sum', 'mean', 'max', 'std']: not honoured" in notes
    assert "output_activation: not honoured" in notes


def test_the_command_writes_a_config_train_reads(tmp_path: Path, capsys):
    source = tmp_path / "gnn_train.yaml"
    source.write_text(yaml.safe_dump(ACORN))
    out = tmp_path / "run.yaml"
    assert main(["config", "from-acorn", str(source), "--out", str(out)]) == 2
    assert "--graphs GRAPHS.h5 (partgnn import-acorn's) or --shards" in capsys.readouterr().err
    shards = ["--shards", str(tmp_path / "shards")]
    assert main(["config", "from-acorn", str(source), "--out", str(out), *shards]) == 0
    captured = capsys.readouterr()
    assert f"{out}: written" in captured.out
    assert "partgnn: config from-acorn: input_dir: not translated" in captured.err
    text = out.read_text()
    assert text.startswith("# written by partgnn config from-acorn gnn_train.yaml")
    assert "#   edge_cut: not translated" in text
    config = load_config(out)
    assert config.model.batch_norm and config.model.mlp_layers == 3
    assert config.optim.schedule == "step" and config.optim.decay_steps == 18
    assert config.mode == "halo" and config.data.shards == str(tmp_path / "shards")
    # its own kind is replaced (said in one line); anything else needs --overwrite
    assert main(["config", "from-acorn", str(source), "--out", str(out), *shards]) == 0
    assert "replac" in capsys.readouterr().err
    mine = tmp_path / "mine.yaml"
    mine.write_text("mode: full\n")
    assert main(["config", "from-acorn", str(source), "--out", str(mine), *shards]) == 2
    assert "--overwrite" in capsys.readouterr().err and mine.read_text() == "mode: full\n"
    # bad input: one line, exit 2, nothing written
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**ACORN, "nb_node_layers": 2}))
    refused = tmp_path / "refused.yaml"
    assert main(["config", "from-acorn", str(bad), "--out", str(refused), *shards]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "nb_node_layers: not a setting" in err and not refused.exists()
    assert main(["config", "from-acorn", str(source), "--out", str(source), *shards]) == 2
    assert "the output is the input" in capsys.readouterr().err


def test_a_graphs_file_lacking_an_input_is_refused_before_writing(dataset, tmp_path, capsys):
    source = tmp_path / "gnn_train.yaml"
    source.write_text(yaml.safe_dump(ACORN))
    out = tmp_path / "run.yaml"
    argv = ["config", "from-acorn", str(source), "--out", str(out), "--graphs",
            str(dataset["graphs"])]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "has no per-hit field cluster_r_1" in err and not out.exists()


def test_the_older_schema_names_its_class_model_name():
    """acorn's older GNN configs (its gnn_train_example's): model_name, weight (the true edges'
    BCE weight), spatial_channels... and its Filter's ratio in GNN files: read or said."""
    acorn = {
        "stage": "GNN", "model_name": "InteractionGNN", "data_split": [1, 1, 1],
        "spatial_channels": 3, "cell_channels": 0, "hidden": 16, "n_graph_iters": 2,
        "nb_node_layer": 2, "nb_edge_layer": 2, "emb_channels": 0, "layernorm": True,
        "batchnorm": False, "aggregation": "sum", "hidden_activation": "SiLU", "weight": 10,
        "warmup": 5, "lr": 0.001, "factor": 0.9, "patience": 15, "truth_key": "pid_signal",
        "mask_background": True, "train_purity": 0, "ratio": 5, "max_epochs": 2,
    }  # fmt: skip
    translation = translate_acorn_config(acorn, where="old.yaml")
    assert translation.config["model"]["shared_weights"] is True  # InteractionGNN's default
    assert translation.config["loss"] == {"pos_weight": 10.0}
    notes = "\n".join(translation.notes)
    for key in ("spatial_channels:", "truth_key:", "ratio:", "train_purity:"):
        assert key in notes, key


def test_a_file_that_is_not_a_mapping_is_one_line():
    with pytest.raises(InputError, match=r"^l\.yaml: not a mapping of acorn's settings$"):
        translate_acorn_config(["hidden", 8], where="l.yaml")
