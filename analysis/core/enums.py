"""The fixed sets of words the point-law fits use, as enums whose values are the strings on disk.

Each is an `enum.StrEnum`: a member *is* its string (`FitStatus.FTOL == "relative decrease below
tolerance"`, `json.dumps` writes the string, f-strings print it), so the JSON a fit writes and
the flags the command line takes are unchanged, while the code names every value once.

- `FitStatus`: how the best start of a fit stopped (`status` in `fit --json`, the summary line);
  one per L-BFGS stop code (`analysis.core.lbfgs.STATUS_NAMES`).
- `LawName`: the built-in point laws of `analysis.laws.registry` (users may register more under
  any other name, so a law's `name` stays a string; these are the ones the package defines).
- `Precision`: the `precision` of a multi-start search (`fit --solver-precision`).
- `NParams`: which parameter count N a fit uses (`--n-params`, `n_params` in the JSON).
- `TransformKind`: how an internal optimiser coordinate maps to a bounded public parameter.
- `BoundPosition`: where a fitted parameter sits relative to its bound (`BoundNote.where`).
"""

from __future__ import annotations

import enum


class FitStatus(enum.StrEnum):
    """Why a start stopped (the best start's is the fit's `status`)."""

    RUNNING = "running"  # never reported by a finished fit: the start still had evaluations left
    GTOL = "gradient below tolerance"
    FTOL = "relative decrease below tolerance"
    STALLED = "line search cannot decrease f (round-off floor)"
    MAX_EVALS = "evaluation limit reached"

    @property
    def converged(self) -> bool:
        """A convergence test was met (the round-off floor at an optimum counts as one)."""
        return self in (FitStatus.GTOL, FitStatus.FTOL, FitStatus.STALLED)


class LawName(enum.StrEnum):
    """The point laws `analysis.laws.registry` registers at import."""

    CHINCHILLA = "chinchilla"
    CHINCHILLA_TIED = "chinchilla_tied"
    DATA_CONSTRAINED = "data_constrained"
    DATA_CONSTRAINED_D = "data_constrained_d"
    # mixture of experts (analysis/laws/moe_forms.py): fixed-token ladders, then (N, D, E) ladders
    MOE_BILINEAR = "moe_bilinear"
    MOE_CLARK = "moe_clark"
    MOE_JOINT_N = "moe_joint_n"
    MOE_BILINEAR_D = "moe_bilinear_d"
    MOE_JOINT = "moe_joint"


# The law `python -m analysis fit` fits without --law (and `backtest` marks as the default).
DEFAULT_LAW = LawName.CHINCHILLA


class Precision(enum.StrEnum):
    """Floating-point strategy of a multi-start search (see `analysis.laws.fitting.multistart`)."""

    AUTO = "auto"  # MIXED for big searches (starts x points >= MIXED_MIN_WORK), else FLOAT64
    MIXED = "mixed"  # every start in float32, the near-best ones polished in float64
    FLOAT64 = "float64"  # every start in float64


class NParams(enum.StrEnum):
    """Which parameter count N is (`--n-params`)."""

    TOTAL = "total"  # every parameter
    NON_EMBEDDING = "non_embedding"  # without the input embedding and untied output head (Kaplan's N)
    # the parameters one token passes through (a mixture of experts' dense-equivalent size: the
    # shared layers and top_k experts); a dense model's total
    ACTIVE = "active"


class TransformKind(enum.StrEnum):
    """Internal coordinate t -> public parameter p, chosen from the parameter's bounds."""

    IDENTITY = "identity"  # unbounded: p = t
    EXP = "exp"  # (0, inf): p = exp(t)
    LOWER = "lower"  # (lo, inf): p = lo + exp(t)
    UPPER = "upper"  # (-inf, hi): p = hi - exp(t)
    INTERVAL = "interval"  # (lo, hi): the soft clamp (identity inside, exponential tails)


class BoundPosition(enum.StrEnum):
    """Where a fitted parameter is relative to one of its bounds."""

    AT = "at"  # on the bound to round-off
    NEAR = "near"  # within NEAR_BOUND_FRACTION of an interval's width
    CI = "ci"  # the estimate is clear of it, the bootstrap CI reaches it
