"""The cost model's efficiency constants refitted to measurements (`layout-eval --calibrate`,
`plan --calibrate`).

- `measured_calibration`: a framework's profile refitted few-shot to the rows of a MEASURED.csv
  (layout columns plus measured_step_time_s or measured_tokens_per_s, optionally oom 0/1), its
  MFU interval from the leave-one-out error over those rows (Student-t: wider with fewer rows);
- `sweep_calibration`: all constants fitted to a trainer sweep's runs (each run's layout as the
  cost model sees the trainer's program, runs.py; runs that failed out of memory are OOM
  labels), its MFU interval leave-one-run-out;
- `fit_rows`: the older form, all constants fitted to a layout CSV's own measured columns;
- `plan_calibration`: what `plan --calibrate` refits, checked against its `--framework`.
"""

from __future__ import annotations

import dataclasses
import pathlib
import statistics

import numpy as np

from models.base.errors import AnalysisError
from sharding.costmodel.calibrate import (
    FEW_SHOT_MIN_ROWS,
    Measurement,
    Scores,
    calibrate,
    few_shot_error_model,
    mfu_pairs,
    refit_profile,
    score,
)
from sharding.costmodel.efficiency import Efficiency
from sharding.costmodel.frameworks import Framework, framework_efficiency
from sharding.costmodel.hetero import is_mixed
from sharding.costmodel.rows import (
    MEASURED_COLUMNS,
    PRECISIONS,
    REQUIRED,
    MixedCluster,
    load_efficiency,
    measured_step_time,
    oom_label,
    parse_rows,
    read_rows,
    row_framework,
)
from sharding.costmodel.runs import read_sweep
from sharding.costmodel.step import estimate_step


def _skipped_text(skipped) -> str | None:
    more = " ..." if len(skipped) > 5 else ""
    return f"skipped {len(skipped)} run(s): {', '.join(skipped[:5])}{more}" if skipped else None


@dataclasses.dataclass(frozen=True)
class Calibration:
    """A profile refitted to measured rows (`--calibrate MEASURED.csv|SWEEP_DIR`): which
    framework, on how many rows, and the refit constants with their error model."""

    framework: Framework
    efficiency: Efficiency
    n_rows: int  # timed rows the profile was refitted on
    n_oom: int  # OOM-labelled rows among them
    source: str
    error_model: str  # how the MFU interval was measured
    loo_median_abs_mfu_error: float | None  # leave-one-out over the rows, MFU fraction
    skipped: tuple[str, ...] = ()  # a sweep's runs left out, each with why

    def skipped_text(self) -> str | None:
        """One line naming the sweep's runs left out (None: none)."""
        return _skipped_text(self.skipped)

    def text(self) -> str:
        loo = (
            ""
            if self.loo_median_abs_mfu_error is None
            else f"; leave-one-out median |ΔMFU| {100 * self.loo_median_abs_mfu_error:.1f} pts"
        )
        iv = self.efficiency.mfu_ratio_interval
        band = "" if iv is None else f"; MFU error interval [{iv[0]:.2f}, {iv[1]:.2f}] ({self.error_model})"
        return (
            f"calibrated: {self.framework.value} profile refitted on {self.n_rows} measured rows of "
            f"{self.source}" + (f" (+{self.n_oom} OOM labels)" if self.n_oom else "") + loo + band
        )

    def as_dict(self) -> dict:
        return {
            "framework": self.framework.value,
            "n_rows": self.n_rows,
            "n_oom": self.n_oom,
            "source": self.source,
            "error_model": self.error_model,
            "loo_median_abs_mfu_error": self.loo_median_abs_mfu_error,
            "mfu_ratio_interval": list(self.efficiency.mfu_ratio_interval or []) or None,
        }


def read_measured(path: pathlib.Path) -> list[dict]:
    """The rows of a MEASURED.csv (one-line errors naming the flag, the columns and the fix)."""
    need = f"the layout columns ({', '.join(REQUIRED)}) and {' or '.join(MEASURED_COLUMNS)} per row"
    if not path.exists():
        raise AnalysisError(f"--calibrate {path}: not found; give MEASURED.csv with {need}, or a SWEEP_DIR")
    try:
        rows = read_rows(path)
    except AnalysisError as e:
        raise AnalysisError(f"--calibrate {e}; it needs {need}") from None
    if not any(c in rows[0] for c in MEASURED_COLUMNS):
        raise AnalysisError(
            f"--calibrate {path} has no {' or '.join(MEASURED_COLUMNS)} column; add the measured seconds "
            "per optimizer step or tokens per second of each row"
        )
    return rows


