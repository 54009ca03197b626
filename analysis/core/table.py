"""Reading and checking the points a law is fitted to.

Why a module of its own: every bad input (missing file, empty CSV, unknown column, NaN or
non-positive value, too few points, one model size) must stop with one line that says what to
fix, before any optimiser runs. A silent garbage fit is worse than no fit.

Columns have *roles*: `N` (parameters), `D` (tokens), `C` (training FLOPs), `loss` (the target),
`x` (the input of the generic `power` law), `U` (unique training tokens, for the data-constrained
laws), `experts` (routed experts per MoE layer, for the MoE laws: dense runs have 1; a value
below 1 is an error). Each role is found by an explicit column name or, by
default, the first present of a few common spellings (including the run table that
`analysis.core.runs.load` writes). Missing D is derived as C / (6N) and missing C as 6ND, as the
Chinchilla papers do.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from typing import Mapping

import numpy as np
import pandas as pd

from analysis.core.enums import NParams
from models.base.errors import AnalysisError
from models.base.rundir import ROLE_FIELDS

# The columns of a runs table (`collect`) holding each role, looked for in this order by every
# reader of one: the role's own name, then the run summary's field (models.base.rundir.ROLE_FIELDS).
TABLE_COLUMNS: dict[str, tuple[str, str]] = {role: (role, field) for role, field in ROLE_FIELDS.items()}
LOSS_COLUMNS = TABLE_COLUMNS["loss"]  # ("loss", the summary's final eval loss)
# The trainer's expert count as `collect` flattens it (missing, NaN, on a dense run: one expert)
EXPERTS_CONFIG_COLUMN = "model.moe.experts"
ALIASES: dict[str, tuple[str, ...]] = {
    "N": (*TABLE_COLUMNS["N"], "Model Size", "params_n"),
    "D": (*TABLE_COLUMNS["D"], "n_tokens"),
    "C": (*TABLE_COLUMNS["C"], "FLOPs", "Training FLOP", "compute"),
    "loss": (*LOSS_COLUMNS, "eval_loss", "final_train_loss"),
    "x": ("x",),
    "U": ("U", "unique_tokens"),
    "experts": ("experts", EXPERTS_CONFIG_COLUMN),
}
FLAGS = {
    "N": "--n-col",
    "D": "--d-col",
    "C": "--c-col",
    "loss": "--loss-col",
    "x": "--x-col",
    "U": "--u-col",
    "experts": "--experts-col",
}
FLOPS_PER_PARAM_TOKEN = 6.0
# Which parameter count N is (`--n-params`): every parameter, or Kaplan et al.'s count without
# the vocabulary matrices (input embedding, untied output head). The runs table of `collect`
# carries both (n_params, n_params_non_embedding); Gadre et al.'s shared data too.
N_PARAMS_KINDS = tuple(NParams)
NON_EMBEDDING_ALIASES = ("n_params_non_embedding", "N_non_embedding")
# A mixture of experts' active (dense-equivalent) parameter count, preferred by the MoE laws
ACTIVE_ALIASES = ("n_params_active", "N_active", "active_params")


class FitNotice(UserWarning):
    """Something about a fit the user must read (the CLI prints each as one `warning:` line)."""


class NParamsWarning(FitNotice):
    """A law meant for non-embedding N was fitted on total N because the data lack that column."""


PARQUET_SUFFIXES = (".parquet", ".pq")  # any case


def read_table(path: str | os.PathLike) -> pd.DataFrame:
    """Read a CSV (or Parquet) of points; one-line errors for missing, empty or unreadable files."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise AnalysisError(f"file not found: {path}")
    if os.path.isdir(path):
        raise AnalysisError(
            f"{path} is a directory; pass a CSV file (or load runs with analysis.core.runs.load)"
        )
    if os.path.getsize(path) == 0:
        raise AnalysisError(f"{path} is empty; it needs a header row and one row per run")
    try:
        df = pd.read_parquet(path) if path.lower().endswith(PARQUET_SUFFIXES) else pd.read_csv(path)
    except pd.errors.EmptyDataError:
        raise AnalysisError(f"{path} has no columns; it needs a header row and one row per run") from None
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError, OSError, ImportError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise AnalysisError(f"cannot parse {path}: {first}") from None
    if df.empty:
        raise AnalysisError(f"{path} has a header but no rows")
    return df


def _find(df: pd.DataFrame, role: str, explicit: str | None) -> str | None:
    if explicit is not None:
        if explicit not in df.columns:
            raise AnalysisError(
                f"column {explicit!r} (given for {role}) not found; the data has columns: "
                f"{', '.join(map(str, df.columns))}"
            )
        return explicit
    for name in ALIASES.get(role, (role,)):
        if name in df.columns:
            return name
    return None


def _missing(df: pd.DataFrame, role: str, what: str) -> AnalysisError:
    tried = ", ".join(ALIASES.get(role, (role,)))
    flag = FLAGS.get(role, "columns={...}")
    return AnalysisError(
        f"no {what} column: looked for {tried}; the data has columns {', '.join(map(str, df.columns))}; "
        f"name the right one with {flag} NAME"
    )


