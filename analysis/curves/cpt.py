"""The continual-pre-training curve law (`cpt_curve`): the loss on both domains at every evaluation of
a continued run, under its whole learning-rate schedule.

Wang et al. 2025 ("Learning dynamics in continual pre-training for large language models", ICML)
split a CPT loss curve into the pre-training curve carried on under the whole schedule (the base
run's, then the continued run's: re-warm, re-decay) and a distribution-shift term that grows with the
continued phase's learning-rate area. Here the first part is the multi-power law (Luo et al. 2025,
`analysis/curves/laws.py`) over the concatenated schedule, its annealing term summing every change
of the rate from step 1 on (a re-warm's rises enter as negative drops: re-warming gives back the
base run's annealing gain), and the shift saturates in the new-domain tokens' share of that area:

    L_d(t) = L0 + A S1(t)^-alpha - B LD(t) + s_d g_d(r) H (1 - (1 + E (1-r) S1_B(t))^-h)

S1 the area under the concatenated schedule up to t, LD MPL's annealing sum over it, S1_B the
continued phase's area, r the replay share (the old corpus's share of the continued rows), s_d = -1
on the new domain (the shift lowers its loss), +1 on the old (forgetting), g_new = 1 and g_old =
1 / (1 + r / rho): a replay share r divides forgetting by 1 + r / rho (Bethune et al. 2025: a small
injected share of pre-training data removes most forgetting). One parameter set per base model and
domain, fitted on the base run's curve after its warm-up and every continued run's curve (log
residuals, soft-L1, multistart); predictions for a new replay ratio, token count or re-warm peak of
a fitted base model. Intervals (90%): the fit's leave-one-replay-ratio-out log errors (each replay
ratio's curves predicted by a fit without them), so they are the error of the prediction the law is
used for.
"""

from __future__ import annotations

import dataclasses
import math
import os
import warnings
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from analysis.core import validation
from analysis.core.methods import Family, Method, Prediction, Role, register
from analysis.core.runs import metrics_frame, read_runs
from analysis.curves.data import Curve, peak_index
from analysis.curves.features import _nodes, _pairs, annealing_drops
from analysis.laws.cpt import cpt_table  # the runs' kinds, replay shares and domains
from models.base.errors import AnalysisError

PARAMS = ("L0", "A", "alpha", "B", "Bb", "C", "beta", "gamma", "H", "E", "h", "rho", "Er")
OLD_ONLY = ("rho", "Er")  # the replay terms: forgetting's share that replay wins back, and how fast
DOMAINS = ("old", "new")
FORMULA = (
    "L_d(t) = L0 + A S1(t)^-alpha - B LD(t) + s_d g_d(r) H (1 - (1 + E (1-r) S1_B(t))^-h), "
    "s_new = -1, s_old = +1, g_new = 1, g_old = 1 / (1 + r / rho)"
)
SCOUT_EVALS, KEEP_STARTS, MAX_EVALS = 25, 3, 300  # multistart: every start 25 steps, the best 3 on
RESOLUTION = 16  # annealing nodes: runs of <= 16 steps (features.py)
Z90 = validation.Z90  # the core's one z of a 90% interval


# ---- the curves ---------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class CptCurve:
    """One run's evaluations on one domain, on its concatenated schedule (the base run's logged
    rates up to the step it was continued from, then the continued run's, steps offset by it)."""

    run: str
    base: str  # the base run's name (itself for a base run)
    domain: str  # "old" | "new"
    corpus: str  # the domain's corpus (eval_loss/<corpus>)
    replay: float  # 0 for a base run
    peak: float  # the continued run's optim.lr (its re-warm peak); the base's own for a base run
    tokens_b: float  # the continued run's tokens (0 for a base run)
    schedule: Curve  # the concatenated rate log (its loss unused)
    start: int  # the continued phase's first step on the concatenated schedule (0: a base run)
    steps: np.ndarray  # evaluation steps on the concatenated schedule
    loss: np.ndarray
    n_params: float = math.nan  # the model's parameters (N)

    @property
    def continued(self) -> bool:
        return self.start > 0


