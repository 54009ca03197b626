"""`python -m experiments.train [overrides]`: one training run in Hydra's output directory.

The work is done by `experiments.train.loop.run`; this module only adds the command-line contract:
* the run directory defaults to `outputs/runs/<model>-<config fingerprint>` (conf/config.yaml's
  `hydra.run.dir`), so the same command started again resumes the run; `hydra.run.dir=...` wins;
* everything the run prints is also appended to `<run dir>/train.log`;
* a completed run started again prints so and exits 0 without importing JAX;
* bad configuration ends with one `error: ...` line on stderr and exit code 2;
* a diverged run exits 3, any other failure exits 1 (details in summary.json), never a traceback.
In a multirun (`-m`) job nothing exits: the status is returned so the other jobs go on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import hydra
from omegaconf import DictConfig, OmegaConf

import experiments.train.config  # noqa: F401 - registers the config schemas (imports no JAX)
from experiments.cli import JobResult, RunFn, hydra_job, run_cli, start_run
from experiments.rundir import completed_summary, fingerprint_fields, register_run_name, train_run_name
from experiments.train.pack import pack_job  # imports no JAX: a completed run exits without it
from models.base.packs import MANIFEST_KEY
from models.base.rundir import RunStatus, RunSummary

# `${scalelab.train_run:}` in conf/config.yaml's hydra.run.dir; registered before Hydra composes.
register_run_name("scalelab.train_run", train_run_name)


@hydra.main(config_path="../../conf", config_name="config", version_base=None)
def main(cfg: DictConfig) -> JobResult:
    return hydra_job(cfg, train)


def train(cfg: DictConfig, run_dir: Path, multirun: bool) -> JobResult:
    """The contract above, for the composed `cfg` in `run_dir`; a pack job (`pack.manifest`, set
    by the sweeper's `sweep.pack` or `hydra/launcher=packed`) trains its members instead."""
    manifest = OmegaConf.select(cfg, MANIFEST_KEY)
    if manifest:
        return pack_job(manifest)
    return start_run(cfg, run_dir, multirun, "training", _load_run, lambda raw: _completed(run_dir, raw))


def _completed(run_dir: Path, raw: Mapping[str, Any]) -> RunSummary | None:
    """The summary of this config's completed run in `run_dir` (said on the console), or None;
    ValueError for a completed run of another config."""
    done = completed_summary(run_dir, lambda: fingerprint_fields(raw))
    if done is not None:
        print(
            f"run in {run_dir} already completed (status {RunStatus.COMPLETED.value}, "
            f"{done.tokens} tokens, final eval loss {done.final_eval_loss}); nothing to do",
            flush=True,
        )
    return done


def _load_run() -> RunFn:
    # Imported here, not at the top: it imports JAX, which a completed run never needs.
    from experiments.train.loop import run

    return run


if __name__ == "__main__":
    run_cli(main)  # config errors Hydra finds while composing: one line, exit 2
