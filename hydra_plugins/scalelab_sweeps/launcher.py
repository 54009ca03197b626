"""`LocalParallelLauncher`: Hydra's joblib launcher with one CPU slot per concurrent run.

Hydra's own joblib launcher runs N jobs in N loky worker processes but lets each of them use the
whole machine, so two JAX runs on two cores fight over both. This launcher runs the same
`execute_job` inside `hold_slot` + `apply_limits` (experiments/sweeps/limits.py): every run owns
`threads_per_job` CPUs that no other concurrent run touches. `n_jobs: null` means as many jobs as
there are free CPU slots.
"""

from __future__ import annotations

import logging
import pathlib
from typing import Any, Dict, Optional, Sequence

from hydra._internal.core_plugins.basic_launcher import BasicLauncher
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, filter_overrides, setup_globals
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict

from experiments.console import install_if_bar
from experiments.sweeps.limits import apply_limits, cpu_sets, hold_slot
from hydra_plugins.scalelab_sweeps.sweeper import _run_config
from models.base.packs import Member, write_pack
from models.base.portable import available_cpus

log = logging.getLogger("scalelab.launcher")


def run_in_slot(
    lock_dir: str,
    slots: list[list[int]],
    threads: int,
    idx: int,
    overrides: Sequence[str],
    hydra_context: HydraContext,
    config: DictConfig,
    task_function: TaskFunction,
    singleton_state: Dict[Any, Any],
) -> JobReturn:
    """Worker-side: take a free CPU slot, pin to it, then run the job as Hydra's joblib does."""
    # deferred: joblib, in the worker only; Hydra imports every plugin module at start-up (see __init__)
    from hydra_plugins.hydra_joblib_launcher._core import execute_job

    install_if_bar()  # the sweep's bar is on this terminal: each line clears its line first
    with hold_slot(pathlib.Path(lock_dir), len(slots)) as k:
        apply_limits(slots[k], threads, slot=k)
        return execute_job(idx, overrides, hydra_context, config, task_function, singleton_state)