def measured_calibration(
    path: pathlib.Path,
    default_fw: Framework | str,
    hardware: str | None,
    prec,
    efficiency: pathlib.Path | None = None,
) -> Calibration:
    """Refit the rows' framework profile (or `efficiency`'s constants) to a MEASURED.csv:
    few-shot (pulled towards the profile), with the leave-one-out error over the rows as its
    MFU interval (a Student-t prediction interval: wider with fewer rows)."""
    rows = read_measured(path)
    try:
        parsed = parse_rows(rows, hardware, default_fw)
    except AnalysisError as e:
        raise AnalysisError(f"--calibrate {path}: {e}") from None
    fws = sorted({row_framework(r, default_fw) for r in rows})
    if len(fws) > 1:
        raise AnalysisError(
            f"--calibrate {path} mixes frameworks ({', '.join(fws)}); refit one framework at a time "
            "(one file per framework, or fix the `framework` column)"
        )
    ms = []
    for i, (r, (shape, layout, hw)) in enumerate(zip(rows, parsed)):
        if isinstance(hw, MixedCluster):
            raise AnalysisError(
                f"--calibrate {path}: row {i + 1} is a mixed cluster ({hw.name}); calibrate on "
                "single-hardware rows"
            )
        step = measured_step_time(r, shape, layout)
        oom = oom_label(r, i + 1)
        if step is not None and not step > 0:
            raise AnalysisError(
                f"--calibrate {path}: row {i + 1}: the measured time must be > 0 (got {step})"
            )
        if step is None and not oom:
            continue
        ms.append(
            Measurement(shape, layout, hw, None if oom else float(step), oom, prec, label=f"row {i + 1}")
        )
    n_timed = sum(m.step_time_s is not None for m in ms)
    if n_timed < FEW_SHOT_MIN_ROWS + 1:
        raise AnalysisError(
            f"--calibrate {path} has {n_timed} row(s) with {' or '.join(MEASURED_COLUMNS)}; the refit "
            f"and its leave-one-out error need at least {FEW_SHOT_MIN_ROWS + 1}"
        )
    fw = fws[0]
    profile = load_efficiency(efficiency) if efficiency is not None else framework_efficiency(fw)
    eff = refit_profile(
        ms, profile, provenance=f"{fw.value} profile refitted on {n_timed} measured rows of {path}"
    )
    em = few_shot_error_model(ms, profile)
    eff = eff.replace(mfu_ratio_lo=em.lo, mfu_ratio_hi=em.hi)
    how = f"5%-95%, Student-t over {em.n} leave-one-out predictions: wider with fewer rows"
    return Calibration(fw, eff, n_timed, len(ms) - n_timed, str(path), how, em.median_abs_mfu_error)


@dataclasses.dataclass(frozen=True)
class RowsFit:
    """All constants fitted to a layout CSV's own measured columns (`LAYOUTS.csv --calibrate EFF.json`)."""

    efficiency: Efficiency  # with its MFU error interval
    scores: Scores  # in-sample
    n_rows: int  # rows with a measurement or an OOM label
    error_model: str  # how the MFU interval was measured


def fit_rows(rows: list[dict], parsed: list, prec, base: Efficiency, source: str) -> RowsFit:
    """Fit constants to the rows' measured step times / tokens per second and OOM flags."""
    ms = []
    for i, (r, (shape, layout, hw)) in enumerate(zip(rows, parsed)):
        if isinstance(hw, MixedCluster):
            raise AnalysisError(
                f"row {i + 1}: --calibrate fits one device type at a time; "
                f"calibrate on single-hardware rows (this row is {hw.name})"
            )
        step = measured_step_time(r, shape, layout)
        oom = oom_label(r, i + 1)
        if step is None and not oom:
            continue
        ms.append(Measurement(shape, layout, hw, None if oom else float(step), oom, prec))
    if sum(m.step_time_s is not None for m in ms) < 3:
        raise AnalysisError("--calibrate needs >= 3 rows with measured_step_time_s or measured_tokens_per_s")
    eff = calibrate(ms, base, provenance=f"fitted to {len(ms)} rows of {source}")
    eff, how = _with_error_model(eff, ms, _leave_one_out(ms, base))
    return RowsFit(eff, score(ms, eff), len(ms), how)


def _leave_one_out(ms: list, base: Efficiency, max_runs: int = 40) -> list[float] | None:
    """measured / predicted MFU (= predicted / measured step time) of each timed run, predicted
    by constants fitted to the other runs (None above `max_runs` timed runs, where it would cost
    a fit per run, or below 4)."""
    timed = [i for i, m in enumerate(ms) if m.step_time_s is not None]
    if not 4 <= len(timed) <= max_runs:
        return None
    ratios = []
    for i in timed:
        eff = calibrate(ms[:i] + ms[i + 1 :], base)
        m = ms[i]
        ratios.append(
            estimate_step(m.model, m.layout, m.hardware, m.precision, eff).step_time_s / m.step_time_s
        )
    return ratios


