"""The one simulated event graph the training benchmarks (bench_train, bench_hosts) run on."""

from __future__ import annotations

from pathlib import Path


def write_event_graph(path: Path, *, pileup: float, pt_min: float) -> tuple[int, int]:
    """Simulates one event (seed 1) at ``pileup``, builds its graph with a ``pt_min`` cut and
    writes it as a graphs file at ``path``.

    Returns:
        The graph's nodes and edges.
    """
    from partgnn.data.detector.geometry import default_geometry
    from partgnn.data.files.writers import write_graphs
    from partgnn.data.graphs.graph_builder import GraphBuildConfig, build_event_graph
    from partgnn.data.simulation.simulate import SimulationConfig, simulate_event

    geometry = default_geometry()
    event = simulate_event(geometry, SimulationConfig(pileup=pileup), event_id=0, seed=1)
    graph, quality = build_event_graph(event, geometry, GraphBuildConfig(pt_min=pt_min))
    write_graphs(path, [(graph, quality.to_dict())])
    return graph.num_nodes, int(graph.edge_index.shape[1])
