"""REF against OTHER: a method's multipliers at the requested budgets, with honest intervals.

The interval of log m at budget C is the bootstrap's spread (`fits.PairFit.log_m_samples`,
deviations from its median) plus a Gaussian term whose sd grows with the distance beyond the
ladders, measured on the ladders themselves by forward chaining (the project's error model,
`analysis.core.intervals.PredictionError`, via `validation.forward_cuts` and
`validation.drift_from_folds`): refitted below each cut, the method predicts the multipliers
measured above it (`analysis.compare.measure`), and the errors give a budget offset and a drift
per decade. A bootstrap alone is far too narrow 100x beyond a ladder: it knows the noise of the
runs, not how a recipe's advantage moves with scale.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from analysis.compare import choice as choice_mod
from analysis.compare import frontiers as fr
from analysis.compare.fits import CHOICE_CANDIDATES, DEFAULT, JOINT_LAWS, CompareMethod, PairFit, fit_pair
from analysis.compare.ladders import Ladder
from analysis.compare.measure import measured
from analysis.compare.result import BudgetMultiplier, Comparison, Crossover, PairComparison, Trend
from analysis.core import progress, validation
from analysis.core.intervals import PredictionError
from models.base.errors import AnalysisError

FOLDS = 3  # forward-chaining cuts of the error model (each refits the method once)
DRAWS = 4000  # samples of bootstrap deviation + Gaussian term behind each interval and probability
REACH = 100.0  # the crossover is looked for up to this many times the ladders' top budget
GRID = 200  # points of the m(C) curve (figure, crossover)


def top_budget(ref: Ladder, other: Ladder) -> float:
    """The ladders' largest budget: the larger of the two ladders' largest best-run budgets."""
    return float(max(ref.frontier()[0].max(), other.frontier()[0].max()))


def default_budgets(ref: Ladder, others: Sequence[Ladder]) -> list[float]:
    """The ladders' top budget, 10x and 100x it."""
    top = max(top_budget(ref, o) for o in others)
    return [top, 10 * top, 100 * top]


def _slope(logC: np.ndarray, y: np.ndarray) -> float:
    return float(np.polyfit(logC, y, 1)[0]) if logC.size >= 2 and np.ptp(logC) > 0 else math.nan


def _usable(x: Ladder) -> bool:
    return min(x.n_budgets, np.unique(x.N).size, np.unique(x.D).size) >= 2


def _baseline_noise(ref: Ladder, other: Ladder) -> float:
    """ "No difference"'s in-sample error: the scatter (`validation.scatter_sd`, about 0) of the
    multipliers measured on the ladders, so that m = 1 carries an interval as wide as the recipes'
    measured differences even where no fold can be scored."""
    lm = measured(ref, other).log_m
    lm = lm[np.isfinite(lm)]
    if not lm.size:
        return 0.0
    return float(np.quantile(np.abs(lm), validation.PREDICTION_LEVEL) / validation.Z90)


