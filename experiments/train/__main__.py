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

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

import experiments.train.config  # noqa: F401 - registers the config schemas (imports no JAX)
from experiments.cli import run_cli
from experiments.rundir import (
    EXIT_CONFIG,
    completed_summary,
    console_log,
    fail,
    first_line,
    log_path,
    register_run_name,
    run_guarded,
    train_run_name,
)
from models.base.configs import to_plain

# `${scalelab.train_run:}` in conf/config.yaml's hydra.run.dir; registered before Hydra composes.
register_run_name("scalelab.train_run", train_run_name)


@hydra.main(config_path="../../conf", config_name="config", version_base=None)
def main(cfg: DictConfig) -> dict:
    hc = HydraConfig.get()
    multirun = hc.mode == RunMode.MULTIRUN
    run_dir = Path(hc.runtime.output_dir)
    with console_log(log_path(run_dir, hc.job.name, cfg)):
        return train(cfg, run_dir, multirun)


def train(cfg: DictConfig, run_dir: Path, multirun: bool) -> dict:
    """The contract above, for the composed `cfg` in `run_dir`."""
    try:
        raw = to_plain(cfg)
    except Exception as e:  # noqa: BLE001 - e.g. an interpolation error in the config
        return fail(f"bad config: {first_line(e)}", EXIT_CONFIG, multirun)
    try:
        done = completed_summary(run_dir, raw)
    except ValueError as e:
        return fail(str(e), EXIT_CONFIG, multirun)
    if done is not None:
        print(
            f"run in {run_dir} already completed (status completed, {done.get('tokens')} tokens, "
            f"final eval loss {done.get('final_eval_loss')}); nothing to do",
            flush=True,
        )
        return done

    # Imported here, not at the top: it imports JAX, which a completed run never needs.
    from experiments.train.loop import run

    return run_guarded(run, cfg, run_dir, multirun, "training")


if __name__ == "__main__":
    run_cli(main)  # config errors Hydra finds while composing: one line, exit 2
