"""`plan --continue-from FIT.json`: continue a trained model on a new corpus, or retrain it?

From a fitted `cpt` law (`python -m analysis fit SWEEP --law cpt --json FIT.json`,
analysis/laws/cpt.py) and a base model (N parameters trained on D_A tokens of the old corpus:
`--base-model N,D_A`, or a JSON with N and D_A, default the ladder's largest base model), two ways
to reach a new-domain loss L* (`--target-loss-new`, default what the law gives the base model
continued for the ladder's largest D_B without replay) while the old domain's loss rises by at
most a fraction f over the base model's (`--max-forgetting`, default 2%):

* continue: the base model on the mixture {new: 1 - r, old: r} for D_B tokens, re-warmed to the
  ladder's re-warm peak: for every replay ratio r of REPLAY_GRID the fewest D_B with L_new <= L*,
  kept when its forgetting L_old / L_old(base) - 1 <= f; the cheapest kept one is (r*, D_B*);
* retrain: a model of the same N from scratch on a mixture {new: 1 - w, old: w} of D tokens: for
  every w the fewest D with L_new <= L* and L_old <= (1 + f) L_old(base); the cheapest.

Each comes with its tokens and FLOPs (training FLOPs per token from the ladder: the continued run's
own tokens only, the base model being paid for already), the new-domain loss and the forgetting
at the chosen point with the law's 90% intervals, the token range over which the interval's edges
cross L*, and the trainer's command. The verdict is the feasible option with fewer FLOPs
(`continue` on a tie); neither feasible within MAX_TOKENS_FACTOR x D_A tokens: `retrain` with the
reason. JSON: `continual: {verdict, reason, base, target_loss_new, max_forgetting, continue: {...},
retrain: {...}}`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib
from typing import TYPE_CHECKING, Any

import numpy as np

from models.base.errors import AnalysisError

if TYPE_CHECKING:  # the law module loads SciPy and pandas: `plan --help` stays fast without it
    from analysis.laws.cpt import CptFit

REPLAY_GRID = (0.0, 0.005, 0.01, 0.02, 0.05, 0.1, 0.15, 0.25, 0.35, 0.5)
MIX_GRID = tuple(np.round(np.linspace(0.05, 0.95, 19), 3))
MAX_TOKENS_FACTOR = 1e3  # the search's longest run: this many times D_A
DEFAULT_FORGETTING = 0.02


def parse_fraction(text: str) -> float:
    """`2%` or `0.02` -> 0.02 (a value >= 0)."""
    s = str(text).strip()
    try:
        v = float(s[:-1]) / 100 if s.endswith("%") else float(s)
    except ValueError:
        raise AnalysisError(
            f"--max-forgetting: {text!r} is not a fraction (0.02) or a percentage (2%)"
        ) from None
    if not math.isfinite(v) or v < 0:
        raise AnalysisError(f"--max-forgetting must be >= 0 (got {text!r})")
    return v


def read_base(text: str | None, law: CptFit) -> dict[str, Any]:
    """The base model: `N,D_A`, a JSON file {N, D_A[, run]}, or None: the ladder's largest."""
    if text is None:
        if not law.base_models:
            raise AnalysisError("the fit names no base model: give --base-model N,D_A")
        return dict(max(law.base_models, key=lambda b: b["N"]))
    path = pathlib.Path(text)
    if text.endswith(".json") or path.is_file():
        try:
            d = json.loads(path.read_text())
            return {**d, "N": float(d["N"]), "D_A": float(d["D_A"])}
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise AnalysisError(
                f"--base-model {text}: a JSON with N and D_A ({type(e).__name__}: {e})"
            ) from None
    try:
        n, d = (float(v) for v in text.split(","))
    except ValueError:
        raise AnalysisError(f"--base-model {text!r}: give N,D_A (e.g. 4.9e4,1.2e6) or a JSON file") from None
    if not (n > 0 and d > 0):
        raise AnalysisError(f"--base-model {text!r}: N and D_A must be > 0")
    known = [b for b in law.base_models if math.isclose(b["N"], n, rel_tol=1e-3)]
    return {**(known[0] if known else {}), "N": n, "D_A": d}


def _tokens_grid(d_a: float) -> np.ndarray:
    return np.geomspace(1e-3 * d_a, MAX_TOKENS_FACTOR * d_a, 400)


def _first_below(values: np.ndarray, grid: np.ndarray, target: float) -> float | None:
    ok = np.flatnonzero(values <= target)
    return None if ok.size == 0 else float(grid[ok[0]])