def _log(path: str) -> pd.DataFrame:
    m = metrics_frame(path)
    if m.empty or "lr" not in m.columns:
        raise AnalysisError(f"{path}: no metrics.jsonl rows with lr: the cpt curve law reads run directories")
    return m[np.isfinite(pd.to_numeric(m["lr"], errors="coerce"))]


def _parent_dir(child: str, parent: str) -> str:
    """The parent's run directory: as recorded, or beside the child (a moved sweep)."""
    if os.path.isdir(parent):
        return parent
    near = os.path.join(os.path.dirname(child.rstrip("/")), os.path.basename(parent.rstrip("/")))
    if os.path.isdir(near):
        return near
    raise AnalysisError(f"{child}: its base run {parent} (train.init_from) is not there, nor beside it")


def load_cpt_curves(source: Any) -> list[CptCurve]:
    """Both domains' evaluation curves of every base and continued run in a sweep directory (or a
    list of run directories); from-scratch runs are left out (they are not continuations)."""
    df = read_runs(source) if not isinstance(source, pd.DataFrame) else source
    table = cpt_table(df)
    old, new = table.attrs["old"], table.attrs["new"]
    parents = dict(zip(df["path"].astype(str), df.get("train.init_from", pd.Series(index=df.index))))
    from_step = dict(zip(df["path"].astype(str), df.get("init_from_step", pd.Series(index=df.index))))
    logs: dict[str, pd.DataFrame] = {}

    def log(path: str) -> pd.DataFrame:
        if path not in logs:
            logs[path] = _log(path)
        return logs[path]

    name = {str(p): str(r) for p, r in zip(table["path"], table["run"])}
    out: list[CptCurve] = []
    for row in table.itertuples(index=False):
        path = str(row.path)
        if row.kind == "scratch":
            continue
        m = log(path)
        if row.kind == "base":
            base_path, start, lr_steps, lr = path, 0, m["step"].to_numpy(np.int64), m["lr"].to_numpy(float)
        else:
            base_path = _parent_dir(path, str(parents.get(path)))
            b = log(base_path)
            t_a = from_step.get(path)
            t_a = int(b["step"].max()) if t_a is None or not np.isfinite(t_a) else int(t_a)
            b = b[b["step"] <= t_a]
            start = t_a
            lr_steps = np.concatenate([b["step"].to_numpy(np.int64), t_a + m["step"].to_numpy(np.int64)])
            lr = np.concatenate([b["lr"].to_numpy(float), m["lr"].to_numpy(float)])
        sched = Curve(os.path.basename(path), lr_steps, np.ones(lr.size), lr)
        for domain, corpus in (("old", old), ("new", new)):
            col = f"eval_loss/{corpus}"
            if col not in m.columns:
                continue
            ev = m[["step", col]].dropna()
            steps = ev["step"].to_numpy(np.int64) + start
            loss = ev[col].to_numpy(float)
            if row.kind == "base":  # the laws describe the curve after warm-up (data.py)
                keep = steps >= lr_steps[peak_index(lr)]
                steps, loss = steps[keep], loss[keep]
            if steps.size:
                out.append(
                    CptCurve(
                        str(row.run),
                        name.get(base_path, os.path.basename(base_path)),
                        domain,
                        corpus,
                        float(row.r) if row.kind == "cpt" else 0.0,
                        float(row.peak),
                        float(row.D_B),
                        sched,
                        start,
                        steps,
                        loss,
                        n_params=float(row.N),
                    )
                )
    if not any(c.continued for c in out):
        raise AnalysisError(
            "no continued runs with evaluation curves: the cpt curve law needs base runs and their "
            "continuations (train.init_from) evaluated during training (train.eval_every; +sweep=cpt)"
        )
    return out


# ---- the law -----------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, eq=False)
class Points:
    """The law's inputs at every evaluation of a set of curves of one domain: MPL's (point, node)
    pairs over the concatenated schedules (`features.py`), nodes chunked between evaluations and
    never across the start of the continued phase, and which pairs are that phase's decays."""

    n: int
    logS1: np.ndarray  # log area under the whole schedule up to each point
    pair_j: np.ndarray
    pair_deta: np.ndarray
    pair_logeta: np.ndarray
    pair_logS: np.ndarray
    pair_new: np.ndarray  # a decay of the continued phase (weighted Bb, not B)
    s1b: np.ndarray  # the continued phase's area up to each point (0 on a base run)
    replay: np.ndarray
    loss: np.ndarray
    curve: np.ndarray  # index of each point's curve in the list it was built from


