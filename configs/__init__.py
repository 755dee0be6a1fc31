"""The run-config templates (``partgnn configs`` lists them), the TrackML detector geometry and
its modules. They live at the top of the repository and ship in the wheel as the package
``partgnn.configs`` (``setup.py`` maps it here); :mod:`partgnn.resources` finds them either way.
"""
