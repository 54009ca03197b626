"""`python -m experiments.rl [overrides]`: one RL fine-tuning run in Hydra's output directory.

The work is done by `experiments.rl.loop.run`; this module adds the command-line contract of
`python -m experiments.train`: a completed run started again says so and exits 0; bad
configuration (or a start too weak for RL) ends with one `error: ...` line and exit 2; a
diverged run exits 3; any other failure exits 1 (traceback in summary.json). In a multirun (-m)
job nothing exits, so the other runs of the sweep go on.
"""

from __future__ import annotations

from pathlib import Path

import hydra
from omegaconf import DictConfig

from experiments.rundir import EXIT_CONFIG, run_guarded
from experiments.rundir import fail as _fail


@hydra.main(config_path="../../conf", config_name="rl", version_base=None)
def main(cfg: DictConfig) -> dict:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    hc = HydraConfig.get()
    multirun = hc.mode == RunMode.MULTIRUN
    run_dir = Path(hc.runtime.output_dir)
    try:
        from models.base.configs import to_plain
        to_plain(cfg)
    except Exception as e:  # noqa: BLE001 - e.g. an interpolation error in the config
        return _fail(f"bad config: {e}", EXIT_CONFIG, multirun)

    from experiments.rl.loop import run

    return run_guarded(run, cfg, run_dir, multirun, "RL run")


if __name__ == "__main__":
    main()