def _with_error_model(eff: Efficiency, ms: list, loo: list[float] | None) -> tuple[Efficiency, str]:
    """`eff` with its MFU error interval (5%-95% of measured / predicted MFU): the leave-one-out
    ratios `loo` when there are some, else in-sample (narrower than the truth), and words saying
    which."""
    if loo is not None:
        lo, hi = np.percentile(loo, [5, 95])
        how = f"leave-one-run-out over {len(loo)} runs"
    else:
        s = score(ms, eff)
        lo, hi = s.mfu_ratio_q05, s.mfu_ratio_q95
        how = f"in-sample over {s.n_timed} runs (narrower than on new layouts)"
    return eff.replace(mfu_ratio_lo=float(lo), mfu_ratio_hi=float(hi)), how


def add_predictions(recs: list[dict], ms: list, eff: Efficiency) -> None:
    """Add the cost model's step time, MFU and memory under `eff` to each run's record."""
    for rec, m in zip(recs, ms):
        est = estimate_step(m.model, m.layout, m.hardware, m.precision, eff)
        rec.update(
            pred_step_time_s=est.step_time_s,
            pred_mfu=est.mfu,
            mfu_convention=est.mfu_convention,
            pred_mem_gb_per_device=est.memory.total / 1e9,
            pred_fits=bool(est.fits),
        )


@dataclasses.dataclass(frozen=True)
class SweepCalibration:
    """All constants fitted to a trainer sweep's runs (`--calibrate SWEEP_DIR`)."""

    calibration: Calibration  # the jax profile's refit, with its MFU error interval
    measurements: list  # one Measurement per run used
    records: list[dict]  # one per run: its layout and measurement (`add_predictions` adds pred_*)
    scores_before: Scores  # in-sample, of the constants it started from
    scores: Scores  # in-sample, of the fit
    loo_err: float | None  # leave-one-run-out median |step time error| (None: too few / many runs)

    @property
    def efficiency(self) -> Efficiency:
        return self.calibration.efficiency

    def as_dict(self) -> dict:
        """What `layout-eval --calibrate SWEEP_DIR` writes to efficiency.json."""
        return {
            "efficiency": self.efficiency.as_dict(),
            "scores": self.scores.as_dict(),
            "scores_before": self.scores_before.as_dict(),
            "n_runs": len(self.measurements),
            "leave_one_out_median_abs_step_error": self.loo_err,
            "error_model": self.calibration.error_model,
        }


def sweep_calibration(
    sweep: pathlib.Path, hardware: str | None, efficiency: pathlib.Path | None
) -> SweepCalibration:
    """The jax profile's constants fitted to a trainer sweep's runs (`.calibration.skipped`: the runs
    left out)."""
    ms, recs, skipped = read_sweep(sweep, hardware)
    n_timed = sum(m.step_time_s is not None for m in ms)
    if n_timed < 3:
        why = "" if not skipped else f" ({_skipped_text(skipped)})"
        raise AnalysisError(
            f"{sweep} has {n_timed} completed run(s) with a measured throughput; --calibrate needs >= 3{why}"
        )
    base = load_efficiency(efficiency)
    before = score(ms, base)
    eff = calibrate(ms, base, provenance=f"fitted to {len(ms)} runs of {sweep}")
    after = score(ms, eff)
    loo = _leave_one_out(ms, base)
    loo_err = None if loo is None else float(statistics.median(abs(1 / r - 1) for r in loo))
    eff, how = _with_error_model(eff, ms, loo)
    loo_mfu = None
    if loo is not None:  # |ΔMFU| of each left-out run = its MFU · |1 − predicted / measured time|
        a, _, _ = mfu_pairs(ms, eff)
        loo_mfu = float(statistics.median(abs(p * (1 / r - 1)) for p, r in zip(a, loo)))
    cal = Calibration(
        Framework.JAX, eff, n_timed, len(ms) - n_timed, str(sweep), how, loo_mfu, tuple(skipped)
    )
    return SweepCalibration(cal, ms, recs, before, after, loo_err)


def plan_calibration(
    path: pathlib.Path, fw: Framework, hardware: str | None, efficiency: pathlib.Path | None
) -> Calibration:
    """`plan --calibrate MEASURED.csv|SWEEP_DIR`: the framework's profile refitted to measurements
    (rows without a `framework` column are `fw`'s), in bf16 mixed precision."""
    if path.is_dir():
        if fw != Framework.JAX:
            raise AnalysisError(
                f"--calibrate {path} is a trainer sweep (the jax framework); drop --framework "
                f"{fw.value}, or give measured rows of {fw.value} as MEASURED.csv"
            )
        single = None if hardware is None or is_mixed(hardware) else hardware
        return sweep_calibration(path, single, efficiency).calibration
    cal = measured_calibration(path, fw, hardware, PRECISIONS["bf16-mixed"], efficiency)
    if cal.framework != fw:
        raise AnalysisError(
            f"--calibrate {path} holds {cal.framework.value} rows but --framework is {fw.value}; "
            f"pass --framework {cal.framework.value} (or fix the file's `framework` column)"
        )
    return cal
