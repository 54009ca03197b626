"""Two processes with jax.distributed (gloo collectives over 127.0.0.1) train like one process."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ARGS = [
    "model.d_model=64",
    "model.n_layers=2",
    "model.n_heads=4",
    "model.seq_len=32",
    "train.batch_size=8",
    "train.steps=4",
    "train.eval_tokens=512",
    "train.ckpt_every=2",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(n_devices: int) -> dict:
    return dict(
        os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={n_devices}", JAX_PLATFORMS="cpu"
    )


@pytest.mark.slow
def test_two_processes_match_one(tmp_path):
    port = _free_port()
    rd2 = tmp_path / "two"
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "experiments.train",
                *ARGS,
                "sharding.data=2",
                "sharding.fsdp=2",
                f"distributed.coordinator_address=127.0.0.1:{port}",
                "distributed.num_processes=2",
                f"distributed.process_id={i}",
                f"hydra.run.dir={rd2}",
            ],
            cwd=REPO,
            env=_env(2),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=240)[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
    assert all(p.returncode == 0 for p in procs), "\n".join(o[-1500:] for o in outs)
    one = subprocess.run(
        [sys.executable, "-m", "experiments.train", *ARGS, f"hydra.run.dir={tmp_path / 'one'}"],
        cwd=REPO,
        env=_env(1),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert one.returncode == 0, one.stderr[-1500:]
    a = json.loads((tmp_path / "one" / "summary.json").read_text())
    b = json.loads((rd2 / "summary.json").read_text())
    assert b["mesh"]["processes"] == 2 and b["mesh"]["devices"] == 4
    assert abs(a["final_train_loss"] - b["final_train_loss"]) <= 1e-5 * a["final_train_loss"]
    assert abs(a["final_eval_loss"] - b["final_eval_loss"]) <= 1e-5 * a["final_eval_loss"]
    assert (rd2 / "checkpoints" / "4").is_dir()
