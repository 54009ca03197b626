"""`python -m experiments.train [overrides]`: one training run in Hydra's output directory.

The work is done by `experiments.trainer.run`; this module only adds the command-line contract:
* a completed run started again prints so and exits 0 without importing JAX;
* bad configuration ends with one `error: ...` line on stderr and exit code 2;
* a diverged run exits 3, any other failure exits 1 (details in summary.json), never a traceback.
In a multirun (`-m`) job nothing exits: the status is returned so the other jobs go on.
"""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

EXIT_CONFIG, EXIT_FAILED, EXIT_DIVERGED = 2, 1, 3


def _fail(msg: str, code: int, multirun: bool) -> dict:
    print(f"error: {msg}", file=sys.stderr, flush=True)
    if not multirun:
        sys.exit(code)
    return {"status": "failed", "error": msg}


@hydra.main(config_path="../conf", config_name="config", version_base=None)
def main(cfg: DictConfig) -> dict:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    hc = HydraConfig.get()
    multirun = hc.mode == RunMode.MULTIRUN
    run_dir = Path(hc.runtime.output_dir)

    from experiments.runinfo import completed_summary
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

    from experiments.trainer import run
    from models.config import ConfigError

    try:
        summary = run(cfg, run_dir)
    except ConfigError as e:
        return _fail(str(e), EXIT_CONFIG, multirun)
    except KeyboardInterrupt:
        return _fail(f"interrupted; start the same command again to resume from the last checkpoint "
                     f"in {run_dir}", 130, multirun)
    except Exception as e:  # noqa: BLE001 - one line here, the traceback is in summary.json
        msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
        return _fail(f"training failed: {type(e).__name__}: {msg[:300]} (traceback in "
                     f"{run_dir / 'summary.json'})", EXIT_FAILED, multirun)
    if summary.get("status") == "diverged" and not multirun:
        print(f"error: run diverged at step {summary.get('steps_done')}; metrics kept in "
              f"{run_dir / 'metrics.jsonl'}", file=sys.stderr, flush=True)
        sys.exit(EXIT_DIVERGED)
    return summary


if __name__ == "__main__":
    main()