def points(curves: Sequence[CptCurve]) -> Points:
    cols: dict[str, list[np.ndarray]] = {
        k: [] for k in ("logS1", "j", "deta", "logeta", "logS", "new", "s1b", "r", "loss", "i")
    }
    offset = 0
    for i, c in enumerate(curves):
        eta = c.schedule.schedule()
        cum = np.cumsum(eta)
        t = c.steps
        edges = np.unique(np.concatenate([t, [c.start] if c.continued else []]).astype(np.int64))
        k, w = _nodes(edges, 0, annealing_drops(eta, warmup_rises=True), RESOLUTION)
        J, K, log_eta, log_S = _pairs(t, k, eta, cum)
        cols["logS1"].append(np.log(cum[t]))
        cols["j"].append(J + offset)
        cols["deta"].append(w[K])
        cols["logeta"].append(log_eta)
        cols["logS"].append(log_S)
        cols["new"].append((k[K] > c.start) & (w[K] > 0) if c.continued else np.zeros(K.size, bool))
        cols["s1b"].append(cum[t] - cum[c.start] if c.continued else np.zeros(t.size))
        cols["r"].append(np.full(t.size, c.replay))
        cols["loss"].append(c.loss)
        cols["i"].append(np.full(t.size, i))
        offset += t.size
    cat = {k: np.concatenate(v) for k, v in cols.items()}
    return Points(
        offset,
        cat["logS1"],
        cat["j"].astype(np.int64),
        cat["deta"],
        cat["logeta"],
        cat["logS"],
        cat["new"].astype(bool),
        cat["s1b"],
        cat["r"],
        cat["loss"],
        cat["i"].astype(np.int64),
    )


def predict(p: Mapping[str, float], x: Points, domain: str, jac: bool = False):
    """The law at `x`'s points; with `jac`, also d prediction / d log(parameter) (n, len(PARAMS))."""
    F = x
    z = math.log(p["C"]) - p["gamma"] * F.pair_logeta + F.pair_logS
    sp = np.logaddexp(0.0, z)  # log(1 + C eta^-gamma S)
    q = np.exp(-p["beta"] * sp)
    coef = np.where(F.pair_new, p["Bb"], p["B"])
    G = -np.expm1(-p["beta"] * sp)
    seg = lambda w: np.bincount(F.pair_j, weights=F.pair_deta * w, minlength=F.n)  # noqa: E731
    LD = seg(coef * G)
    power = np.exp(-p["alpha"] * F.logS1)
    lu = np.log1p(p["E"] * (1.0 - x.replay) * x.s1b)
    sat = -np.expm1(-p["h"] * lu)  # 1 - (1 + E (1-r) S1_B)^-h: the shift, as fast as new tokens come
    if domain == "old":  # forgetting, of which replay wins back 1 - g at its own pace
        g = 1.0 / (1.0 + x.replay / p["rho"])
        lu2 = np.log1p(p["Er"] * x.s1b)
        sat2 = -np.expm1(-p["h"] * lu2)
        shift = p["H"] * (sat - (1.0 - g) * sat2)
    else:
        g, lu2, sat2 = np.ones(F.n), np.zeros(F.n), np.zeros(F.n)
        shift = -p["H"] * sat
    sign = 1.0 if domain == "old" else -1.0
    pred = p["L0"] + p["A"] * power - LD + shift
    if not jac:
        return pred
    dG_dz = p["beta"] * q * np.exp(z - sp)  # d/dz of 1 - (1 + e^z)^-beta
    d1 = p["h"] * np.exp(-p["h"] * lu) * -np.expm1(-lu)  # d sat / d log E
    d2 = p["h"] * np.exp(-p["h"] * lu2) * -np.expm1(-lu2)  # d sat2 / d log Er
    J = {
        "L0": np.full(F.n, p["L0"]),
        "A": p["A"] * power,
        "alpha": -p["alpha"] * p["A"] * power * F.logS1,
        "B": -seg(np.where(F.pair_new, 0.0, p["B"]) * G),
        "Bb": -seg(np.where(F.pair_new, p["Bb"], 0.0) * G),
        "C": -seg(coef * dG_dz),
        "beta": -p["beta"] * seg(coef * sp * q),
        "gamma": p["gamma"] * seg(coef * dG_dz * F.pair_logeta),
        "H": shift,
        "E": sign * p["H"] * d1,
        "h": sign * p["H"] * p["h"] * (lu * np.exp(-p["h"] * lu) - (1.0 - g) * lu2 * np.exp(-p["h"] * lu2)),
        "rho": p["H"] * sat2 * (1.0 - g) * g,
        "Er": -p["H"] * (1.0 - g) * d2,
    }
    return pred, np.stack([J[k] for k in PARAMS], axis=1)


