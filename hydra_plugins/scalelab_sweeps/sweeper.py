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

import dataclasses as dc
import json
import logging
import pathlib
import shutil
import subprocess
import sys
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

from experiments.console import quiet
from experiments.early_stop import EarlyStop
from experiments.early_stop import spent as early_stop_spent
from experiments.sweeps.disk import full_disk_error, sweep_footprint
from experiments.sweeps.grid import plan_sweep
from experiments.sweeps.hparams import PROBE
from experiments.sweeps.ladder import LadderError
from experiments.sweeps.limits import record_launch
from experiments.sweeps.monitor import SweepMonitor
from experiments.sweeps.recipes import recipe_label, recipe_overrides
from experiments.sweeps.runs import decide, read_status, run_dirname, run_id
from experiments.sweeps.summary import Counts
from models.base.diskspace import DiskFull, disk_full_of
from models.base.errors import ConfigError
from models.base.jsonio import write_text_atomic
from models.base.packs import Member, own_overrides, write_pack
from models.base.portable import lock_file, unlock_file
from models.base.rundir import HPARAMS_FILE, SWEEP_PLAN_FILE, SWEEP_RUNS_TABLE, RunRole, RunStatus

log = logging.getLogger("scalelab.sweep")
# the launchers' per-job lines, silenced with SCALELAB_QUIET=1 (the sweep's count lines stay)
LAUNCH_LOGGERS = ("scalelab.launcher", "hydra._internal.core_plugins.basic_launcher", "hydra_plugins")


def chatter(msg: str) -> None:
    """An informational line of the sweep's own, not printed with SCALELAB_QUIET=1."""
    if not quiet():
        log.info(msg)


class SweepError(CompactHydraException):
    """A sweep-level problem; Hydra prints just this one-line message (no traceback)."""

    def __init__(self, msg: str) -> None:
        super().__init__(f"error: {msg}")


def engine_error(launcher: str, err: BaseException) -> str | None:
    """One line for a cluster engine's refusal to take the sweep's jobs (no `sbatch`, a partition
    SLURM does not have, an unreachable Ray address), naming the setting to fix; None for any
    other error (it propagates as it is)."""
    text = str(err).strip()
    lines = [line for line in text.splitlines() if line.strip()] or [type(err).__name__]
    if launcher == "SlurmLauncher":
        if shutil.which("sbatch") is None or "srun" in lines[0]:
            return (
                "hydra/launcher=slurm: no `sbatch`/`srun` on PATH -- run the sweep on a SLURM login node "
                "(or load the cluster's slurm module), or use hydra/launcher=local"
            )
        refusal = [line for line in lines if line.startswith("sbatch: error:")]
        if refusal:
            return f"hydra/launcher=slurm: SLURM refused the jobs: {refusal[0]} (check hydra.launcher.*)"
    if launcher in ("RayLauncher", "RayClusterLauncher") and isinstance(
        err, (ConnectionError, TimeoutError, RuntimeError)
    ):
        return (
            f"hydra/launcher=ray_cluster: cannot start or reach Ray ({lines[-1]}) -- start a cluster with "
            "`ray start --head` or fix hydra.launcher.ray.init.address"
        )
    return None


