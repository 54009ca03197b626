"""The fitted-law report of a sweep: collect runs, fit, validate, plot, write HTML + Markdown.

`build_report(sweep_dir, out_dir)` is what `python -m analysis report` runs. It uses only the
public analysis API (runs.load, fit_law, approach2, compare_approaches, allocation, held-out
fits), so the report shows exactly what a notebook user would get:

1. every run under the sweep dir (completed or not) and the shapes the sweep skipped; runs that
   differ only in `optim.*` (an LR sweep per rung) are reduced to the best run per (budget,
   shape) for every fit below (analysis.core.best_runs), with the loss-vs-LR figure per rung;
2. Approach 3: the Chinchilla law fitted to all completed runs, bootstrap CIs, N*/D* at the
   requested budgets and the compute-optimal frontier;
3. Approach 2: IsoFLOP parabolas per budget -> N_opt(C) power law, compared with Approach 3;
4. the held-out check: the law fitted on all budgets but the largest predicts the largest;
5. with hyperparameter laws (`hparams`: an HP.json from `python -m analysis fit-hparams`, or one
   found as SWEEP_DIR/hparams.json or SWEEP_DIR/../hparams.json), the "Hyperparameter law"
   section (analysis/report/hparams.py) and the recipe in every planning section;
6. when the runs measured downstream tasks (`eval.tasks`), each task's predicted accuracy with its
   90% interval at the law's compute-optimal (N*, D*) (analysis/report/downstream.py);
7. warnings a reader must see before trusting the numbers (too few sizes per budget, minima at
   the ladder's edge, parameters at their bounds, approaches disagreeing, big held-out error).

`sweep_dir` may also be a runs table (.csv, .parquet or .pq: what `python -m analysis collect`
writes, or a user's own table with N, D and/or C, loss and optionally U), read with the column
rules of `python -m analysis fit` (analysis.core.table.resolve_inputs): the report then has the
law fit, the held-out check, allocation and frontier; loss curves, hyperparameter probes,
downstream tasks and RL need run directories and are left out, with one line saying so. A table
the law cannot be fitted to is an error (one line), not a report without a law.

Sections whose data is insufficient are replaced by a warning saying why; the report is still
written. Outputs: report.html (self-contained, figures inlined as base64 PNG), report.md with
figures/*.png beside it, and report.json with the numbers.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import math
import pathlib
import warnings
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from scipy.stats import binom

from analysis.compare import section as recipes
from analysis.core.best_runs import SELECTED, Selection, has_config, marked, select_best_runs
from analysis.core.enums import DEFAULT_LAW
from analysis.core.runs import RunNote, RunWarning
from analysis.core.runs import load as load_runs
from analysis.core.table import choose_n_column, read_table, resolve, resolve_inputs
from analysis.laws.fitting import FitResult, fit_law
from analysis.laws.isoflop import approach2, compare_approaches, group_budgets
from analysis.laws.methods import fit_auto
from analysis.laws.registry import bound_notes, get_law
from analysis.laws.selection import AUTO, default_law
from analysis.planning import data_limit, planner
from analysis.report import continual, interactive, moe
from analysis.report import figures as figs
from analysis.report import published as pub
from analysis.report.downstream import downstream_section
from analysis.report.hparams import law_section, load_laws
from analysis.report.render import verdict, write_report
from analysis.rl.report import find_rl_runs, rl_section
from models.base.errors import AnalysisError
from models.base.jsonio import write_json_atomic
from models.base.rundir import ROLE_FIELDS, SWEEP_PLAN_FILE, RunStatus
from models.flops import MFU_CAUSAL, MFU_CONVENTIONS, palm_flops_per_token

COLS = dict(ROLE_FIELDS)  # the fit's column of each role: the summary field (n_params, ...)
LOSS = COLS["loss"]  # the runs' final eval loss
MIN_SIZES = 3
# The held-out check flags its intervals when fewer held-out runs fall inside their 90% prediction
# intervals than a 90% interval plausibly gives: P(at most that many inside | n, 0.9) below this
# (a one-sided binomial test). No error target: what a good error is depends on the extrapolation.
COVERAGE_ALPHA = 0.05
MFU_CONVENTION = planner.MFU_CONVENTION  # the planner's (the cost model's): PaLM's 6N + 12LHQT
MAX_NAMES = 5  # a warning names at most this many runs; the run table under Details has them all


def _budget_labels(df: pd.DataFrame) -> pd.Series:
    """The compute budget each run belongs to: the sweep's `sweep.budget`, else grouped FLOPs."""
    if "sweep.budget" in df.columns:
        b = pd.to_numeric(df["sweep.budget"], errors="coerce")
        if b.notna().all():
            return b.astype(float)
    C = df["flops"].to_numpy(float)
    lab = group_budgets(C)
    out = np.empty_like(C)
    for g in np.unique(lab):
        out[lab == g] = float(np.exp(np.mean(np.log(C[lab == g]))))
    return pd.Series(out, index=df.index)


def _read_plan(sweep_dir: pathlib.Path) -> list[dict]:
    p = sweep_dir / SWEEP_PLAN_FILE
    try:
        return [r for r in json.loads(p.read_text())["runs"] if r.get("action") == "skip"]
    except (OSError, ValueError, KeyError, TypeError):
        return []


PLAN_COMPUTE_KEYS = ("flops_to_train", "flops_if_separate")
EARLY_STOP_KEYS = ("flops_spent", "flops_full_sweep", "flops_saved_by_early_stop", "stopped_early", "at", "p")