# log-parameter bounds: keep the fit off the ridges where two parameters trade without limit
BOUNDS = {
    "L0": (1e-3, 1e3), "A": (1e-6, 1e6), "alpha": (1e-3, 10.0), "B": (1e-3, 1e4), "Bb": (1e-3, 1e4),
    "C": (1e-4, 1e4), "beta": (0.05, 5.0), "gamma": (1e-3, 3.0), "H": (1e-4, 20.0), "E": (1e-4, 1e4),
    "h": (0.05, 5.0), "rho": (1e-4, 10.0), "Er": (1e-4, 1e4),
}  # fmt: skip


def _starts(x: Points, domain: str) -> list[np.ndarray]:
    lmin = float(np.min(x.loss))
    base = x.s1b == 0
    s1_mid = float(np.exp(np.median(x.logS1[base]))) if base.any() else 1.0
    spread = float(np.ptp(x.loss[base])) if base.sum() > 1 else 0.3 * lmin
    shift = float(np.ptp(x.loss[~base])) if (~base).any() else 0.3
    out = []
    for L0 in (0.6 * lmin, 0.85 * lmin):
        for alpha in (0.3, 1.0):
            A = max(spread, 0.05) * s1_mid**alpha
            for E in (0.3, 3.0):
                for B in (3.0, 30.0):
                    p = dict(L0=L0, A=A, alpha=alpha, B=B, Bb=B, C=1.0, beta=0.5, gamma=0.5)
                    p.update(H=max(shift, 0.05), E=E, h=1.0, rho=0.05, Er=E / 10)
                    out.append(np.log([p[k] for k in PARAMS]))
    return out


def _unpack(theta: np.ndarray) -> dict[str, float]:
    return dict(zip(PARAMS, np.exp(np.clip(theta, -40.0, 40.0)).tolist()))


def _fit_points(x: Points, domain: str, weights: np.ndarray | None = None) -> dict[str, float]:
    logy = np.log(x.loss)
    w = np.ones(logy.size) if weights is None else weights
    free = [i for i, k in enumerate(PARAMS) if domain == "old" or k not in OLD_ONLY]

    lo = np.log([BOUNDS[PARAMS[i]][0] for i in free])
    hi = np.log([BOUNDS[PARAMS[i]][1] for i in free])

    def full(t_free, theta):
        theta = theta.copy()
        theta[free] = t_free
        return theta

    def resid(t_free, theta):
        with np.errstate(all="ignore"):
            pred = predict(_unpack(full(t_free, theta)), x, domain)
        r = logy - np.log(np.where(pred > 0, pred, 1e-12))
        return np.where(np.isfinite(r), r, 10.0) * w

    def jac(t_free, theta):
        with np.errstate(all="ignore"):
            pred, J = predict(_unpack(full(t_free, theta)), x, domain, jac=True)
        out = -J[:, free] / np.where(pred > 0, pred, 1e-12)[:, None] * w[:, None]
        return np.where(np.isfinite(out), out, 0.0)

    def run(theta, t0, nfev):
        return least_squares(
            resid,
            t0,
            jac=jac,
            bounds=(lo, hi),
            args=(theta,),
            loss="soft_l1",
            f_scale=0.01,
            method="trf",
            max_nfev=nfev,
        )

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # every start a few steps, then the best few to convergence
        first = [(run(t, np.clip(t[free], lo + 1e-9, hi - 1e-9), SCOUT_EVALS), t) for t in _starts(x, domain)]
        first.sort(key=lambda rt: rt[0].cost)
        final = [(run(t, res.x, MAX_EVALS), t) for res, t in first[:KEEP_STARTS]]
    res, theta = min(final, key=lambda rt: rt[0].cost)
    theta = theta.copy()
    theta[free] = res.x
    return _unpack(theta)


