"""Trained models for where tracking runs: a partgnn checkpoint as a self-contained module with
ACTS's GNN-plugin calling convention (node features and edge index in, edge logits out),
written as TorchScript, an AOTInductor package or ONNX (``partgnn export``)."""
