"""`fit --law cpt`: the final loss on the old and the new domain after continual pre-training.

A continual-pre-training ladder (the `+sweep=cpt` preset, experiments/sweeps/continual.py) holds
three kinds of runs, each scored on two corpora (`eval_loss/<corpus>`): base models trained on the
old corpus (D_A tokens), base models continued on a mixture of the new corpus and a replay share r
of the old one (D_B tokens, `train.init_from`), and models trained from scratch on a mixture.
Every run is one point (N, D_A, D_B, r): D_A the old-corpus tokens before the mixed phase (0 from
scratch), D_B the mixed phase's tokens (0 for a base model), r the old corpus's share of them.

The law (`cpt`), fitted jointly on both domains' losses in log space:

    L_old = E_o + (N_o / N)^alpha + (D_o / S_o)^beta
    L_new = E_n + (N_n / N)^alpha + (D_n / S_n)^beta
    S_o = D_A / (1 + K ((1-r) D_B / 1e5)^phi / (1 + rho r)) + r D_B + tau_o (1-r) D_B
    S_n = (1-r) D_B + tau_n (D_A + r D_B);   from scratch (D_A = 0): S_o, S_n x eta

Each domain is Chinchilla's form (Hoffmann et al. 2022, in Kaplan et al. 2020's N_c/N, D_c/D
spelling) in the tokens of that domain the model has seen, the other domain's tokens counting at a
transfer rate tau (Hernandez et al. 2021, "Scaling laws for transfer", count transferred data as
effective data), one alpha and beta for both domains; the new domain's loss after D_B tokens at
replay r is the D-CPT law's situation (Que et al. 2024, "D-CPT Law": a domain's loss as a
function of N, D and its share of the mixture). Forgetting erodes the old tokens' worth: D_A
counts 1 / (1 + K (new tokens)^phi / (1 + rho r)) of itself after (1-r) D_B new tokens, so it
grows with the new tokens and a small replay share r divides it by (1 + rho r) (Bethune et al.
2025, "Scaling laws for forgetting during finetuning with pretraining data injection": forgetting
a power law of the fine-tuning tokens, an injected share p of pretraining data acting like
(1 + B p) times the capacity; Ibrahim et al. 2024, "Simple and scalable strategies to continually
pre-train LLMs": re-warming raises the old loss, a little replay removes most of it). A model
trained from scratch on the interleaved mixture sees each token at an efficiency eta (measured
on the CPU ladder: from scratch on both corpora lands well above continuing on the new one last).

The baseline (`cpt_chinchilla`): one Chinchilla law per domain in the run's total tokens
D_A + D_B, blind to the order and the mixture (what one fits without a continual law).

Only the continued runs at the ladder's main re-warm peak (its most common `optim.lr` among
them) are fitted: other peaks are a different schedule (the report shows their forgetting).
Intervals (90%): bootstrap over runs (parameter noise), the in-sample log-residual scatter,
and the forward-chaining drift in N (fit the continued runs up to one model size, predict the
next) for predictions beyond the largest continued model fitted; in log units, as the point
laws' engine (analysis/core/intervals.py) combines them.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import warnings
from typing import Any, Callable, Mapping

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from analysis.core import validation
from analysis.core.methods import Family, Method, Prediction, Role, register
from models.base.errors import AnalysisError

CPT, BASELINE = "cpt", "cpt_chinchilla"
KIND = "cpt"  # fit.json `kind`, checked by the planner
ROLES = ("N", "D_A", "D_B", "r")
PREFIX = "eval_loss/"
MIN_SIZES = 2  # model sizes with continued runs a fit needs
Z90 = validation.Z90
FORMULA = (
    "L_old = E_o + (N_o/N)^alpha + (D_o/S_o)^beta, S_o = D_A / (1 + K ((1-r) D_B / 1e5)^phi / (1 + rho r)) "
    "+ r D_B + tau_o (1-r) D_B; L_new = E_n + (N_n/N)^alpha + (D_n/S_n)^beta, "
    "S_n = (1-r) D_B + tau_n (D_A + r D_B); from scratch (D_A = 0) S x eta"
)
BASELINE_FORMULA = "per domain: L = E + A N^-alpha + B (D_A + D_B)^-beta (order and mixture ignored)"


# ---- the runs as points -----------------------------------------------------------------------


def _num(df: pd.DataFrame, col: str, default: float = math.nan) -> np.ndarray:
    if col not in df.columns:
        return np.full(len(df), default)
    return pd.to_numeric(df[col], errors="coerce").to_numpy(float)


def domains(df: pd.DataFrame) -> tuple[str, str]:
    """(old corpus, new corpus): the two `eval_loss/<corpus>` columns; the new one is the corpus
    the base models were scored on besides their own (`data.eval_corpora`), else the one the
    continued runs train on most."""
    names = sorted(c[len(PREFIX) :] for c in df.columns if isinstance(c, str) and c.startswith(PREFIX))
    if len(names) != 2:
        raise AnalysisError(
            f"the cpt law reads runs scored on two corpora (eval_loss/<corpus> columns); "
            f"found {names or 'none'}: "
            "train them with data.mixture / data.eval_corpora (the +sweep=cpt preset)"
        )
    listed = set()
    for cell in df.get("data.eval_corpora", pd.Series(dtype=object)).dropna():
        try:
            listed.update(json.loads(cell) if isinstance(cell, str) else list(cell))
        except (ValueError, TypeError):
            continue
    new = [n for n in names if n in listed]
    if len(new) != 1:
        share = {n: np.nanmean(_num(df, f"data.mixture.{n}")) for n in names}
        new = [max(names, key=lambda n: -math.inf if math.isnan(share[n]) else share[n])]
    old = next(n for n in names if n != new[0])
    return old, new[0]


def cpt_table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per run: run, kind (base | cpt | scratch), N, D_A, D_B, r, peak (optim.lr),
    loss_old, loss_new, flops_per_token, and the shape (model.*); runs without both losses or
    without a parameter count are dropped."""
    if df.empty:
        raise AnalysisError("no runs to fit")
    old, new = domains(df)
    N = _num(df, "n_params", _num(df, "N").mean() if "N" in df else math.nan)
    if "N" in df.columns:
        N = np.where(np.isfinite(N), N, _num(df, "N"))
    tokens = _num(df, "tokens", math.nan)
    if "D" in df.columns:
        tokens = np.where(np.isfinite(tokens), tokens, _num(df, "D"))
    parent = _num(df, "init_from_tokens")
    w_old = _num(df, f"data.mixture.{old}")
    w_new = _num(df, f"data.mixture.{new}")
    mixed = np.isfinite(w_old) | np.isfinite(w_new)
    r = np.where(mixed, np.nan_to_num(w_old, nan=0.0), 1.0)
    r = np.where(mixed & np.isfinite(w_old) & np.isfinite(w_new), w_old / (w_old + w_new), r)
    cont = np.isfinite(parent)
    kind = np.where(cont, "cpt", np.where(mixed, "scratch", "base"))
    out = pd.DataFrame(
        {
            "run": df["run"].astype(str).to_numpy() if "run" in df else np.arange(len(df)).astype(str),
            "kind": kind,
            "N": N,
            "D_A": np.where(cont, parent, np.where(mixed, 0.0, tokens)),
            "D_B": np.where(mixed, tokens, 0.0),
            "r": np.where(mixed, r, 0.0),
            "peak": _num(df, "optim.lr"),
            "loss_old": _num(df, PREFIX + old),
            "loss_new": _num(df, PREFIX + new),
            "flops_per_token": _num(df, "flops_per_token"),
        }
    )
    for k in ("model.n_layers", "model.d_model", "model.n_heads", "path"):
        if k in df.columns:
            out[k] = df[k].to_numpy()
    ok = np.isfinite(out[["N", "D_A", "D_B", "loss_old", "loss_new"]].to_numpy()).all(axis=1)
    ok &= (out.loss_old > 0).to_numpy() & (out.loss_new > 0).to_numpy() & (out.N > 0).to_numpy()
    out = out[ok].reset_index(drop=True)
    out.attrs.update(old=old, new=new)
    return out