def error_model(
    ref: Ladder, other: Ladder, method: CompareMethod, seed: int = 0
) -> tuple[PredictionError, float]:
    """The method's forward-chaining error on these ladders (`FOLDS` cuts; each fold refits the
    method below its cut and predicts the multipliers measured above it): the error of log m at a
    budget (a budget offset and a drift per decade beyond the ladders), and the RMS error of the
    fitted slope of log m against log C over each fold's hidden budgets (the trend's)."""
    cuts = validation.forward_cuts(np.concatenate([ref.C, other.C]), max_folds=FOLDS)
    errors, decades, folds, slopes = [], [], [], []
    start = None
    if method in JOINT_LAWS and cuts:  # every fold searches from the full fit's optimum (and a few more)
        try:
            start = fit_pair(ref, other, method, bootstrap=0, seed=seed).params
        except AnalysisError:
            start = None
    for cut in cuts:
        r, o = ref.below(cut), other.below(cut)
        meas = measured(ref, other, above=cut)
        if not meas.C.size or not (_usable(r) and _usable(o)):
            continue
        try:
            pf = fit_pair(ref, other, method, bootstrap=0, seed=seed, cut=cut, start=start)
        except AnalysisError:
            continue
        e = pf.log_m(meas.C) - meas.log_m
        ok = np.isfinite(e)
        if not ok.any():
            continue
        errors.append(e[ok])
        decades.append(np.log10(meas.C[ok] / max(r.C.max(), o.C.max())))
        folds.append((float(cut), float(np.mean(np.abs(e[ok])))))
        lc = np.log(meas.C[ok])
        slopes.append(_slope(lc, pf.log_m(meas.C[ok])) - _slope(lc, meas.log_m[ok]))
    # "no difference": its folds' offset and drift on top of the measured spread, not net of it (its
    # error grows where the recipes' difference does; netting it out left 71% coverage on the zoo)
    noise = _baseline_noise(ref, other) if method == CompareMethod.NO_DIFFERENCE else 0.0
    budget_sd, drift = validation.drift_from_folds(errors, decades, 0.0)
    s = np.array([x for x in slopes if math.isfinite(x)])
    pe = PredictionError(
        noise_sd=noise,
        budget_sd=budget_sd,
        drift_per_decade=drift,
        scale_max=top_budget(ref, other),
        scale_role="C",
        n_folds=len(folds),
        n_fold_points=int(sum(e.size for e in errors)),
        fold_mae=validation.fold_mae(errors),
        method="bootstrap + forward-chaining budget offset and drift of log m",
        fold_errors=tuple(folds),
    )
    return pe, float(np.sqrt(np.mean(s**2))) if s.size else 0.0


def _draws(samples: np.ndarray | None, sd: np.ndarray, seed: int) -> np.ndarray:
    """(DRAWS, G) deviations of log m: a bootstrap row's deviation from the median plus N(0, sd^2).
    Each draw takes one standard normal for every budget, so a budget's draws do not depend on
    which other budgets are asked for (`predict(C=c)` equals c's row of the table)."""
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((DRAWS, 1)) * sd
    if samples is None or len(samples) < 10:
        return z
    s = np.where(np.isfinite(samples), samples, np.nan)
    dev = s - np.nanmedian(s, axis=0, keepdims=True)
    return dev[rng.integers(0, len(s), DRAWS)] + z


