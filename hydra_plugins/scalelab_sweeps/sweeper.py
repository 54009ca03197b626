"""`ScalelabSweeper`: a Hydra Sweeper that plans scaling sweeps and skips finished runs.

Selected by `+sweep=<preset>` (conf/sweep/*.yaml set `hydra/sweeper: scalelab`). It keeps `-m`
semantics: any other command-line overrides are expanded exactly like Hydra's basic sweeper
(`optim.lr=1e-3,3e-3` gives two sweeps), and each of those combinations is crossed with the
runs planned from the `sweep` node (experiments/sweeps/grid.py: plan_sweep). Every run gets
`hydra.sweep.subdir=<label>_<id>` where the id hashes the run's resolved config
(experiments/sweeps/runs.py), so relaunching finds earlier runs by path: completed runs are not
launched at all, interrupted runs are launched and resume from their checkpoints, failed or
diverged runs are kept unless `sweep.rerun_failed=true`.
"""

from __future__ import annotations

import json
import logging
import os
import pathlib
from typing import Any, List, Optional, Sequence

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn, JobStatus
from hydra.errors import CompactHydraException
from hydra.plugins.launcher import Launcher
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf

from models.base.portable import lock_file, unlock_file

log = logging.getLogger("scalelab.sweep")


class SweepError(CompactHydraException):
    """A sweep-level problem; Hydra prints just this one-line message (no traceback)."""

    def __init__(self, msg: str) -> None:
        super().__init__(f"error: {msg}")


class TaskGuard:
    """Wraps the task function so one run's `sys.exit(n)` fails that run, not the whole sweep.

    Hydra's `run_job` records an `Exception` as a failed job but lets `SystemExit` through,
    which would kill a sequential sweep at the first diverged run. It also appends the
    launch's CPUs, thread settings and timings to `<run dir>/launches.jsonl`.
    """

    def __init__(self, fn: TaskFunction) -> None:
        self.fn = fn

    def __call__(self, cfg: DictConfig) -> Any:
        # Imported here: Hydra imports every plugin module at start-up, for any app (see __init__).
        from experiments.sweeps.limits import record_launch

        with record_launch(pathlib.Path(HydraConfig.get().runtime.output_dir)):
            try:
                return self.fn(cfg)
            except SystemExit as e:
                if e.code in (None, 0):
                    return None
                raise RuntimeError(f"run exited with status {e.code}") from None


def _container(cfg: DictConfig, key: Optional[str] = None) -> Any:
    node = cfg if key is None else OmegaConf.select(cfg, key)
    if node is None:
        return None
    try:
        return OmegaConf.to_container(node, resolve=True)
    except Exception:  # interpolations that only resolve inside a job (e.g. ${hydra:...})
        return OmegaConf.to_container(node, resolve=False)


def _run_config(cfg: DictConfig) -> dict:
    out = {}
    for k in cfg.keys():
        if k != "hydra":
            out[k] = _container(cfg, str(k))
    return out


