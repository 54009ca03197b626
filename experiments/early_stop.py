"""`sweep.early_stop`: a run of a sweep stops itself when its forecast says it will not end best in
its rung (docs/sweep.md, "Stopping the losers early").

    sweep.early_stop: {at: [0.25, 0.5], p: 0.05}     # off (null) by default
    # optional: key (the swept setting that makes a rung, default optim.lr), method (forecast
    # --method, default transfer: numpy only, a decision in seconds; auto would fit the multi-power
    # law with JAX at every decision, and on our hparam_ladder it was no better)

At each fraction f of `at`, after step ceil(f x steps), the run decides for itself (the same code on
a laptop, SLURM or Ray: nothing outside the run is asked to stop it). It measures its held-out loss at
that step, then asks `python -m analysis forecast <sweep dir> --choose <key>` (a subprocess: the
analysis half sits above the training half, as for `sweep.fit_hparams`) for `p_best`, the chance that
it ends best among the runs of its rung (the runs of the sweep directory that differ from it only in
`key`: finished ones count by their final loss, the others, stopped ones included, by their forecast).
Below `p`, it saves a checkpoint and stops: status `stopped` (RunStatus), with `stop_reason`,
`forecast` and `frac_done` in its summary.json. Without a forecast (fewer finished runs than the
forecast learns from, or no finished run reaching that fraction with two logged points), or alone in
its rung, it goes on. WSD trunks and branches never stop early (a trunk serves several runs).

A stopped run keeps its directory, checkpoint and curve: relaunching the sweep keeps it while
`sweep.early_stop` is set, and resumes it from its checkpoint to its end when it is not
(`experiments.sweeps.runs.decide`). The sweep plan counts the compute it spent against the full
sweep (`spent`).

Imports no JAX (the trainer calls it from its steps loop).
"""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib
import subprocess
import sys
from typing import Any, Callable, Mapping

from models.base.errors import ConfigError
from models.base.rundir import RunDir, RunRole, RunStatus

DEFAULT_KEY = "optim.lr"
DEFAULT_METHOD = "transfer"  # numpy only: a decision in seconds (mpl fits the law with JAX at every decision)
FORECAST_TIMEOUT_S = 600.0
MIN_FINISHED = 3  # finished runs the forecast learns from, at least (analysis.forecast.transfer.MIN_COMPLETE)
KEYS = ("at", "p", "key", "method")


@dataclasses.dataclass(frozen=True)
class EarlyStop:
    """The `sweep.early_stop` settings."""

    at: tuple[float, ...]
    p: float
    key: str = DEFAULT_KEY
    method: str = DEFAULT_METHOD

    @classmethod
    def parse(cls, node: Any) -> "EarlyStop | None":
        """The settings of a `sweep.early_stop` node (None when null / off); ConfigError naming the
        key otherwise."""
        if node is None or node is False:
            return None
        if not isinstance(node, Mapping):
            raise ConfigError(
                f"sweep.early_stop must be a mapping like {{at: [0.25, 0.5], p: 0.05}}, got {node!r}"
            )
        unknown = sorted(set(node) - set(KEYS))
        if unknown:
            raise ConfigError(f"sweep.early_stop has unknown keys {unknown}; it takes {', '.join(KEYS)}")
        at = node.get("at")
        at = [at] if isinstance(at, (int, float)) and not isinstance(at, bool) else at
        try:
            fracs = tuple(sorted({float(f) for f in at}))
        except (TypeError, ValueError):
            raise ConfigError(
                f"sweep.early_stop.at must be fractions of a run, e.g. [0.25, 0.5]; got {at!r}"
            ) from None
        if not fracs or any(not 0 < f < 1 for f in fracs):
            raise ConfigError(
                f"sweep.early_stop.at must be fractions in (0, 1), e.g. [0.25, 0.5]; got {at!r}"
            )
        p = node.get("p", 0.05)
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 < float(p) < 1:
            raise ConfigError(f"sweep.early_stop.p must be a probability in (0, 1), e.g. 0.05; got {p!r}")
        key = str(node.get("key") or DEFAULT_KEY)
        method = str(node.get("method") or DEFAULT_METHOD)
        return cls(fracs, float(p), key, method)

    @classmethod
    def of_run(cls, raw: Mapping[str, Any]) -> "EarlyStop | None":
        """The settings a run's config asks for (its `sweep` node), None for a run that never stops
        early: not in a sweep, or a WSD trunk or branch."""
        sweep = raw.get("sweep") if isinstance(raw, Mapping) else None
        if not isinstance(sweep, Mapping):
            return None
        train = raw.get("train") or {}
        if train.get("branch_points") or train.get("branch_from"):
            return None
        return cls.parse(sweep.get("early_stop"))

    def steps(self, total: int) -> dict[int, float]:
        """{step: fraction} of the decisions of a run of `total` steps (steps before the last)."""
        out: dict[int, float] = {}
        for f in self.at:
            k = math.ceil(f * total)
            if 0 < k < total:
                out.setdefault(k, f)
        return out


@dataclasses.dataclass(frozen=True)
class Decision:
    """What a run decided at a step: stop or go on, why, and the forecast it went by."""

    stop: bool
    reason: str
    frac_done: float
    forecast: dict[str, Any] | None = None

    def summary_fields(self) -> dict[str, Any]:
        """summary.json's fields of a stopped run."""
        return {"stop_reason": self.reason, "forecast": self.forecast, "frac_done": self.frac_done}