def main_peak(table: pd.DataFrame) -> float | None:
    """The ladder's main re-warm peak: the most common `optim.lr` of its continued runs."""
    peaks = table.peak[(table.kind == "cpt") & np.isfinite(table.peak)]
    if peaks.empty:
        return None
    return float(peaks.round(12).mode().iloc[0])


def fitted_rows(table: pd.DataFrame) -> pd.DataFrame:
    """The rows a fit uses: base and from-scratch runs, and the continued runs at the main peak."""
    peak = main_peak(table)
    keep = table.kind != "cpt"
    if peak is not None:
        keep |= (table.kind == "cpt") & np.isclose(table.peak, peak, rtol=1e-9)
    return table[keep].reset_index(drop=True)


# ---- the forms --------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Form:
    """A law of (N, D_A, D_B, r) -> (L_old, L_new): public parameter names, bounds, the map from
    internal (unbounded) coordinates to them, and a few starts."""

    name: str
    params: tuple[str, ...]
    bounds: tuple[tuple[float, float], ...]
    predict: Callable[[dict[str, float], dict[str, np.ndarray]], tuple[np.ndarray, np.ndarray]]
    starts: Callable[[pd.DataFrame], list[np.ndarray]]  # internal coordinates
    formula: str

    def public(self, t: np.ndarray) -> dict[str, float]:
        lo, hi = (np.array([b[i] for b in self.bounds]) for i in (0, 1))
        t = np.clip(np.asarray(t, float), -700.0, 700.0)
        open_ = np.isinf(hi)
        v = np.where(open_, lo + np.exp(t), lo + (np.where(open_, 1.0, hi) - lo) / (1.0 + np.exp(-t)))
        return dict(zip(self.params, v.tolist()))

    def internal(self, p: Mapping[str, float]) -> np.ndarray:
        t = []
        for name, (lo, hi) in zip(self.params, self.bounds):
            v = float(p[name])
            if math.isinf(hi):
                t.append(math.log(max(v - lo, 1e-300)))
            else:
                f = min(max((v - lo) / (hi - lo), 1e-9), 1 - 1e-9)
                t.append(math.log(f / (1 - f)))
        return np.array(t)


