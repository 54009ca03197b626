"""A real local Ray cluster (`ray start --head` on 127.0.0.1, started and stopped here): the sweep
through `hydra/launcher=ray_cluster` with `ray.init.address=auto`, relaunch, a killed worker's run
retried and resumed, and the one-line error for an unreachable address."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from tests.test_cluster_slurm import LONG, SWEEP, _free_port, _summaries, _train, _wait, require

pytestmark = [pytest.mark.cluster, pytest.mark.slow]
RAY = ["hydra/launcher=ray_cluster", "hydra.launcher.ray.init.address=auto"]


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory):
    """Environment whose RAY_ADDRESS names a running 2-CPU head node on loopback."""
    require("ray", "ray")
    require("hydra_plugins.hydra_ray_launcher", "ray")
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HYDRA_", "RAY_", "SLURM_"))}
    env.update(JAX_PLATFORMS="cpu", XLA_FLAGS="", RAY_USAGE_STATS_ENABLED="0")
    start = subprocess.run(
        ["ray", "start", "--head", "--node-ip-address=127.0.0.1", f"--port={port}", "--num-cpus=2",
         "--include-dashboard=false", "--disable-usage-stats"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert start.returncode == 0, (start.stdout + start.stderr)[-2000:]
    env["RAY_ADDRESS"] = f"127.0.0.1:{port}"
    yield env
    subprocess.run(["ray", "stop", "--force"], env=env, capture_output=True, timeout=120)


def test_sweep_through_ray_equals_local_and_relaunch_trains_nothing(ray_head, tmp_path):
    sw = tmp_path / "ray"
    _train(ray_head, *SWEEP, *RAY, f"hydra.sweep.dir={sw}")
    got = _summaries(sw)
    assert len(got) == 4 and all(s["status"] == "completed" for s in got.values())
    _train(ray_head, *SWEEP, f"hydra.sweep.dir={tmp_path / 'local'}")
    ref = _summaries(tmp_path / "local")
    assert ref.keys() == got.keys()
    for k in ref:
        assert got[k]["final_eval_loss"] == pytest.approx(ref[k]["final_eval_loss"], rel=1e-5), k
    again = _train(ray_head, *SWEEP, *RAY, f"hydra.sweep.dir={sw}")
    assert "4 reused, 0 trained" in again.stdout + again.stderr


def _task_pids() -> list[int]:
    """Processes running a Ray task of the Hydra launcher (Ray titles them `ray::_run_job`)."""
    out = subprocess.run(["pgrep", "-f", "ray::_run_job"], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def test_killed_worker_run_is_retried_and_resumes(ray_head, tmp_path):
    """SIGKILL the worker process mid-run: Ray retries the task (max_retries), the run resumes
    from its last checkpoint and ends equal to an uninterrupted run."""
    sw = tmp_path / "sw"
    proc = subprocess.Popen(
        ["python", "-m", "experiments.train", "-m", *LONG, *RAY, f"hydra.sweep.dir={sw}"],
        env=ray_head,
        cwd=os.path.dirname(os.path.dirname(__file__)),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    _wait(lambda: any(sw.glob("*/checkpoints/100")) or proc.poll() is not None, 240, "the first checkpoint")
    pids = _task_pids()
    assert pids, "no Ray task process found"
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    t0 = time.time()
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out[-2000:]
    (s,) = _summaries(sw).values()
    assert s["status"] == "completed" and s.get("resumed_from_step", 0) >= 100, out[-2000:]
    ref_dir = tmp_path / "ref"
    _train(ray_head, *LONG, f"hydra.sweep.dir={ref_dir}")
    (ref,) = _summaries(ref_dir).values()
    assert s["final_eval_loss"] == pytest.approx(ref["final_eval_loss"], rel=1e-5)
    print(f"worker killed at step >= 100; retried run finished {time.time() - t0:.0f} s later")


def test_unreachable_ray_address_is_one_line(ray_head, tmp_path):
    env = {k: v for k, v in ray_head.items() if k != "RAY_ADDRESS"}
    p = _train(
        env, *SWEEP, "hydra/launcher=ray_cluster", "hydra.launcher.ray.init.address=127.0.0.1:1",
        f"hydra.sweep.dir={tmp_path}", check=False, timeout=60,
    )  # fmt: skip
    last = (p.stdout + p.stderr).strip().splitlines()[-1]
    assert p.returncode != 0 and "Traceback" not in p.stderr, (p.stdout + p.stderr)[-1500:]
    assert last.startswith("error: hydra/launcher=ray_cluster: cannot start or reach Ray"), last
