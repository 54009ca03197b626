"""`run_cli(main)`: start a `@hydra.main` entry point under the config-error contract; and
`hydra_job` / `start_run`, the body every such entry point shares.

Hydra checks the command line against the config schema (the dataclasses registered by
experiments/train/config.py and experiments/rl/config.py) while it composes, before the run's
own validator sees anything: a key the schema does not have, a value of the wrong type, a preset
that does not exist. Left alone, Hydra prints such an error over several lines and exits 1; the
contract of `python -m experiments.train` and `python -m experiments.rl` is one `error: ...` line
and exit 2 for every bad configuration. So `run_cli` has Hydra raise its errors
(HYDRA_FULL_ERROR, unless the user set it for a full traceback) and reports them itself.

The entry points of `experiments.train` and `experiments.rl` are then, each:

    @hydra.main(config_path="../../conf", config_name=..., version_base=None)
    def main(cfg):
        return hydra_job(cfg, job)      # run dir, multirun, console copied to <run dir>/<job>.log

    def job(cfg, run_dir, multirun):
        return start_run(cfg, run_dir, multirun, label, load_run, completed)

Nothing here imports JAX: `load_run` imports the loop only when there is a run to do.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path
from typing import Any, Callable, Mapping

from hydra.core.hydra_config import HydraConfig
from hydra.errors import CompactHydraException, ConfigCompositionException, OverrideParseException
from hydra.types import RunMode
from omegaconf import DictConfig
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException, ValidationError

from experiments.rundir import EXIT_CONFIG, EXIT_FAILED, console_log, fail, first_line, log_path, run_guarded
from models.base.configs import to_plain
from models.base.rundir import RunSummary

RunFn = Callable[[Any, Path], RunSummary]  # a loop's `run(cfg, run_dir) -> summary`
# What a Hydra job returns: the run's summary, or a pack job's `{"pack": [{run_id, status}, ...]}`.
JobResult = RunSummary | dict[str, Any]

CONFIG_ERRORS = (ConfigCompositionException, OverrideParseException, OmegaConfBaseException)
# Lines of Hydra's / OmegaConf's messages that locate rather than explain.
_DETAIL_PREFIXES = ("full_key:", "object_type=", "reference_type=", "Config search path", "provider=")


def run_cli(main: Callable[[], Any]) -> None:
    """Call `main` (a `@hydra.main` function); a config error Hydra raises while composing ends
    with one `error:` line and exit 2, any other Hydra error as Hydra reports it."""
    if os.environ.get("HYDRA_FULL_ERROR"):  # the user asked for Hydra's full tracebacks
        main()
        return
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra raises instead of printing: report below
    try:
        main()
    except CONFIG_ERRORS as e:
        fail(one_line(e), EXIT_CONFIG, multirun=False)
    except CompactHydraException as e:  # e.g. the sweeper's own one-line errors
        print(str(e), file=sys.stderr, flush=True)
        sys.exit(EXIT_FAILED)
    finally:
        os.environ.pop("HYDRA_FULL_ERROR", None)


def hydra_job(cfg: DictConfig, job: Callable[[DictConfig, Path, bool], JobResult]) -> JobResult:
    """The body of a `@hydra.main` function: `job(cfg, run dir, multirun)` in Hydra's output
    directory, with everything printed also appended to `<run dir>/<hydra.job.name>.log`."""
    hc = HydraConfig.get()
    run_dir = Path(hc.runtime.output_dir)
    with console_log(log_path(run_dir, hc.job.name, cfg)):
        return job(cfg, run_dir, hc.mode == RunMode.MULTIRUN)


def start_run(
    cfg: DictConfig,
    run_dir: Path,
    multirun: bool,
    label: str,
    load_run: Callable[[], RunFn],
    completed: Callable[[Mapping[str, Any]], RunSummary | None] | None = None,
) -> RunSummary:
    """The command-line contract of one run: a config that does not resolve ends with one
    `error: bad config: ...` line (exit 2); `completed(raw config)`, when given, may return the
    summary of a completed run (returned as is: nothing to do) or raise ValueError (exit 2);
    then `load_run()(cfg, run_dir)` under `experiments.rundir.run_guarded`'s exit codes."""
    try:
        raw = to_plain(cfg)
    except Exception as e:  # noqa: BLE001 - e.g. an interpolation error in the config
        return fail(f"bad config: {first_line(e)}", EXIT_CONFIG, multirun)
    if completed is not None:
        try:
            done = completed(raw)
        except ValueError as e:
            return fail(str(e), EXIT_CONFIG, multirun)
        if done is not None:
            return done
    return run_guarded(load_run(), cfg, run_dir, multirun, label)


def one_line(err: BaseException) -> str:
    """A Hydra / OmegaConf composition error as one line that names the key."""
    cause = err.__cause__ if isinstance(err.__cause__, OmegaConfBaseException) else None
    if cause is None and isinstance(err, OmegaConfBaseException):
        cause = err
    if isinstance(cause, (ConfigAttributeError, ConfigKeyError)):
        unknown = _unknown_key(cause)
        if unknown:
            return unknown
    if isinstance(cause, ValidationError) and getattr(cause, "full_key", None):
        return f"{cause.full_key}: {_compact(str(cause.msg))}"
    if isinstance(err, OverrideParseException):
        return f"cannot parse the override {err.override!r}: {_compact(err.message)}"
    text = _compact(str(err))
    if cause is not None and cause is not err:
        text = f"{text} ({_compact(str(cause))})"
    return text


def _unknown_key(cause: OmegaConfBaseException) -> str | None:
    """`config_from_mapping`'s wording for a key the schema dataclass lacks, or None."""
    cls, full_key = getattr(cause, "object_type", None), getattr(cause, "full_key", None)
    if not (dataclasses.is_dataclass(cls) and full_key):
        return None
    section, _, key = str(full_key).rpartition(".")
    known = sorted(f.name for f in dataclasses.fields(cls))
    return f"unknown {section or 'config'} key(s) {[key]}; known: {known}"


def _compact(text: str) -> str:
    """Join a multi-line message into one line, dropping location details; a line ending with
    ':' introduces a list, joined with commas (`Available options in 'model': small, tiny`)."""
    out, listing = "", False
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(_DETAIL_PREFIXES):
            if line.startswith("Config search path"):
                break
            continue
        if not out:
            out = line
        elif listing:
            out += (" " if out.endswith(":") else ", ") + line
        else:
            out += (" " if out.endswith((".", ":")) else "; ") + line
        listing = listing or line.endswith(":")
    return out