def run_name(run_dir: pathlib.Path) -> str:
    """How `analysis forecast <sweep dir>` names the run (analysis.core.runs: relative to its parent)."""
    return f"{run_dir.parent.name}/{run_dir.name}"


def ask_forecast(sweep_dir: pathlib.Path, cfg: EarlyStop) -> tuple[dict | None, str]:
    """`python -m analysis forecast <sweep_dir> --choose <key>`'s JSON, or None and why not."""
    cmd = [sys.executable, "-m", "analysis", "forecast", str(sweep_dir), "--choose", cfg.key]
    cmd += ["--method", cfg.method, "--json", "-"]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=FORECAST_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"forecast did not run ({type(e).__name__})"
    if p.returncode != 0:
        lines = [x for x in p.stderr.strip().splitlines() if x.strip()]
        return None, (lines[-1] if lines else f"forecast exited {p.returncode}").removeprefix("error: ")
    try:
        return json.loads(p.stdout), ""
    except json.JSONDecodeError:
        return None, "forecast wrote no JSON"


def judge(result: Mapping[str, Any], name: str, step: int, total: int, cfg: EarlyStop) -> Decision:
    """Stop when the run's p_best in its rung is below cfg.p (module docstring)."""
    frac = step / total
    choice = next(
        (c for c in result.get("choices") or [] if any(m["run"] == name for m in c["members"])), None
    )
    mine = next((r for r in result.get("runs") or [] if r["run"] == name), None)
    if choice is None or mine is None:
        return Decision(False, "no forecast of this run", frac)
    if len(choice["members"]) < 2:
        return Decision(False, "alone in its rung so far", frac)
    me = next(m for m in choice["members"] if m["run"] == name)
    best = min((m for m in choice["members"] if m["run"] != name), key=lambda m: m["final_loss"])
    lo, hi = mine["interval"]
    forecast = {
        "final_loss": mine["final_loss"],
        "interval": [lo, hi],
        "p_best": me["p_best"],
        "method": mine.get("method"),
        "frac_seen": mine.get("frac_seen"),
        "rung_best_run": best["run"],
        "rung_best_final_loss": best["final_loss"],
        "rung_size": len(choice["members"]),
    }
    text = (
        f"forecast final loss {mine['final_loss']:.4f} (90% {lo:.4f}-{hi:.4f}) against the rung's best "
        f"{best['final_loss']:.4f} ({best['run'].split('/')[-1]}): p_best {me['p_best']:.3f} "
        f"{'<' if me['p_best'] < cfg.p else '>='} p {cfg.p:g} at {frac:.0%} of its steps"
    )
    return Decision(me["p_best"] < cfg.p, text, frac, forecast)


@dataclasses.dataclass(frozen=True)
class Stopper:
    """A run's early-stop decisions: at which steps, and the decision at one of them."""

    cfg: EarlyStop
    run_dir: pathlib.Path
    total: int
    log: Callable[[str], None]

    @classmethod
    def of(cls, raw: Mapping[str, Any], run_dir: pathlib.Path, total: int, log: Callable[[str], None]):
        """The run's Stopper, None when it never stops early (EarlyStop.of_run)."""
        cfg = EarlyStop.of_run(raw)
        return None if cfg is None else cls(cfg, pathlib.Path(run_dir), int(total), log)

    @property
    def steps(self) -> dict[int, float]:
        return self.cfg.steps(self.total)

    def decide(self, step: int) -> Decision:
        """Ask the forecast and judge (the run's metrics up to `step` are on disk); without
        MIN_FINISHED finished runs in the sweep directory there is nothing to learn from yet."""
        finished = sum(
            RunDir(d).status == RunStatus.COMPLETED for d in self.run_dir.parent.iterdir() if d.is_dir()
        )
        if finished < MIN_FINISHED:
            result, why = None, f"{finished} finished run(s) in the sweep so far, fewer than {MIN_FINISHED}"
        else:
            result, why = ask_forecast(self.run_dir.parent, self.cfg)
        if result is None:
            d = Decision(False, f"no forecast ({why})", step / self.total)
        else:
            d = judge(result, run_name(self.run_dir), step, self.total, self.cfg)
        verdict = "stop" if d.stop else "go on"
        self.log(f"early stop at step {step} ({step / self.total:.0%}): {verdict}: {d.reason}")
        return d


def spent(records: list[dict], sweep_dir: pathlib.Path) -> dict[str, Any]:
    """What the sweep spent against the full sweep, for sweep_plan.json: every planned run's FLOPs
    to train (`flops_to_train`, WSD trunks and branches as the plan counts them) when it ran to
    its end, its summary's FLOPs so far when it stopped early (or was interrupted)."""
    full = done = saved = 0.0
    stopped = []
    for r in records:
        if r.get("action") == "skip":
            continue
        planned = float(r.get("flops_to_train", r["flops"]))
        full += planned
        status = r.get("status_after") or r.get("status_before")
        if status == RunStatus.COMPLETED or r.get("role") in (RunRole.TRUNK, RunRole.BRANCH):
            done += planned
            continue
        s = RunDir(sweep_dir / r["run_dir"]).read_summary() if r.get("run_dir") else None
        so_far = float(s.flops) if s is not None and s.flops is not None else 0.0
        done += min(so_far, planned)
        if status == RunStatus.STOPPED:
            stopped.append(r["run_dir"])
            saved += max(planned - so_far, 0.0)
    return {
        "flops_spent": done,
        "flops_full_sweep": full,
        "flops_saved_by_early_stop": saved,
        "stopped_early": stopped,
    }
