"""The small event graph every distributed exactness test partitions."""

from pathlib import Path

import pytest

from partgnn.data.detector.geometry import default_geometry
from partgnn.data.files.writers import write_graphs
from partgnn.data.graphs.graph_builder import GraphBuildConfig, build_event_graph
from partgnn.data.simulation.simulate import SimulationConfig, simulate_event


@pytest.fixture(scope="session")
def graphs_file(tmp_path_factory) -> Path:
    """A simulated pile-up-10 event graph without pT cut (5,002 nodes, 5,327 edges)."""
    geometry = default_geometry()
    event = simulate_event(geometry, SimulationConfig(pileup=10), event_id=0, seed=3)
    graph, quality = build_event_graph(event, geometry, GraphBuildConfig(pt_min=0.0))
    path = tmp_path_factory.mktemp("distributed") / "graphs.h5"
    write_graphs(path, [(graph, quality.to_dict())])
    return path
