"""`python -m experiments.rl [overrides]`: one RL fine-tuning run in Hydra's output directory.

The work is done by `experiments.rl_loop.run`; this module adds the command-line contract of
`python -m experiments.train`: a completed run started again says so and exits 0; bad
configuration (or a start too weak for RL) ends with one `error: ...` line and exit 2; a
diverged run exits 3; any other failure exits 1 (traceback in summary.json). In a multirun (-m)
job nothing exits, so the other runs of the sweep go on.
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


@hydra.main(config_path="../conf", config_name="rl", version_base=None)
def main(cfg: DictConfig) -> dict:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    hc = HydraConfig.get()
    multirun = hc.mode == RunMode.MULTIRUN
    run_dir = Path(hc.runtime.output_dir)
    try:
        from experiments.runinfo import to_plain
        to_plain(cfg)
    except Exception as e:  # noqa: BLE001 - e.g. an interpolation error in the config
        return _fail(f"bad config: {e}", EXIT_CONFIG, multirun)

    from experiments.rl_loop import run
    from models.config import ConfigError

    try:
        summary = run(cfg, run_dir)
    except ConfigError as e:
        return _fail(str(e), EXIT_CONFIG, multirun)
    except KeyboardInterrupt:
        return _fail(f"interrupted; start the same command again to resume from the last "
                     f"checkpoint in {run_dir}", 130, multirun)
    except Exception as e:  # noqa: BLE001 - one line here, the traceback is in summary.json
        msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
        return _fail(f"RL run failed: {type(e).__name__}: {msg[:300]} (traceback in "
                     f"{run_dir / 'summary.json'})", EXIT_FAILED, multirun)
    if summary.get("status") == "diverged" and not multirun:
        print(f"error: RL run diverged at step {summary.get('steps_done')}; metrics kept in "
              f"{run_dir / 'metrics.jsonl'}", file=sys.stderr, flush=True)
        sys.exit(EXIT_DIVERGED)
    return summary


if __name__ == "__main__":
    main()