@dataclass(frozen=True)
class Points:
    """Validated inputs of one fit: positive finite arrays per role, plus the target."""

    inputs: dict[str, np.ndarray]  # role -> values, for the law's inputs (and C when known)
    y: np.ndarray
    weights: np.ndarray
    columns: dict[str, str]  # role -> column name used ("<derived>" when computed)
    index: np.ndarray  # row labels of the source frame

    @property
    def n(self) -> int:
        return self.y.shape[0]


_WHAT = {
    "N": "model-size (parameters)",
    "D": "tokens",
    "C": "compute (FLOPs)",
    "loss": "loss",
    "x": "x",
    "U": "unique-token (U: the training split's size, or data.max_unique_tokens)",
    "experts": "experts (routed experts per MoE layer; dense runs have 1)",
}


def resolve_inputs(
    df: pd.DataFrame, roles: tuple[str, ...], columns: Mapping[str, str] | None = None
) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Arrays for `roles` (plus C whenever it is known or derivable) and the column names used.

    D is derived as C / (6N) when absent, C as 6ND. Only the columns that are needed are checked,
    so a NaN in an unused column does not block a fit.
    """
    columns = dict(columns or {})
    unknown_roles = set(columns) - set(ALIASES) - set(roles)
    if unknown_roles:
        raise AnalysisError(
            f"columns given for unknown roles {sorted(unknown_roles)}; roles are {', '.join(ALIASES)}"
        )
    used: dict[str, str] = {}
    cache: dict[str, np.ndarray | None] = {}

    def col(role: str, required: bool) -> np.ndarray | None:
        if role not in cache:
            name = _find(df, role, columns.get(role))
            if name is None:
                cache[role] = None
            else:
                try:
                    cache[role] = _numeric(df, name, role)
                    used[role] = str(name)
                except AnalysisError:
                    if required:
                        raise
                    cache[role] = None
        if cache[role] is None and required:
            raise _missing(df, role, _WHAT.get(role, role))
        return cache[role]

    vals: dict[str, np.ndarray] = {}
    for role in roles:
        if (
            role == "D"
            and _find(df, "D", columns.get("D")) is None
            and _find(df, "C", columns.get("C")) is not None
        ):
            N, C = col("N", True), col("C", True)
            vals["D"], used["D"] = (
                C / (FLOPS_PER_PARAM_TOKEN * N),
                f"<derived: {used['C']} / (6 * {used['N']})>",
            )
        elif (
            role == "C"
            and _find(df, "C", columns.get("C")) is None
            and _find(df, "N", columns.get("N")) is not None
        ):
            N, D = col("N", True), col("D", True)
            vals["C"], used["C"] = FLOPS_PER_PARAM_TOKEN * N * D, f"<derived: 6 * {used['N']} * {used['D']}>"
        else:
            vals[role] = col(role, True)
    if "C" not in vals:
        C = col("C", False)
        if C is not None:
            vals["C"] = C
        else:
            N, D = vals.get("N", col("N", False)), vals.get("D", col("D", False))
            if N is not None and D is not None:
                vals["C"], used["C"] = FLOPS_PER_PARAM_TOKEN * N * D, "<derived: 6 N D>"
    return vals, used


def resolve(
    df: pd.DataFrame,
    inputs: tuple[str, ...],
    columns: Mapping[str, str] | None = None,
    weights: str | np.ndarray | None = None,
) -> Points:
    """Pick the columns for `inputs` + loss (deriving D or C), check them, return `Points`."""
    columns = dict(columns or {})
    loss_name = _find(df, "loss", columns.get("loss"))
    if loss_name is None:
        raise _missing(df, "loss", "loss")
    vals, used = resolve_inputs(df, inputs, {k: v for k, v in columns.items() if k != "loss"})
    y = _numeric(df, loss_name, "loss")
    used["loss"] = str(loss_name)
    if isinstance(weights, str):
        if weights not in df.columns:
            raise AnalysisError(
                f"weight column {weights!r} not found; columns: {', '.join(map(str, df.columns))}"
            )
        w = _numeric(df, weights, "weight")
    elif weights is None:
        w = np.ones(len(df))
    else:
        w = np.asarray(weights, dtype=float)
        if w.shape != (len(df),):
            raise AnalysisError(f"weights must have one value per row ({len(df)}), got shape {w.shape}")
        _check_values(w, "weights", "weight")
    if np.any(w < 0) or not np.any(w > 0):
        raise AnalysisError("weights must be >= 0 with at least one > 0")
    if "U" in vals:
        _check_repeats(df, vals)
    return Points(inputs=vals, y=y, weights=w, columns=used, index=np.asarray(df.index))


EPOCHS_COLUMN = "epochs"  # what `collect` writes: tokens trained / unique tokens


def _check_repeats(df: pd.DataFrame, vals: Mapping[str, np.ndarray]) -> None:
    """A row whose `epochs` column says it repeated its data (> 1 epoch) while its D is below its
    U contradicts itself: U or D is not what the run trained on."""
    if EPOCHS_COLUMN not in df.columns or "D" not in vals:
        return
    ep = pd.to_numeric(df[EPOCHS_COLUMN], errors="coerce").to_numpy(float)
    bad = np.flatnonzero((ep > 1.01) & (vals["D"] < vals["U"]))
    if bad.size:
        i = int(bad[0])
        raise AnalysisError(
            f"row {i}: {EPOCHS_COLUMN}={ep[i]:g} says the run repeated its data, but D={vals['D'][i]:g} < "
            f"U={vals['U'][i]:g}; fix the row's unique tokens (U) or its tokens (D)"
        )


def _numeric(df: pd.DataFrame, name: str, role: str) -> np.ndarray:
    try:
        v = pd.to_numeric(df[name], errors="raise").to_numpy(dtype=float)
    except (ValueError, TypeError):
        raise AnalysisError(f"column {name!r} ({role}) has non-numeric values") from None
    if role == "experts" and name == EXPERTS_CONFIG_COLUMN:
        v = np.where(np.isnan(v), 1.0, v)  # a collected dense run has no model.moe: one expert
    _check_values(v, name, role)
    return v


def _check_values(v: np.ndarray, name: str, role: str) -> None:
    bad = ~np.isfinite(v)
    if bad.any():
        rows = np.flatnonzero(bad)[:5].tolist()
        raise AnalysisError(
            f"column {name!r} ({role}) has {int(bad.sum())} NaN/inf value(s) (rows {rows}); "
            f"remove or fix those rows"
        )
    if role == "weight":
        return
    if role == "experts" and (v < 1).any():
        rows = np.flatnonzero(v < 1)[:5].tolist()
        raise AnalysisError(
            f"column {name!r} (experts) has {int((v < 1).sum())} value(s) below 1 (rows {rows}, e.g. "
            f"{v[v < 1][0]:g}); it counts routed experts per MoE layer, and a dense run has experts = 1"
        )
    nonpos = v <= 0
    if nonpos.any():
        rows = np.flatnonzero(nonpos)[:5].tolist()
        raise AnalysisError(
            f"column {name!r} ({role}) has {int(nonpos.sum())} non-positive value(s) "
            f"(rows {rows}, e.g. {v[nonpos][0]:g}); "
            "scaling laws are fitted in log space, so every value must be > 0"
        )


def choose_n_column(
    df: pd.DataFrame,
    law,
    columns: Mapping[str, str] | None = None,
    n_params: str | None = None,
) -> tuple[dict[str, str], str | None]:
    """(columns with the N column chosen, which N it is: "total", "non_embedding", "active" or None).

    `law` is a registry `Law` (its name, inputs and `default_n_params` are read). `n_params` None
    means the law's default ("non_embedding" for Kaplan-form laws of N), and nothing at all for a
    law without an N input. A column named with `columns["N"]` (`--n-col`)
    is used as given; its kind is the one requested, else read from its name. Non-embedding N
    is the first of `NON_EMBEDDING_ALIASES` present; active N (the MoE laws) the first of
    `ACTIVE_ALIASES`, else the N column as given. Missing, it is a one-line error when
    requested and, for a law's default, a `NParamsWarning` and a fit on total N (said in the result).
    """
    columns = dict(columns or {})
    if n_params is not None and n_params not in N_PARAMS_KINDS:
        raise AnalysisError(f"--n-params must be one of {', '.join(N_PARAMS_KINDS)} (got {n_params!r})")
    if n_params is None and "N" not in law.inputs:
        return columns, None
    kind = n_params or law.default_n_params
    if "N" in columns:
        named = NParams.NON_EMBEDDING if columns["N"] in NON_EMBEDDING_ALIASES else NParams.TOTAL
        named = NParams.ACTIVE if columns["N"] in ACTIVE_ALIASES or kind == NParams.ACTIVE else named
        return columns, n_params or named
    if kind == NParams.TOTAL:
        return columns, kind
    if kind == NParams.ACTIVE:
        # the active count when the table has one (a routed model's total counts every expert);
        # else the N column as given, taken to be the dense-equivalent size (a dense run's total)
        name = next((c for c in ACTIVE_ALIASES if c in df.columns), None)
        if name is not None:
            columns["N"] = name
        return columns, kind
    name = next((c for c in NON_EMBEDDING_ALIASES if c in df.columns), None)
    if name is not None:
        columns["N"] = name
        return columns, kind
    if n_params is not None:
        raise AnalysisError(
            "--n-params non_embedding needs a non-embedding parameter count: add a column "
            f"{NON_EMBEDDING_ALIASES[0]} (parameters without the embedding and untied output head), or name "
            "one with --n-col"
        )
    warnings.warn(
        f"law {law.name} is fitted on non-embedding N by default (Kaplan et al. 2020), but the data "
        f"have no {NON_EMBEDDING_ALIASES[0]} column: fitted on total N instead; add that column, or "
        "pass --n-params total to say so",
        NParamsWarning,
        stacklevel=3,
    )
    return columns, NParams.TOTAL
