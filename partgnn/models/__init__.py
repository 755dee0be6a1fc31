"""Models: the Interaction Network edge classifier and PyG layers on a partition."""
