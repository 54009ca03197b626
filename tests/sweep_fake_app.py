"""A stand-in for experiments.train with the same on-disk contract, for fast sweeper tests.

It "trains" by evaluating a known Chinchilla law at the tokens seen so far, honouring the
training core's contract: `metrics.jsonl` (one line per step), a checkpoint every
`train.ckpt_every` steps (`ckpt.json`), resume from the checkpoint, `summary.json` at the end
with `status`, and a completed run started again does nothing. Each trained step is also
appended to `steps.log`, so tests can count exactly how many steps a relaunch trained.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import sys
import time

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from models.config import ModelConfig  # noqa: E402
from models.flops import flops_per_token, param_count  # noqa: E402


def _law(n: float, d: float) -> float:
    return 1.7 + 400.0 / n**0.34 + 900.0 / max(d, 1.0) ** 0.30


def _lr_factor(fake: DictConfig, n: float, lr: float) -> float:
    """1 + penalty * ln(lr / lr*(n))^2 with lr*(n) = lr_star * (n / lr_n0)^lr_exp (1 when the
    penalty is 0): a known optimum law for the hyperparameter-law tests."""
    if not fake.get("lr_penalty"):
        return 1.0
    best = fake.lr_star * (n / fake.lr_n0) ** fake.lr_exp
    return 1.0 + fake.lr_penalty * math.log(lr / best) ** 2


def _atomic(path: pathlib.Path, obj: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj))
    os.replace(tmp, path)


@hydra.main(config_path="sweep_fake_conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    run = pathlib.Path(HydraConfig.get().runtime.output_dir)
    summary = run / "summary.json"
    if summary.exists() and json.loads(summary.read_text()).get("status") == "completed":
        print(f"run already completed: {run}")
        return
    mc = ModelConfig.from_mapping(dict(cfg.model))
    n, fpt = param_count(mc), flops_per_token(mc)
    tps = cfg.train.batch_size * cfg.model.seq_len
    steps = int(cfg.train.steps) if cfg.train.steps else int(cfg.train.tokens) // tps
    ckpt = run / "ckpt.json"
    start = json.loads(ckpt.read_text())["step"] if ckpt.exists() else 0
    metrics = open(run / "metrics.jsonl", "a")
    t0 = time.time()
    for step in range(start + 1, steps + 1):
        if cfg.fake.busy:
            end = time.time() + cfg.fake.step_sleep
            x = 0
            while time.time() < end:
                x += 1
        elif cfg.fake.step_sleep:
            time.sleep(cfg.fake.step_sleep)
        tokens = step * tps
        loss = _law(n, tokens) * _lr_factor(cfg.fake, n, cfg.optim.lr)
        rec = {
            "step": step,
            "tokens": tokens,
            "flops": tokens * fpt,
            "loss": loss,
            "lr": cfg.optim.lr,
            "grad_norm": 1.0,
            "step_time_s": 0.01,
            "tokens_per_s": tps / 0.01,
            "mfu": 0.1,
        }
        if step % cfg.train.eval_every == 0 or step == steps:
            rec["eval_loss"] = loss * 1.01
        metrics.write(json.dumps(rec) + "\n")
        metrics.flush()
        with open(run / "steps.log", "a") as f:
            f.write(f"{step}\n")
        if cfg.fake.crash_d_model == cfg.model.d_model and step >= 3:
            _atomic(summary, {"status": "failed", "n_params": n})
            raise RuntimeError("fake crash")
        if cfg.fake.diverge_d_model == cfg.model.d_model and step >= 3:
            _atomic(summary, {"status": "diverged", "n_params": n})
            raise SystemExit(3)
        if (cfg.train.ckpt_every and step % cfg.train.ckpt_every == 0) or step == steps:
            _atomic(ckpt, {"step": step})
    tokens = steps * tps
    _atomic(
        summary,
        {
            "status": "completed",
            "n_params": n,
            "n_params_non_embedding": n,
            "tokens": tokens,
            "flops": tokens * fpt,
            "final_train_loss": _law(n, tokens) * _lr_factor(cfg.fake, n, cfg.optim.lr),
            "final_eval_loss": _law(n, tokens) * _lr_factor(cfg.fake, n, cfg.optim.lr) * 1.01,
            "tokens_per_s": 1e5,
            "mfu": 0.1,
            "peak_flops_per_device": 1e11,
            "mesh": {},
            "corpus": {},
            "wall_time_s": time.time() - t0,
        },
    )


if __name__ == "__main__":
    main()