class TaskGuard:
    """Wraps the task function so one run's `sys.exit(n)` fails that run, not the whole sweep.

    Hydra's `run_job` records an `Exception` as a failed job but lets `SystemExit` through,
    which would kill a sequential sweep at the first diverged run. It also appends the
    launch's CPUs, thread settings and timings to `<run dir>/launches.jsonl`.
    """

    def __init__(self, fn: TaskFunction) -> None:
        self.fn = fn

    def __call__(self, cfg: DictConfig) -> Any:
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
        self.pack = 1
        self.early_stop: EarlyStop | None = None  # sweep.early_stop (experiments/early_stop.py)
        self._branch_info: dict[str, dict] = {}  # label -> role / trunk / flops of WSD branch runs
        self._job_idx = 0  # Hydra job index of the next launch (over every stage of the sweep)

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
        assert self.config is not None and self.hydra_context is not None
        loader = self.hydra_context.config_loader
        base = loader.load_sweep_config(self.config, combo)
        sweep = _container(base, "sweep")
        if not isinstance(sweep, dict):
            raise SweepError(
                "the scalelab sweeper needs a `sweep` config node: "
                "select a preset with +sweep=isoflop (or model_ladder, data_ladder, layouts)"
            )
        if sweep.get("recipes"):  # one ladder per recipe, each planned with its overrides (sweeps/recipes.py)
            try:
                recipes = recipe_overrides(sweep["recipes"])
            except LadderError as e:
                raise SweepError(str(e)) from None
            for _name, recipe in recipes:
                self._plan_combo(combo + recipe, sweep_dir, seen, launch, records)
            return
        try:
            self.early_stop = EarlyStop.parse(sweep.get("early_stop"))
        except ConfigError as e:
            raise SweepError(str(e)) from None
        run_cfg = _run_config(base)
        try:
            planned = plan_sweep(run_cfg, sweep, corpus_tokens=_corpus_tokens(run_cfg, sweep))
        except LadderError as e:
            raise SweepError(str(e)) from None
        planned = [dc.replace(p, label=recipe_label(p.label, sweep.get("recipe"))) for p in planned]
        self.dry_run = self.dry_run or bool(sweep.get("dry_run", False))
        if sweep.get("branches"):
            planned = self._with_branches(planned, combo, sweep, run_cfg, sweep_dir)
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
            go, why = decide(status, bool(sweep.get("rerun_failed", False)), self.early_stop is not None)
            rec.update(run_dir=subdir, status_before=status, action="launch" if go else "reuse", reason=why)
            rec.update(self._branch_info.get(p.label, {}))
            records.append(rec)
            if go:
                launch.append(
                    {
                        "overrides": job + [f"hydra.sweep.subdir={subdir}"],
                        "rec": rec,
                        "config": _run_config(job_cfg),
                        # branches after their trunks; every other run trains beside the trunks
                        "phase": 1 if rec.get("role") == RunRole.BRANCH else 0,
                    }
                )

    def _with_branches(
        self, planned: list, combo: list[str], sweep: dict, run_cfg: dict, sweep_dir: pathlib.Path
    ) -> list:
        """`sweep.branches`: the runs of each shape at several budgets become branches of one
        WSD trunk (experiments/sweeps/packing.py plan_branches); the trunk runs are added."""
        from experiments.sweeps.packing import plan_branches  # deferred: NumPy (see __init__)

        optim = run_cfg.get("optim") or {}
        if optim.get("schedule") != "wsd":
            raise SweepError(
                f"sweep.branches=true needs optim.schedule=wsd (got {optim.get('schedule')!r}): "
                "branches share a WSD trunk; add optim.schedule=wsd"
            )
        tps = int(run_cfg["train"]["batch_size"]) * int(run_cfg["model"]["seq_len"])
        groups: dict[tuple, list[int]] = {}
        for i, p in enumerate(planned):
            if not p.skip:
                key = tuple(o for o in p.overrides if not o.startswith(_LENGTH_KEYS))
                groups.setdefault(key, []).append(i)
        out = list(planned)
        for key, idx in groups.items():
            steps = [planned[i].steps for i in idx]
            plan = plan_branches(steps, tps, float(optim["decay_fraction"]), sweep.get("warmup_fraction"))
            if plan is not None:
                out += self._branch_group(
                    out, [idx[m] for m in plan.members], plan, list(key), combo, sweep, tps
                )
        return out

    def _branch_group(
        self,
        out: list,
        members: list[int],
        plan: Any,
        key: list[str],
        combo: list[str],
        sweep: dict,
        tps: int,
    ) -> list:
        """The trunk of one shape (returned, to be planned like any run) and its branches (in
        `out`, with the common warmup, `train.branch_from` and `train.branch_step`)."""
        from experiments.sweeps.packing import flops_of  # deferred: NumPy (see __init__)

        assert self.config is not None and self.hydra_context is not None
        first = out[members[0]]
        label = first.label.split("_", 1)[1] if "_" in first.label else first.label
        points = ",".join(str(b) for b in sorted(set(plan.branch_steps)))
        trunk_ov = key + [
            f"train.tokens={plan.trunk_steps * tps}",
            "train.steps=null",
            "optim.schedule=constant",
            f"optim.warmup_tokens={plan.warmup_tokens}",
            f"train.branch_points=[{points}]",
        ]
        trunk = dc.replace(
            first,
            label=f"trunk_{label}",
            overrides=tuple(trunk_ov),
            budget=None,
            tokens=plan.trunk_steps * tps,
            steps=plan.trunk_steps,
        )
        tcfg = self.hydra_context.config_loader.load_sweep_config(self.config, combo + trunk_ov)
        rid = run_id(_run_config(tcfg), list(sweep.get("id_ignore") or []))
        tdir = (pathlib.Path(str(self.config.hydra.sweep.dir)) / run_dirname(trunk.label, rid)).resolve()
        trunk_flops = flops_of(plan.trunk_steps, tps, first.flops_per_token)
        self._branch_info[trunk.label] = {"role": RunRole.TRUNK, "flops_to_train": trunk_flops}
        for i, bp in zip(members, plan.branch_steps):
            p = out[i]
            ov = [o for o in p.overrides if not o.startswith("optim.warmup_tokens=")]
            ov += [
                f"optim.warmup_tokens={plan.warmup_tokens}",
                f"train.branch_from={tdir}",
                f"train.branch_step={bp}",
            ]
            out[i] = dc.replace(p, overrides=tuple(ov))
            self._branch_info[p.label] = {
                "role": RunRole.BRANCH,
                "trunk": tdir.name,
                "branch_step": bp,
                "flops_to_train": flops_of(p.steps - bp, tps, p.flops_per_token),
            }
        return [trunk]

    # ---- packing -----------------------------------------------------------------------------
    def _packed(self, jobs: list[dict], sweep_dir: pathlib.Path) -> list[dict]:
        """`sweep.pack` = K > 1: jobs of one program become pack jobs of at most K runs each
        (experiments/train/pack.py); a job with no partner stays as it is (logged)."""
        from experiments.sweeps.packing import pack_groups  # deferred: NumPy (see __init__)

        if self.pack <= 1 or len(jobs) < 2:
            return jobs
        # Never leave the launcher's concurrent slots idle: a pack job takes one slot (the parallel
        # launcher pins it to its own core), so a group of G runs on S slots packs by min(K, ceil(G / S)).
        slots = max(1, int(getattr(self.launcher, "n_jobs", 1) or 1))
        out = []
        for group in pack_groups([j["config"] for j in jobs], len(jobs)):
            k = min(self.pack, -(-len(group) // slots))
            for idx in [group[i : i + k] for i in range(0, len(group), k)]:
                if len(idx) == 1:
                    chatter(f"  not packed (no other run of its program): {jobs[idx[0]]['rec']['run_dir']}")
                    out.append(jobs[idx[0]])
                else:
                    out.append(self._pack_job([jobs[i] for i in idx], sweep_dir))
        return out

    def _pack_job(self, members: list[dict], sweep_dir: pathlib.Path) -> dict:
        """One pack job: its manifest written, its overrides those of the first member plus
        its own directory and `+pack.manifest`."""
        ids = [j["rec"]["run_dir"] for j in members]
        pid, pack_ov = write_pack(
            sweep_dir,
            [
                Member((sweep_dir / i).resolve(), i, j["config"], tuple(own_overrides(j["overrides"])))
                for i, j in zip(ids, members)
            ],
            concurrency=self.pack,
        )
        for j in members:
            j["rec"]["packed_with"] = ids
        chatter(f"  pack {pid}: {len(ids)} runs of one program: {', '.join(ids)}")
        return {
            "overrides": own_overrides(members[0]["overrides"]) + pack_ov,
            "members": members,
            "rec": members[0]["rec"],
        }

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
        except OSError as e:  # a full disk where the sweep writes (its plan, packs): one line
            full = disk_full_of(e)
            if full is None:
                raise
            raise SweepError(full.command_line()) from None
        finally:
            unlock_file(lock)
            lock.close()

    def _sweep_locked(self, arguments: List[str], sweep_dir: pathlib.Path) -> Any:
        self.pack = _pack_size(OmegaConf.select(self.config, "sweep.pack"))
        if quiet():
            for name in LAUNCH_LOGGERS:
                logging.getLogger(name).setLevel(logging.WARNING)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        if OmegaConf.select(self.config, "sweep.hparams") != PROBE:
            records, returns = self._stage(arguments, sweep_dir, [])
            if records is not None and OmegaConf.select(self.config, "sweep.fit_hparams"):
                _fit_hparams(sweep_dir)
            return self._finish(records or [], returns, sweep_dir)
        # sweep.hparams=probe: the LR probe's budgets first, their laws fitted, then the other
        # budgets at the fitted values (one sweep, one plan file)
        probe, rest = _probe_budgets(_container(self.config, "sweep") or {})
        stage1 = [
            f"sweep.budgets={_flist(probe)}",
            f"sweep.lr_probe.budgets={_flist(probe)}",
            "sweep.hparams=null",
        ]
        records, returns = self._stage(list(arguments) + stage1, sweep_dir, [])
        if records is None:
            log.info("sweep.hparams=probe: the other budgets are planned once the probe's laws are fitted")
            return []
        try:
            laws: Any = _fit_hparams(sweep_dir)
        except SweepError as e:  # never lose the sweep to a fit: the rest trains untuned, said loudly
            log.warning(f"{e}; the other budgets train at the configured optim.* values instead")
            laws = "null"
        if rest:
            stage2 = [f"sweep.budgets={_flist(rest)}", "sweep.lr_probe=null", f"sweep.hparams={laws}"]
            more, returns2 = self._stage(list(arguments) + stage2, sweep_dir, records)
            records, returns = more if more is not None else records, returns + returns2
        return self._finish(records, returns, sweep_dir)

    def _stage(
        self, arguments: List[str], sweep_dir: pathlib.Path, earlier: list[dict]
    ) -> tuple[Optional[list[dict]], list]:
        """Plan and launch one set of runs; (every record so far, job returns), records None on a
        dry run (only planned and logged)."""
        launch, records = self._plan_jobs(arguments)
        records = earlier + records
        _log_plan(records, len(earlier))
        footprint = sweep_footprint(launch, self.launcher, self.pack, sweep_dir)  # sweeps/disk.py
        if footprint.warning():
            log.warning(footprint.warning())
        _write_plan(sweep_dir, records, footprint, self.early_stop)
        if self.dry_run:
            log.info("sweep.dry_run=true: nothing launched")
            return None, []
        assert self.launcher is not None
        returns: List[Sequence[JobReturn]] = []
        batch_size = self.max_batch_size or max(1, len(launch))
        with SweepMonitor(sweep_dir, [j["rec"] for j in launch]) as monitor:  # sweeps/monitor.py
            for phase in (0, 1):  # WSD branches last: they start from their trunks' checkpoints
                phase_jobs = [j for j in launch if j.get("phase", 1) == phase]
                phase_jobs = launch_order(phase_jobs)
                jobs = self._packed(phase_jobs, sweep_dir)
                for start in range(0, len(jobs), batch_size):
                    batch = jobs[start : start + batch_size]
                    results = self._launch([j["overrides"] for j in batch])
                    self._job_idx += len(batch)
                    returns.append(results)
                    for job, ret in zip(batch, results):
                        _record_result(job, ret, sweep_dir)
                        for member in job.get("members") or [job]:
                            monitor.ended(member["rec"])
        try:
            _write_plan(sweep_dir, records, footprint, self.early_stop)
        except DiskFull as e:  # the runs' outcome is still told (sweep done ...)
            log.warning(f"warning: {SWEEP_PLAN_FILE} not updated: {e}")
        return records, returns

    def _launch(self, overrides: list) -> Sequence[JobReturn]:
        """The launcher's `launch`; a cluster engine refusing the jobs ends in one line."""
        assert self.launcher is not None
        try:
            return self.launcher.launch(overrides, initial_job_idx=self._job_idx)
        except Exception as e:  # noqa: BLE001 - re-raised unless it is the engine's refusal
            msg = engine_error(type(self.launcher).__name__, e)
            if msg is None:
                raise
            raise SweepError(msg) from e

    def _finish(self, records: list[dict], returns: list, sweep_dir: pathlib.Path) -> Any:
        """The sweep's count line (experiments/sweeps/summary.py: planned = reused + trained +
        skipped + failed); the one-line error when a run failed with an error."""
        if self.dry_run:
            return []
        ran = [r for r in records if r["action"] == "launch"]
        for r in ran:  # a job that returned no result: the run is as its directory says
            r.setdefault("status_after", read_status(sweep_dir / r["run_dir"]))
        ended = (RunStatus.COMPLETED, RunStatus.DIVERGED, RunStatus.STOPPED)
        failed = [r for r in ran if r.get("status_after") not in ended]
        diverged = [r for r in ran if r.get("status_after") == RunStatus.DIVERGED]
        stopped = [r for r in failed if full_disk_error(sweep_dir / r["run_dir"], r.get("error"))]
        for r in stopped:  # a run a full disk stopped: said so, and resumed by a relaunch
            r["error"] = full_disk_error(sweep_dir / r["run_dir"], r.get("error"))
        full = {id(r) for r in stopped}
        counts = Counts.of(records, disk_full=lambda r: id(r) in full)
        log.info(f"{counts.line('sweep done')} -> {sweep_dir}")
        for r in diverged:
            log.warning(f"diverged: {r['run_dir']}")
        if failed:
            names = ", ".join(f"{r['run_dir']} ({r.get('error') or r.get('status_after')})" for r in failed)
            raise SweepError(f"{len(failed)} of the {len(ran)} runs to train failed: {names}")
        return returns


def _flist(values: list[float]) -> str:
    return "[" + ",".join(f"{v:g}" for v in values) + "]"


def _probe_budgets(sweep: dict) -> tuple[list[float], list[float]]:
    """(the LR probe's budgets, the sweep's other budgets) for sweep.hparams=probe."""
    probe = sweep.get("lr_probe") or {}
    chosen = probe.get("budgets") if isinstance(probe, dict) else None
    if not chosen or not probe.get("lrs"):
        raise SweepError(
            "sweep.hparams=probe fits the laws on the LR probe: give its learning rates and budgets, "
            "e.g. 'sweep.lr_probe={lrs:[3e-3,3e-2],budgets:[1e11,1.5e11]}'"
        )
    budgets = [float(c) for c in sweep.get("budgets") or []]
    missing = [c for c in chosen if float(c) not in budgets]
    if missing:
        raise SweepError(f"sweep.lr_probe.budgets {missing} are not in sweep.budgets {budgets}")
    probe_b = sorted({float(c) for c in chosen})
    return probe_b, [c for c in sorted(budgets) if c not in probe_b]


# overrides that set a run's length (a WSD trunk serves runs that differ only in them)
def launch_order(jobs: list[dict]) -> list[dict]:
    """The jobs of one phase in launch order: runs that start from nothing first (a continued run
    waits on its base model, `train.init_from`), WSD trunks before the rest of their kind (their
    branches wait on them); otherwise as planned."""

    def continued(job: dict) -> bool:
        return bool(((job.get("config") or {}).get("train") or {}).get("init_from"))

    return sorted(jobs, key=lambda j: (continued(j), j["rec"].get("role") != RunRole.TRUNK))


_LENGTH_KEYS = ("train.tokens=", "train.steps=", "optim.warmup_tokens=", "sweep.budget=")


def _pack_size(value: Any) -> int:
    """`sweep.pack` (None = 1, off) as an int >= 1, else the one-line error."""
    if value is None:
        return 1
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SweepError(f"sweep.pack must be an integer >= 1 (got {value!r}); 1 = no packing")
    return value


def _record_result(job: dict, ret: JobReturn, sweep_dir: pathlib.Path) -> None:
    """Each run's status after its (pack) job, and the job's error if it failed."""
    value = ret._return_value
    for member in job.get("members") or [job]:
        rec = member["rec"]
        rec["status_after"] = read_status(sweep_dir / rec["run_dir"])
        if ret.status == JobStatus.FAILED:
            rec["error"] = str(value)
        elif getattr(value, "error", None):  # a run's RunSummary (a pack job's result has none)
            rec["error"] = str(value.error)
        elif isinstance(value, dict):  # a pack job: its members' errors (a full disk stops them all)
            errors = {m.get("run_id"): m.get("error") for m in value.get("pack") or []}
            if errors.get(rec["run_dir"]):
                rec["error"] = errors[rec["run_dir"]]


def _fit_hparams(sweep_dir: pathlib.Path) -> pathlib.Path:
    """`sweep.fit_hparams`: collect the sweep and fit its hyperparameter laws, through the analysis
    command line (the sweeper sits below the analysis package): <sweep dir>/runs.csv and
    <sweep dir>/hparams.json. A fit that fails is the sweep's one-line error; the runs stay. The
    probe fits the law (`--method fit_hparams`): a probe spans two or three budgets, too few folds
    for fit-hparams' own choice, whose fallback (the best value tried per rung) would plan every
    later budget at one grid learning rate."""
    table, laws = sweep_dir / SWEEP_RUNS_TABLE, sweep_dir / HPARAMS_FILE
    for cmd in (
        ["collect", str(sweep_dir), "--out", str(table.parent)],  # writes DIR/runs.csv
        ["fit-hparams", str(table), "--method", "fit_hparams", "--json", str(laws)],
    ):
        p = subprocess.run([sys.executable, "-m", "analysis", *cmd], capture_output=True, text=True)
        for line in (p.stdout + p.stderr).splitlines():
            chatter(f"  {cmd[0]}: {line}")
        if p.returncode != 0:
            last = (p.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise SweepError(f"sweep.fit_hparams: `python -m analysis {' '.join(cmd)}` failed: {last}")
    log.info(f"hyperparameter laws -> {laws} (use them with sweep.hparams={laws})")
    return laws.resolve()


def _corpus_tokens(run_cfg: dict, sweep: dict) -> Optional[int]:
    """Training-split size for the epoch limit (None when no limit is asked for)."""
    if sweep.get("max_epochs") is None and sweep.get("kind") != "data_limited":  # it checks U <= split
        return None
    # deferred: it loads the corpus module (numpy), and plugin modules stay light (see __init__)
    from experiments.sweeps.corpus import train_tokens

    return train_tokens(run_cfg)


def _log_plan(records: list[dict], start: int = 0) -> None:
    """Each newly planned run (`records[start:]`; not with SCALELAB_QUIET=1), then the count line
    of every run planned so far (experiments/sweeps/summary.py)."""
    for r in records[start:]:
        budget = f"C={r['budget']:.2e} " if r["budget"] else ""
        chatter(
            f"  [{r['action']:6s}] {r['label']:24s} {budget}N={r['n_params']:,} "
            f"D={r['tokens']:,} steps={r['steps']} -- {r['reason']}"
        )
    log.info(Counts.of(records).line("sweep plan", to_train=True))


def _write_plan(
    sweep_dir: pathlib.Path, records: list[dict], footprint: Any = None, early_stop: EarlyStop | None = None
) -> None:
    """`sweep_plan.json` beside the runs: what was planned, launched, reused and skipped, and why;
    `flops_to_train` (what the sweep spends: WSD trunks and their branches' decays, every other
    run whole) against `flops_if_separate` (every run trained alone); `checkpoint_footprint`
    (experiments/sweeps/disk.py) the disk its launched runs' checkpoints take against the free space;
    with `sweep.early_stop`, `early_stop`: its settings, the FLOPs spent against the full sweep's and
    the runs stopped early."""
    kept = [r for r in records if r["action"] != "skip"]
    separate = sum(float(r["flops"]) for r in kept if r.get("role") != RunRole.TRUNK)
    spent = sum(float(r.get("flops_to_train", r["flops"])) for r in kept)
    plan = {"flops_to_train": spent, "flops_if_separate": separate, "runs": records}
    if footprint is not None:
        plan["checkpoint_footprint"] = footprint.as_dict()
    if early_stop is not None:  # the compute spent against the full sweep (experiments/early_stop.py)
        plan["early_stop"] = {**dc.asdict(early_stop), **early_stop_spent(records, sweep_dir)}
    write_text_atomic(sweep_dir / SWEEP_PLAN_FILE, json.dumps(plan, indent=1, default=str))
