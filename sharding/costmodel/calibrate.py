"""Fit the cost model's `Efficiency` constants to measured runs.

Two fits, because the two kinds of measurement carry different information:
- time constants: robust least squares (scipy.optimize.least_squares, soft-L1 loss) on the log
  of measured step time of the runs that completed;
- memory constants (`mem_overhead_bytes`, `act_frag`): a grid search maximising OOM
  classification accuracy over all runs, because the OOM label is a step function of them.
Fitting is deterministic (fixed start, no random restarts), so a calibration script reproduces
the shipped constants exactly.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import numpy as np
from scipy import optimize, stats

from sharding.costmodel.efficiency import PRIOR_EFFICIENCY, Efficiency
from sharding.costmodel.hardware import Hardware
from sharding.costmodel.spec import (
    BF16_MIXED,
    Layout,
    LayoutAttention,
    LayoutError,
    ModelShape,
    Precision,
    ZeroStage,
    validate_layout,
)
from sharding.costmodel.step import MFU_CONVENTION, estimate_step, step_time_s

# name: (lower, upper) bounds of each time constant the fit may move
TIME_BOUNDS: dict[str, tuple[float, float]] = {
    "gemm_eff_max": (0.3, 0.95),
    "gemm_half_dim": (1.0, 2000.0),
    "flash1_eff": (0.05, 0.8),  # FlashAttention-2 paper: ≤ 73% of A100 peak fwd+bwd
    "flash2_eff": (0.05, 0.8),
    "score_traffic_naive": (1.0, 400.0),
    "score_traffic_fused": (1.0, 400.0),
    "elem_bytes_h": (1.0, 2000.0),
    "elem_bytes_h_unfused_norm": (1.0, 4000.0),
    "layer_overhead_s": (1e-6, 5e-2),
    "link_eff": (0.4, 0.95),  # NCCL bus bandwidth reaches 50-90% of the link
    "intra_link_eff": (0.4, 0.95),
    "dp_overlap": (0.0, 1.0),
    "zero3_overlap": (0.0, 1.0),
    "tp_overlap": (0.0, 0.9),
    "stage_jitter": (0.0, 0.5),
}
# Profile fits (framework families, few-shot refits) also move the per-op host overhead of ZeRO-3
# collectives; the shared fit keeps it at 0 (`Efficiency.coll_op_overhead_s`).
PROFILE_BOUNDS: dict[str, tuple[float, float]] = {**TIME_BOUNDS, "coll_op_overhead_s": (0.0, 2e-3)}
# Prior widths of a profile fit: one standard deviation, in the fit's own coordinates (log for
# the log-scaled constants: 0.5 = a factor of 1.65; fractions of peak / of overlap: 0.1; the
# per-op overhead: 100 µs, the order of a Python hook plus a NCCL launch)
PRIOR_SD_LOG = 0.5
PRIOR_SD_FRACTION = 0.1
PRIOR_SD = {"coll_op_overhead_s": 1e-4}
# Strength of the shared prior in a profile fit, in the units of the data term (every source
# weighs 100 spread over its runs, `benchmarks/external_layouts.py`, times its squared log
# step-time errors under the soft-L1 loss). Tried 0.003 / 0.03 / 0.3 on the fsdp family's
# leave-one-source-out median |ΔMFU| (MPT 2.1 / 2.0 / 2.3 points, torchtitan 0.5 / 1.2 / 0.9,
# IBM 2.0 / 2.7 / 3.2): flat; but at 0.003 the megatron profile fitted to BLOOM + MT-NLG alone
# (4 runs) predicts Hagemann 2.3 points worse than the shared fit (over-fitted), so 0.03 ships.
# 0 over-fits every family (link_eff at its bound 0.95, layer overhead ×5). Few-shot refits use
# the same ratio of prior to data (`refit_profile`).
PROFILE_PRIOR_STRENGTH = 0.03
_LOG_SCALED = {
    "gemm_half_dim",
    "score_traffic_naive",
    "score_traffic_fused",
    "elem_bytes_h",
    "elem_bytes_h_unfused_norm",
    "layer_overhead_s",
}


@dataclasses.dataclass(frozen=True)
class Measurement:
    """One measured run: step time in seconds, or `oom=True` (then step_time_s is None)."""

    model: ModelShape
    layout: Layout
    hardware: Hardware
    step_time_s: float | None
    oom: bool
    precision: Precision = BF16_MIXED
    label: str = ""
    # weight of the run in the time fit (e.g. 1/runs of its source, so that every source counts
    # alike however many rows it has)
    weight: float = 1.0


@dataclasses.dataclass(frozen=True)
class Scores:
    """Agreement of predictions with measurements (MFU in fractions of peak)."""

    n_timed: int
    n_oom_labelled: int
    spearman_mfu: float
    median_abs_mfu_error: float
    oom_accuracy: float
    mfu_ratio_q05: float = float("nan")  # measured / predicted MFU, 5% and 95% quantiles
    mfu_ratio_q95: float = float("nan")

    def as_dict(self) -> dict[str, float | str]:
        return {**dataclasses.asdict(self), "mfu_convention": MFU_CONVENTION}


def _predict(meas: Measurement, eff: Efficiency):
    return estimate_step(meas.model, meas.layout, meas.hardware, meas.precision, eff)


def _value(eff: Efficiency, name: str) -> float:
    if name == "intra_link_eff":  # None: the same as link_eff
        return eff.link_effs[0]
    return getattr(eff, name)


def _encode(eff: Efficiency, names: Sequence[str]) -> np.ndarray:
    return np.array([math.log(_value(eff, n)) if n in _LOG_SCALED else _value(eff, n) for n in names])


def _decode(x: np.ndarray, names: Sequence[str], base: Efficiency) -> Efficiency:
    kw = {n: (math.exp(v) if n in _LOG_SCALED else float(v)) for n, v in zip(names, x)}
    return base.replace(**kw)


# soft-L1 scale of the time fit's residuals (log step time): errors beyond ~5% count linearly
SOFT_L1_SCALE = 0.05


def _quadratic_under_soft_l1(d: np.ndarray, f: float = SOFT_L1_SCALE) -> np.ndarray:
    """Residuals r whose soft-L1 loss f²·2(sqrt(1 + (r/f)²) − 1) equals d²: the prior stays a
    Gaussian (quadratic) penalty although the fit's loss is robust (an L1 penalty would pin
    every constant at the prior's value: its kink at zero outweighs any small data gradient)."""
    z = (1 + d**2 / (2 * f**2)) ** 2 - 1
    return np.sign(d) * f * np.sqrt(z)