@dataclasses.dataclass(frozen=True)
class Option:
    """One way to get there: tokens, FLOPs, the losses and forgetting at it, with intervals."""

    feasible: bool
    mix: float | None  # replay r (continue) or the old corpus's share w (retrain)
    tokens: float | None
    tokens_interval: tuple[float | None, float | None]
    flops: float | None
    flops_interval: tuple[float | None, float | None]
    loss_new: float | None
    loss_new_interval: tuple[float, float] | None
    loss_old: float | None
    loss_old_interval: tuple[float, float] | None
    forgetting: float | None
    forgetting_interval: tuple[float, float] | None
    command: str | None
    why: str = ""

    def as_dict(self, mix_key: str) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d[mix_key] = d.pop("mix")
        for k, v in list(d.items()):
            if isinstance(v, tuple):
                d[k] = list(v)
        return d


def _option(
    law: CptFit, N: float, x: dict[str, Any], target: float, base_old: float, fpt: float, tokens_key: str
):
    """Losses, forgetting and the tokens interval of one chosen point (`tokens_key`: D_B or D)."""
    p = law.predict(x)
    grid = _tokens_grid(law_base_da(x))
    sweep = {**x, tokens_key: grid}
    g = law.predict({k: np.broadcast_to(np.asarray(v, float), grid.shape) for k, v in sweep.items()})
    lo_t, hi_t = _first_below(g["new_lo"], grid, target), _first_below(g["new_hi"], grid, target)
    tokens = float(np.atleast_1d(x[tokens_key])[0])
    f = lambda v: float(np.atleast_1d(v)[0])  # noqa: E731
    return dict(
        tokens=tokens,
        tokens_interval=(lo_t, hi_t),
        flops=tokens * fpt,
        flops_interval=(None if lo_t is None else lo_t * fpt, None if hi_t is None else hi_t * fpt),
        loss_new=f(p["new"]),
        loss_new_interval=(f(p["new_lo"]), f(p["new_hi"])),
        loss_old=f(p["old"]),
        loss_old_interval=(f(p["old_lo"]), f(p["old_hi"])),
        forgetting=f(p["old"]) / base_old - 1,
        forgetting_interval=(f(p["old_lo"]) / base_old - 1, f(p["old_hi"]) / base_old - 1),
    )


def law_base_da(x: dict[str, Any]) -> float:
    """The scale the token search spans: D_A of a continued run, the total D of a retrained one."""
    d_a = float(np.atleast_1d(x["D_A"])[0])
    return d_a if d_a > 0 else float(np.atleast_1d(x["D_B"])[0]) / 10


def _infeasible(why: str) -> Option:
    return Option(
        False, None, None, (None, None), None, (None, None), None, None, None, None, None, None, None, why
    )


def plan_continue(law: CptFit, base: dict, target: float, max_f: float, command) -> Option:
    N, d_a = base["N"], base["D_A"]
    base_old = float(law.base_loss(N, d_a)[0])
    grid = _tokens_grid(d_a)
    best = None
    for r in REPLAY_GRID:
        p = law.predict({"N": N, "D_A": d_a, "D_B": grid, "r": r})
        d_b = _first_below(p["new"], grid, target)
        if d_b is None:
            continue
        i = int(np.flatnonzero(grid == d_b)[0])
        if p["old"][i] / base_old - 1 <= max_f and (best is None or d_b < best[1]):
            best = (r, d_b)
    if best is None:
        return _infeasible(
            f"no replay ratio in {REPLAY_GRID[0]:g}..{REPLAY_GRID[-1]:g} reaches L_new <= {target:.4g} "
            "within "
            f"{MAX_TOKENS_FACTOR:g} x D_A new tokens while forgetting <= {max_f:.2%}"
        )
    r, d_b = best
    fpt = law.flops_per_token_at(N)
    x = {"N": N, "D_A": d_a, "D_B": d_b, "r": r}
    return Option(True, r, **_option(law, N, x, target, base_old, fpt, "D_B"), command=command(r, d_b))


