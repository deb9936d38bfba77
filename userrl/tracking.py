"""MLflow tracking of a training run: params, per-iteration metrics, config and sample trajectories."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import yaml
from mlflow import MlflowClient
from mlflow.entities import Metric, Param
from mlflow.exceptions import MlflowException

from userrl.config import UserRLConfig
from userrl.trajectory import Trajectory, write_parquet
from userrl.user_session import configured_user_model


class MLflowTracker:
    """One MLflow run per training run, written from the driver."""

    def __init__(self, config: UserRLConfig, run_name: str | None = None, tags: dict[str, str] | None = None,
                 run_id: str | None = None):
        """Start a run in `tracking.experiment` (or reopen `run_id`, e.g. a resumed sweep trial)."""
        self.uri = config.mlflow_uri()
        if self.uri.startswith("sqlite:///"):
            Path(self.uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        self.client = MlflowClient(tracking_uri=self.uri)
        self.artifacts = config.run_dir / "artifacts"
        if run_id:  # params were logged when the run began (and resume_from differs now, so skip them)
            self.run_id = run_id
            self.client.update_run(run_id, status="RUNNING")
            return
        experiment_id = ensure_experiment(self.client, config.tracking.experiment)
        ec = config.env
        user = configured_user_model(ec.backend, ec.local_user_model, ec.llm)
        users = {"user_model": user.name, "user_version": str(user.version)} if user else {}
        self.run_id = self.client.create_run(experiment_id, run_name=run_name or config.experiment.name,
                                            tags={**users, **(tags or {})}).info.run_id
        params = {k: str(v)[:500] for k, v in config.flat().items()}
        items = list(params.items())
        for i in range(0, len(items), 90):  # MLflow accepts at most 100 params per batch
            self.client.log_batch(self.run_id, params=[Param(k, v) for k, v in items[i:i + 90]])
        self.client.log_text(self.run_id, yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False),
                             "config.yaml")

    def log_result(self, result: dict[str, Any], step: int) -> None:
        """Numeric entries become metrics at `step`; samples become a parquet artifact."""
        now = int(time.time() * 1000)
        metrics = [Metric(key.replace("/", "."), float(value), now, step) for key, value in result.items()
                   if isinstance(value, int | float) and not isinstance(value, bool)]
        for i in range(0, len(metrics), 900):
            self.client.log_batch(self.run_id, metrics=metrics[i:i + 900])
        samples: list[Trajectory] = result.get("samples") or []
        if samples:
            path = write_parquet(samples, self.artifacts / f"samples_iter_{step:06d}.parquet")
            self.client.log_artifact(self.run_id, str(path), "trajectories")
        if result.get("checkpoint"):
            self.client.set_tag(self.run_id, "checkpoint", result["checkpoint"])

    def finish(self, status: str = "FINISHED") -> None:
        """Close the run (FINISHED, FAILED or KILLED)."""
        self.client.set_terminated(self.run_id, status=status)


def ensure_experiment(client: MlflowClient, name: str) -> str:
    """Id of the MLflow experiment `name`, created if missing (tolerates a concurrent creator)."""
    experiment = client.get_experiment_by_name(name)
    if experiment:
        return experiment.experiment_id
    try:
        return client.create_experiment(name)
    except MlflowException:  # another trial created it between the two calls
        return client.get_experiment_by_name(name).experiment_id