def _prior_sd(name: str) -> float:
    if name in PRIOR_SD:
        return PRIOR_SD[name]
    return PRIOR_SD_LOG if name in _LOG_SCALED else PRIOR_SD_FRACTION


def fit_time_constants(
    measurements: Sequence[Measurement],
    base: Efficiency = PRIOR_EFFICIENCY,
    names: Sequence[str] | None = None,
    prior: Efficiency | None = None,
    prior_strength: float = 0.0,
    min_timed: int = 3,
) -> Efficiency:
    """Least-squares fit of the time constants to log step times of completed runs.

    With `prior` (a profile fit): every constant also pays sqrt(prior_strength)·(x − prior)/sd
    (a Gaussian prior of width `_prior_sd` in the fit's coordinates), so constants the runs say
    little about stay at the prior's values; `names` default to PROFILE_BOUNDS then."""
    timed = [mm for mm in measurements if mm.step_time_s is not None and not mm.oom]
    if len(timed) < min_timed:
        raise LayoutError(f"calibration needs at least {min_timed} timed runs (got {len(timed)})")
    bounds = PROFILE_BOUNDS if prior is not None else TIME_BOUNDS
    names = list(names or bounds)
    # only fit attention constants that the data can see
    kernels = {mm.layout.attention for mm in timed}
    unfused = any(not mm.layout.fused_norm for mm in timed)
    skip = {
        "flash1_eff": LayoutAttention.FLASH1 not in kernels,
        "flash2_eff": LayoutAttention.FLASH2 not in kernels,
        "score_traffic_naive": LayoutAttention.NAIVE not in kernels,
        "score_traffic_fused": LayoutAttention.FUSED_SOFTMAX not in kernels,
        "elem_bytes_h_unfused_norm": not unfused,
        "tp_overlap": all(mm.layout.tp == 1 for mm in timed),
        "stage_jitter": all(mm.layout.pp == 1 for mm in timed),
        "dp_overlap": all(mm.layout.dp == 1 for mm in timed),
        "zero3_overlap": all(mm.layout.zero_stage < ZeroStage.PARAMETERS or mm.layout.dp == 1 for mm in timed)
        and not any(mm.layout.breadth_first for mm in timed),
    }
    skip["coll_op_overhead_s"] = all(
        mm.layout.zero_stage < ZeroStage.PARAMETERS or mm.layout.dp == 1 for mm in timed
    )
    names = [n for n in names if not skip.get(n, False)]
    lo = np.array([math.log(bounds[n][0]) if n in _LOG_SCALED else bounds[n][0] for n in names])
    hi = np.array([math.log(bounds[n][1]) if n in _LOG_SCALED else bounds[n][1] for n in names])
    y = np.log([mm.step_time_s for mm in timed])
    w = np.sqrt([mm.weight for mm in timed])
    if prior is not None:
        x_prior = np.clip(_encode(prior, names), lo, hi)
        w_prior = math.sqrt(prior_strength) / np.array([_prior_sd(n) for n in names])

    for mm in timed:  # once here, not at every trial of the constants (`step_time_s`)
        validate_layout(mm.model, mm.layout)

    def residuals(x: np.ndarray) -> np.ndarray:
        eff = _decode(x, names, base)
        times = [
            step_time_s(mm.model, mm.layout, mm.hardware, mm.precision, eff, validate=False) for mm in timed
        ]
        r = w * (np.log(times) - y)
        if prior is None:
            return r
        return np.concatenate([r, _quadratic_under_soft_l1(w_prior * (x - x_prior))])

    x0 = np.clip(_encode(base, names), lo + 1e-9, hi - 1e-9)
    sol = optimize.least_squares(
        residuals, x0, bounds=(lo, hi), loss="soft_l1", f_scale=SOFT_L1_SCALE, x_scale="jac", max_nfev=400
    )
    return _decode(sol.x, names, base)


