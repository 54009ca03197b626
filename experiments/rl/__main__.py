"""`python -m experiments.rl [overrides]`: one RL fine-tuning run in Hydra's output directory.

The work is done by `experiments.rl.loop.run`; this module adds the command-line contract of
`python -m experiments.train`: the run directory defaults to
`outputs/rl/<task>-<algo>-<model>-<fingerprint>` (conf/rl.yaml's `hydra.run.dir`), so the same
command started again resumes the run (`hydra.run.dir=...` wins); what the run prints is also
appended to `<run dir>/rl.log`; a completed run started again says so and exits 0; bad
configuration (or a start too weak for RL) ends with one `error: ...` line and exit 2; a
diverged run exits 3; any other failure exits 1 (traceback in summary.json). In a multirun (-m)
job nothing exits, so the other runs of the sweep go on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import hydra
from omegaconf import DictConfig

from experiments.cli import JobResult, RunFn, hydra_job, run_cli, start_run
from experiments.rl.config import fingerprint, fingerprint_fields  # also registers the config schemas
from experiments.rundir import model_label, register_run_name
from models.base.configs import to_plain


def run_name(cfg: Mapping[str, Any]) -> str:
    """`<task>-<algo>-<model>-<fingerprint>` of an RL config; the fingerprint covers the fields
    that make an RL run that run (experiments/rl/config.py: fingerprint_fields), as composed."""
    model, optim, rl = (to_plain(cfg.get(k)) or {} for k in ("model", "optim", "rl"))
    label = "init" if rl.get("init") else model_label(model)
    task, algo = (rl.get(k) or {} for k in ("task", "algo"))
    fp = fingerprint(fingerprint_fields(model, optim, rl))
    return f"{task.get('name')}-{algo.get('name')}-{label}-{fp}"


# `${scalelab.rl_run:}` in conf/rl.yaml's hydra.run.dir; registered before Hydra composes.
register_run_name("scalelab.rl_run", run_name)


@hydra.main(config_path="../../conf", config_name="rl", version_base=None)
def main(cfg: DictConfig) -> JobResult:
    return hydra_job(cfg, fine_tune)


def fine_tune(cfg: DictConfig, run_dir: Path, multirun: bool) -> JobResult:
    """The contract above, for the composed `cfg` in `run_dir` (the completed-run check, with the
    fingerprint as the trainer's, is the loop's: its fields need the resolved model config)."""
    return start_run(cfg, run_dir, multirun, "RL run", _load_run)


def _load_run() -> RunFn:
    # Imported here, not at the top: it imports JAX, which `--help` / `--cfg` do not need.
    from experiments.rl.loop import run

    return run


if __name__ == "__main__":
    run_cli(main)  # config errors Hydra finds while composing: one line, exit 2
