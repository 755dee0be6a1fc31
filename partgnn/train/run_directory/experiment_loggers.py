"""Experiment tracking beside TensorBoard: Weights & Biases and MLflow (``run.loggers``).

Each receives what TensorBoard does (:meth:`~partgnn.train.run_directory.run_log.RunLog.scalar`:
every metric of metrics.csv at its step) and the run's config once. Both are optional extras
(``pip install partgnn[wandb]``, ``partgnn[mlflow]``) and keep everything on the machine unless
the user sets them up otherwise:

- ``wandb`` runs offline by default, into the run directory's ``wandb/`` (``wandb sync`` uploads
  it later); ``WANDB_MODE=online`` (and a login) sends it as it runs, ``WANDB_PROJECT`` names the
  project (default ``partgnn``).
- ``mlflow`` writes MLflow's file store in the run directory's ``mlruns/`` (``mlflow ui
  --backend-store-uri RUN/mlruns`` shows it); ``MLFLOW_TRACKING_URI`` points it elsewhere (a
  server, a database), ``MLFLOW_EXPERIMENT_NAME`` names the experiment (default ``partgnn``).

Only the main process logs (as with TensorBoard).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any, Protocol

from partgnn.errors import InputError

#: The loggers ``run.loggers`` may name, with the package and the extra that installs it.
LOGGERS: dict[str, tuple[str, str]] = {"wandb": ("wandb", "wandb"), "mlflow": ("mlflow", "mlflow")}


class ExperimentLogger(Protocol):
    """What the run log hands a tracker."""

    def scalar(self, name: str, value: float, step: int) -> None: ...

    def close(self) -> None: ...


def check_loggers(names: list[str], where: str = "config") -> None:
    """Refuses an unknown logger or one whose package is not installed (one line).

    Raises:
        InputError: Naming the logger and how to install it.
    """
    for name in names:
        if name not in LOGGERS:
            raise InputError(
                f"{where}: run.loggers: {name!r} is not one of {', '.join(LOGGERS)} "
                "(TensorBoard is run.tensorboard)"
            )
        package, extra = LOGGERS[name]
        if importlib.util.find_spec(package) is None:
            raise InputError(
                f"{where}: run.loggers: {name} is not installed: pip install 'partgnn[{extra}]'"
            )


def open_loggers(
    names: list[str], run_dir: Path, config: dict[str, Any], *, resume_step: int | None
) -> list[ExperimentLogger]:
    """The trackers ``names`` for the run in ``run_dir``, each told the config."""
    opened: list[ExperimentLogger] = []
    for name in names:
        if name == "wandb":
            opened.append(WandbLogger(run_dir, config, resume_step=resume_step))
        elif name == "mlflow":
            opened.append(MlflowLogger(run_dir, config))
    return opened


class WandbLogger:
    """A Weights & Biases run, offline unless ``WANDB_MODE`` says otherwise.

    A resumed run continues the same W&B run (its id is kept in ``wandb/partgnn-run-id``);
    W&B drops a step logged below one it has (a resume repeats the steps after its
    checkpoint), as TensorBoard's ``purge_step`` replaces them.
    """

    def __init__(self, run_dir: Path, config: dict[str, Any], *, resume_step: int | None) -> None:
        import wandb

        folder = run_dir / "wandb"
        folder.mkdir(parents=True, exist_ok=True)
        id_file = folder / "partgnn-run-id"
        run_id = (
            id_file.read_text().strip() if resume_step is not None and id_file.exists() else None
        )
        self.run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", "partgnn"),
            name=run_dir.name,
            dir=str(run_dir),
            mode=os.environ.get("WANDB_MODE", "offline"),  # type: ignore[arg-type]
            config=config,
            id=run_id,
            resume="allow" if run_id else None,
            settings=wandb.Settings(silent=True, console="off"),
        )
        id_file.write_text(self.run.id + "\n")
        self._last_step = -1

    def scalar(self, name: str, value: float, step: int) -> None:
        if step < self._last_step:
            return
        self._last_step = step
        self.run.log({name: value}, step=step)

    def close(self) -> None:
        self.run.finish()


class MlflowLogger:
    """An MLflow run, in the run directory's file store unless ``MLFLOW_TRACKING_URI`` says
    otherwise."""

    def __init__(self, run_dir: Path, config: dict[str, Any]) -> None:
        import mlflow

        uri = os.environ.get("MLFLOW_TRACKING_URI") or (run_dir / "mlruns").resolve().as_uri()
        if uri.startswith("file:"):
            # (MLflow 3 keeps its file store in maintenance mode behind this switch)
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self.client = mlflow.MlflowClient(tracking_uri=uri)
        experiment_name = os.environ.get("MLFLOW_EXPERIMENT_NAME", "partgnn")
        experiment = self.client.get_experiment_by_name(experiment_name)
        experiment_id = (
            experiment.experiment_id
            if experiment is not None
            else self.client.create_experiment(experiment_name)
        )
        self.run_id = self.client.create_run(experiment_id, run_name=run_dir.name).info.run_id
        for key, value in _flat(config).items():
            self.client.log_param(self.run_id, key, str(value)[:6000])

    def scalar(self, name: str, value: float, step: int) -> None:
        self.client.log_metric(self.run_id, name, float(value), step=step)

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


def _flat(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"optim.lr": 0.001, ...}`` from the config's sections."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(_flat(value, f"{name}."))
        else:
            flat[name] = value
    return flat