# ---- the fit -----------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class CptCurveFit:
    """Per base model and domain: the fitted parameters and the log-error scale of a prediction
    for a replay ratio the fit did not see (leave one replay ratio out; None with under three)."""

    old: str
    new: str
    params: Mapping[tuple[str, str], Mapping[str, float]]  # (base run, domain) -> parameters
    scale: Mapping[tuple[str, str], float | None]
    curves: tuple[CptCurve, ...]
    formula: str = FORMULA

    def predict_curve(self, c: CptCurve) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(mean, lo, hi) of `c`'s loss at its evaluation steps (90%)."""
        key = (c.base, c.domain)
        if key not in self.params:
            raise AnalysisError(f"no fitted cpt curve law for base model {c.base}: fit its runs first")
        mean = predict(self.params[key], points([c]), c.domain)
        s = self.scale.get(key)
        if s is None:
            return mean, np.full(mean.shape, np.nan), np.full(mean.shape, np.nan)
        return mean, mean * math.exp(-Z90 * s), mean * math.exp(Z90 * s)

    def summary(self) -> str:
        lines = [f"cpt_curve: {self.formula}", f"old domain {self.old}, new domain {self.new}"]
        for (base, domain), p in sorted(self.params.items()):
            s = self.scale.get((base, domain))
            band = f"+-{100 * Z90 * s:.1f}% (90%)" if s is not None else "no interval"
            lines.append(
                f"  {base} {domain}: "
                + ", ".join(f"{k}={p[k]:.4g}" for k in PARAMS if domain == "old" or k not in OLD_ONLY)
                + f"; held-out replay {band}"
            )
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "law": "cpt_curve",
            "formula": self.formula,
            "old_domain": self.old,
            "new_domain": self.new,
            "fits": [
                {"base": b, "domain": d, "params": dict(p), "log_scale": self.scale.get((b, d))}
                for (b, d), p in sorted(self.params.items())
            ],
        }


def _groups(curves: Sequence[CptCurve]) -> dict[tuple[str, str], list[CptCurve]]:
    out: dict[tuple[str, str], list[CptCurve]] = {}
    for c in curves:
        out.setdefault((c.base, c.domain), []).append(c)
    return out


def held_out_errors(group: Sequence[CptCurve], domain: str) -> dict[float, np.ndarray]:
    """Per replay ratio of the continued curves: the log errors of its points predicted by a fit
    on the group without that ratio's curves."""
    ratios = sorted({c.replay for c in group if c.continued})
    out = {}
    for r in ratios:
        train = [c for c in group if not (c.continued and c.replay == r)]
        test = [c for c in group if c.continued and c.replay == r]
        p = _fit_points(points(train), domain)
        x = points(test)
        out[r] = np.log(x.loss) - np.log(np.maximum(predict(p, x, domain), 1e-12))
    return out


def fit_cpt_curves(source: Any, calibrate: bool = True) -> CptCurveFit:
    """The law per base model and domain on a sweep's curves (`load_cpt_curves`), with the
    leave-one-replay-ratio-out error scale for its intervals (`calibrate`)."""
    curves = (
        source if isinstance(source, (list, tuple)) and source and isinstance(source[0], CptCurve) else None
    )
    if curves is None:
        curves = load_cpt_curves(source)
    params, scale = {}, {}
    for key, group in _groups(curves).items():
        if not any(c.continued for c in group):
            continue
        params[key] = _fit_points(points(group), key[1])
        ratios = {c.replay for c in group if c.continued}
        if calibrate and len(ratios) >= 3:
            errs = np.concatenate(list(held_out_errors(group, key[1]).values()))
            scale[key] = float(np.sqrt(np.mean(errs**2)))
        else:
            scale[key] = None
    corpus = {c.domain: c.corpus for c in curves}
    return CptCurveFit(corpus.get("old", "old"), corpus.get("new", "new"), params, scale, tuple(curves))