def plan_retrain(law: CptFit, base: dict, target: float, max_f: float, command) -> Option:
    N, d_a = base["N"], base["D_A"]
    base_old = float(law.base_loss(N, d_a)[0])
    grid = _tokens_grid(d_a)
    best = None
    for w in MIX_GRID:
        p = law.predict({"N": N, "D_A": 0.0, "D_B": grid, "r": w})
        ok = np.flatnonzero((p["new"] <= target) & (p["old"] <= (1 + max_f) * base_old))
        if ok.size and (best is None or grid[ok[0]] < best[1]):
            best = (float(w), float(grid[ok[0]]))
    if best is None:
        return _infeasible(
            f"no mixture reaches L_new <= {target:.4g} and L_old <= {(1 + max_f) * base_old:.4g} within "
            f"{MAX_TOKENS_FACTOR:g} x D_A tokens at N={N:.3g}"
        )
    w, d = best
    fpt = law.flops_per_token_at(N)
    x = {"N": N, "D_A": 0.0, "D_B": d, "r": w}
    return Option(True, w, **_option(law, N, x, target, base_old, fpt, "D_B"), command=command(w, d))


def _mixture(law: CptFit, old_share: float) -> str:
    new, old = law.domains["new"], law.domains["old"]
    return f"'data.mixture={{{new}: {1 - old_share:.4g}, {old}: {old_share:.4g}}}'"


def _commands(law: CptFit, base: dict):
    """(continue command, retrain command) builders: the trainer's command lines."""
    shape = " ".join(f"model.{k}={v}" for k, v in (base.get("model") or {}).items())
    parent = base.get("path") or "<base run directory>"
    peak = f" optim.lr={law.peak:g}" if law.peak else ""

    def cont(r: float, d_b: float) -> str:
        return (
            f"python -m experiments.train {shape} train.init_from={parent} {_mixture(law, r)} "
            f"train.tokens={int(round(d_b))}{peak}"
        ).replace("  ", " ")

    def retrain(w: float, d: float) -> str:
        return f"python -m experiments.train {shape} {_mixture(law, w)} train.tokens={int(round(d))}".replace(
            "  ", " "
        )

    return cont, retrain


def plan_continual(law: CptFit, base: dict, target: float | None, max_f: float) -> dict[str, Any]:
    """The `continual` JSON of `plan --continue-from` (module docstring)."""
    N, d_a = base["N"], base["D_A"]
    base_old, base_new = (float(v) for v in law.base_loss(N, d_a))
    d_b_max = law.input_ranges.get("D_B_continued", law.input_ranges["D_B"])[1]
    if target is None:
        target = float(law.predict({"N": N, "D_A": d_a, "D_B": d_b_max, "r": 0.0})["new"][0])
        target_source = (
            "the law's new-domain loss continuing for the ladder's largest D_B "
            f"({d_b_max:.3g}) without replay"
        )
    else:
        target_source = "--target-loss-new"
    if target <= law.params.get("E_n", 0.0):
        raise AnalysisError(
            f"--target-loss-new {target:g} is below the law's irreducible new-domain loss "
            f"{law.params['E_n']:.4g}"
        )
    cont_cmd, retrain_cmd = _commands(law, base)
    cont = plan_continue(law, base, target, max_f, cont_cmd)
    retrain = plan_retrain(law, base, target, max_f, retrain_cmd)
    if cont.feasible and (not retrain.feasible or cont.flops <= retrain.flops):
        verdict = "continue"
        reason = f"continuing with {cont.mix:.1%} replay needs {cont.flops:.3g} FLOPs" + (
            f", {retrain.flops / cont.flops:.2g}x fewer than retraining ({retrain.flops:.3g})"
            if retrain.feasible
            else "; retraining cannot reach the target"
        )
    else:
        verdict = "retrain"
        reason = (
            f"retraining on a {1 - retrain.mix:.0%}/{retrain.mix:.0%} mixture needs {retrain.flops:.3g} FLOPs"
            + (
                f", fewer than continuing ({cont.flops:.3g})"
                if cont.feasible
                else f"; continuing cannot: {cont.why}"
            )
            if retrain.feasible
            else f"neither reaches the target: {cont.why}"
        )
    return {
        "verdict": verdict,
        "reason": reason,
        "law": law.law,
        "domains": law.domains,
        "base": {k: v for k, v in base.items() if k in ("N", "D_A", "run", "path", "model")}
        | {"loss_old": base_old, "loss_new": base_new},
        "target_loss_new": target,
        "target_source": target_source,
        "max_forgetting": max_f,
        "rewarm_peak": law.peak,
        "continue": cont.as_dict("replay"),
        "retrain": retrain.as_dict("old_share"),
        "flops_note": "training FLOPs of the new run only (the base model's D_A tokens are spent already)",
    }


