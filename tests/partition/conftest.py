"""Small simulated event graphs shared by the partition tests (built once per session)."""

import pytest
from torch_geometric.data import Data

from partgnn.data.detector.geometry import default_geometry
from partgnn.data.graphs.graph_builder import GraphBuildConfig, build_event_graph
from partgnn.data.simulation.simulate import SimulationConfig, simulate_event


def _pileup10_graph(pt_min: float) -> Data:
    geometry = default_geometry()
    event = simulate_event(geometry, SimulationConfig(pileup=10), event_id=0, seed=1)
    graph, _ = build_event_graph(event, geometry, GraphBuildConfig(pt_min=pt_min))
    return graph


@pytest.fixture(scope="session")
def event_graph() -> Data:
    """A pile-up-10 graph with pT > 1 GeV (~600 nodes and edges)."""
    return _pileup10_graph(1.0)


@pytest.fixture(scope="session")
def sparse_event_graph() -> Data:
    """A pile-up-10 graph without pT cut (~5e3 nodes and edges, degrees 0 to ~20)."""
    return _pileup10_graph(0.0)
