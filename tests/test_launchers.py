"""Launchers: the SLURM job that submitit would submit, the SLURM -> jax.distributed mapping, and
the parallel local launcher's per-run CPU slots (two runs at once, never on the same core)."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]


def _compose(overrides):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    import experiments.train.config  # noqa: F401 - registers the config schema (base_distributed, ...)

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base=None):
        return compose("config", overrides=overrides, return_hydra_config=True)


def test_slurm_launcher_builds_the_job_we_configured(tmp_path, monkeypatch):
    submitit = pytest.importorskip("submitit")
    from hydra.core.hydra_config import HydraConfig
    from hydra.core.utils import JobReturn, JobStatus
    from hydra.utils import instantiate

    # submitit's SLURM executor refuses to start without `srun` on PATH
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")

    cfg = _compose(
        [
            "+sweep=isoflop",
            "hydra/launcher=slurm",
            "hydra.launcher.partition=gpu",
            "hydra.launcher.nodes=2",
            "hydra.launcher.gpus_per_node=4",
            "hydra.launcher.timeout_min=90",
            "hydra.launcher.account=proj42",
            "hydra.launcher.setup=['source ~/venv/bin/activate']",
            f"hydra.sweep.dir={tmp_path}/sweep",
        ]
    )
    HydraConfig.instance().set_config(cfg)
    launcher = instantiate(cfg.hydra.launcher)
    assert type(launcher).__name__ == "SlurmLauncher"
    launcher.setup(hydra_context=None, task_function=lambda c: None, config=cfg)

    captured = {}

    class FakeJob:
        def results(self):
            r = JobReturn()
            r.status = JobStatus.COMPLETED
            r._return_value = None
            return [r]

    def fake_map_array(self, fn, *args):
        captured["executor"] = self
        captured["n"] = len(args[0])
        return [FakeJob() for _ in args[0]]

    monkeypatch.setattr(submitit.AutoExecutor, "map_array", fake_map_array)
    out = launcher.launch([["model.n_layers=1"], ["model.n_layers=2"]], initial_job_idx=0)
    assert len(out) == 2 and captured["n"] == 2
    ex = captured["executor"]._executor
    p = ex.parameters
    assert p["partition"] == "gpu" and p["nodes"] == 2 and p["account"] == "proj42"
    assert p["gpus_per_node"] == 4 and p["ntasks_per_node"] == 4  # one process per GPU
    assert p["time"] == 90 and p["signal_delay_s"] == 120 and p["cpus_per_task"] == 8
    assert ex.max_num_timeout == 3  # preempted / timed-out runs are requeued and resume
    text = ex._make_submission_file_text("python -u -m submitit.core._submit x", "uid")
    for line in (
        "#SBATCH --partition=gpu",
        "#SBATCH --nodes=2",
        "#SBATCH --ntasks-per-node=4",
        "#SBATCH --gpus-per-node=4",
        "#SBATCH --time=90",
        "#SBATCH --account=proj42",
        "#SBATCH --signal=USR2@120",
        "source ~/venv/bin/activate",
    ):
        assert line in text, f"{line!r} not in the sbatch script:\n{text}"
    assert str(tmp_path / "sweep" / ".submitit") in text


def test_slurm_environment_maps_to_jax_distributed(monkeypatch):
    from sharding.distributed import resolve

    env = {
        "SLURM_NTASKS": "8",
        "SLURM_PROCID": "5",
        "SLURM_LOCALID": "1",
        "SLURM_JOB_ID": "77",
        "SLURM_STEP_NODELIST": "gpu[003-004]",
        "SLURM_STEP_NUM_NODES": "2",
        "SLURM_NODELIST": "gpu[003-004]",
    }
    args = resolve({}, env)
    assert args == {
        "coordinator_address": "gpu003:12355",
        "num_processes": 8,
        "process_id": 5,
        "source": "slurm",
    }
    assert resolve({"port": 23456}, env)["coordinator_address"] == "gpu003:23456"
    assert resolve({}, {**env, "SLURM_NTASKS": "1", "SLURM_PROCID": "0"}) is None  # one task: no-op

    # JAX itself gives each task its own GPU: local_device_ids = [SLURM_LOCALID]
    from jax._src.clusters import ClusterEnv

    for k, v in env.items():
        monkeypatch.setenv(k, v)
    addr, n, pid, local = ClusterEnv.auto_detect_unset_distributed_params(
        args["coordinator_address"], args["num_processes"], args["process_id"], None, None, None
    )
    assert (addr, n, pid, list(local)) == ("gpu003:12355", 8, 5, [1])


def test_ray_and_local_launcher_configs_compose():
    cfg = _compose(["+sweep=isoflop", "hydra/launcher=ray_cluster"])
    assert (
        cfg.hydra.launcher._target_.endswith("RayClusterLauncher")
        and cfg.hydra.launcher.ray.remote.num_gpus == 0
    )
    cfg = _compose(["+sweep=isoflop", "hydra/launcher=local"])
    assert cfg.hydra.launcher._target_.endswith("BasicLauncher")
    cfg = _compose(["+sweep=demo"])
    assert cfg.hydra.launcher._target_.endswith("LocalParallelLauncher")
    assert cfg.hydra.sweeper._target_.endswith("ScalelabSweeper")


def test_cpu_slots_are_disjoint_and_exclusive(tmp_path):
    from experiments.sweeps.limits import cpu_sets, hold_slot

    sets = cpu_sets(2, 1)
    if len(os.sched_getaffinity(0)) >= 2:
        assert not set(sets[0]) & set(sets[1])
    with hold_slot(tmp_path, 2) as a:
        with hold_slot(tmp_path, 2) as b:
            assert {a, b} == {0, 1}


def test_a_batch_smaller_than_n_jobs_shares_every_cpu(monkeypatch):
    """A lone pack (one job of K runs) gets every CPU, not one slot's: no core idles; a batch of
    at least n_jobs jobs keeps n_jobs slots of threads_per_job CPUs."""
    from experiments.sweeps import limits
    from hydra_plugins.scalelab_sweeps import launcher as L

    for mod in (L, limits):
        monkeypatch.setattr(mod, "available_cpus", lambda: [0, 1, 2, 3])
    la = L.LocalParallelLauncher(n_jobs=4, threads_per_job=1)
    assert la.slots_for(8) == [[0], [1], [2], [3]]
    assert la.slots_for(1) == [[0, 1, 2, 3]]
    assert la.slots_for(2) == [[0, 1], [2, 3]]
    assert la.slots_for(3) == [[0], [1], [2]]  # 4 // 3 = 1: one CPU each, the fourth idles
    wide = L.LocalParallelLauncher(n_jobs=1, threads_per_job=4)
    assert wide.slots_for(1) == [[0, 1, 2, 3]]


def test_parallel_launcher_runs_two_at_once_each_on_its_own_core(tmp_path):
    """Two CPU-bound fake runs at once: overlapping in time, disjoint CPUs, <= 1 core each."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 CPUs")
    sw = tmp_path / "sw"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYDRA_")}
    env.update(JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO))
    p = subprocess.run(
        [
            sys.executable,
            str(REPO / "tests" / "sweep_fake_app.py"),
            "-m",
            "+sweep=isoflop",
            "sweep.budgets=[3e9]",
            "sweep.ladder.depths=[1,2]",
            "sweep.min_steps=5",
            "train.ckpt_every=1000",
            "fake.busy=true",
            "fake.step_sleep=0.03",
            "hydra/launcher=parallel",
            "hydra.launcher.n_jobs=2",
            f"hydra.sweep.dir={sw}",
            f"hydra.searchpath=[file://{REPO}/conf]",
        ],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    recs = [json.loads(l) for f in sw.glob("*/launches.jsonl") for l in f.read_text().splitlines()]
    assert len(recs) == 2
    a, b = recs
    assert a["start"] < b["end"] and b["start"] < a["end"], "the two runs did not overlap"
    assert len(a["cpus"]) == len(b["cpus"]) == 1 and a["cpus"] != b["cpus"]
    for r in recs:
        assert (
            r["threads"]["OMP_NUM_THREADS"] == "1" and "--xla_cpu_multi_thread_eigen=false" in r["xla_flags"]
        )
        assert r["cpu_s"] <= 1.15 * r["wall_s"], f"a run used more than its one core: {r}"