class LocalParallelLauncher(Launcher):
    """Parallel local runs (joblib/loky processes), each pinned to its own CPUs."""

    def __init__(self, n_jobs: Optional[int] = None, threads_per_job: int = 1, **joblib_kwargs: Any) -> None:
        if isinstance(threads_per_job, bool) or not isinstance(threads_per_job, int) or threads_per_job < 1:
            raise ValueError(
                f"hydra.launcher.threads_per_job must be a positive integer (got {threads_per_job!r})"
            )
        self.threads = threads_per_job
        avail = len(available_cpus())  # affinity mask on Linux, all CPUs elsewhere (no pinning)
        self.n_jobs = int(n_jobs) if n_jobs else max(1, avail // threads_per_job)
        if self.n_jobs < 1:
            raise ValueError(f"hydra.launcher.n_jobs must be >= 1 (got {n_jobs!r})")
        if self.n_jobs * self.threads > avail:
            log.warning(f"{self.n_jobs} jobs x {self.threads} threads > {avail} CPUs: runs will share cores")
        self.joblib = {
            k: (OmegaConf.to_container(v) if OmegaConf.is_config(v) else v) for k, v in joblib_kwargs.items()
        }
        self.config: Optional[DictConfig] = None
        self.task_function: Optional[TaskFunction] = None
        self.hydra_context: Optional[HydraContext] = None

    def slots_for(self, n_launch: int) -> list[list[int]]:
        """CPU slots for a batch of `n_launch` jobs: `n_jobs` slots of `threads_per_job` CPUs, or,
        when the batch has fewer jobs than `n_jobs`, the CPUs shared out among them, so that no
        core idles while the batch runs: a lone pack of K runs gets every core for its member
        threads (with one core per job it used one of two, docs/sweep.md). The thread caps stay
        `threads_per_job`'s (XLA's intra-op pool too): a pack's parallelism is its members."""
        conc = max(1, min(self.n_jobs, n_launch))
        return cpu_sets(conc, max(self.threads, len(available_cpus()) // conc))

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config = config
        self.task_function = task_function
        self.hydra_context = hydra_context

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        # deferred: joblib, only when this launcher runs; Hydra imports every plugin module at start-up
        from joblib import Parallel, delayed

        setup_globals()
        assert self.config is not None and self.task_function is not None
        sweep_dir = pathlib.Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        slots = self.slots_for(len(job_overrides))
        log.info(f"launching {len(job_overrides)} jobs, {len(slots)} at a time, CPU slots {slots}")
        for i, ov in enumerate(job_overrides):
            log.info(f"\t#{initial_job_idx + i} : {' '.join(filter_overrides(ov))}")
        state = Singleton.get_state()
        runs = Parallel(n_jobs=self.n_jobs, backend="loky", **self.joblib)(
            delayed(run_in_slot)(
                str(sweep_dir / ".cpu_slots"),
                slots,
                self.threads,
                initial_job_idx + i,
                list(ov),
                self.hydra_context,
                self.config,
                self.task_function,
                state,
            )
            for i, ov in enumerate(job_overrides)
        )
        return list(runs)


class PackedLauncher(Launcher):
    """`hydra/launcher=packed`: a plain multirun whose jobs compile to one program (they differ
    only in the train step's inputs: optimizer scalars, seed, length) trains them as packs of
    at most `pack` runs, each pack one job (experiments/train/pack.py), e.g.

        python -m experiments.train -m optim.lr=1e-3,3e-3,1e-2 hydra/launcher=packed

    Every run keeps the directory Hydra would give it (`<hydra.sweep.dir>/<hydra.sweep.subdir>`);
    jobs with no partner run as usual. Packs run one after another in this process."""

    def __init__(self, pack: int = 4) -> None:
        if isinstance(pack, bool) or not isinstance(pack, int) or pack < 1:
            raise ValueError(f"hydra.launcher.pack must be an integer >= 1 (got {pack!r})")
        self.pack = pack
        self.config: Optional[DictConfig] = None
        self.task_function: Optional[TaskFunction] = None
        self.hydra_context: Optional[HydraContext] = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config, self.task_function, self.hydra_context = config, task_function, hydra_context
        self.inner = BasicLauncher()
        self.inner.setup(hydra_context=hydra_context, task_function=task_function, config=config)

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        # deferred: NumPy and the trainer's config; Hydra imports every plugin module at start-up
        from experiments.sweeps.packing import pack_groups

        assert self.config is not None and self.hydra_context is not None
        sweep_dir = pathlib.Path(str(self.config.hydra.sweep.dir))
        jobs = []
        for i, ov in enumerate(job_overrides):
            cfg = self.hydra_context.config_loader.load_sweep_config(self.config, list(ov))
            with open_dict(cfg):
                cfg.hydra.job.num = initial_job_idx + i
            try:
                subdir = str(OmegaConf.select(cfg, "hydra.sweep.subdir"))
            except Exception:  # noqa: BLE001 - an interpolation only a running job resolves
                subdir = str(initial_job_idx + i)
            jobs.append((list(ov), subdir, _run_config(cfg)))
        launch: list[list[str]] = []
        for idx in pack_groups([j[2] for j in jobs], self.pack):
            if len(idx) == 1:
                launch.append(jobs[idx[0]][0])
                continue
            members = [jobs[i] for i in idx]
            pid, pack_ov = write_pack(
                sweep_dir,
                [Member((sweep_dir / sub).resolve(), sub, c, tuple(ov)) for ov, sub, c in members],
                concurrency=self.pack,
            )
            log.info(f"pack {pid}: {len(idx)} runs of one program: {', '.join(m[1] for m in members)}")
            launch.append(members[0][0] + pack_ov)
        return self.inner.launch(launch, initial_job_idx)
