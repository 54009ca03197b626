"""Reading RL learning curves (pass rate vs RL compute) from tables or RL run directories.

Why a separate module: the fitter (`analysis.rl.laws`) only sees numbers; this module owns the
file formats, the input validation (one-line errors), and the burn-in policy, so the CLI, the RL
report, the registry and notebooks all read curves the same way.

Table (CSV or Parquet, read by `analysis.core.table.read_table`): columns `compute`, `pass_rate`,
optional `stderr`.
RL run directory (written by `python -m experiments.rl`): `metrics.jsonl`, one JSON object per
evaluation with `flops_rl` (cumulative RL compute C, evaluation excluded), `pass_rate`,
`pass_rate_stderr`, `prompts_seen`, `train_reward`, `zero_var_frac`, `kl`, ...; and
`summary.json` with `prompts_per_pass` (size of a finite training-prompt pool, or null).
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
import warnings

import numpy as np
import pandas as pd

from analysis.core.runs import RunWarning
from analysis.core.table import read_table
from analysis.rl.laws import RLPoints
from models.base.errors import AnalysisError
from models.base.rundir import METRICS_FILE, RunDir

DEFAULT_BURN_IN_FRAC = 0.1


@dataclasses.dataclass(frozen=True)
class RLCurve:
    """One learning curve (one seed of one recipe), sorted by compute.

    `extra` holds optional per-evaluation columns of RL runs (train_reward, zero_var_frac, kl,
    entropy, step, prompts_seen) as float arrays aligned with `compute`.
    """

    name: str
    compute: np.ndarray
    pass_rate: np.ndarray
    stderr: np.ndarray
    is_run: bool
    prompts_per_pass: int | None = None
    extra: dict = dataclasses.field(default_factory=dict)

    @property
    def final_compute(self) -> float:
        return float(self.compute.max())


def load_curve(path: str | pathlib.Path) -> RLCurve:
    """A curve from a table (CSV or Parquet: compute, pass_rate[, stderr]) or an RL run directory."""
    p = pathlib.Path(path)
    return _load_run(p) if p.is_dir() else table_curve(read_table(p), p.name, str(p))


def table_curve(df: pd.DataFrame, name: str = "table", source: str | None = None) -> RLCurve:
    """A curve from a table of evaluations: columns compute, pass_rate and optionally stderr (no
    burn-in: a table is taken as curated points). Errors name `source` (default `name`)."""
    src = source or name
    missing = [c for c in ("compute", "pass_rate") if c not in df.columns]
    if missing:
        raise AnalysisError(
            f"{src}: missing column(s) {missing}; need compute, pass_rate and "
            f"optionally stderr (found {list(df.columns)})"
        )
    num = {}
    for c in ("compute", "pass_rate", "stderr"):
        v = pd.to_numeric(df[c], errors="coerce").to_numpy(np.float64) if c in df.columns else None
        if v is not None and not np.all(np.isfinite(v)):
            raise AnalysisError(
                f"{src}: column {c} has non-numeric or missing values "
                f"(first bad row {int(np.argmax(~np.isfinite(v))) + 2})"
            )
        num[c] = v
    return _validated(name, num["compute"], num["pass_rate"], num["stderr"], False)


def _load_run(d: pathlib.Path) -> RLCurve:
    rd = RunDir(d)
    mfile = rd.metrics_path
    if not mfile.exists():
        raise AnalysisError(
            f"{d}: no {METRICS_FILE}; is this an RL run directory (python -m experiments.rl)?"
        )
    records = rd.metrics()  # the one reader: a torn line is skipped (and said), null -> NaN
    if records.skipped:
        warnings.warn(records.skipped_message(), RunWarning, stacklevel=3)
    rows = [r for r in records if "pass_rate" in r and ("flops_rl" in r or "compute" in r)]
    if not rows:
        raise AnalysisError(
            f"{mfile}: no evaluation rows with flops_rl and pass_rate "
            "(not an RL run, or it has not evaluated yet)"
        )

    def get(k: str) -> np.ndarray:
        return np.array([math.nan if r.get(k) is None else float(r[k]) for r in rows])

    C = np.array([float(r.get("flops_rl", r.get("compute"))) for r in rows])
    extra = {k: get(k) for k in ("step", "prompts_seen", "train_reward", "zero_var_frac", "kl", "entropy")}
    summary = rd.read_summary()
    per_pass = summary.prompts_per_pass if summary is not None else None
    return _validated(d.name, C, get("pass_rate"), get("pass_rate_stderr"), True, per_pass, extra)


def _validated(name, C, y, s, is_run, per_pass=None, extra=None) -> RLCurve:
    if C.size < 3:
        raise AnalysisError(f"{name}: need at least 3 evaluation points (got {C.size})")
    if np.any(C < 0):
        raise AnalysisError(f"{name}: compute must be >= 0")
    if np.any((y < 0) | (y > 1)):
        raise AnalysisError(f"{name}: pass_rate must lie in [0, 1] (a fraction, not a percent)")
    if s is not None and np.any(np.isfinite(s) & (s < 0)):
        raise AnalysisError(f"{name}: stderr must be >= 0")
    order = np.argsort(C, kind="stable")
    s = np.full_like(y, np.nan) if s is None else s
    extra = {k: v[order] for k, v in (extra or {}).items()}
    return RLCurve(name, C[order], y[order], s[order], is_run, per_pass, extra)


def burn_in_cutoff(curve: RLCurve, burn_in: float | None = None, frac: float | None = None) -> float:
    """Compute below which evaluations are excluded from the fit (the start point excepted).

    Explicit `burn_in` (compute units) wins; `frac` means that fraction of the final compute.
    Default for RL runs: the smaller of 10% of the final compute and one pass over a finite
    training-prompt pool (the policy is still adapting to the RL loop). Default for CSV tables:
    no burn-in — a table is taken as already-curated evaluation points (often log-spaced, where
    "the first 10% of compute" would discard most of them).
    """
    if burn_in is not None:
        if not (burn_in >= 0 and math.isfinite(burn_in)):
            raise AnalysisError("--burn-in must be a finite compute value >= 0")
        return float(burn_in)
    if frac is not None:
        if not 0 <= frac < 1:
            raise AnalysisError("--burn-in-frac must be in [0, 1)")
        return frac * curve.final_compute
    if not curve.is_run:
        return 0.0
    cut = DEFAULT_BURN_IN_FRAC * curve.final_compute
    seen = curve.extra.get("prompts_seen")
    if curve.prompts_per_pass and seen is not None and np.any(seen >= curve.prompts_per_pass):
        cut = min(cut, float(curve.compute[np.argmax(seen >= curve.prompts_per_pass)]))
    return cut


def fit_points(
    curve: RLCurve, cutoff: float, until: float | None = None, keep_start: bool = True
) -> RLPoints:
    """Points used for fitting: compute >= cutoff (and <= until), plus the C = 0 start
    evaluation when present and `keep_start` (it anchors the sigmoid's R0)."""
    C = curve.compute
    keep = (C >= cutoff) & (C > 0)
    if until is not None:
        keep &= C <= until
    if keep_start:
        keep |= C == 0
    return RLPoints.make(C[keep], curve.pass_rate[keep], curve.stderr[keep])


def variance_collapsed(curve: RLCurve, until: float | None = None, min_zero_var: float = 0.8) -> bool:
    """True when, at the last evaluation (up to compute `until`), most training groups have
    zero reward variance while the train reward is neither ~0 nor ~1: the policy became
    deterministic (exploration collapsed), so the curve's future is not the fitted law's."""
    zv, tr = curve.extra.get("zero_var_frac"), curve.extra.get("train_reward")
    if zv is None or tr is None:
        return False
    i = len(zv) - 1 if until is None else int(np.searchsorted(curve.compute, until, "right")) - 1
    if i < 0 or not np.isfinite(zv[i]) or not np.isfinite(tr[i]):
        return False
    return bool(zv[i] >= min_zero_var and 0.05 < tr[i] < 0.95)
