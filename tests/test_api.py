"""``import partgnn``: the public entry points, documented, loaded on first use."""

import subprocess
import sys

import pytest

import partgnn


def test_import_partgnn_loads_no_torch():
    code = "import sys, partgnn; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.strip() == "False", done.stderr


def test_all_lists_exactly_the_exports():
    assert set(partgnn.__all__) == {"__version__", *partgnn._EXPORTS}
    assert sorted(dir(partgnn)) == sorted(partgnn.__all__)


@pytest.mark.parametrize("name", sorted(partgnn._EXPORTS))
def test_every_entry_point_resolves_and_is_documented(name):
    value = getattr(partgnn, name)
    assert value.__module__ == partgnn._EXPORTS[name] or name == "InputError"
    assert (value.__doc__ or "").strip(), f"partgnn.{name} has no docstring"


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        partgnn.nope  # noqa: B018


def test_the_api_loss_over_all_parts_is_the_trainers_event_loss():
    import torch
    from torch_geometric.data import Data

    from partgnn.train.loss import edge_loss, weighted_count

    generator = torch.Generator().manual_seed(0)
    edge_index = torch.tensor([[0, 1, 2, 3, 0, 2], [1, 2, 3, 0, 2, 1]])
    y = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0], dtype=torch.float64)
    graph = Data(x=torch.randn(4, 2, generator=generator), edge_index=edge_index, y=y)
    logits = torch.randn(6, generator=generator, dtype=torch.float64)
    total, counted = torch.zeros((), dtype=torch.float64), []
    for plan in partgnn.partition_event(graph, 2, method="metis"):
        part = partgnn.local_graph(graph, plan)
        total += partgnn.owned_edge_loss(logits[part.edge_ids], part, pos_weight=3.0)
        counted.append(int(part.edge_owned.sum()))
    assert sorted(counted) != [0, 6] and sum(counted) == 6  # both parts count edges
    # The trainer's full-mode loss: every edge, over the weighted count 6 + 2 * 3 = 12.
    expected = edge_loss(logits, y, 3.0, weighted_count(6, 3, 3.0))
    assert weighted_count(6, 3, 3.0) == 12.0
    torch.testing.assert_close(total, expected, rtol=1e-12, atol=0)