def _p_positive(x: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return np.nanmean(x > 0, axis=0) + 0.5 * np.nanmean(x == 0, axis=0)


def _winner(log_m: float, ref: str, other: str) -> str | None:
    return None if log_m == 0 or not math.isfinite(log_m) else (other if log_m > 0 else ref)


def winner_sign(log_m: float, p_other: float) -> int:
    """+1 (OTHER wins), -1 (REF wins) or 0 (none): the multiplier's side of 1; a multiplier of exactly
    1 (shrunk to no difference) names the recipe more likely better, at even odds none."""
    if log_m != 0 and math.isfinite(log_m):
        return 1 if log_m > 0 else -1
    return 0 if p_other == 0.5 or not math.isfinite(p_other) else (1 if p_other > 0.5 else -1)


def shrunk(log_m: np.ndarray, draws: np.ndarray) -> np.ndarray:
    """log m pulled towards 0 (no difference) by its own uncertainty: the positive-part James-Stein
    (empirical Bayes) factor max(0, 1 - sigma^2 / log m^2), sigma the sd of the predictive draws (from
    their 90% range). A multiplier within its noise of 1 becomes 1; a clear one is kept."""
    lo, hi = validation.percentile_interval(draws)
    sigma = (hi - lo) / (2 * validation.Z90)
    with np.errstate(all="ignore"):
        w = np.where(log_m != 0, np.clip(1 - sigma**2 / log_m**2, 0.0, 1.0), 0.0)
    return np.where(np.isfinite(w), w, 0.0) * log_m


@dataclass(frozen=True)
class PairModel:
    """A method fitted to REF and OTHER with the forward-chaining error of its log m (`error`; no
    fold scored: the bootstrap alone) and of its trend (`trend_sd`); with `shrink`, the point is
    `shrunk` and the draws stay the fit's (the interval, widened to hold the point, then covers both
    the fit and no difference; P(OTHER better) is the fit's)."""

    fit: PairFit
    error: PredictionError
    trend_sd: float = 0.0
    shrink: bool = False
    seed: int = 0

    def sd(self, C: np.ndarray) -> np.ndarray:
        C = np.atleast_1d(np.asarray(C, float))
        if not (self.error.n_folds or self.error.noise_sd):
            return np.zeros(C.size)
        return self.error.sd(self.error.decades(C))

    def draws(self, C: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the point log m, the predictive draws (DRAWS, len C) of the fit) at budgets C."""
        lm = self.fit.log_m(C)
        x = np.clip(lm + _draws(self.fit.log_m_samples(C), self.sd(C), self.seed), -fr.LOG_CAP, fr.LOG_CAP)
        return (shrunk(lm, x) if self.shrink else lm), x

    def log_interval(self, C: np.ndarray) -> tuple[np.ndarray, ...]:
        """(log m, lo, hi, P(OTHER better)) at budgets C: the 90% interval of log m, widened to hold
        the point."""
        lm, x = self.draws(C)
        lo, hi = validation.percentile_interval(x)
        return lm, np.minimum(lo, lm), np.maximum(hi, lm), _p_positive(x)

    def error_dict(self) -> dict:
        return {**self.error.to_dict(), "trend_sd": self.trend_sd}


def named_winner(lo: float, hi: float, ref: str, other: str) -> str | None:
    """The winner a comparison names: OTHER when the 90% interval of the multiplier lies above 1,
    REF when below; None (no clear winner) when it holds 1."""
    return other if lo > 1 else ref if hi < 1 else None


def verdict(C: float, m: float, lo: float, hi: float, ref: str, other: str) -> str:
    """The sentence of one budget: who wins, by how much compute, or no clear winner."""
    iv = f"{m:.3g} [{lo:.3g}, {hi:.3g}]"
    w = named_winner(lo, hi, ref, other)
    if w is None:
        return f"no clear winner at C={C:.3g}: the 90% interval of the multiplier, {iv}, holds 1"
    if w == other:
        return f"{other} wins at C={C:.3g}: {ref} needs {iv}x the compute to match it"
    inv = f"{1 / m:.3g} [{1 / hi:.3g}, {1 / lo:.3g}]"
    return f"{ref} wins at C={C:.3g}: {other} needs {inv}x the compute to match it"


def _budgets(model: PairModel, C: np.ndarray, ref: str, other: str) -> list[BudgetMultiplier]:
    lm, lo, hi, p = model.log_interval(C)
    if model.fit.method == CompareMethod.NO_DIFFERENCE:  # no difference by assumption: even odds
        p = np.full(C.size, 0.5)
    out = []
    for i, c in enumerate(C):
        m, a, b = math.exp(lm[i]), math.exp(lo[i]), math.exp(hi[i])
        capped = bool(lm[i] >= fr.LOG_CAP - 1e-9)
        w, v = named_winner(a, b, ref, other), verdict(float(c), m, a, b, ref, other)
        out.append(BudgetMultiplier(float(c), m, a, b, float(p[i]), w, capped, v))
    return out


def _trend(model: PairModel, C: np.ndarray) -> Trend:
    c1, c2 = float(np.min(C)), float(np.max(C))
    if c2 < 1.01 * c1:
        c1, c2 = c1 / math.sqrt(10), c1 * math.sqrt(10)
    ends = np.array([c1, c2])
    span = math.log(c2 / c1)
    lm = model.fit.log_m(ends)
    slope = float((lm[1] - lm[0]) / span)
    centre = model.draws(ends)[0]
    shrunk_slope = float((centre[1] - centre[0]) / span)  # the fit's own unless the ends were shrunk
    s = model.fit.log_m_samples(ends)
    samples = None if s is None else ((s[:, 1] - s[:, 0]) / span)[:, None]
    # the drift of log m per decade, as a slope; or the folds' own slope errors, whichever is larger
    pe = model.error
    sd = np.array([max(pe.drift_per_decade / math.log(10), model.trend_sd) if pe.n_folds else 0.0])
    lo, hi = validation.percentile_interval(slope + _draws(samples, sd, model.seed + 1))
    return Trend(shrunk_slope, float(min(lo[0], shrunk_slope)), float(max(hi[0], shrunk_slope)), (c1, c2))


def _crossover(pf: PairFit, start: float, end: float, ref: str, other: str) -> Crossover:
    C = np.geomspace(start, end, GRID)
    lm = pf.log_m(C)
    point = fr.first_crossing(np.log(C), lm)[0]
    s = pf.log_m_samples(C)
    lo = hi = None
    share = math.nan
    if s is not None:
        cross = fr.first_crossing(np.log(C), s)
        share = float(np.mean(np.isfinite(cross)))
        if np.isfinite(cross).sum() >= 10:
            lo, hi = (math.exp(v) for v in validation.percentile_bounds(np.log(cross[np.isfinite(cross)])))
    if not math.isfinite(point):
        return Crossover(None, lo, hi, share, start, end)
    j = int(np.searchsorted(C, point))
    below, above = (_winner(float(lm[i]), ref, other) for i in (max(j - 1, 0), min(j, GRID - 1)))
    return Crossover(float(point), lo, hi, share, start, end, below, above)


def _frontier_record(f: fr.Frontier | None, x: Ladder) -> dict:
    """A recipe's fitted frontier and its measured points (no_difference fits none: the points only,
    which the figure draws)."""
    if f is None:
        C, L = x.frontier()
        pts = {"C": [float(c) for c in C], "loss": [float(v) for v in L]}
        return {"E": None, "G": None, "gamma": None, "form": None, "points": pts}
    E, lg, ga = (float(v) for v in f.params)
    return {
        "E": E,
        "G": math.exp(lg) if math.isfinite(lg) else None,
        "gamma": ga,
        "form": "L*(C) = E + G C^-gamma",
        "points": {"C": list(f.points_C), "loss": list(f.points_loss)},
    }


def compare_pair(
    ref: Ladder,
    other: Ladder,
    method: CompareMethod | str,
    budgets: Sequence[float],
    bootstrap: int = 200,
    seed: int = 0,
) -> tuple[PairComparison, PairModel]:
    """REF against OTHER under `method` at `budgets` (and the fitted model behind it). `auto`: the
    method the ladders' own folds choose (`choice.choose`), its record in `method_choice`."""
    method = CompareMethod(method)
    if method == CompareMethod.AUTO:
        mc = choice_mod.choose(ref, other, bootstrap, seed, compare_pair)
        pc, model = compare_pair(ref, other, mc.chosen, budgets, bootstrap, seed)
        note = "; ".join(x for x in (mc.note, pc.note if mc.chosen != mc.baseline else "") if x)
        return dataclasses.replace(pc, method=str(method), note=note, method_choice=mc.to_dict()), model
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        if method == CompareMethod.SHRUNK:
            chosen, (pe, trend_sd), why = choose_method(ref, other, seed)
        else:
            chosen, why = method, ""
            pe, trend_sd = error_model(ref, other, chosen, seed)
        model = PairModel(
            fit_pair(ref, other, chosen, bootstrap, seed), pe, trend_sd, method == CompareMethod.SHRUNK, seed
        )
        C = np.asarray(sorted(budgets), float)
        rows = _budgets(model, C, ref.name, other.name)
        top = top_budget(ref, other)
        start, end = float(min(ref.C.min(), other.C.min())), REACH * max(top, float(C.max()) / REACH)
        cross = _crossover(model.fit, start, end, ref.name, other.name)  # the fit's own sign change
        grid = np.geomspace(start, end, GRID)
        lm, lo, hi, _ = model.log_interval(grid)
    notes = [why, model.fit.note]
    if not pe.n_folds and chosen != CompareMethod.NO_DIFFERENCE:
        notes.append("no forward-chaining fold could be scored: bootstrap intervals only")
    note, trend, err = "; ".join(x for x in notes if x), _trend(model, C), model.error_dict()
    fits = ((ref, model.fit.ref), (other, model.fit.other))
    frontiers = {x.name: _frontier_record(f, x) for x, f in fits}
    curve = (grid, np.exp(lm), np.exp(lo), np.exp(hi))
    forced = choice_mod.MethodChoice(
        str(method), str(choice_mod.BASELINE), (), (), {}, f"method {method} asked for: no choice made"
    )
    pc = PairComparison(
        ref.name,
        other.name,
        str(method),
        tuple(rows),
        trend,
        cross,
        err,
        frontiers,
        top,
        note,
        curve,
        forced.to_dict(),
    )
    return pc, model