def fit_memory_constants(measurements: Sequence[Measurement], base: Efficiency) -> Efficiency:
    """Grid search of (mem_overhead_bytes, act_frag) for the best OOM accuracy (ties: the
    smallest overhead and fragmentation, i.e. the least pessimistic model)."""
    labelled = list(measurements)
    if not labelled:
        raise LayoutError("calibration needs at least one run with an OOM/ran label")
    # memory is linear in the two constants: total = fixed + overhead + frag·acts
    parts = []
    for mm in labelled:
        mem = _predict(mm, base.replace(mem_overhead_bytes=0.0, act_frag=1.0)).memory
        parts.append((mem.total - mem.activations, mem.activations, mem.capacity, mm.oom))
    fixed, acts, cap, oom = (np.array(v, dtype=float) for v in zip(*parts))
    best = (-1.0, 0.0, 1.0)
    for frag in np.round(np.arange(1.0, 1.601, 0.01), 3):
        for over in np.arange(0.0, 12.01e9, 0.1e9):
            acc = float(np.mean((fixed + over + frag * acts > cap) == oom.astype(bool)))
            if acc > best[0] + 1e-12:
                best = (acc, float(over), float(frag))
    return base.replace(mem_overhead_bytes=best[1], act_frag=best[2])


def calibrate(
    measurements: Sequence[Measurement],
    base: Efficiency = PRIOR_EFFICIENCY,
    provenance: str = "",
    prior: Efficiency | None = None,
    prior_strength: float = 0.0,
    min_timed: int = 3,
) -> Efficiency:
    """Memory constants from OOM labels (kept from `base` unless some runs hit OOM and some
    did not), then time constants from step times (with `prior`: pulled towards it, see
    `fit_time_constants`)."""
    labels = {mm.oom for mm in measurements}
    eff = fit_memory_constants(measurements, base) if labels == {True, False} else base
    eff = fit_time_constants(
        measurements, eff, prior=prior, prior_strength=prior_strength, min_timed=min_timed
    )
    # the error model of `base` described `base`'s constants, not these: the caller measures one
    return eff.replace(
        provenance=provenance or f"fitted to {len(measurements)} runs", mfu_ratio_lo=None, mfu_ratio_hi=None
    )


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    return float(stats.spearmanr(a, b).statistic)


def mfu_pairs(
    measurements: Sequence[Measurement], eff: Efficiency, measured_mfu: Sequence[float | None] | None = None
) -> tuple[np.ndarray, np.ndarray, list[bool]]:
    """(predicted MFU, measured MFU) of the timed runs, and per run whether the OOM prediction
    matches its label. A run's measured MFU is model FLOPs / (step time · devices · peak) under the
    model's convention unless `measured_mfu` supplies the published figure (same convention)."""
    pred_mfu, meas_mfu, correct = [], [], []
    for i, mm in enumerate(measurements):
        est = _predict(mm, eff)
        correct.append((not est.fits) == mm.oom)
        if mm.step_time_s is None or mm.oom:
            continue
        pred_mfu.append(est.mfu)
        if measured_mfu is not None and measured_mfu[i] is not None:
            meas_mfu.append(float(measured_mfu[i]))
        else:
            meas_mfu.append(est.model_flops / (mm.step_time_s * mm.layout.n_devices * mm.hardware.peak_flops))
    return np.array(pred_mfu), np.array(meas_mfu), correct