def lines(result: dict[str, Any]) -> list[str]:
    """What `plan --continue-from` prints."""
    b = result["base"]
    out = [
        f"base model: N={b['N']:.4g}, D_A={b['D_A']:.4g} on {result['domains']['old']}: "
        f"L_old {b['loss_old']:.4f}, L_new {b['loss_new']:.4f} (law)",
        f"target: L_new <= {result['target_loss_new']:.4f} on {result['domains']['new']} "
        f"({result['target_source']}), "
        f"forgetting <= {result['max_forgetting']:.2%}",
    ]
    for key, mix in (("continue", "replay"), ("retrain", "old_share")):
        o = result[key]
        if not o["feasible"]:
            out.append(f"  {key}: not feasible ({o['why']})")
            continue
        ti, li, fi = o["tokens_interval"], o["loss_new_interval"], o["forgetting_interval"]
        out.append(
            f"  {key}: {mix} {o[mix]:.3g}, {o['tokens']:.3g} tokens [{_g(ti[0])}, {_g(ti[1])}], "
            f"{o['flops']:.3g} FLOPs; "
            f"L_new {o['loss_new']:.4f} [{li[0]:.4f}, {li[1]:.4f}], forgetting {o['forgetting']:+.2%} "
            f"[{fi[0]:+.2%}, {fi[1]:+.2%}]"
        )
        if "cost" in o:
            out.append(f"    {key} {o['cost']['text']}")
    out.append(f"verdict: {result['verdict']} -- {result['reason']}")
    cmd = result[result["verdict"]].get("command")
    if cmd:
        out.append(f"  {cmd}")
    return out


def price(result: dict[str, Any], hardware: str, gpus: int, costs: Any, **shape: Any) -> None:
    """Add each feasible option's `cost` (device-hours, days, energy, CO2e, dollars with 90%
    intervals, `plan --params N --tokens D`'s figures for the base model's size on `gpus` x
    `hardware`; `shape`: seq_len, vocab) to `result`, its intervals widened by the token
    interval's."""
    from analysis.planning.planner import plan  # deferred: the cost model loads on use

    n = result["base"]["N"]
    for key in ("continue", "retrain"):
        o = result[key]
        if not o["feasible"]:
            continue
        c = plan(None, gpus, hardware, params=n, tokens=o["tokens"], costs=costs, **shape).best.costs
        d = c.as_dict()
        lo_t, hi_t = o["tokens_interval"]
        for k in ("device_hours", "days", "energy_mwh", "tco2eq", "cost_usd"):
            iv = d.get(f"{k}_interval")
            if iv is not None:
                d[f"{k}_interval"] = [
                    iv[0] * (lo_t / o["tokens"] if lo_t else 1.0),
                    None if hi_t is None else iv[1] * hi_t / o["tokens"],
                ]
        d["text"] = c.text()
        o["cost"] = d


def _g(v: float | None) -> str:
    return "never" if v is None else f"{v:.3g}"


def run_continual(
    fit_path: pathlib.Path, base_model: str | None, target: float | None, max_forgetting: str | None
):
    """(the `continual` JSON, its lines) of `plan --continue-from FIT.json`."""
    try:
        data = json.loads(pathlib.Path(fit_path).read_text())
    except OSError as e:
        raise AnalysisError(f"--continue-from {fit_path}: {e.strerror or e}") from None
    except ValueError as e:
        raise AnalysisError(f"--continue-from {fit_path}: not JSON ({e})") from None
    from analysis.laws.cpt import CptFit  # deferred: SciPy and pandas (see the imports)

    law = CptFit.from_dict(data, f"--continue-from {fit_path}")
    base = read_base(base_model, law)
    result = plan_continual(
        law, base, target, DEFAULT_FORGETTING if max_forgetting is None else parse_fraction(max_forgetting)
    )
    return result, lines(result)


def add_continual_arguments(p) -> None:
    """`plan`'s continual-pre-training flags (argparse parser `p`)."""
    p.add_argument(
        "--continue-from", type=pathlib.Path, metavar="FIT.json", help="continue or retrain (fit --law cpt)"
    )
    p.add_argument("--base-model", metavar="N,D_A", help="the model to continue (default: the fit's largest)")
    p.add_argument("--target-loss-new", type=float, metavar="L", help="new-domain loss to reach")
    p.add_argument("--max-forgetting", metavar="F", help="old-domain loss rise allowed (default 2%%)")