def _x(table: pd.DataFrame | Mapping[str, Any]) -> dict[str, np.ndarray]:
    return {k: np.asarray(table[k], float) for k in ROLES}


TOKENS_REF = 1e5  # the forgetting term's token unit (K is the erosion at 1e5 new tokens)


def _cpt_predict(p: Mapping[str, float], x: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    N, DA, DB, r = (np.asarray(x[k], float) for k in ROLES)
    new_tok = (1.0 - r) * DB
    keep = 1.0 / (1.0 + p["K"] * (new_tok / TOKENS_REF) ** p["phi"] / (1.0 + p["rho"] * r))
    s_old = DA * keep + r * DB + p["tau_o"] * new_tok
    s_new = new_tok + p["tau_n"] * (DA + r * DB)
    scratch = (DA <= 0) & (DB > 0)  # from scratch on a mixture: interleaved tokens count eta each
    s_old, s_new = (np.maximum(np.where(scratch, p["eta"] * s, s), 1.0) for s in (s_old, s_new))
    old = p["E_o"] + (p["N_o"] / N) ** p["alpha"] + (p["D_o"] / s_old) ** p["beta"]
    new = p["E_n"] + (p["N_n"] / N) ** p["alpha"] + (p["D_n"] / s_new) ** p["beta"]
    return old, new


_CPT_CENTRE = {
    "E_o": 1.0, "N_o": 1e3, "D_o": 1e5, "E_n": 0.8, "N_n": 1e3, "D_n": 1e5, "alpha": 2.0, "beta": 0.54,
    "tau_o": 0.12, "tau_n": 0.12, "K": 1.0, "phi": 1.0, "rho": 10.0, "eta": 0.73,
}  # fmt: skip
N_STARTS = 40


def _cpt_starts(t: pd.DataFrame) -> list[np.ndarray]:
    """Internal starts: the centre and N_STARTS draws around it (unit sd in internal coordinates,
    a fixed seed: the same fit every time)."""
    centre = CPT_FORM.internal(_CPT_CENTRE)
    rng = np.random.default_rng(0)
    return [centre] + [centre + rng.normal(0.0, 1.0, centre.size) for _ in range(N_STARTS)]


CPT_FORM = Form(
    CPT,
    ("E_o", "N_o", "D_o", "E_n", "N_n", "D_n", "alpha", "beta", "tau_o", "tau_n", "K", "phi", "rho", "eta"),
    (
        (0.0, math.inf),
        (0.0, math.inf),
        (0.0, math.inf),
        (0.0, math.inf),
        (0.0, math.inf),
        (0.0, math.inf),
        (0.0, 4.0),
        (0.0, 2.0),
        (0.0, 1.0),
        (0.0, 1.0),
        (0.0, math.inf),
        (0.0, 2.0),
        (0.0, math.inf),
        (0.0, 1.0),
    ),
    _cpt_predict,
    _cpt_starts,
    FORMULA,
)


def _baseline_predict(p: Mapping[str, float], x: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    N = np.asarray(x["N"], float)
    D = np.maximum(np.asarray(x["D_A"], float) + np.asarray(x["D_B"], float), 1.0)
    return tuple(
        p[f"E_{d}"] + p[f"A_{d}"] * N ** -p[f"alpha_{d}"] + p[f"B_{d}"] * D ** -p[f"beta_{d}"]
        for d in ("o", "n")
    )


def _baseline_starts(t: pd.DataFrame) -> list[np.ndarray]:
    lo_o, lo_n = float(t.loss_old.min()), float(t.loss_new.min())
    publics = [
        dict(E_o=e * lo_o, A_o=10.0, B_o=30.0, alpha_o=al, beta_o=be,
             E_n=e * lo_n, A_n=10.0, B_n=30.0, alpha_n=al, beta_n=be)
        for e, al, be in itertools.product((0.5, 0.8), (0.3, 0.7), (0.2, 0.5))
    ]  # fmt: skip
    return [BASELINE_FORM.internal(q) for q in publics]


BASELINE_FORM = Form(
    BASELINE,
    ("E_o", "A_o", "B_o", "alpha_o", "beta_o", "E_n", "A_n", "B_n", "alpha_n", "beta_n"),
    ((0.0, math.inf),) * 3 + ((0.0, 2.0),) * 2 + ((0.0, math.inf),) * 3 + ((0.0, 2.0),) * 2,
    _baseline_predict,
    _baseline_starts,
    BASELINE_FORMULA,
)
FORMS = {CPT: CPT_FORM, BASELINE: BASELINE_FORM}


# ---- fitting ----------------------------------------------------------------------------------


def _residuals(t: np.ndarray, form: Form, x: dict[str, np.ndarray], y_old: np.ndarray, y_new: np.ndarray):
    p = form.public(t)
    with np.errstate(all="ignore"):
        old, new = form.predict(p, x)
        res = np.concatenate([np.log(old) - np.log(y_old), np.log(new) - np.log(y_new)])
    return np.where(np.isfinite(res), res, 10.0)


_POLISH = dict(method="lm", x_scale="jac", ftol=1e-10, xtol=1e-10, gtol=1e-10, max_nfev=4000)
_COARSE = dict(method="lm", max_nfev=400)


def _lsq(form: Form, table: pd.DataFrame, starts: list[np.ndarray], options: dict) -> list[Any]:
    x = _x(table)
    y_old, y_new = table.loss_old.to_numpy(float), table.loss_new.to_numpy(float)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [least_squares(_residuals, t, args=(form, x, y_old, y_new), **options) for t in starts]


def fit_form(form: Form, table: pd.DataFrame, start: np.ndarray | None = None) -> np.ndarray:
    """Internal parameters of `form` fitted to `table` (least squares of log loss on both domains),
    from its grid of starts (the best few polished), or from `start` alone."""
    if start is not None:
        return _lsq(form, table, [start], _POLISH)[0].x
    x = _x(table)
    y_old, y_new = table.loss_old.to_numpy(float), table.loss_new.to_numpy(float)
    grid = form.starts(table)
    cost = [float(np.sum(_residuals(t, form, x, y_old, y_new) ** 2)) for t in grid]
    coarse = sorted(_lsq(form, table, [grid[i] for i in np.argsort(cost)[:8]], _COARSE), key=lambda r: r.cost)
    return min(_lsq(form, table, [r.x for r in coarse[:3]], _POLISH), key=lambda r: r.cost).x


def _check(table: pd.DataFrame) -> None:
    sizes = np.unique(table.N[table.kind == "cpt"])
    if len(sizes) < MIN_SIZES:
        raise AnalysisError(
            f"the cpt law needs continued runs (train.init_from) at {MIN_SIZES} or more model sizes; "
            f"found {len(sizes)}"
        )
    if (table.kind == "base").sum() < 2:
        raise AnalysisError(
            "the cpt law needs the base models' own runs (2 or more) beside their continued runs"
        )


@dataclasses.dataclass(frozen=True)
class CptFit:
    """A fitted cpt law (or its baseline): what `fit --law cpt --json` writes and `plan
    --continue-from` reads back (`from_dict`)."""

    law: str
    params: dict[str, float]
    samples: np.ndarray  # (B, P) bootstrap samples, public values
    residual_sd: float  # log units, both domains
    drift_sd: float  # log units: forward-chaining error in N beyond the fitted continued runs
    n_folds: int
    domains: dict[str, str]  # {"old": corpus, "new": corpus}
    n_runs: int
    n_max: float  # largest N with continued runs in the fit
    input_ranges: dict[str, list[float]]
    peak: float | None  # the re-warm peak (optim.lr) of the fitted continued runs
    base_models: list[dict[str, Any]]  # per base model: N, D_A, flops_per_token, losses, shape, run
    flops_per_token: dict[str, float]  # str(N) -> training FLOPs per token
    left_out: int = 0  # continued runs at other re-warm peaks, not fitted
    law_selection: Any = None  # `fit`'s interface: no choice among forms here
    n_params: Any = None

    @property
    def form(self) -> Form:
        return FORMS[self.law]

    def predict(self, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """{old, new: predicted loss; old_lo, old_hi, new_lo, new_hi: 90% interval} at inputs
        N, D_A, D_B, r (arrays)."""
        x = {k: np.atleast_1d(np.asarray(inputs[k], float)) for k in ROLES}
        x = dict(zip(ROLES, np.broadcast_arrays(*x.values())))
        old, new = self.form.predict(self.params, x)
        out = {"old": old, "new": new}
        sd2 = self.residual_sd**2 + np.where(x["N"] > self.n_max * 1.001, self.drift_sd**2, 0.0)
        for d, mean in (("old", old), ("new", new)):
            if len(self.samples):
                sims = np.stack(
                    [self.form.predict(dict(zip(self.form.params, s)), x)[d == "new"] for s in self.samples]
                )
                with np.errstate(all="ignore"):
                    boot = np.nanvar(np.log(sims) - np.log(mean), axis=0)
            else:
                boot = 0.0
            half = Z90 * np.sqrt(sd2 + boot)
            out[f"{d}_lo"], out[f"{d}_hi"] = mean * np.exp(-half), mean * np.exp(half)
        return out

    def base_loss(self, N: Any, D_A: Any) -> tuple[np.ndarray, np.ndarray]:
        """(old, new) losses of the base model itself (D_B = 0)."""
        z = np.zeros_like(np.asarray(N, float))
        return self.form.predict(
            self.params, {"N": np.asarray(N, float), "D_A": np.asarray(D_A, float), "D_B": z, "r": z}
        )

    def flops_per_token_at(self, N: float) -> float:
        """Training FLOPs per token of a model of N parameters: the ladder's own figure at its
        sizes, else the nearest size's FLOPs per parameter times N."""
        known = {float(k): v for k, v in self.flops_per_token.items()}
        if not known:
            return 6.0 * N
        nearest = min(known, key=lambda n: abs(math.log(n / N)))
        return known[nearest] if math.isclose(nearest, N, rel_tol=1e-6) else known[nearest] / nearest * N

    def ci(self) -> dict[str, list[float]]:
        if not len(self.samples):
            return {}
        lo, hi = np.nanpercentile(self.samples, [2.5, 97.5], axis=0)
        return {k: [float(a), float(b)] for k, a, b in zip(self.form.params, lo, hi)}

    def summary(self) -> str:
        ci = self.ci()
        lines = [f"law {self.law}: {self.form.formula}"]
        lines.append(
            f"  {self.n_runs} runs, domains old={self.domains['old']} new={self.domains['new']}"
            + (f", re-warm peak {self.peak:g}" if self.peak else "")
            + (f" ({self.left_out} continued runs at other peaks left out)" if self.left_out else "")
        )
        for k, v in self.params.items():
            band = f" [{ci[k][0]:.4g}, {ci[k][1]:.4g}]" if k in ci else ""
            lines.append(f"  {k:6s} = {v:.4g}{band}")
        lines.append(
            f"  scatter {self.residual_sd:.3%} (log sd); drift beyond N={self.n_max:.3g}: "
            f"{self.drift_sd:.3%} "
            f"({self.n_folds} forward fold(s) in N)"
        )
        return "\n".join(lines)

    def to_dict(self, budgets: Any = None) -> dict[str, Any]:
        return {
            "kind": KIND,
            "law": self.law,
            "formula": self.form.formula,
            "param_names": list(self.form.params),
            "params": self.params,
            "ci": self.ci(),
            "bootstrap_samples": self.samples.tolist(),
            "residual_sd": self.residual_sd,
            "drift_sd": self.drift_sd,
            "n_folds": self.n_folds,
            "domains": self.domains,
            "n_runs": self.n_runs,
            "n_max": self.n_max,
            "input_ranges": self.input_ranges,
            "rewarm_peak": self.peak,
            "left_out_other_peaks": self.left_out,
            "base_models": self.base_models,
            "flops_per_token": self.flops_per_token,
            "level": validation.PREDICTION_LEVEL,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], source: str = "") -> "CptFit":
        if d.get("kind") != KIND or d.get("law") not in FORMS:
            raise AnalysisError(
                f"{source or 'the fit'} is not a cpt law (fit RUNS --law cpt --json FIT.json)"
            )
        try:
            return cls(
                law=d["law"],
                params={k: float(v) for k, v in d["params"].items()},
                samples=np.asarray(d.get("bootstrap_samples") or [], float).reshape(
                    -1, len(FORMS[d["law"]].params)
                ),
                residual_sd=float(d["residual_sd"]),
                drift_sd=float(d["drift_sd"]),
                n_folds=int(d.get("n_folds", 0)),
                domains=dict(d["domains"]),
                n_runs=int(d["n_runs"]),
                n_max=float(d["n_max"]),
                input_ranges={k: list(v) for k, v in d["input_ranges"].items()},
                peak=d.get("rewarm_peak"),
                base_models=list(d.get("base_models") or []),
                flops_per_token={str(k): float(v) for k, v in (d.get("flops_per_token") or {}).items()},
                left_out=int(d.get("left_out_other_peaks", 0)),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise AnalysisError(f"{source or 'the fit'}: a cpt fit without {e}") from None


def _scatter(form: Form, t: np.ndarray, table: pd.DataFrame) -> float:
    res = _residuals(t, form, _x(table), table.loss_old.to_numpy(float), table.loss_new.to_numpy(float))
    return float(max(validation.scatter_sd(res), validation.ROUNDOFF_SD))


def _drift(form: Form, table: pd.DataFrame, t0: np.ndarray) -> tuple[float, int]:
    """RMS log error of forward folds in N: fit with the continued and from-scratch runs up to each
    size (every base model kept: the model being continued is known), predict the next size's."""
    sizes = np.unique(table.N[table.kind != "base"])
    errs, folds = [], 0
    for k in range(1, len(sizes)):
        inside = (table.kind == "base") | (table.N <= sizes[k - 1])
        nxt = (table.kind != "base") & np.isclose(table.N, sizes[k])
        fold = table[inside]
        if np.unique(fold.N[fold.kind == "cpt"]).size < 1 or not nxt.any():
            continue
        t = fit_form(form, fold, start=t0)
        old, new = form.predict(form.public(t), _x(table[nxt]))
        errs.append(np.log(old) - np.log(table.loss_old[nxt].to_numpy()))
        errs.append(np.log(new) - np.log(table.loss_new[nxt].to_numpy()))
        folds += 1
    if not errs:
        return 0.0, 0
    e = np.concatenate(errs)
    return float(np.sqrt(np.mean(e[np.isfinite(e)] ** 2))), folds


def _bootstrap(form: Form, table: pd.DataFrame, t0: np.ndarray, n: int, seed: int) -> np.ndarray:
    """Public parameter samples from refits on runs resampled within each kind and size."""
    rng = np.random.default_rng(seed)
    groups = [idx for _, idx in table.groupby(["kind", "N"]).indices.items()]
    out = []
    for _ in range(n):
        pick = np.concatenate([rng.choice(g, size=len(g), replace=True) for g in groups])
        t = fit_form(form, table.iloc[pick].reset_index(drop=True), start=t0)
        out.append([form.public(t)[k] for k in form.params])
    return np.asarray(out, float).reshape(-1, len(form.params))


def _base_models(table: pd.DataFrame) -> list[dict[str, Any]]:
    rows = []
    for _, b in table[table.kind == "base"].sort_values("N").iterrows():
        shape = {
            k.split(".", 1)[1]: int(b[k])
            for k in ("model.n_layers", "model.d_model", "model.n_heads")
            if k in b and pd.notna(b[k])
        }
        rows.append(
            {
                "N": float(b.N),
                "D_A": float(b.D_A),
                "loss_old": float(b.loss_old),
                "loss_new": float(b.loss_new),
                "flops_per_token": float(b.flops_per_token) if np.isfinite(b.flops_per_token) else None,
                "run": str(b.run),
                "path": str(b.get("path", "")) or None,
                "model": shape,
            }
        )
    return rows


def fit_cpt_table(table: pd.DataFrame, law: str = CPT, bootstrap: int = 100, seed: int = 0) -> CptFit:
    """Fit `law` (cpt or its baseline) on a `cpt_table` (its fitted rows: `fitted_rows`)."""
    rows = fitted_rows(table)
    _check(rows)
    cont = rows[rows.kind == "cpt"]
    form = FORMS[law]
    t0 = fit_form(form, rows)
    drift, folds = _drift(form, rows, t0)
    fpt = {
        str(float(n)): float(v)
        for n, v in rows.groupby("N").flops_per_token.median().items()
        if np.isfinite(v)
    }
    return CptFit(
        law=law,
        params=form.public(t0),
        samples=_bootstrap(form, rows, t0, max(0, int(bootstrap)), seed),
        residual_sd=_scatter(form, t0, rows),
        drift_sd=drift,
        n_folds=folds,
        domains={"old": table.attrs["old"], "new": table.attrs["new"]},
        n_runs=len(rows),
        n_max=float(cont.N.max()),
        input_ranges={
            **{k: [float(rows[k].min()), float(rows[k].max())] for k in ROLES},
            "D_B_continued": [float(cont.D_B.min()), float(cont.D_B.max())],
        },
        peak=main_peak(table),
        base_models=_base_models(rows),
        flops_per_token=fpt,
        left_out=int(len(table) - len(rows)),
    )


# ---- the registry -----------------------------------------------------------------------------


def _fit_method(law: str) -> Callable[..., CptFit]:
    def fit(table: pd.DataFrame, columns: Mapping[str, str] | None = None, **options: Any) -> CptFit:
        if columns:
            raise AnalysisError(
                f"--law {CPT} reads the runs' own columns (eval_loss/<corpus>, ...): drop the column flags"
            )
        return fit_cpt_table(
            cpt_table(table), law, int(options.get("bootstrap") or 0), int(options.get("seed") or 0)
        )

    return fit


def _predict(result: CptFit, inputs: Mapping[str, np.ndarray]) -> Prediction:
    """The new domain's loss (`domain=1`, default) or the old one's (`domain=0`) at N, D_A, D_B, r."""
    domain = "old" if float(np.atleast_1d(inputs.get("domain", 1.0))[0]) == 0.0 else "new"
    p = result.predict(inputs)
    return Prediction(p[domain], p[f"{domain}_lo"], p[f"{domain}_hi"])


def _plot(result: CptFit, table: pd.DataFrame | None, ax: Any = None):
    from analysis.laws.cpt_figure import loss_figure  # deferred: matplotlib, only for a figure

    return loss_figure(result, None if table is None else cpt_table(table), ax)


_DOC = (
    "continual pre-training: both domains' losses against N, D_A, D_B and replay r, with forgetting "
    "(Que et al. 2024; Bethune et al. 2025)"
)
register(Method(CPT, Family.POINT, (CPT,), Role.DEFAULT, _fit_method(CPT), _predict, _plot, _DOC))
_BASE_DOC = "one Chinchilla law per domain in D_A + D_B, blind to order and replay"
register(
    Method(BASELINE, Family.POINT, (CPT,), Role.BASELINE, _fit_method(BASELINE), _predict, _plot, _BASE_DOC)
)