def score(
    measurements: Sequence[Measurement], eff: Efficiency, measured_mfu: Sequence[float | None] | None = None
) -> Scores:
    """Spearman ρ and median |error| of MFU over timed runs (measured MFU as in `mfu_pairs`);
    OOM accuracy over all runs."""
    a, b, correct = mfu_pairs(measurements, eff, measured_mfu)
    q05, q95 = np.quantile(b / a, [0.05, 0.95]) if len(a) else (float("nan"),) * 2
    return Scores(
        n_timed=len(a),
        n_oom_labelled=len(correct),
        spearman_mfu=_spearman(a, b) if len(a) > 2 else float("nan"),
        median_abs_mfu_error=float(np.median(np.abs(a - b))) if len(a) else float("nan"),
        oom_accuracy=float(np.mean(correct)) if correct else float("nan"),
        mfu_ratio_q05=float(q05),
        mfu_ratio_q95=float(q95),
    )


# Few-shot refits need this many timed rows: with the profile as prior, two rows already say how
# far the stack is from it; one row cannot be left out for the error model.
FEW_SHOT_MIN_ROWS = 2
# Strength of the profile prior in a few-shot refit, per unit of the rows' total weight: the
# profile counts as much as PROFILE_PRIOR_STRENGTH / 100 of the measured rows together.
FEW_SHOT_PRIOR_WEIGHT = 1.0


def refit_profile(
    measurements: Sequence[Measurement], profile: Efficiency, provenance: str = ""
) -> Efficiency:
    """`profile` refitted to a few measured rows of one system: memory constants from its OOM
    labels, time constants pulled towards the profile (each row weighs 1, the profile
    FEW_SHOT_PRIOR_WEIGHT times all of them together)."""
    rows = [dataclasses.replace(mm, weight=1.0) for mm in measurements]
    n = max(1, sum(1 for mm in rows if mm.step_time_s is not None and not mm.oom))
    eff = calibrate(
        rows,
        profile,
        provenance=provenance,
        prior=profile,
        prior_strength=FEW_SHOT_PRIOR_WEIGHT * n * PROFILE_PRIOR_STRENGTH / 100.0,
        min_timed=FEW_SHOT_MIN_ROWS,
    )
    return eff


@dataclasses.dataclass(frozen=True)
class FewShotErrorModel:
    """Leave-one-out over the measured rows of a few-shot refit: each timed row predicted by the
    profile refitted to the others. `ratios`: measured / predicted MFU of those predictions;
    (lo, hi): the 5%-95% interval of a new layout's ratio, a Student-t prediction interval on
    the log ratios (mean ± t(0.95, n − 1)·sd·sqrt(1 + 1/n)), which widens as n shrinks."""

    ratios: tuple[float, ...]
    lo: float
    hi: float
    median_abs_mfu_error: float

    @property
    def n(self) -> int:
        return len(self.ratios)


def few_shot_error_model(measurements: Sequence[Measurement], profile: Efficiency) -> FewShotErrorModel:
    """Leave-one-out error model of `refit_profile` on `measurements`: every timed row is left
    out once and the others (at least FEW_SHOT_MIN_ROWS) refit the profile."""
    ms = list(measurements)
    timed = [i for i, mm in enumerate(ms) if mm.step_time_s is not None and not mm.oom]
    if len(timed) < FEW_SHOT_MIN_ROWS + 1:
        raise LayoutError(
            f"the few-shot error model needs at least {FEW_SHOT_MIN_ROWS + 1} measured rows "
            f"(got {len(timed)})"
        )
    ratios, errs = [], []
    for i in timed:
        eff = refit_profile(ms[:i] + ms[i + 1 :], profile)
        est = _predict(ms[i], eff)
        meas_mfu = est.model_flops / (ms[i].step_time_s * ms[i].layout.n_devices * ms[i].hardware.peak_flops)
        ratios.append(meas_mfu / est.mfu)
        errs.append(abs(meas_mfu - est.mfu))
    logs = np.log(ratios)
    n = len(logs)
    half = float(stats.t.ppf(0.95, n - 1)) * float(np.std(logs, ddof=1)) * math.sqrt(1 + 1 / n)
    mid = float(np.mean(logs))
    return FewShotErrorModel(
        tuple(float(r) for r in ratios),
        math.exp(mid - half),
        math.exp(mid + half),
        float(np.median(errs)),
    )