# ---- predictions of a new continuation, the registry --------------------------------------------
def continuation(fit: CptCurveFit, base: str, domain: str, replay: float, steps: Any, lr: Any) -> CptCurve:
    """A planned continuation of fitted base model `base`: its rates `lr` at its (continued-phase)
    `steps`, at replay share `replay`; its loss unknown (NaN)."""
    ref = next((c for c in fit.curves if c.base == base and not c.continued), None)
    if ref is None:
        known = sorted({c.base for c in fit.curves})
        raise AnalysisError(f"unknown base model {base!r}; the fit's base models: {', '.join(known)}")
    steps = np.asarray(steps, float).astype(np.int64)
    lr = np.broadcast_to(np.asarray(lr, float), steps.shape)
    if steps.size == 0 or np.any(np.diff(steps) <= 0) or steps[0] < 1:
        raise AnalysisError("step must be increasing integers >= 1 (the continued phase's steps)")
    s = ref.schedule
    t_a = int(s.steps[-1])
    sched = Curve(
        "continuation",
        np.concatenate([s.steps, t_a + steps]),
        np.ones(s.steps.size + steps.size),
        np.concatenate([s.lr, lr]),
    )
    return CptCurve(
        "continuation",
        base,
        domain,
        ref.corpus,
        float(replay),
        math.nan,
        math.nan,
        sched,
        t_a,
        t_a + steps,
        np.full(steps.size, math.nan),
        n_params=ref.n_params,
    )


def _fit(table: Any, **options: Any) -> CptCurveFit:
    return fit_cpt_curves(table, **options)


def _predict(record: CptCurveFit, inputs: Mapping[str, Any]):
    """{"run": name}: a fitted run's curves on both domains at its evaluation steps; or {"base",
    "domain", "replay", "step", "lr"}: a new continuation of a fitted base model."""
    if "run" in inputs:
        cs = [c for c in record.curves if c.run == str(inputs["run"])]
        if "domain" in inputs:
            cs = [c for c in cs if c.domain == str(inputs["domain"])]
        if not cs:
            raise AnalysisError(f"no curve of run {inputs['run']!r} in the fit")
    else:
        missing = [k for k in ("base", "domain", "replay", "step", "lr") if k not in inputs]
        if missing:
            raise AnalysisError(
                f"a cpt_curve prediction needs run, or base, domain, replay, step, lr (missing {missing})"
            )
        cs = [
            continuation(
                record,
                str(inputs["base"]),
                str(inputs["domain"]),
                float(np.ravel(inputs["replay"])[0]),
                inputs["step"],
                inputs["lr"],
            )
        ]
    parts = [record.predict_curve(c) for c in cs]
    return Prediction(*(np.concatenate([p[i] for p in parts]) for i in range(3)))


def _plot(record: CptCurveFit, table: Any, ax: Any = None):
    """Every continued run's loss on both domains against its continued-phase step: measured
    (dots) and the law (lines), one colour per replay ratio."""
    # matplotlib only when a figure is asked for (importing analysis stays light)
    import matplotlib
    from matplotlib.figure import Figure

    fig = ax.figure if ax is not None else Figure(figsize=(9, 4), layout="constrained")
    axes = [ax, ax] if ax is not None else fig.subplots(1, 2)
    ratios = sorted({c.replay for c in record.curves if c.continued})
    for c in record.curves:
        if not c.continued:
            continue
        a = axes[0 if c.domain == "old" else 1]
        color = matplotlib.colormaps["viridis"](ratios.index(c.replay) / max(len(ratios) - 1, 1))
        pred = record.predict_curve(c)[0]
        a.scatter(c.steps - c.start, c.loss, s=5, color=color, alpha=0.5)
        a.plot(c.steps - c.start, pred, color=color, lw=0.8)
    for a, d in zip(axes, (record.old, record.new)):
        a.set_xlabel("continued step")
        a.set_ylabel(f"eval loss on {d}")
        a.grid(True, alpha=0.3)
    return fig


def _register() -> None:
    register(
        Method(
            "cpt_curve",
            Family.CURVE,
            ("cpt-curve",),
            Role.DEFAULT,
            _fit,
            _predict,
            _plot,
            "Wang et al. 2025's CPT curve split (MPL over the whole schedule + a replay-aware shift)",
        )
    )


_register()