def read_compute(sweep_dir: pathlib.Path, warn: list[str]) -> dict | None:
    """What the sweep spends on training against the same runs trained separately, from
    sweep_plan.json's `flops_to_train` and `flops_if_separate` (WSD branches share a trunk, so
    the first is smaller): {flops_to_train, flops_if_separate, ratio}, and with sweep.early_stop
    `early_stop` (the FLOPs spent against the full sweep's, the runs stopped). None, silently, when
    the plan is missing or predates those keys; None and a warning when they are not positive numbers."""
    try:
        plan = json.loads((sweep_dir / SWEEP_PLAN_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(plan, dict) or not all(k in plan for k in PLAN_COMPUTE_KEYS):
        return None
    try:
        spent, separate = (float(plan[k]) for k in PLAN_COMPUTE_KEYS)
    except (TypeError, ValueError):
        spent = separate = math.nan
    if not (math.isfinite(spent) and math.isfinite(separate) and spent > 0 and separate > 0):
        warn.append(
            f"sweep_plan.json: flops_to_train and flops_if_separate must be positive FLOP counts (got "
            f"{plan['flops_to_train']!r}, {plan['flops_if_separate']!r}); "
            "the report does not state the compute"
        )
        return None
    out = {"flops_to_train": spent, "flops_if_separate": separate, "ratio": spent / separate}
    early = plan.get("early_stop")  # sweep.early_stop: the compute spent against the full sweep
    if isinstance(early, dict) and early.get("flops_full_sweep"):
        out["early_stop"] = {k: early.get(k) for k in EARLY_STOP_KEYS}
    return out


class LoadMessages(NamedTuple):
    """What loading the runs said: `warnings` (skipped or unreadable runs, data problems) and
    `notes` (what was left out by design, e.g. WSD trunks: the report's notes line, not a warning)."""

    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


def collect(sweep_dir: pathlib.Path) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, LoadMessages]:
    """(all runs, completed runs with a `budget` column, curves, load warnings and notes).

    RL runs (found by `analysis.rl.report.find_rl_runs`) are left out: they have their own section.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        all_runs, curves = load_runs(sweep_dir, include_unfinished=True, cache_dir=False)
    notes = [str(w.message) for w in caught if issubclass(w.category, RunWarning)]
    design = [str(w.message) for w in caught if issubclass(w.category, RunNote)]
    notes = [n for n in notes if n not in design]
    rl_dirs = {str(d) for d in find_rl_runs(sweep_dir)}
    if rl_dirs and "path" in all_runs.columns:
        rl_names = set(all_runs.loc[all_runs["path"].astype(str).isin(rl_dirs), "run"])
        all_runs = all_runs[~all_runs["path"].astype(str).isin(rl_dirs)].copy()
        if "run" in curves.columns:
            curves = curves[~curves["run"].isin(rl_names)]
        notes = [n for n in notes if not any(r in n for r in rl_names)]
        design = [n for n in design if not any(r in n for r in rl_names)]
        if all_runs.empty:
            raise NoPretrainingRuns(f"only RL runs under {sweep_dir}")
    for c in (*COLS.values(), "tokens_per_s", "mfu", "wall_time_s"):
        if c in all_runs.columns:
            all_runs[c] = pd.to_numeric(all_runs[c], errors="coerce")
    done = all_runs[all_runs["status"] == RunStatus.COMPLETED].copy()
    need = list(COLS.values())
    missing = [c for c in need if c not in done.columns]
    if missing:
        raise AnalysisError(
            f"run summaries under {sweep_dir} lack {missing}; were they written by experiments.train?"
        )
    done = done.dropna(subset=need)
    done = done[np.isfinite(done[LOSS]) & (done[LOSS] > 0)]
    if done.empty:
        raise AnalysisError(f"no completed runs with a final eval loss under {sweep_dir}; nothing to report")
    done["budget"] = _budget_labels(done)
    if "budget" not in all_runs.columns:
        all_runs["budget"] = np.nan
    all_runs.loc[done.index, "budget"] = done["budget"]
    return all_runs, done.reset_index(drop=True), curves, LoadMessages(tuple(notes), tuple(design))


class NoPretrainingRuns(AnalysisError):
    """The directory holds RL runs only: the report is then the RL section alone."""


TABLE_SUFFIXES = (".csv", ".parquet", ".pq")
# The sections a runs table cannot give: they read files in each run's directory.
RUN_DIR_SECTIONS = ("loss curves", "hyperparameter probes", "downstream tasks", "RL")


def is_runs_table(path: str | pathlib.Path) -> bool:
    """Whether `path` names a runs table (by its suffix: .csv, .parquet, .pq) rather than a folder."""
    path = pathlib.Path(path)
    return path.suffix.lower() in TABLE_SUFFIXES and not path.is_dir()


@dataclasses.dataclass(frozen=True)
class Source:
    """What the report reads: a sweep directory, or a runs table already read and checked
    (`collected`: all runs, completed runs with `budget`, curves, notes, as `collect` returns)."""

    path: pathlib.Path
    collected: tuple | None = None  # set for a runs table
    columns: dict = dataclasses.field(default_factory=dict)  # role -> column used (a runs table)

    @property
    def table(self) -> bool:
        return self.collected is not None


def collect_table(
    path: pathlib.Path, columns: dict[str, str] | None = None, n_params: str = "total"
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, list[str], dict[str, str]]:
    """`collect` for a runs table: (all rows, completed rows with a `budget` column, no curves,
    notes, role -> column used). Columns are found as `python -m analysis fit` finds them
    (`columns`: --n-col and co.; D from C / 6N, C from 6ND). A `status` column (collect
    --include-unfinished) keeps unfinished rows out of the fits; without run configs a `selected`
    column keeps its marked rows, as in `fit`. Budgets: a positive `budget` column, else
    `sweep.budget`, else runs grouped by C. Errors are one line naming the table."""
    columns = dict(columns or {})
    df = read_table(path).reset_index(drop=True)
    runs = df.copy()
    status = df["status"] if "status" in df.columns else pd.Series(np.nan, index=df.index)
    runs["status"] = status.where(status.notna(), RunStatus.COMPLETED).astype(str)
    runs["run"] = df["run"].astype(str) if "run" in df.columns else [f"row {i + 1}" for i in df.index]
    keep = runs["status"] == RunStatus.COMPLETED
    if has_config(df):  # select_best recomputes the selection from the run configs
        runs = runs.drop(columns=[c for c in (SELECTED, "hparam_group") if c in runs.columns])
    elif SELECTED in df.columns:
        runs[SELECTED] = marked(df)
        keep &= runs[SELECTED]
    if not keep.any():
        raise AnalysisError(f"{path}: no completed (and selected) rows; nothing to fit")
    try:  # on the table's own columns, so that every message names those
        pts = resolve(df[keep], ("N", "D"), columns)
        _check_enough_runs(pts)
        if n_params == "non_embedding":
            ne = choose_n_column(df, get_law("chinchilla"), columns, n_params)[0]["N"]
            runs["n_params_non_embedding"] = pd.to_numeric(df[ne], errors="coerce")
    except AnalysisError as e:
        raise AnalysisError(f"{path}: {e}") from None
    used = pts.columns
    runs = runs.assign(**_role_values(df, used))
    done = runs[keep].copy()
    own = pd.to_numeric(df.loc[keep, "budget"], errors="coerce") if "budget" in df.columns else None
    done["budget"] = own.astype(float) if own is not None and (own > 0).all() else _budget_labels(done)
    runs["budget"] = np.nan
    runs.loc[done.index, "budget"] = done["budget"]
    notes = _repeated_data_notes(path, df[keep], done["tokens"].to_numpy(float), columns)
    return runs, done.reset_index(drop=True), pd.DataFrame(), LoadMessages(tuple(notes)), used


def _check_enough_runs(pts) -> None:
    """The report's law needs as many runs as it has free parameters, at two model sizes and two
    token counts at least (the law's own rule); the report has no --fix, so the fix is more runs."""
    law = get_law("chinchilla")
    need = len(law.param_names)
    if pts.n < need:
        raise AnalysisError(
            f"{pts.n} usable run(s) for the {need} free parameters of the Chinchilla law: add runs "
            f"(at least {need}, more is better), or fit with `python -m analysis fit --fix NAME=VALUE`"
        )
    for role, k in law.min_distinct.items():
        seen = len(np.unique(pts.inputs[role]))
        if seen < k:
            raise AnalysisError(
                f"only {seen} distinct value(s) in column {pts.columns[role]!r} ({role}); the Chinchilla "
                f"law needs at least {k} to identify its {role}-dependence: add runs at other "
                + ("model sizes" if role == "N" else "token counts")
            )


def _role_values(runs: pd.DataFrame, used: dict[str, str]) -> dict[str, pd.Series]:
    """The report's columns (n_params, tokens, flops, final_eval_loss) from the columns the fit's
    rules chose (`used`, role -> column; "<derived ...>" for D = C / 6N or C = 6ND), for every row."""

    def num(role: str) -> pd.Series | None:
        name = used.get(role, "<")
        return None if name.startswith("<") else pd.to_numeric(runs[name], errors="coerce").astype(float)

    N, D, C = num("N"), num("D"), num("C")
    if D is None:
        D = C / (6.0 * N)
    if C is None:
        C = 6.0 * N * D
    return {COLS["N"]: N, COLS["D"]: D, COLS["C"]: C, LOSS: num("loss")}


def _repeated_data_notes(
    path: pathlib.Path, rows: pd.DataFrame, tokens: np.ndarray, columns: dict[str, str]
) -> list[str]:
    """A warning when the table's unique tokens (U of `rows`, found as `fit` finds it) show
    repeated data (`tokens` D > U): the report's Chinchilla law counts every token as fresh."""
    try:
        U = resolve_inputs(rows, ("U",), {k: v for k, v in columns.items() if k == "U"})[0]["U"]
    except AnalysisError as e:
        if "U" in columns:  # named with --u-col: it must be usable
            raise AnalysisError(f"{path}: {e}") from None
        return []
    epochs = tokens / U
    rep = epochs > 1.001
    if not rep.any():
        return []
    return [
        f"{int(rep.sum())} of {len(rows)} runs repeated their data (D > U, up to {epochs.max():.3g} "
        "epochs): the law was chosen by their own epochs and size backtests (Chinchilla, which counts "
        "repeats as fresh, unless a data-constrained form wins both; law.law_selection); "
        f"`python -m analysis fit {path} --law data_constrained` forces the repeated-data law"
    ]


def _frontier(fit, C: np.ndarray) -> dict:
    al = fit.allocation(list(C))
    rows = al["budgets"]
    out: dict[str, Any] = {"C": [r["C"] for r in rows], "method": rows[0]["loss_method"] if rows else None}
    for key in ("loss", "N_opt", "D_opt"):
        out[key] = [r[key] for r in rows]
        cis = [r.get(f"{key}_ci", [math.nan, math.nan]) for r in rows]
        out[key + "_lo"] = [c[0] for c in cis]
        out[key + "_hi"] = [c[1] for c in cis]
    pis = [r.get("loss_interval", [math.nan, math.nan]) for r in rows]  # 90% prediction interval
    out["loss_pi_lo"], out["loss_pi_hi"] = [c[0] for c in pis], [c[1] for c in pis]
    return out


MAX_THIN_BUDGET_LINES = 3  # more budgets with too few sizes than this: one line for all of them


def _edge_and_size_warnings(done: pd.DataFrame) -> list[str]:
    out, thin = [], []
    for b, g in done.groupby("budget"):
        sizes = np.unique(g["n_params"])
        if len(sizes) < MIN_SIZES:
            thin.append((b, len(sizes)))
            continue
        best = g.loc[g[LOSS].idxmin(), "n_params"]
        if best == sizes.min():
            out.append(
                f"budget C={b:.3g}: the lowest loss is at the smallest model (N={int(best):,}); the "
                "optimum may lie below the ladder -- add smaller shapes"
            )
        elif best == sizes.max():
            out.append(
                f"budget C={b:.3g}: the lowest loss is at the largest model (N={int(best):,}); the "
                "optimum may lie above the ladder -- add larger shapes"
            )
    return _thin_budget_warnings(thin) + out


def _thin_budget_warnings(thin: list[tuple[float, int]]) -> list[str]:
    """Budgets with fewer than MIN_SIZES model sizes: a line each, or one line for many (a runs
    table not laid out on IsoFLOP budgets has a FLOP group per run or two)."""
    if len(thin) <= MAX_THIN_BUDGET_LINES:
        return [
            f"budget C={b:.3g}: only {n} model size(s) completed (< {MIN_SIZES}); "
            "its IsoFLOP minimum is not identified"
            for b, n in thin
        ]
    return [
        f"{len(thin)} compute budgets have fewer than {MIN_SIZES} model sizes (C="
        + ", ".join(f"{b:.3g}" for b, _ in thin)
        + "); their IsoFLOP minima are not identified"
    ]


def _bound_warnings(fit) -> list[str]:
    """Parameters at or near a bound the law enforces, or whose CI reaches one (the rule of
    `analysis.laws.registry.bound_notes`, the same lines `fit` prints); CIs spanning > 100x."""
    out = [n.message for n in bound_notes(fit.law_obj, fit.params, fit.ci, tuple(fit.fixed))]
    for name in fit.param_names:
        lo_ci, hi_ci = fit.ci.get(name, [math.nan, math.nan])
        if np.isfinite(lo_ci) and np.isfinite(hi_ci) and lo_ci > 0 and hi_ci / lo_ci > 100:
            out.append(
                f"law parameter {name}: 95% CI [{lo_ci:.3g}, {hi_ci:.3g}] spans more than 100x "
                "-- poorly constrained by these runs"
            )
    if not fit.converged:
        out.append(f"the law fit did not converge ({fit.status})")
    return out


MFU_COL = "mfu_planner"  # each run's MFU in MFU_CONVENTION (`planner_mfu`)


def planner_mfu(runs: pd.DataFrame) -> pd.Series:
    """Each run's MFU in the planner's convention (MFU_CONVENTION, PaLM's 6N + 12·L·H·Q·T per token,
    N every parameter), so the report's MFU and `python -m analysis plan`'s are one number: the
    trainer's MFU (summary.json `mfu`, causal 6N_matmul + 6·L·T·H·d_head) times the ratio of the
    two FLOP counts per token (models.flops), from the run's `model` config and `flops_per_token`.
    NaN where that cannot be done: no MFU, no model config or FLOPs per token (a runs table, older
    summaries), or another convention (a mixture of experts' active FLOPs)."""
    out = pd.Series(np.nan, index=runs.index, dtype=float)
    if "mfu" not in runs.columns:
        return out
    for i, r in runs.iterrows():
        out[i] = _planner_mfu(r)
    return out


def _planner_mfu(r: pd.Series) -> float:
    mfu = pd.to_numeric(r.get("mfu"), errors="coerce")
    conv = r.get("mfu_convention")
    conv = None if not isinstance(conv, str) else conv
    if not np.isfinite(mfu) or conv not in (None, MFU_CAUSAL, MFU_CONVENTION):
        return math.nan
    if conv == MFU_CONVENTION:
        return float(mfu)
    model = r.get("model")
    try:
        model = json.loads(model) if isinstance(model, str) else model
        if not isinstance(model, dict):  # the flattened Hydra config instead
            model = {k: r.get(f"model.{k}") for k in ("n_layers", "n_heads", "d_model", "seq_len")}
        L, H, d, T = (int(model[k]) for k in ("n_layers", "n_heads", "d_model", "seq_len"))
        n, causal = float(r.get("n_params")), float(r.get("flops_per_token"))
    except (TypeError, ValueError, KeyError):
        return math.nan
    if not (H > 0 and causal > 0 and np.isfinite(n)):
        return math.nan
    return float(mfu) * palm_flops_per_token(n, L, H * (d // H), T) / causal


def _mfu_record(all_runs: pd.DataFrame) -> dict:
    """report.json's `mfu_convention`: the planner's, what it counts, and how many runs have it."""
    have = int(np.isfinite(all_runs[MFU_COL]).sum()) if MFU_COL in all_runs.columns else 0
    trainer = int(pd.to_numeric(all_runs.get("mfu", pd.Series(dtype=float)), errors="coerce").notna().sum())
    return {
        "name": MFU_CONVENTION,
        "counts": MFU_CONVENTIONS[MFU_CONVENTION],
        "runs_with_mfu": have,
        "runs_without": trainer - have,  # an MFU in summary.json that could not be converted
    }


def _run_table(all_runs: pd.DataFrame) -> list[dict]:
    rows = []
    for _, r in all_runs.sort_values(["budget", "n_params"], na_position="last").iterrows():

        def num(k):
            v = r.get(k)
            try:
                v = float(v)
            except (TypeError, ValueError):
                return None
            return v if math.isfinite(v) else None

        rows.append(
            {
                "run": str(r["run"]),
                "status": str(r["status"]),
                "budget": num("budget"),
                "N": num("n_params"),
                "D": num("tokens"),
                "C": num("flops"),
                "loss": num(LOSS),
                "tokens_per_s": num("tokens_per_s"),
                "mfu": num(MFU_COL),  # the planner's convention (report.json `mfu_convention`)
                "mfu_trainer": num("mfu"),  # summary.json's (the trainer's causal convention)
                "wall_time_s": num("wall_time_s"),
                "selected": bool(r[SELECTED]) if SELECTED in r.index and pd.notna(r[SELECTED]) else None,
            }
        )
    return rows


def build_report(
    sweep_dir: str | pathlib.Path,
    out_dir: str | pathlib.Path | None = None,
    budgets: Sequence[float] | None = None,
    bootstrap: int = 1000,
    seed: int = 0,
    title: str | None = None,
    hardware: str | None = None,
    gpus: int = 1024,
    n_params: str = "total",
    hparams: str | pathlib.Path | None = None,
    unique_tokens: float | None = None,
    columns: dict[str, str] | None = None,
    recipes_from: Sequence[str] = (),
) -> dict:
    """Analyse the runs under `sweep_dir` and write report.{html,md,json} + figures to `out_dir`.

    `sweep_dir` may instead be a runs table (.csv, .parquet, .pq; see the module docstring), whose
    columns are found as `python -m analysis fit` finds them, or as `columns` (role -> column:
    N, D, C, loss, U) names them; default `out_dir` then: T-report beside a table T.csv.
    `budgets`: compute budgets to state N*/D* for (default: 10x the largest budget swept).
    `hardware` (a conf/hardware name or YAML) and `gpus`: with explicit `budgets`, add a planning
    section per budget (analysis.planning.planner: shape, layout, days, loss with CI from the fitted law).
    RL runs under `sweep_dir` get the RL section (analysis.rl.report); a directory of RL runs
    only gives a report of that section alone. `n_params`: which parameter count N every section
    uses, "total" (default: the Chinchilla law counts every parameter) or "non_embedding".
    `hparams`: an HP.json for the "Hyperparameter law" section and the plans' recipe (default:
    SWEEP_DIR/hparams.json or SWEEP_DIR/../hparams.json when one exists).
    `unique_tokens`: plan the planning sections under a corpus of that many unique tokens
    (analysis.planning.data_limit).
    A sweep of `sweep.recipes` (a runs table with a recipe column), or `recipes_from` (further
    sweeps, one recipe each), adds the "Recipes" section (analysis.compare.section); every other
    section is then fitted to the first recipe's runs.
    Returns the report dict (also written as report.json); its `paths` name the files.
    """
    source = _source(pathlib.Path(sweep_dir), columns, n_params, bootstrap)
    path = source.path
    default_out = path.with_name(f"{path.stem}-report") if source.table else path / "report"
    out = pathlib.Path(out_dir) if out_dir is not None else default_out
    fig_dir = out / "figures"
    fig_dir.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter(
            "ignore", RuntimeWarning
        )  # overflow in bootstrap resamples far from the optimum
        try:
            rep = _build(
                source,
                out,
                fig_dir,
                budgets,
                bootstrap,
                seed,
                title,
                hardware,
                gpus,
                n_params,
                hparams,
                unique_tokens,
                recipes_from,
            )
        except NoPretrainingRuns:
            rep = _rl_only(path, out, title)
    return rep


def _source(path: pathlib.Path, columns: dict[str, str] | None, n_params: str, bootstrap: int) -> Source:
    """The sweep directory or runs table to report on, checked (a table read) before anything is written."""
    if bootstrap < 0:
        raise AnalysisError(f"--bootstrap must be >= 0 (got {bootstrap})")
    if is_runs_table(path):
        *collected, used = collect_table(path, columns, n_params)
        return Source(path, tuple(collected), used)
    if not path.is_dir():
        what = "; a runs table must end in .csv, .parquet or .pq" if path.is_file() else ""
        raise AnalysisError(f"sweep directory not found: {path}{what}")
    if columns:
        flags = ", ".join(f"--{r.lower()}-col" for r in columns)
        raise AnalysisError(
            f"{flags}: column flags are for a runs table (.csv, .parquet, .pq); {path} is a directory"
        )
    return Source(path)


def _rl_section(sweep_dir: pathlib.Path, out: pathlib.Path, warn: list[str]) -> dict | None:
    """The RL section (markdown + its figures in `out`) when `sweep_dir` holds RL runs."""
    if not find_rl_runs(sweep_dir):
        return None
    try:
        return {"markdown": rl_section(sweep_dir, out)}
    except AnalysisError as e:
        warn.append(f"no RL section: {e}")
        return None


def _plan_sections(
    fit, requested: list[float], hardware: str, gpus: int, warn: list[str], hparams=None, unique_tokens=None
) -> list[dict]:
    """One planning section per requested budget, from the law fitted here (with its bootstrap);
    `hparams` (an analysis.planning.recipe.HparamSet) tunes each plan's recipe; `unique_tokens`
    plans under that data limit (the report's data-constrained law, else the paper's prior)."""
    law = data_limit.base_law(fit, "Chinchilla law fitted in this report")
    data_law = (
        None
        if unique_tokens is None
        else data_limit.from_fit(fit, law, f"{fit.law} law fitted in this report")
    )
    out = []
    for c in requested:
        try:
            p = planner.plan(
                c, gpus, hardware, law=law, hparams=hparams, unique_tokens=unique_tokens, data_law=data_law
            )
            out.append({"markdown": p.to_markdown(), "budget": c, "recipe": p.recipe.as_dict()})
            if p.data_limit is not None:
                out[-1]["data_limit"] = p.data_limit.as_dict()
        except AnalysisError as e:
            warn.append(f"no plan for {c:.3g} FLOPs on {gpus} x {hardware}: {e}")
    return out


def _rl_only(sweep_dir: pathlib.Path, out: pathlib.Path, title: str | None) -> dict:
    """The report of a folder holding RL runs only: the RL section alone."""
    warn: list[str] = []
    rl = _rl_section(sweep_dir, out, warn)
    if rl is None:
        raise AnalysisError(
            f"no completed pretraining runs and no RL runs with evaluations under {sweep_dir}; "
            "nothing to report" + (f" ({warn[0]})" if warn else "")
        )
    rep = {
        "verdict": f"RL runs only under {sweep_dir.name}: no pretraining law to answer with; the RL "
        "scaling section below has each run's reward against compute.",
        "title": title or f"RL scaling report: {sweep_dir.name}",
        "sweep_dir": str(sweep_dir.resolve()),
        "generated": _now(),
        "warnings": warn,
        "sections": [rl],
        "rl_only": True,
        "paths": _paths(out),
    }
    _write_outputs(rep, out)
    return rep


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _paths(out: pathlib.Path) -> dict[str, str]:
    return {"html": str(out / "report.html"), "md": str(out / "report.md"), "json": str(out / "report.json")}


def _write_outputs(rep: dict, out: pathlib.Path, interactive_specs: dict[str, dict] | None = None) -> None:
    """report.md, report.html (rendered from report.md's Markdown; `interactive_specs`, Plotly figures
    by the PNG path they replace in the HTML) and report.json (strict JSON: NaN and inf written as null)."""
    write_report(rep, out, interactive_specs)
    write_json_atomic(out / "report.json", rep, indent=1, sort_keys=False)


def _build(
    source: Source,
    out: pathlib.Path,
    fig_dir: pathlib.Path,
    budgets,
    bootstrap: int,
    seed: int,
    title: str | None,
    hardware: str | None = None,
    gpus: int = 1024,
    n_params: str = "total",
    hparams: str | pathlib.Path | None = None,
    unique_tokens: float | None = None,
    recipes_from: Sequence[str] = (),
) -> dict:
    """Collect, fit (Approaches 3 and 2), compare, hold out, plot, add sections, write."""
    warn: list[str] = []
    sweep_dir = source.path
    # a bad --hparams fails before any fit; a runs table has no folder to find an HP.json in
    hp_laws, hp_found = (
        (None, "auto") if source.table and hparams is None else load_laws(sweep_dir, hparams, warn)
    )
    all_runs, done_all, curves, loaded = source.collected or collect(sweep_dir)
    every_recipe = done_all  # the Recipes section compares them; the other sections fit REF's runs
    ref = recipes.ref_recipe(done_all, None if source.table else sweep_dir)
    all_runs, done_all = recipes.ref_only(all_runs, ref), recipes.ref_only(done_all, ref)
    every_moe = done_all  # the MoE and Continual sections fit every run; the others the dense base runs
    all_runs, done_all = _dense_base(all_runs), _dense_base(done_all)
    all_runs = all_runs.assign(**{MFU_COL: planner_mfu(all_runs)})
    done, hp = select_best(all_runs, done_all)
    done = _use_n_params(done, n_params)
    budgets_swept = sorted(done["budget"].unique())
    requested = _requested_budgets(budgets, budgets_swept)
    warn[:0] = list(loaded.warnings) + _incomplete_warnings(all_runs) + (hp.warnings if hp else [])
    warn += _edge_and_size_warnings(done)
    rep = _header(source, title, all_runs, done_all, budgets_swept, requested, bootstrap, seed)
    rep["hparams"] = hp.to_dict() if hp is not None else None
    rep["n_params"] = n_params
    rep["compute"] = None if source.table else read_compute(sweep_dir, warn)
    fit = _law_section(rep, done, requested, bootstrap, seed, warn, strict=source.table)
    if rep["law"] is not None:
        rep["law"]["n_params"] = n_params  # the fit read N from n_params, which _use_n_params filled
    law_sec = law_section(hp_laws, hp_found, rep["law"], requested, warn)
    if law_sec is not None:  # report.json keeps the laws under `hparams`, beside the selection
        rep["hparams"] = {**(rep["hparams"] or {"active": False}), "law": law_sec}
    a2 = _approach2_section(rep, done, requested, bootstrap, seed, warn)
    rep["comparison"] = _comparison(fit, a2, warn)
    law = fit.law if fit is not None else DEFAULT_LAW
    rep["holdout"], hold_fit = _holdout_check(done, budgets_swept, seed, warn, law)
    rep["downstream"] = (
        None
        if source.table
        else downstream_section(done, curves, fit, requested, budgets_swept, bootstrap, seed, warn)
    )
    rep["published"] = pub.published(requested)
    rep["mfu_convention"] = _mfu_record(all_runs)
    rep["warnings"] = warn
    rep["notes"] = list(loaded.notes)
    specs = _figures(rep, all_runs, done, curves, fit, a2, hold_fit, requested, law_sec, fig_dir, out)
    ctx = SectionContext(source, out, fit, requested, budgets, hardware, gpus, hp_laws, unique_tokens)
    ctx = dataclasses.replace(ctx, bootstrap=bootstrap, seed=seed, recipes_from=tuple(recipes_from))
    ctx = dataclasses.replace(ctx, every_recipe=every_recipe, ref=ref, every_moe=every_moe, warn=warn)
    rep["sections"] = []
    for build in SECTIONS:  # every closing section, in order, the one way they are added
        secs, notes = build(ctx)
        rep["sections"] += secs
        rep["notes"] += notes
    rep["paths"] = _paths(out)
    rep = {"verdict": verdict(rep), **rep}
    _write_outputs(rep, out, {rep["figures"][k]: v for k, v in specs.items() if k in rep["figures"]})
    return rep


def _figures(rep, all_runs, done, curves, fit, a2, hold_fit, requested, law_sec, fig_dir, out) -> dict:
    """Draw and save the static figures (into `rep["figures"]`); return the interactive ones."""
    frontier = frontier_grid(done, fit, requested)
    figures = report_figures(
        all_runs,
        done,
        curves,
        fit,
        a2,
        rep["holdout"],
        hold_fit,
        requested,
        hparams=rep["hparams"],
        downstream=rep["downstream"],
        frontier=frontier,
    )
    figures.update(hparam_figures(law_sec))
    rep["figures"] = _save_figures(figures, fig_dir, out)
    return interactive_figures(all_runs, done, fit, a2, rep["holdout"], hold_fit, requested, frontier)


@dataclasses.dataclass(frozen=True)
class SectionContext:
    """What a closing section of the report reads (`SECTIONS`)."""

    source: Source
    out: pathlib.Path
    fit: FitResult | None
    requested: list[float]
    budgets: Sequence[float] | None
    hardware: str | None
    gpus: int
    hp_laws: Any
    unique_tokens: float | None
    bootstrap: int = 0
    seed: int = 0
    recipes_from: tuple[str, ...] = ()
    every_recipe: pd.DataFrame | None = None
    ref: str | None = None
    every_moe: pd.DataFrame | None = None
    warn: list[str] = dataclasses.field(default_factory=list)


# A closing section: context -> (its sections, notes for the report). `SECTIONS` is their order.
SECTIONS: list[Callable[[SectionContext], tuple[list[dict], list[str]]]] = []


def section(build: Callable[[SectionContext], tuple[list[dict], list[str]]]):
    """Register a closing section of the report (appended to `SECTIONS`)."""
    SECTIONS.append(build)
    return build


@section
def _plans(c: SectionContext) -> tuple[list[dict], list[str]]:
    """A planning section per budget (with --hardware and --budget)."""
    if c.hardware and c.budgets and c.fit is not None:
        return _plan_sections(c.fit, c.requested, c.hardware, c.gpus, c.warn, c.hp_laws, c.unique_tokens), []
    if c.unique_tokens is not None:
        c.warn.append("--unique-tokens plans the planning sections: give --hardware and --budget too")
    return [], []


@section
def _rl(c: SectionContext) -> tuple[list[dict], list[str]]:
    """The RL section, for a sweep directory holding RL runs."""
    rl = None if c.source.table else _rl_section(c.source.path, c.out, c.warn)
    return ([] if rl is None else [rl]), []


RECIPES_BOOTSTRAP = 200  # the Recipes section's joint bootstrap (at most; `compare`'s default)


@section
def _recipes(c: SectionContext) -> tuple[list[dict], list[str]]:
    """The "Recipes" section (analysis.compare.section) when there are recipes to compare."""
    notes = (
        []
        if c.ref is None
        else [f"recipes: every section but 'Recipes' is fitted to the first recipe, {c.ref}"]
    )
    try:
        sec = recipes.recipes_section(
            c.every_recipe,
            str(c.source.path),
            c.out,
            c.budgets,
            min(c.bootstrap, RECIPES_BOOTSTRAP),
            c.seed,
            c.recipes_from,
            None if c.source.table else c.source.path,
        )
    except AnalysisError as e:
        c.warn.append(f"no Recipes section: {e}")
        return [], notes
    return ([] if sec is None else [sec]), notes


@section
def _moe(c: SectionContext) -> tuple[list[dict], list[str]]:
    """A routed sweep's "Mixture of experts" section (analysis/report/moe.py); nothing for a sweep
    of one expert count."""
    sec = moe.moe_section(c.every_moe, c.out, c.bootstrap, c.seed, c.warn)
    if sec is None:
        return [], []
    return [sec], [
        f"mixture of experts: every section but '{moe.TITLE}' is fitted to the dense runs (experts = 1)"
    ]


@section
def _continual(c: SectionContext) -> tuple[list[dict], list[str]]:
    """A sweep with continued runs (`+sweep=cpt`): the "Continual pre-training" section
    (analysis/report/continual.py); nothing for any other sweep."""
    sec = (
        None
        if c.every_moe is None
        else continual.continual_section(c.every_moe, c.out, c.bootstrap, c.seed, c.warn)
    )
    notes = [f"continual pre-training: every section but '{continual.TITLE}' is fitted to the base runs"]
    return ([] if sec is None else [sec]), (notes if sec is not None else [])


def _dense_base(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs the laws, the plan and the run table show: a routed sweep's dense runs, a continual
    sweep's base models."""
    return continual.base_only(moe.dense_only(runs))


def select_best(all_runs: pd.DataFrame, done: pd.DataFrame) -> tuple[pd.DataFrame, Selection | None]:
    """(the completed runs the laws are fitted to, the selection or None).

    Runs that differ only in `optim.*` count once per (budget, shape): the best one. The
    selection sees every run, also diverged ones, so a higher learning rate that diverged still
    counts as tried (the best run is then not at the edge of the range). `all_runs` gains the
    `selected` column shown in the report's run table."""
    if not has_config(all_runs):
        return done, None
    sel = select_best_runs(all_runs, loss_col=LOSS)
    all_runs[SELECTED] = sel.table[SELECTED].to_numpy(bool)
    if not sel.active:
        return done, sel
    keep = set(sel.table.loc[sel.table[SELECTED], "run"])
    return done[done["run"].isin(keep)].reset_index(drop=True), sel


def _use_n_params(done: pd.DataFrame, n_params: str) -> pd.DataFrame:
    """`done` with its `n_params` column holding the N every section uses. Every fit, profile and
    figure reads N from `n_params`, so swapping that column (the run table keeps the totals) is
    what keeps all of them on one N. One-line error for an unknown kind or a missing column."""
    if n_params == "total":
        return done
    if n_params != "non_embedding":
        raise AnalysisError(f"--n-params must be total or non_embedding (got {n_params!r})")
    ne = pd.to_numeric(
        done.get("n_params_non_embedding", pd.Series(np.nan, index=done.index)), errors="coerce"
    )
    if not (ne.notna().all() and (ne > 0).all()):
        raise AnalysisError(
            "--n-params non_embedding needs n_params_non_embedding in every completed run's "
            "summary.json (experiments.train writes it); add it, or use --n-params total"
        )
    return done.assign(n_params=ne.astype(float))


def _requested_budgets(budgets: Sequence[float] | None, budgets_swept: list[float]) -> list[float]:
    """The budgets to state N*/D* for: the user's, else 10x the largest swept budget."""
    requested = [float(b) for b in budgets] if budgets else [10 * max(budgets_swept)]
    if any(not (math.isfinite(b) and b > 0) for b in requested):
        raise AnalysisError(f"--budget values must be positive FLOP counts (got {requested})")
    return requested


def _incomplete_warnings(all_runs: pd.DataFrame) -> list[str]:
    not_done = all_runs[all_runs["status"] != RunStatus.COMPLETED]
    if not len(not_done):
        return []
    named = [f"{r} ({s})" for r, s in zip(not_done["run"], not_done["status"])]
    more = len(named) - MAX_NAMES
    return [
        f"{len(not_done)} run(s) did not complete and are left out of every fit: "
        + ", ".join(named[:MAX_NAMES])
        + (f" and {more} more (all in the run list under Details)" if more > 0 else "")
    ]


def _header(
    source: Source,
    title: str | None,
    all_runs: pd.DataFrame,
    done: pd.DataFrame,
    budgets_swept: list[float],
    requested: list[float],
    bootstrap: int,
    seed: int,
) -> dict[str, Any]:
    """The report's opening fields: what was swept, which runs there are, how the fits resample;
    `source` says whether they came from a sweep directory or a runs table (and its columns)."""
    path = source.path
    return {
        "title": title or f"Scaling-law report: {path.name}",
        "sweep_dir": str(path.resolve()),
        "source_name": path.name,
        "source": _source_record(source, all_runs),
        "generated": _now(),
        "n_runs": int(len(all_runs)),
        "n_completed": int(len(done)),
        "budgets_swept": [float(b) for b in budgets_swept],
        "requested_budgets": requested,
        "runs": _run_table(all_runs),
        "skipped_shapes": [] if source.table else _read_plan(path),
        "bootstrap": int(bootstrap),
        "seed": int(seed),
    }


def _source_record(source: Source, all_runs: pd.DataFrame) -> dict[str, Any]:
    """report.json's `source`: {kind: "sweep"} or {kind: "runs_table", columns (role -> column the
    fit's rules chose), left_out (sections that need run directories), note (the line saying so)}."""
    if not source.table:
        return {"kind": "sweep"}
    left_out = [s for s in RUN_DIR_SECTIONS if s != "hyperparameter probes" or not has_config(all_runs)]
    return {
        "kind": "runs_table",
        "columns": dict(source.columns),
        "left_out": left_out,
        "note": f"Not in this report: {', '.join(left_out)} -- they need run directories, and a runs "
        "table has none.",
    }


def _law_section(
    rep: dict,
    done: pd.DataFrame,
    requested: list[float],
    bootstrap: int,
    seed: int,
    warn: list[str],
    strict: bool = False,
) -> FitResult | None:
    """Approach 3: the law `fit` fits without --law, fitted to every completed run -> rep["law"]
    (None if it fails): Chinchilla, or on runs that repeat their data the form their own epochs and
    size backtests choose (`selection.default_law`). `strict` (a runs table, whose report is its
    law): a failed fit is an error, not a warning."""
    law = default_law(done, COLS)
    try:
        if law == AUTO:
            fit = fit_auto(done, COLS, bootstrap=bootstrap, seed=seed)
        else:
            fit = fit_law(done, law, COLS, bootstrap=bootstrap, seed=seed)
    except AnalysisError as e:
        if strict:
            raise AnalysisError(f"the {law} law cannot be fitted to this table: {e}") from None
        rep["law"] = None
        warn.append(f"no law fit (Approach 3): {e}")
        return None
    rep["law"] = {k: v for k, v in fit.to_dict(requested).items() if k != "bootstrap_samples"}
    warn += _bound_warnings(fit)
    return fit


def _approach2_section(
    rep: dict, done: pd.DataFrame, requested: list[float], bootstrap: int, seed: int, warn: list[str]
) -> dict | None:
    """Approach 2: IsoFLOP parabolas -> rep["approach2"] and its N_opt/D_opt at the requested budgets."""
    try:
        a2 = approach2(
            done,
            COLS,
            method="parabola",
            budget_col="budget",
            bootstrap=min(bootstrap, 1000) or 200,
            seed=seed,
        )
    except AnalysisError as e:
        rep["approach2"] = None
        warn.append(f"no Approach 2 (IsoFLOP) estimate: {e}")
        return None
    if not np.isfinite(a2["a"]):
        warn.append(
            "Approach 2: fewer than two budgets have an interior parabola minimum, so N_opt(C) has "
            "no power law; widen the ladder or add budgets"
        )
    rep["approach2"] = a2
    rep["approach2_at_requested"] = (
        [
            {
                "C": c,
                "N_opt": a2["G"] * c ** a2["a"],
                "D_opt": c / (a2["flops_per_param_token"] * a2["G"] * c ** a2["a"]),
            }
            for c in requested
        ]
        if np.isfinite(a2["a"])
        else []
    )
    return a2


def _comparison(fit: FitResult | None, a2: dict | None, warn: list[str]) -> dict | None:
    """Do Approaches 2 and 3 agree on the exponent a? None when either is missing."""
    if fit is None or a2 is None or not np.isfinite(a2["a"]):
        return None
    cmp_ = compare_approaches(fit, a2)
    if cmp_["disagree"]:
        warn.append("Approaches 2 and 3 disagree: " + cmp_["message"])
    return cmp_


def _holdout_check(
    done: pd.DataFrame, budgets_swept: list[float], seed: int, warn: list[str], law: str = DEFAULT_LAW
) -> tuple[dict | None, FitResult | None]:
    """Fit the report's `law` on every budget but the largest and predict the largest: (summary, that fit)."""
    if len(budgets_swept) < 3:
        warn.append(
            "no held-out check: it needs at least three compute budgets (two to fit the law on -- at one "
            "budget N and D are tied by C = kND -- and the largest to predict)"
        )
        return None, None
    thr = float(math.sqrt(budgets_swept[-1] * budgets_swept[-2]))
    fit_part = done[done["budget"] < thr]
    held = done[done["budget"] >= thr]
    try:
        hold_fit = fit_law(
            pd.concat([fit_part, held]),
            law,
            COLS,
            bootstrap=0,
            seed=seed,
            holdout_above=float(held["flops"].min() * 0.999),
        )
    except AnalysisError as e:
        warn.append(f"no held-out check: {e}")
        return None, None
    hold = dict(
        hold_fit.holdout.to_dict(),
        threshold=thr,
        fit_budgets=[float(b) for b in budgets_swept[:-1]],
        held_out_budget=float(budgets_swept[-1]),
        n_fit=int(len(fit_part)),
        fit_params=hold_fit.params,
    )
    if not math.isfinite(hold["mean_rel_error"]):
        warn.append("held-out check failed: the law fitted on the smaller budgets gives no finite prediction")
        return None, hold_fit
    hold.update(coverage_check(hold.get("points", []), hold.get("interval_level", 0.9)))
    if hold["too_few_inside"]:
        outside = [p for p in hold["points"] if p.get("interval") and not _inside(p)]
        warn.append(
            f"only {hold['n_inside']} of {hold['n_intervals']} held-out runs inside their "
            f"{100 * hold['interval_level']:.0f}% prediction intervals, fewer than such intervals "
            f"plausibly give (one-sided binomial p = {hold['coverage_p']:.2g}): the intervals are too "
            "narrow for this extrapolation; outside: "
            + "; ".join(
                f"N={p['N']:,.0f} (actual {p['actual']:.4f}, interval [{p['interval'][0]:.4f}, "
                f"{p['interval'][1]:.4f}])"
                for p in outside[:MAX_NAMES]
            )
            + (f" and {len(outside) - MAX_NAMES} more" if len(outside) > MAX_NAMES else "")
        )
    return hold, hold_fit


def _inside(p: dict) -> bool:
    return p["interval"][0] <= p["actual"] <= p["interval"][1]


def coverage_check(points: Sequence[dict], level: float = 0.9) -> dict:
    """How many held-out `points` lie inside their prediction intervals, and whether that is
    fewer than intervals of coverage `level` plausibly give: {n_intervals, n_inside, coverage_p
    (P(at most n_inside inside | n_intervals, level), one-sided binomial), too_few_inside
    (coverage_p < COVERAGE_ALPHA)}. One run outside of one is no evidence (p = 0.1 at 90%)."""
    with_iv = [p for p in points if p.get("interval")]
    n, k = len(with_iv), sum(_inside(p) for p in with_iv)
    p_value = float(binom.cdf(k, n, level)) if n else math.nan
    return {
        "interval_level": level,
        "n_intervals": n,
        "n_inside": int(k),
        "coverage_p": p_value,
        "too_few_inside": bool(n and p_value < COVERAGE_ALPHA),
    }


def frontier_grid(done: pd.DataFrame, fit: FitResult | None, requested: list[float]) -> dict | None:
    """The fitted frontier (N*, D*, expected best loss with its bands) on 40 budgets spanning the runs
    and the requested budgets: what the loss and allocation figures draw, computed once for both the
    PNGs and the interactive figures."""
    if fit is None:
        return None
    hi_c = max(done["flops"].max(), *requested) * 1.5
    return _frontier(fit, np.geomspace(done["flops"].min() / 1.5, hi_c, 40))


def _k_flops(done: pd.DataFrame, fit: FitResult | None) -> float:
    if fit is not None:
        return fit.flops_per_param_token
    return float(np.median(done["flops"] / (done["n_params"] * done["tokens"])))


def report_figures(
    all_runs: pd.DataFrame,
    done: pd.DataFrame,
    curves: pd.DataFrame,
    fit: FitResult | None,
    a2: dict | None,
    hold: dict | None,
    hold_fit: FitResult | None,
    requested: list[float],
    hparams: dict | None = None,
    downstream: dict | None = None,
    frontier: dict | None = None,
) -> dict[str, Figure | None]:
    """The report's figures by name (None where the data cannot support one), in report order.
    `done` holds the runs the laws were fitted to; `hparams` and `downstream` are report.json's
    selection record and downstream-task section; `frontier` is `frontier_grid`'s (computed when
    not given). The IsoFLOP and allocation figures show the published laws (analysis.report.published)."""
    frontier = frontier if frontier is not None else frontier_grid(done, fit, requested)
    out = {
        "loss_vs_compute": figs.loss_vs_compute(done, frontier),
        "isoflop": figs.isoflop_curves(done, fit, _k_flops(done, fit), a2, pub.LAWS),
        "allocation": figs.optimal_allocation(a2, frontier, requested, pub.LAWS),
        "lr_sensitivity": figs.lr_sensitivity(hparams),
    }
    if fit is not None:
        out["residuals"] = figs.residuals(done, fit.predict(done, COLS))
    if hold is not None:
        part = done[done["budget"] < hold["threshold"]]
        out["holdout"] = figs.holdout(part, hold_fit.predict(part, COLS), hold)
    out["downstream"] = figs.downstream(done, downstream)
    out["loss_curves"] = figs.loss_curves(done, curves)
    out["throughput"] = figs.throughput(all_runs, MFU_COL, MFU_CONVENTION)
    return out


def interactive_figures(
    all_runs: pd.DataFrame,
    done: pd.DataFrame,
    fit: FitResult | None,
    a2: dict | None,
    hold: dict | None,
    hold_fit: FitResult | None,
    requested: list[float],
    frontier: dict | None,
) -> dict[str, dict]:
    """report.html's Plotly figures (analysis/report/interactive.py) by the name of the PNG they
    replace there: the figures whose points are runs."""
    out: dict[str, dict | None] = {
        "loss_vs_compute": interactive.loss_vs_compute(done, frontier),
        "isoflop": interactive.isoflop(
            figs.isoflop_profiles(done, fit, _k_flops(done, fit), a2, pub.LAWS), pub.LAWS if fit else ()
        ),
        "allocation": interactive.allocation(a2, frontier, requested, pub.LAWS),
    }
    if fit is not None:
        out["residuals"] = interactive.residuals(done, fit.predict(done, COLS))
    if hold is not None:
        part = done[done["budget"] < hold["threshold"]]
        held = done[done["budget"] >= hold["threshold"]]
        out["holdout"] = interactive.holdout(part, hold_fit.predict(part, COLS), hold, held)
    out["throughput"] = interactive.throughput(all_runs, MFU_COL, MFU_CONVENTION)
    return {k: v for k, v in out.items() if v is not None}


def hparam_figures(law_sec: dict | None) -> dict[str, Figure | None]:
    """The "Hyperparameter law" section's figures (empty without laws)."""
    if law_sec is None:
        return {}
    return {"hparam_law": figs.hparam_law(law_sec), "hparam_penalty": figs.hparam_penalty(law_sec)}


def _save_figures(
    figures: dict[str, Figure | None], fig_dir: pathlib.Path, out: pathlib.Path
) -> dict[str, str]:
    """Save each figure as fig_dir/<name>.png and release it; {name: path relative to `out`}."""
    files = {}
    for name, fig in figures.items():
        if fig is None:
            continue
        path = figs.save(fig, fig_dir / f"{name}.png")
        fig.clear()
        files[name] = str(path.relative_to(out))
    return files
