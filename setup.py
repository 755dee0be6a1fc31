"""The package list of the wheel: partgnn's packages, plus the top-level ``configs/`` folder
shipped as ``partgnn.configs`` (everything else is in pyproject.toml)."""

from setuptools import find_namespace_packages, setup

setup(
    packages=[
        *find_namespace_packages(include=["partgnn", "partgnn.*"], exclude=["*__pycache__"]),
        "partgnn.configs",
    ],
    package_dir={"partgnn.configs": "configs"},
)