def choose_method(
    ref: Ladder, other: Ladder, seed: int = 0
) -> tuple[CompareMethod, tuple[PredictionError, float], str]:
    """auto_shrunk's choice: (the method, its error model, why): the first of `CHOICE_CANDIDATES`
    unless another predicts the multipliers above every forward-chaining cut better by the parsimony
    margin (`validation.choose_against`, the rule `fit --law auto` uses)."""
    models, folds = {}, {}
    what = f"{other.name} vs {ref.name}: auto_shrunk's candidates"
    for m in progress.track(CHOICE_CANDIDATES, desc=what, unit="method"):
        try:
            models[m] = error_model(ref, other, m, seed)
        except AnalysisError:
            continue
        folds[str(m)] = {cut: mae for cut, mae in models[m][0].fold_errors}
    if not models:
        raise AnalysisError("method auto_shrunk: no candidate could be fitted to these ladders")
    order = [str(m) for m in CHOICE_CANDIDATES if m in models]
    pick = CompareMethod(validation.choose_against(order[0], folds, order))
    scores = ", ".join(f"{k} {v[0].fold_mae:.3f}" for k, v in models.items() if math.isfinite(v[0].fold_mae))
    return pick, models[pick], f"chose {pick} (fold mean |log m| error: {scores or 'none scored'})"