class ScalelabSweeper(Sweeper):
    """Plans the runs of a `sweep` preset and launches only those that still need work."""

    def __init__(self, max_batch_size: Optional[int] = None, params: Optional[dict] = None) -> None:
        self.max_batch_size = max_batch_size
        # `hydra.sweeper.params` (as Hydra's basic sweeper): a preset's own sweep dimensions, e.g.
        # conf/sweep/lr_isoflop.yaml's optim.lr; the same key on the command line wins.
        self.params = {str(k): str(v) for k, v in (params or {}).items()}
        self.config: Optional[DictConfig] = None
        self.hydra_context: Optional[HydraContext] = None
        self.launcher: Optional[Launcher] = None
        self.dry_run = False

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config = config
        self.hydra_context = hydra_context
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=TaskGuard(task_function), config=config
        )

    # ---- planning ----------------------------------------------------------------------------
    def _plan_jobs(self, arguments: List[str]) -> tuple[list[dict], list[dict]]:
        """(jobs to launch, a record per planned run) for every combination of the command
        line's own sweep overrides, each crossed with the runs its `sweep` node plans."""
        assert self.config is not None and self.hydra_context is not None
        loader = self.hydra_context.config_loader
        arguments = [f"{k}={v}" for k, v in self.params.items()] + list(arguments)
        parsed = OverridesParser.create(config_loader=loader).parse_overrides(arguments)
        combos = BasicSweeper.split_arguments(parsed, None)[0] if parsed else [[]]
        sweep_dir = pathlib.Path(str(self.config.hydra.sweep.dir))
        launch: list[dict] = []
        records: list[dict] = []
        seen: set[str] = set()
        for combo in combos:
            self._plan_combo(list(combo), sweep_dir, seen, launch, records)
        return launch, records

    def _plan_combo(
        self,
        combo: list[str],
        sweep_dir: pathlib.Path,
        seen: set[str],
        launch: list[dict],
        records: list[dict],
    ) -> None:
        """Plan one combination: skip, reuse or launch each run, by its deterministic directory."""
        # Imported here: Hydra imports every plugin module at start-up, for any app (see __init__).
        from experiments.sweeps.grid import plan_sweep
        from experiments.sweeps.ladder import LadderError
        from experiments.sweeps.runs import decide, read_status, run_dirname, run_id

        assert self.config is not None and self.hydra_context is not None
        loader = self.hydra_context.config_loader
        base = loader.load_sweep_config(self.config, combo)
        sweep = _container(base, "sweep")
        if not isinstance(sweep, dict):
            raise SweepError(
                "the scalelab sweeper needs a `sweep` config node: "
                "select a preset with +sweep=isoflop (or model_ladder, data_ladder, layouts)"
            )
        run_cfg = _run_config(base)
        try:
            planned = plan_sweep(run_cfg, sweep, corpus_tokens=_corpus_tokens(run_cfg, sweep))
        except LadderError as e:
            raise SweepError(str(e)) from None
        self.dry_run = self.dry_run or bool(sweep.get("dry_run", False))
        for p in planned:
            rec = {
                "label": p.label,
                "budget": p.budget,
                "n_params": p.n_params,
                "flops_per_token": p.flops_per_token,
                "tokens": p.tokens,
                "steps": p.steps,
                "flops": p.flops,
                "overrides": combo + list(p.overrides),
            }
            if p.skip:
                records.append({**rec, "action": "skip", "reason": p.skip})
                continue
            job = combo + list(p.overrides)
            job_cfg = loader.load_sweep_config(self.config, job)
            subdir = run_dirname(p.label, run_id(_run_config(job_cfg), list(sweep.get("id_ignore") or [])))
            if subdir in seen:
                continue
            seen.add(subdir)
            status = read_status(sweep_dir / subdir)
            go, why = decide(status, bool(sweep.get("rerun_failed", False)))
            rec.update(run_dir=subdir, status_before=status, action="launch" if go else "reuse", reason=why)
            records.append(rec)
            if go:
                launch.append({"overrides": job + [f"hydra.sweep.subdir={subdir}"], "rec": rec})

    # ---- sweeping ----------------------------------------------------------------------------
    def sweep(self, arguments: List[str]) -> Any:
        assert self.config is not None and self.launcher is not None
        sweep_dir = pathlib.Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        lock = open(sweep_dir / ".sweep.lock", "w")
        if not lock_file(lock, blocking=False):  # flock, or msvcrt on Windows (models/base/portable.py)
            lock.close()
            raise SweepError(
                f"sweep dir {sweep_dir} is in use by another running sweep; "
                "wait for it or choose another hydra.sweep.dir"
            )
        try:
            return self._sweep_locked(arguments, sweep_dir)
        finally:
            unlock_file(lock)
            lock.close()

    def _sweep_locked(self, arguments: List[str], sweep_dir: pathlib.Path) -> Any:
        # Imported here: Hydra imports every plugin module at start-up, for any app (see __init__).
        from experiments.sweeps.runs import read_status
        from models.base.rundir import RunStatus

        launch, records = self._plan_jobs(arguments)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        _log_plan(records)
        _write_plan(sweep_dir, records)
        if self.dry_run:
            log.info("sweep.dry_run=true: nothing launched")
            return []

        returns: List[Sequence[JobReturn]] = []
        batch_size = self.max_batch_size or max(1, len(launch))
        idx = 0
        for start in range(0, len(launch), batch_size):
            batch = launch[start : start + batch_size]
            results = self.launcher.launch([j["overrides"] for j in batch], initial_job_idx=idx)
            idx += len(batch)
            returns.append(results)
            for job, ret in zip(batch, results):
                rec = job["rec"]
                rec["status_after"] = read_status(sweep_dir / rec["run_dir"])
                value = ret._return_value
                if ret.status == JobStatus.FAILED:
                    rec["error"] = str(value)
                elif isinstance(value, dict) and value.get("error"):
                    rec["error"] = str(value["error"])
        _write_plan(sweep_dir, records)

        ran = [r for r in records if r["action"] == "launch"]
        failed = [r for r in ran if r.get("status_after") not in (RunStatus.COMPLETED, RunStatus.DIVERGED)]
        diverged = [r for r in ran if r.get("status_after") == RunStatus.DIVERGED]
        n_reused = sum(r["action"] == "reuse" for r in records)
        n_skip = sum(r["action"] == "skip" for r in records)
        log.info(
            f"sweep done: {len(ran) - len(failed) - len(diverged)} trained, {n_reused} reused, "
            f"{len(diverged)} diverged, {len(failed)} failed, {n_skip} skipped -> {sweep_dir}"
        )
        for r in diverged:
            log.warning(f"diverged: {r['run_dir']}")
        if failed:
            names = ", ".join(f"{r['run_dir']} ({r.get('error') or r.get('status_after')})" for r in failed)
            raise SweepError(f"{len(failed)} of {len(ran)} launched runs failed: {names}")
        return returns


def _corpus_tokens(run_cfg: dict, sweep: dict) -> Optional[int]:
    """Training-split size for the epoch limit (None when no limit is asked for)."""
    if sweep.get("max_epochs") is None:
        return None
    # Imported here: it loads the corpus module (numpy), and plugin modules stay light (see __init__).
    from experiments.sweeps.corpus import train_tokens

    return train_tokens(run_cfg)


def _log_plan(records: list[dict]) -> None:
    n_launch = sum(r["action"] == "launch" for r in records)
    log.info(f"sweep plan: {len(records)} runs, {n_launch} to launch")
    for r in records:
        budget = f"C={r['budget']:.2e} " if r["budget"] else ""
        log.info(
            f"  [{r['action']:6s}] {r['label']:24s} {budget}N={r['n_params']:,} "
            f"D={r['tokens']:,} steps={r['steps']} -- {r['reason']}"
        )


def _write_plan(sweep_dir: pathlib.Path, records: list[dict]) -> None:
    """`sweep_plan.json` beside the runs: what was planned, launched, reused and skipped, and why."""
    tmp = sweep_dir / ".sweep_plan.json.tmp"
    tmp.write_text(json.dumps({"runs": records}, indent=1, default=str))
    os.replace(tmp, sweep_dir / "sweep_plan.json")
