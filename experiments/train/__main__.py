"""`python -m experiments.train [overrides]`: one training run in Hydra's output directory.

The work is done by `experiments.train.loop.run`; this module only adds the command-line contract:
* a completed run started again prints so and exits 0 without importing JAX;
* bad configuration ends with one `error: ...` line on stderr and exit code 2;
* a diverged run exits 3, any other failure exits 1 (details in summary.json), never a traceback.
In a multirun (`-m`) job nothing exits: the status is returned so the other jobs go on.
"""

from __future__ import annotations

from pathlib import Path

import hydra
from omegaconf import DictConfig

from experiments.rundir import EXIT_CONFIG, run_guarded
from experiments.rundir import fail as _fail


@hydra.main(config_path="../../conf", config_name="config", version_base=None)
def main(cfg: DictConfig) -> dict:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    hc = HydraConfig.get()
    multirun = hc.mode == RunMode.MULTIRUN
    run_dir = Path(hc.runtime.output_dir)

    from experiments.rundir import completed_summary
    try:
        done = completed_summary(run_dir, cfg)
    except ValueError as e:
        return _fail(str(e), EXIT_CONFIG, multirun)
    except Exception as e:  # noqa: BLE001 - e.g. an interpolation error in the config
        return _fail(f"bad config: {e}", EXIT_CONFIG, multirun)
    if done is not None:
        print(f"run in {run_dir} already completed (status completed, {done.get('tokens')} tokens, "
              f"final eval loss {done.get('final_eval_loss')}); nothing to do", flush=True)
        return done

    from experiments.train.loop import run

    return run_guarded(run, cfg, run_dir, multirun, "training")


if __name__ == "__main__":
    main()