def compare_recipes(
    ref: Ladder,
    others: Sequence[Ladder],
    method: CompareMethod | str | None = None,
    budgets: Sequence[float] | None = None,
    bootstrap: int = 200,
    seed: int = 0,
) -> tuple[Comparison, list[PairModel]]:
    """REF against every OTHER at `budgets` (default: the top budget, 10x and 100x it) under
    `method` (default: the one the backtest zoo chose, `fits.DEFAULT`)."""
    method = CompareMethod(method) if method is not None else DEFAULT
    if bootstrap < 0:
        raise AnalysisError(f"--bootstrap must be >= 0 (got {bootstrap})")
    requested = sorted(budgets) if budgets else default_budgets(ref, others)
    pairs, models = [], []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for o in progress.track(others, desc=f"compare against {ref.name}", unit="pair"):
            pc, model = compare_pair(ref, o, method, requested, bootstrap, seed)
            pairs.append(pc)
            models.append(model)
    seen = dict.fromkeys(
        str(w.message).splitlines()[0] for w in caught if issubclass(w.category, UserWarning)
    )
    sources = {x.name: x.source for x in (ref, *others)}
    comp = Comparison(ref.name, str(method), tuple(pairs), tuple(requested), bootstrap, sources, tuple(seen))
    return comp, models
