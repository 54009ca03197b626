"""The backtest zoo: every backtest protocol on every development ladder, the default and the
baseline side by side (docs/zoo.md is its table; docs/backtest.md, how to read
it). A method becomes a protocol's default only when the zoo shows it no worse than the baseline by
more than MARGIN on every dataset (`rule`). The ladders: ../shared/data (Epoch's Chinchilla runs,
Gadre et al. 2024, Luo et al. 2025's MPL curves, Gemstones: McLeish et al. 2025), our presets' runs
tables under benchmarks/data/zoo (`python -m analysis collect` of a sweep) and seeded synthetic ones
generated here. Held-back public ladders are not in it.

    python -m analysis.backtests.zoo [--quick] [--only TEXT] [--only-default] [--bootstrap 50]
        [--cache [PATH]] [--markdown docs/zoo.md]

`--quick` runs the tests' subset (one dataset per protocol). `--cache` keeps each finished backtest
in PATH (default $SCALELAB_CACHE/zoo/, else ~/.cache/scalelab/zoo/, one file per --bootstrap and
--only-default) and reuses it, so an interrupted run resumes: delete it after changing a method.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import pathlib
import sys
import time
import warnings
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd

import analysis.laws.methods  # noqa: F401  (registers the point laws)
from analysis import backtests as backtest
from analysis.core.methods import methods
from analysis.core.table import read_table
from analysis.laws import moe_forms
from models.base.errors import AnalysisError
from models.base.jsonio import write_json

ROOT = pathlib.Path(__file__).resolve().parents[2]  # the checkout: the zoo is a development tool
SHARED = pathlib.Path(os.environ.get("SCALELAB_SHARED_DATA") or ROOT.parent / "shared" / "data")
OWN = ROOT / "benchmarks" / "data" / "zoo"
MARGIN = 0.10  # a default may lose to the baseline on a dataset by at most this share of its error
COVERAGE_RANGE = (0.80, 0.95)  # the target for a 90% interval on each dataset
CORPORA = {"c4_original": "C4", "rpj": "RedPajama", "rw_original": "RefinedWeb"}
GADRE_MAIN = "loss_c4_val"
GADRE_LOSSES = ("loss_openlm_eval", GADRE_MAIN, "loss_paloma_c4_en", "loss_paloma_code")
GADRE_LOSSES += ("loss_paloma_refinedweb", "loss_paloma_ptb", "loss_paloma_redpajama", "loss_de_en")
COMPARE_LOSSES = ("loss_c4_val", "loss_paloma_c4_en", "loss_openlm_eval")
CORPUS_PAIRS = (("rw_original", "c4_original"), ("rw_original", "rpj"), ("c4_original", "rpj"))
DOWNSTREAM_TASKS = ("hellaswag", "arc_easy", "piqa", "copa", "lambada_openai")
GEM_STEPS = 477  # Gemstones' steps per ~2B tokens
GEMSTONES_LR_STEPS = GEM_STEPS * 50  # the half-LR runs' length (~100B tokens; they end at step 23840)


@dataclass(frozen=True)
class Case:
    """One (dataset, protocol) of the zoo: `load()` gives the table (or a path, for curves)."""

    dataset: str
    protocol: str
    load: Callable[[], pd.DataFrame | str]
    options: dict = field(default_factory=dict)
    quick: bool = False  # in the tests' subset


# ---- public tables (../shared/data) ------------------------------------------------------------
def _gadre(corpus: str | None = None) -> pd.DataFrame:
    r = read_table(SHARED / "gadre2024_overtraining" / "runs.csv")
    return r if corpus is None else r[r.dataset == corpus]


def _gem(name: str, **columns: object) -> pd.DataFrame:
    return read_table(SHARED / "gemstones" / f"{name}.csv").assign(**columns)


def _mpl(size: str) -> Callable[[], str]:
    """Luo et al.'s MPL curves of one model size (a folder of curve CSVs)."""
    return lambda: str(SHARED / "mpl_loss_curves" / f"csv_{size}")


def epoch() -> pd.DataFrame:
    """Epoch's reconstruction of the Chinchilla runs, the 5 highest losses dropped."""
    d = read_table(SHARED / "chinchilla_epoch" / "svg_extracted_data.csv")
    d = d[d.loss < d.loss.nlargest(5).min()]
    out = pd.DataFrame({"N": d["Model Size"], "C": d["Training FLOP"], "loss": d.loss})
    return out.assign(D=out.C / (6 * out.N)).reset_index(drop=True)


def gadre(corpus: str, loss: str = GADRE_MAIN) -> Callable[[], pd.DataFrame]:
    """Gadre et al.'s runs on one corpus as (N, D, loss) on one validation loss."""

    def load() -> pd.DataFrame:
        x = _gadre(corpus)
        return pd.DataFrame({"N": x.n_params, "D": x.tokens, "loss": x[loss]}).dropna().reset_index(drop=True)

    return load


def gadre_runs(corpus: str) -> Callable[[], pd.DataFrame]:
    """Gadre et al.'s runs on one corpus with every column (several losses: `fit` must ask)."""
    return lambda: _gadre(corpus).reset_index(drop=True)


def gadre_ladder(corpus: str | None) -> Callable[[], pd.DataFrame]:
    """fit-task's ladder (run, N, D, task, task_loss, accuracy) of one corpus (None: all three): the
    five DOWNSTREAM_TASKS, the C4 validation loss as every task's loss."""

    def load() -> pd.DataFrame:
        return pd.DataFrame(
            [
                dict(run=x.run, N=float(x.n_params), D=float(x.tokens), task=t, task_loss=x.loss_c4_val)
                | {"accuracy": getattr(x, f"acc_{t}")}
                for x in _gadre(corpus).itertuples()
                for t in DOWNSTREAM_TASKS
            ]
        )

    return load


def gadre_pair(ref: str, other: str, loss: str, top: float | None = None) -> Callable[[], pd.DataFrame]:
    """Two of Gadre et al.'s corpora as recipes (REF's rows first) on one validation loss (`top`:
    the runs with 6 N D <= top only)."""

    def load() -> pd.DataFrame:
        x = pd.concat([_gadre(c).assign(recipe=CORPORA[c]) for c in (ref, other)])
        x = x if top is None else x[6.0 * x.n_params * x.tokens <= top]
        return pd.DataFrame({"recipe": x.recipe, "N": x.n_params, "D": x.tokens, "loss": x[loss]}).dropna()

    return load


def gemstones_cooldowns() -> pd.DataFrame:
    """The cooldown branches' end losses."""
    c = _gem("cooldowns")
    return pd.DataFrame({"N": c.N, "D": c.tokens_end, "loss": c.loss_end})


def gemstones_hot() -> pd.DataFrame:
    """The hot (constant-LR) checkpoints every ~50B tokens."""
    h = _gem("hot_checkpoints")
    h = h[h.step % (GEM_STEPS * 25) == 0]
    return pd.DataFrame({"N": h.N, "D": h.tokens, "loss": h.loss}).reset_index(drop=True)


def gemstones_lr() -> pd.DataFrame:
    """Hot and half-LR runs at matched checkpoints: two learning rates per (shape, tokens) rung,
    which the lr protocol must refuse in one line."""
    b = pd.concat([_gem("hot_checkpoints", lr=1.0), _gem("half_lr_checkpoints", lr=0.5)])
    b = b[b.step % (GEM_STEPS * 25) == 0]
    return pd.DataFrame({"N": b.N, "D": b.tokens, "lr": b.lr, "loss": b.loss}).reset_index(drop=True)


def gemstones_lr_pair() -> pd.DataFrame:
    """Full and half learning rate as recipes (REF full): the 20 models both were run for,
    checkpoints every ~10B tokens up to the half-LR runs' 100B."""
    h, c = _gem("hot_checkpoints", recipe="full LR"), _gem("half_lr_checkpoints", recipe="half LR")
    b = pd.concat([h[h.model.isin(set(c.model)) & (h.tokens <= c.tokens.max())], c])
    b = b[b.step % (GEM_STEPS * 5) == 0]
    return pd.DataFrame({"recipe": b.recipe, "N": b.N, "D": b.tokens, "loss": b.loss}).reset_index(drop=True)


def gemstones_cooled_pair() -> pd.DataFrame:
    """Cooled against hot (REF): the cooldown branches' end losses (McLeish et al. 2025's WSD
    cooldowns, 20 models) against the constant-LR checkpoints every ~10B tokens of the same models,
    up to the longest cooldown's tokens."""
    c, h = _gem("cooldowns"), _gem("hot_checkpoints")
    h = h[(h.step % (GEM_STEPS * 5) == 0) & h.model.isin(set(c.model)) & (h.tokens <= c.tokens_end.max())]
    hot = pd.DataFrame({"recipe": "hot", "N": h.N, "D": h.tokens, "loss": h.loss})
    cooled = pd.DataFrame({"recipe": "cooled", "N": c.N, "D": c.tokens_end, "loss": c.loss_end})
    return pd.concat([hot, cooled]).astype({"N": float, "D": float}).reset_index(drop=True)


def gemstones_shape_split() -> pd.DataFrame:
    """One recipe split in two: the 22 hot runs' shapes, sorted by N, alternately into "even" (REF)
    and "odd" (checkpoints every ~10B tokens): the same data, optimizer and schedule, so the
    multiplier is about 1 (the shapes differ, width x depth)."""
    h = _gem("hot_checkpoints")
    order = h.groupby("model").N.first().sort_values().index
    side = {m: ("odd" if i % 2 else "even") for i, m in enumerate(order)}
    h = h[h.step % (GEM_STEPS * 5) == 0]
    out = pd.DataFrame({"recipe": h.model.map(side), "N": h.N, "D": h.tokens, "loss": h.loss})
    return out.astype({"N": float, "D": float}).reset_index(drop=True)


def gemstones_prefix_350b() -> pd.DataFrame:
    """The hot runs as a curves table (curve-prefix): each shape to 350B tokens at its constant
    learning rate, one rung per shape (optim.lr 1: the relative peak rate)."""
    h = _gem("hot_checkpoints").rename(columns={"tokens": "D"})
    return h.assign(run=h.model, total_steps=h.step.max(), **{"optim.lr": 1.0})


def gemstones_prefix_lr() -> pd.DataFrame:
    """Full and half learning rate at ~100B tokens as a curves table (curve-prefix): the hot runs up
    to the half-LR runs' length and the half-LR runs, the 20 shapes that have both (optim.lr 1, 0.5)."""
    h, c = _gem("hot_checkpoints", **{"optim.lr": 1.0}), _gem("half_lr_checkpoints", **{"optim.lr": 0.5})
    h = h[h.model.isin(c.model.unique()) & (h.step <= GEMSTONES_LR_STEPS)]
    b = pd.concat([h, c]).rename(columns={"tokens": "D"})
    return b.assign(run=b.model + "_lr" + b["optim.lr"].astype(str), total_steps=GEMSTONES_LR_STEPS)


def mpl_sizes() -> pd.DataFrame:
    """Luo et al.'s 9 schedules at both sizes as one sweep (curve-prefix, schedule the swept key):
    the 100M runs from the 25M ones (each file a run, its last logged step its total_steps)."""
    parts = [
        read_table(f).assign(run=f"{size}M {f.stem}", schedule=f.stem, N=size * 1e6)
        for size in (25, 100)
        for f in sorted((SHARED / "mpl_loss_curves" / f"csv_{size}").glob("*.csv"))
    ]
    d = pd.concat(parts, ignore_index=True)
    return d.assign(total_steps=d.groupby("run").step.transform("max"))


def gemstones_schedules(branches: tuple[int, ...] = (GEM_STEPS * 20, GEM_STEPS * 30, 21465)) -> pd.DataFrame:
    """A schedule sweep from Gemstones (curve-prefix, schedule the swept key): per shape that has
    cooldowns and half-LR runs and per cooldown branch at `branches` (steps), a rung of three runs of
    the branch's length: `wsd` (the hot curve to the branch, then its cooldown's end loss), `constant`
    (the hot run) and `constant half LR` (the half-LR run), the constant runs' loss at that length
    interpolated between their checkpoints (log loss, linear in step)."""
    hot, half, cool = _gem("hot_checkpoints"), _gem("half_lr_checkpoints"), _gem("cooldowns")
    rows = []
    for b in cool[cool.branch_step.isin(branches) & cool.model.isin(half.model)].itertuples():
        T, base = int(b.step_end), {"N": b.N, "total_steps": int(b.step_end), "model": b.model}
        for name, src in (("constant", hot), ("constant half LR", half)):
            g = src[src.model == b.model].sort_values("step")
            end = float(np.exp(np.interp(T, g.step, np.log(g.loss))))
            g = pd.concat([g[g.step < T][["step", "loss"]], pd.DataFrame({"step": [T], "loss": [end]})])
            rows.append(g.assign(schedule=name, run=f"{b.model} {T} {name}", **base))
        g = hot[(hot.model == b.model) & (hot.step <= b.branch_step)][["step", "loss"]]
        g = pd.concat([g, pd.DataFrame({"step": [T], "loss": [b.loss_end]})])
        rows.append(g.assign(schedule="wsd", run=f"{b.model} {T} wsd", **base))
    d = pd.concat(rows, ignore_index=True)
    return d.assign(D=d.step * 4_194_304)


def own(name: str) -> Callable[[], pd.DataFrame]:
    return lambda: read_table(OWN / f"{name}.csv")


# ---- synthetic ladders (seeded) -----------------------------------------------------------------
def repeated(seed: int = 0, r_d: float = 15.0) -> pd.DataFrame:
    """Muennighoff et al.'s data-constrained form (R_D = 15 by default) on 6 sizes x 2 unique-token
    counts x 7 epoch counts."""
    rng = np.random.default_rng(seed)
    rows = []
    for N in np.geomspace(2e7, 6e8, 6):
        for U in (1e9, 4e9):
            for ep in (0.5, 1, 2, 4, 8, 16, 32):
                D = ep * U
                Ue, R = min(D, U), max(D / U - 1, 0)
                Dp = Ue + Ue * r_d * (1 - np.exp(-R / r_d))
                loss = (1.8 + 480 / N**0.34 + 2100 / Dp**0.37) * np.exp(rng.normal(0, 0.003))
                rows.append(dict(N=N, D=D, U=U, loss=loss))
    return pd.DataFrame(rows)


def repeated_large(seed: int = 0, noise: float = 0.005) -> pd.DataFrame:
    """A repeated-data ladder shaped like a real one: many epoch counts at small sizes, one to four
    at the large ones (10 sizes, 10M-9B), and a repetition effect the data-constrained forms cannot
    fit exactly: Muennighoff et al.'s effective data (R_D = 15) but, beyond ~16 epochs, a loss that
    rises again (overfitting, stronger for larger models on fewer unique tokens)."""
    rng = np.random.default_rng(seed)
    rows = []
    for N in np.geomspace(1e7, 9e9, 10):
        epochs = (1, 2, 4, 8, 16, 32, 64) if N < 3e8 else (1, 2, 4, 8) if N < 3e9 else (1, 2)
        for U in (20 * N / 4, 20 * N):  # a quarter of and the compute-optimal token count
            for ep in epochs:
                D = ep * U
                Dp = U + U * 15.0 * (1 - np.exp(-(ep - 1) / 15.0))
                loss = 1.8 + 480 / N**0.34 + 2100 / Dp**0.37
                loss *= 1 + 0.01 * max(np.log2(ep / 16), 0) * (N / 1e8) ** 0.5
                rows.append(dict(N=N, D=D, U=U, loss=loss * np.exp(rng.normal(0, noise))))
    return pd.DataFrame(rows)


def kaplan_ladder(seed: int) -> pd.DataFrame:
    """A misspecified ladder: Kaplan et al. 2020's eq. 1.5 (not additive; N_c 8.8e13, D_c 5.4e13,
    alpha_N 0.076, alpha_D 0.095) scaled by 0.9 over a floor of 1.8, 12 budgets x 7 shapes, 0.5% noise."""
    rng = np.random.default_rng(seed)
    rows = []
    for C in np.geomspace(1e16, 2.5e19, 12):
        for f in np.geomspace(0.25, 4, 7):
            N = np.sqrt(C / 6 / 20) * f
            D = C / 6 / N
            loss = 1.8 + 0.9 * ((8.8e13 / N) ** (0.076 / 0.095) + 5.4e13 / D) ** 0.095
            rows.append(dict(N=N, D=D, C=C, loss=loss * np.exp(rng.normal(0, 0.005))))
    return pd.DataFrame(rows)


def lr_ladder(seed: int = 1) -> pd.DataFrame:
    """An irregular LR sweep: 6 sizes, 5-7 log-spaced learning rates per size, shifted per rung; the
    optimum follows lr* = 3e-3 (N / 1e8)^-0.3 (`lr_true`, what the lr backtest scores against) and
    the loss is quadratic in ln lr around it."""
    rng = np.random.default_rng(seed)
    rows = []
    for i, N in enumerate(np.geomspace(2e7, 1e9, 6)):
        star = 3e-3 * (N / 1e8) ** -0.3
        for lr in np.exp(np.log(star) + np.linspace(-1.5, 1.5, 5 + i % 3) + rng.normal(0, 0.2)):
            loss = (2 + 400 / N**0.34) * (1 + 0.02 * np.log(lr / star) ** 2) * np.exp(rng.normal(0, 0.002))
            rows.append(dict(N=N, D=20 * N, lr=lr, loss=loss, lr_true=star))
    return pd.DataFrame(rows)


def lr_sweep_like(seed: int = 0) -> pd.DataFrame:
    """An LR ladder shaped like a real sweep: 8 sizes (20M-1.2B), per size 3-5 learning rates x2 or
    x4 apart around a guess that lags the optimum (+0.2 dex per decade, +-0.15 dex: the best at the
    grid's edge for some sizes), a loss that rises steeply above the optimum (relative penalty
    0.02 u^2 below it, + 0.05 (e^1.5u - 1 - 1.5u) above, u = ln lr/lr*: +1% at 0.5x, +5% at 2x;
    Gemstones' half-LR runs lose 0-1.7% at 60B tokens), runs more than x8 above it diverged (no
    loss), 0.3% noise. lr* = 3e-3 (N / 1e8)^-0.45 (`lr_true`)."""
    rng = np.random.default_rng(seed)
    rows = []
    for N in np.geomspace(2e7, 1.2e9, 8):
        star = 3e-3 * (N / 1e8) ** -0.45
        guess = star * 10 ** (0.2 * np.log10(N / 1e8) + rng.normal(0, 0.15))
        k, step = int(rng.integers(3, 6)), rng.choice((2.0, 4.0))
        for lr in guess * step ** (np.arange(k) - (k - 1) / 2 + rng.integers(-1, 2) * 0.5):
            u = np.log(lr / star)
            pen = 0.02 * u * u + (0.05 * (np.exp(1.5 * u) - 1 - 1.5 * u) if u > 0 else 0.0)
            loss = (1.8 + 480 / N**0.34 + 2100 / (20 * N) ** 0.37) * (1 + pen) * np.exp(rng.normal(0, 0.003))
            rows.append(dict(N=N, D=20 * N, lr=lr, loss=np.nan if u > np.log(8) else loss, lr_true=star))
    return pd.DataFrame(rows)


def lr_batch_ladder(
    seed: int = 0, skew: float = 0.0, drop: float = 0.0, noise: float = 0.002
) -> pd.DataFrame:
    """A synthetic LR x batch grid: 6 sizes x2 apart (33.4M-1.07B) x 2 budgets (D = 20N, 80N), per
    rung 6 learning rates and 5 power-of-two batch sizes, x2 steps, shifted per rung. The optima
    follow lr* = 3e-3 (N/1e8)^-0.3 (D/20N)^-0.1 and B* = 128 (N/1e8)^0.1 (D/2e9)^0.4 (sequences);
    the loss is a Chinchilla loss times 1 + 0.02 u^2 + 0.012 v^2 - 0.01 u v + skew u^3 (u = ln
    lr/lr*, v = ln B/B*: a larger batch wants a larger lr), `noise` relative noise (0.2%); `drop` of
    the cells left out at random."""
    rng = np.random.default_rng(seed)
    rows = []
    for N in 1.07e9 / 2.0 ** np.arange(5, -1, -1):
        for D in (20 * N, 80 * N):
            lr_star = 3e-3 * (N / 1e8) ** -0.3 * (D / (20 * N)) ** -0.1
            b_star = 128 * (N / 1e8) ** 0.1 * (D / 2e9) ** 0.4
            base = 1.8 + 480 / N**0.34 + 2100 / D**0.37
            lrs = lr_star * 2.0 ** (np.arange(6) - 2.5 + rng.uniform(-0.5, 0.5))
            batches = 2.0 ** (np.round(np.log2(b_star) + rng.uniform(-0.5, 0.5)) + np.arange(-2, 3))
            for lr in lrs:
                for b in batches:
                    u, v = np.log(lr / lr_star), np.log(b / b_star)
                    pen = 0.02 * u * u + 0.012 * v * v - 0.01 * u * v + skew * u**3
                    loss = base * (1 + pen) * np.exp(rng.normal(0, noise))
                    if rng.uniform() >= drop:
                        rows.append(
                            {"N": N, "D": D, "optim.lr": lr, "train.batch_size": b, "loss": loss}
                            | {"optim.lr_true": lr_star, "train.batch_size_true": b_star}
                        )
    return pd.DataFrame(rows)


REF_LAW = (1.8, 480.0, 2100.0, 0.34, 0.37)  # E, A, B, alpha, beta of the synthetic pairs' REF


def _optimum(law: tuple, C: float, k: float = 6.0) -> float:
    """N at the IsoFLOP minimum of a Chinchilla law at budget C (C = k N D)."""
    E, A, B, al, be = law
    return (al * A / (be * B)) ** (1 / (al + be)) * (C / k) ** (be / (al + be))


def _frontier_gap(law: tuple, C: float, k: float = 6.0) -> float:
    """L*(C) - E of a Chinchilla law (its IsoFLOP minimum above the floor)."""
    E, A, B, al, be = law
    N = _optimum(law, C, k)
    return A / N**al + B / (C / (k * N)) ** be


def _isoflop(law: tuple, budgets, rng, noise: float, k: float = 6.0) -> list[dict]:
    E, A, B, al, be = law
    rows = []
    for C in budgets:
        for N in _optimum(law, C, k) * np.geomspace(0.25, 4, 7):
            D = C / (k * N)
            rows.append(dict(N=N, D=D, C=C, loss=(E + A / N**al + B / D**be) * np.exp(rng.normal(0, noise))))
    return rows


def recipe_pair(
    seed: int = 0, multiplier: float = 2.0, drift: float = 0.0, cross: float = 1e18
) -> pd.DataFrame:
    """Two synthetic IsoFLOP ladders (7 budgets 1e17-1e20 x 7 shapes around the optimum, 0.5%
    noise). drift 0: OTHER is REF with N and D worth sqrt(multiplier) times more (A, B scaled), a
    constant multiplier at every budget. drift > 0: both exponents x (1 + drift) and the
    coefficients scaled so that the frontiers cross at `cross`: shared E, so log m is linear in log
    C with slope drift (d log m / d log C), m = 1 at `cross` (`true_log_m`)."""
    rng = np.random.default_rng(seed)
    E, A, B, al, be = REF_LAW
    if drift == 0:
        s = multiplier**0.5
        other = (E, A * s**-al, B * s**-be, al, be)
    else:
        al2, be2 = al * (1 + drift), be * (1 + drift)
        f = _frontier_gap(REF_LAW, cross) / _frontier_gap((E, A, B, al2, be2), cross)
        other = (E, A * f, B * f, al2, be2)
    budgets = np.geomspace(1e17, 1e20, 7)
    ref_rows = [dict(r, recipe="ref") for r in _isoflop(REF_LAW, budgets, rng, 0.005)]
    return pd.DataFrame(ref_rows + [dict(r, recipe="other") for r in _isoflop(other, budgets, rng, 0.005)])


def small_pair(
    seed: int, multiplier: float, kaplan: bool = False, noise: float = 0.004, offset: float = 0.002
) -> pd.DataFrame:
    """A pair shaped like a real small-budget comparison: 10 budgets 1e16-2.6e19 x 7 shapes, `noise`
    per run (0.4%) and an `offset` per (recipe, budget) (0.2%: one learning rate per IsoFLOP curve);
    OTHER is REF with N and D worth sqrt(multiplier) times more, a constant multiplier. REF follows
    REF_LAW, or with `kaplan` Kaplan et al.'s eq. 1.5 as in `kaplan_ladder` (no Chinchilla law
    fits it: a joint law's recipe terms absorb the misfit)."""
    rng = np.random.default_rng(seed)
    rows = []
    for name, s in (("ref", 1.0), ("other", multiplier**0.5)):
        for C in np.geomspace(1e16, 2.6e19, 10):
            off = rng.normal(0, offset)
            for f in np.geomspace(0.25, 4, 7):
                N = (np.sqrt(C / 6 / 20) if kaplan else _optimum(REF_LAW, C)) * f
                D = C / (6 * N)
                if kaplan:
                    loss = 1.8 + 0.9 * ((8.8e13 / (s * N)) ** (0.076 / 0.095) + 5.4e13 / (s * D)) ** 0.095
                else:
                    E, A, B, al, be = REF_LAW
                    loss = E + A / (s * N) ** al + B / (s * D) ** be
                rows.append(dict(recipe=name, N=N, D=D, C=C, loss=loss * np.exp(off + rng.normal(0, noise))))
    return pd.DataFrame(rows)


def true_log_m(multiplier: float, drift: float, C: np.ndarray, cross: float = 1e18) -> np.ndarray:
    """The exact log multiplier of `recipe_pair` at budgets C."""
    C = np.asarray(C, float)
    return np.full(C.shape, np.log(multiplier)) if drift == 0 else drift * np.log(C / cross)


# Mixture of experts: Clark et al. 2022's five dense-equivalent sizes at ten expert counts (dense =
# 1) with one token count, and an (N, D, E) ladder in the joint form (analysis/laws/moe_forms.py).
MOE_SIZES = (1.5e7, 2.5e7, 1.3e8, 3.7e8, 1.3e9)
MOE_EXPERTS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


def moe_fixed_tokens(seed: int, truth: str, noise: float = 0.005) -> Callable[[], pd.DataFrame]:
    """A fixed-token MoE ladder (N, experts, loss): `truth` "clark" (Clark et al.'s form: log-bilinear
    in N and the saturating Ê, E_start 2, E_max 300, their fitted signs and sizes), "floor" (an
    irreducible loss under a power law in N whose exponent moves with ln Ê: the loss bends as N
    grows) or "bilinear" (the baseline's own form: moe.sh's check law); `noise` lognormal sd."""

    def load() -> pd.DataFrame:
        rng = np.random.default_rng(seed)
        N, E = (a.ravel() for a in np.meshgrid(MOE_SIZES, MOE_EXPERTS, indexing="ij"))
        x = np.log(N / moe_forms.N_REF)
        if truth == "clark":
            le = np.log(moe_forms.e_hat(E, 2.0, 300.0))
            loss = np.exp(1.0 - 0.082 * x - 0.108 * le + 0.009 * x * le)
        elif truth == "floor":
            le = np.log(moe_forms.e_hat(E, 1.5, 400.0))
            loss = 1.3 + 1.2 * np.exp(-0.07 * le - (0.16 - 0.006 * le) * x)
        else:
            x8, le = np.log(N / 1e8), np.log(E)
            loss = np.exp(0.95 - 0.055 * x8 - 0.03 * le + 0.004 * x8 * le)
        return pd.DataFrame({"N": N, "experts": E, "loss": loss * np.exp(rng.normal(0, noise, N.size))})

    return load


def moe_tokens(seed: int = 0, noise: float = 0.004) -> pd.DataFrame:
    """An (N, D, E) MoE ladder in Ludziejewski et al. 2025's joint form (with Clark's Ê): 6 sizes
    20M-1.3B x 2 token counts (10 and 40 tokens per parameter) x 7 expert counts (1-64)."""
    rng = np.random.default_rng(seed)
    rows = []
    for N in np.geomspace(2e7, 1.3e9, 6):
        for D in (10 * N, 40 * N):
            for E in (1, 2, 4, 8, 16, 32, 64):
                le = np.log(moe_forms.e_hat(E, 1.5, 300.0))
                loss = (
                    1.7
                    + 0.55 * np.exp(-0.05 * le - (0.3 - 0.01 * le) * np.log(N / 1e9))
                    + 0.35 * np.exp(-0.08 * le - (0.28 + 0.01 * le) * np.log(D / 1e10))
                )
                rows.append(dict(N=N, D=D, experts=E, loss=loss * np.exp(rng.normal(0, noise))))
    return pd.DataFrame(rows)


# ---- the zoo: every (dataset, protocol), in the order of docs/zoo.md ----------------------
def _n(n: float) -> dict:
    return {"holdout_above_n": n}


def _public_cases() -> list[Case]:
    out = [Case("epoch", "budget", epoch, quick=True)]
    out.append(Case("epoch", "frontier", epoch, {"holdout_above": 1e20}, quick=True))
    for corpus, name in CORPORA.items():  # every validation loss (size), C4 (budget, frontier), tasks
        rw = corpus == "rw_original"
        out += [
            Case(f"gadre {name}/{loss[5:]}", "size", gadre(corpus, loss), _n(5e8), rw and loss == GADRE_MAIN)
            for loss in GADRE_LOSSES
        ]
        out += [Case(f"gadre {name}/c4_val", p, gadre(corpus)) for p in ("budget", "frontier")]
        out.append(Case(f"gadre {name} (5 tasks)", "downstream", gadre_ladder(corpus), _n(5e8), rw))
    out += [Case(f"mpl {s}M", "curve", _mpl(s), quick=s == "25") for s in ("25", "100")]
    return out + [
        Case("gemstones cooldowns", "budget", gemstones_cooldowns),
        Case("gemstones cooldowns", "frontier", gemstones_cooldowns),
        Case("gemstones cooldowns", "size", gemstones_cooldowns, _n(1.5e9)),
        # the cooldown protocol reads the folder (hot curves and cooldown branches)
        Case("gemstones cooldowns", "cooldown", lambda: str(SHARED / "gemstones"), _n(1.5e9)),
        Case("gemstones hot", "budget", gemstones_hot),
        Case("gemstones hot", "size", gemstones_hot, _n(1.5e9)),
        Case("gemstones hot+half-LR", "lr", gemstones_lr),
    ]


SWEEP_LIKE = "synthetic LR sweep, coarse, steep above"  # lr_sweep_like


def _synthetic_cases() -> list[Case]:
    skewed = "synthetic LR x batch grid, skewed, 15% cells missing, seed 1"
    out = [
        Case(f"synthetic repeated{name}", p, load, quick=p == "epochs" and not name)
        for p in ("epochs", "size")  # size: the law fitted on the smaller sizes predicts the largest
        for name, load in (
            ("", repeated),
            (" R_D=5 seed 1", lambda: repeated(1, 5.0)),
            (" R_D=40 seed 2", lambda: repeated(2, 40.0)),
        )
    ]
    big = "synthetic repeated, larger models at fewer epochs, overfitting"
    out += [Case(big, "epochs", repeated_large), Case(big, "size", repeated_large, _n(3e9))]
    out += [
        Case("synthetic LR ladder", "lr", lr_ladder, _n(4e8), quick=True),
        *(Case(f"{SWEEP_LIKE}, seed {s}", "lr", lambda s=s: lr_sweep_like(s), _n(3e8)) for s in (0, 7)),
        Case("synthetic LR x batch grid", "lr", lr_batch_ladder, _n(4.3e8)),
        Case("synthetic LR x batch grid", "batch", lr_batch_ladder, _n(4.3e8)),
        Case(skewed, "lr", lambda: lr_batch_ladder(1, skew=0.004, drop=0.15), _n(4.3e8)),
        Case(skewed, "batch", lambda: lr_batch_ladder(1, skew=0.004, drop=0.15), _n(4.3e8)),
    ]
    for seed in range(3):
        for protocol, opts in (("budget", {}), ("frontier", {"holdout_above": 5.1e17}), ("size", _n(3e8))):
            out.append(Case(f"synthetic Kaplan seed {seed}", protocol, lambda s=seed: kaplan_ladder(s), opts))
    return out


def _c(cut: float) -> dict:
    return {"holdout_above": cut}


FIT_5E17 = _c(5e17)  # the held-back comparisons' fitted budgets


def _quiet(seed: int) -> Callable[[], pd.DataFrame]:
    return lambda: small_pair(seed, 1.3, True, noise=0.003, offset=0.0)


def _small(seed: int, multiplier: float, kaplan: int) -> Case:
    name = f"synthetic small pair m={multiplier}{' Kaplan' * kaplan}, fit <= 5e17"
    return Case(name, "compare", lambda: small_pair(seed, multiplier, bool(kaplan)), FIT_5E17)


def _compare_prefix_moe_cases() -> list[Case]:
    out = [
        Case(
            f"gadre {CORPORA[other]} vs {CORPORA[ref]}/{loss[5:]}",
            "compare",
            gadre_pair(ref, other, loss),
            quick=(ref, other, loss) == ("rw_original", "c4_original", "loss_paloma_c4_en"),
        )
        for ref, other in CORPUS_PAIRS
        for loss in COMPARE_LOSSES
    ]
    out += [
        Case("gemstones half vs full LR", "compare", gemstones_lr_pair),
        Case("synthetic pair m=2", "compare", lambda: recipe_pair(0, 2.0)),
        Case("synthetic pair drift 0.1", "compare", lambda: recipe_pair(1, drift=0.1)),
        Case("ours recipes lr 3e-3 vs 1e-2", "compare", own("recipes_lr")),  # a `sweep.recipes` demo
    ]
    # shaped like the held-back comparisons: fitted on the small budgets, predicted 5-50x beyond them
    # (fit <= 5e17, hidden up to 2.6e19; Gadre's and Gemstones' ladders start higher: their own cut)
    out += [
        Case(
            f"gadre {CORPORA[other]} vs {CORPORA[ref]}/{loss[5:]}, fit <= 3e18",
            "compare",
            gadre_pair(ref, other, loss, top=1.5e20),
            _c(3e18),
        )
        for ref, other in CORPUS_PAIRS
        for loss in ("loss_paloma_refinedweb", "loss_de_en")
    ]
    out += [
        Case("gemstones half vs full LR, fit <= 2e19", "compare", gemstones_lr_pair, _c(2e19)),
        Case("gemstones cooled vs hot, fit <= 2e19", "compare", gemstones_cooled_pair, _c(2e19)),
        Case("gemstones shapes odd vs even, fit <= 2e19", "compare", gemstones_shape_split, _c(2e19)),
        *(_small(i, m, k) for i, (m, k) in enumerate(((1.0, 0), (1.05, 0), (1.3, 0), (1.0, 1), (1.3, 1)))),
        *(
            Case(f"synthetic small pair m=1.3 Kaplan, 0.3% noise, seed {s}", "compare", _quiet(s), FIT_5E17)
            for s in (5, 6)
        ),
    ]
    out += [
        # forecasts from the first 25% of a run: the larger shapes from the smaller ones' finished
        # curves; MPL: each run length from the others, schedules known
        Case("gemstones hot 350B", "curve-prefix", gemstones_prefix_350b, _n(6e8), quick=True),
        Case("gemstones full vs half LR", "curve-prefix", gemstones_prefix_lr, _n(6e8)),
        *(Case(f"mpl {s}M", "curve-prefix", _mpl(s)) for s in ("25", "100")),
        Case("mpl 25M -> 100M, 9 schedules", "curve-prefix", mpl_sizes),
        Case("gemstones wsd vs constant vs half LR", "curve-prefix", gemstones_schedules, _n(6e8)),
        Case("ours hparam_ladder", "curve-prefix", lambda: str(OWN / "hparam_ladder_curves.csv.gz")),
        # MoE: the largest model size hidden
        Case("synthetic MoE Clark form, fixed tokens", "moe", moe_fixed_tokens(0, "clark"), quick=True),
        Case("synthetic MoE Clark form, fixed tokens, seed 1", "moe", moe_fixed_tokens(1, "clark")),
        Case("synthetic MoE irreducible loss, fixed tokens", "moe", moe_fixed_tokens(2, "floor")),
        Case(
            "synthetic MoE log-bilinear (moe.sh), fixed tokens", "moe", moe_fixed_tokens(3, "bilinear", 0.003)
        ),
        Case("synthetic MoE joint form, (N, D, E)", "moe", moe_tokens),
    ]
    for name, protocols in (  # our presets' runs tables (moe: +sweep=moe, N = active parameters)
        ("demo", ("budget", "frontier", "lr")),
        ("data_limited", ("epochs", "size")),
        ("hparam_ladder", ("lr", "batch")),
        ("moe", ("moe",)),
    ):
        out += [Case(f"ours {name}", p, own(name)) for p in protocols]
    return out


def cases() -> list[Case]:
    """Every (dataset, protocol) of the zoo."""
    return _public_cases() + _synthetic_cases() + _compare_prefix_moe_cases()


# ---- running ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Outcome:
    """One backtest's summary (what the zoo table shows; what `--cache` keeps)."""

    dataset: str
    protocol: str
    error_key: str | None  # the protocol's error key; None when the backtest refused the table
    cut: dict
    rows: list  # Backtest.rows(): one summary per method
    error: str | None
    seconds: float

    @property
    def key(self) -> str:
        return f"{self.dataset} | {self.protocol}"

    def role(self, role: str) -> dict | None:
        return next((r for r in self.rows if r[role]), None)


def run_case(case: Case, bootstrap: int, only_default: bool = False) -> Outcome:
    """One case's backtest; `only_default` scores the baseline and the default only (the tests)."""
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            opt = backtest.Options(bootstrap=bootstrap, only_default=only_default, **case.options)
            bt = backtest.run(case.load(), case.protocol, opt)
        done = (bt.error_key(), bt.cut, bt.rows(), None)
    except AnalysisError as e:
        done = (None, {}, [], str(e))
    return Outcome(case.dataset, case.protocol, *done, time.perf_counter() - t0)


def registered(protocol: str) -> set[str]:
    """The methods the registry lists for `protocol` (its runner's module registers its family's)."""
    importlib.import_module(backtest.RUNNERS[backtest.Protocol(protocol)][0])
    return {m.name for m in methods(protocol=protocol)}


def unregistered(outcomes: list[Outcome]) -> dict[str, list[str]]:
    """Per protocol, the methods its backtests scored that the registry does not list for it (the
    rule never picks them)."""
    out: dict[str, list[str]] = {}
    for o in outcomes:
        for m in (r["method"] for r in o.rows):
            if m not in registered(o.protocol) and m not in out.setdefault(o.protocol, []):
                out[o.protocol].append(m)
    return out


# ---- the report ---------------------------------------------------------------------------------
def _protocols(outcomes: list[Outcome]) -> list[str]:
    return list(dict.fromkeys(o.protocol for o in outcomes))


def _pairs(outcomes: list[Outcome], protocol: str) -> list[tuple[Outcome, dict, dict]]:
    """(outcome, default row, baseline row) of the protocol's backtests where both were scored."""
    out = []
    for o in outcomes:
        d, b = o.role("default"), o.role("baseline")
        if o.protocol == protocol and d and b and d[o.error_key] is not None and b[o.error_key] is not None:
            out.append((o, d, b))
    return out


def _worse(error: float, baseline: float) -> bool:
    return error > (1 + MARGIN) * baseline + 1e-12


def _mean(v: list) -> float | None:
    v = [x for x in v if x is not None]
    return float(np.mean(v)) if v else None


def summary(outcomes: list[Outcome]) -> list[dict]:
    """Per protocol: mean over datasets of the default's and the baseline's error and coverage, and
    on how many datasets the default is worse than the baseline by more than MARGIN."""
    out = []
    for protocol in _protocols(outcomes):
        pairs = _pairs(outcomes, protocol)
        out.append(
            dict(
                protocol=protocol,
                n=len(pairs),
                default=_mean([d[o.error_key] for o, d, _ in pairs]),
                baseline=_mean([b[o.error_key] for o, _, b in pairs]),
                default_cov=_mean([d["coverage_90"] for _, d, _ in pairs]),
                baseline_cov=_mean([b["coverage_90"] for _, _, b in pairs]),
                default_worse=sum(_worse(d[o.error_key], b[o.error_key]) for o, d, b in pairs),
            )
        )
    return out


def _errors(outcomes: list[Outcome], protocol: str) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """(method -> dataset -> error, dataset -> baseline error) of one protocol's scored backtests,
    for the methods the registry lists for the protocol."""
    names = registered(protocol)
    by_method: dict[str, dict[str, float]] = {}
    base: dict[str, float] = {}
    for o in outcomes:
        b = o.role("baseline")
        if o.protocol != protocol or b is None or b[o.error_key] is None:
            continue
        base[o.dataset] = b[o.error_key]
        for r in o.rows:
            if not r["baseline"] and r["method"] in names and r[o.error_key] is not None:
                by_method.setdefault(r["method"], {})[o.dataset] = r[o.error_key]
    return by_method, base


def rule(by_method: dict, base: dict, datasets: list[str]) -> str | None:
    """The method no worse than the baseline by more than MARGIN on every dataset of `datasets`
    with the lowest mean error there; None (the baseline) when no method is, or without datasets.
    (Not `validation.choose_against`: that one needs a challenger to *beat* the baseline.)"""
    ok = {
        m: np.mean([e[d] for d in datasets])
        for m, e in by_method.items()
        if datasets and all(d in e and not _worse(e[d], base[d]) for d in datasets)
    }
    return min(ok, key=ok.__getitem__) if ok else None


def _default_record(outcomes: list[Outcome], protocol: str) -> str:
    """What the command does without flags on this protocol's datasets, against the rule: its
    method(s), and on how many datasets it is worse than the baseline by more than MARGIN."""
    pairs = _pairs(outcomes, protocol)
    fails = [
        f"{o.dataset} {d[o.error_key] / b[o.error_key]:.2f}x"
        for o, d, b in pairs
        if _worse(d[o.error_key], b[o.error_key])
    ]
    what = "/".join(dict.fromkeys(d["method"] for _, d, _ in pairs)) or "—"
    n = len(pairs)
    return f"{what}: passes on {n - len(fails)} of {n}" + (f" (fails: {'; '.join(fails)})" if fails else "")


def decisions(outcomes: list[Outcome]) -> list[dict]:
    """Per protocol: the rule's pick on every dataset, and its leave-one-dataset-out record (the
    pick made without dataset d, scored on d) against the baseline's."""
    out = []
    for protocol in _protocols(outcomes):
        by_method, base = _errors(outcomes, protocol)
        ds = list(base)
        if not ds:
            continue
        lodo = []
        for d in ds:
            pick = rule(by_method, base, [x for x in ds if x != d])
            lodo.append(base[d] if pick is None or d not in by_method[pick] else by_method[pick][d])
        pick = rule(by_method, base, ds)
        worst = max(ds, key=lambda d: by_method[pick][d] / base[d]) if pick else None
        out.append(
            dict(
                protocol=protocol,
                n=len(ds),
                default=_default_record(outcomes, protocol),
                pick=pick or "baseline",
                lodo=float(np.mean(lodo)),
                baseline=float(np.mean([base[d] for d in ds])),
                worst=None if worst is None else f"{worst} ({by_method[pick][worst] / base[worst]:.2f}x)",
            )
        )
    return out


def consistent_with_90(k: int, n: int, alpha: float = 0.05) -> bool:
    """Whether k of n inside a 90% interval is consistent with a true 90% (two-sided binomial test
    at `alpha`): with n = 3, 2/3 and 3/3 are; with n = 30, 24-30 are."""
    from scipy.stats import binomtest  # start-up time: scipy.stats only when coverage is judged

    return n > 0 and binomtest(k, n, 0.9).pvalue >= alpha


def _table(cols: list[str], rows: list[list]) -> list[str]:
    line = lambda cells: "| " + " | ".join(map(str, cells)) + " |"
    return [line(cols), "|" + "---|" * len(cols), *map(line, rows)]


def coverage_section(outcomes: list[Outcome]) -> list[str]:
    """Per protocol and dataset: the default's 90% coverage, its held-out count, and the verdict
    (in COVERAGE_RANGE; else whether the count is consistent with 90% at all)."""
    rows = []
    for o in outcomes:
        d = o.role("default")
        if o.error is not None or not d or d.get("coverage_90") is None:
            continue
        n, cov = int(d["n"]), d["coverage_90"]
        k = round(cov * n)
        verdict = "out of range; consistent with 90%" if consistent_with_90(k, n) else "**miscalibrated**"
        verdict = "in range" if COVERAGE_RANGE[0] <= cov <= COVERAGE_RANGE[1] else verdict
        rows.append([o.protocol, o.dataset, d["method"], f"{k} / {n}", f"{cov:.0%}", verdict])
    cols = ["protocol", "dataset", "default", "inside / held out", "coverage", "verdict"]
    return [
        "",
        "## Coverage of the default's 90% intervals, per dataset",
        "",
        f"In range: {COVERAGE_RANGE[0]:.0%}-{COVERAGE_RANGE[1]:.0%}. With few held-out points a",
        "dataset's coverage is coarse (3 points: 0, 33, 67 or 100%), so each row also says whether",
        "k of n is consistent with a true 90% (two-sided binomial test, 5%).",
        "",
        *_table(cols, rows),
    ]


HEADER = """# Backtests: the development zoo

Written by `python -m analysis.backtests.zoo --markdown docs/zoo.md` (do not edit by hand).
Each row hides the top of one ladder (`python -m analysis backtest DATA --protocol P`), fits every
candidate method below the cut and scores it on what it did not see. Errors: mean |relative error|
of the loss (budget, frontier, size, epochs, curve), mean |log10| of the learning-rate optimum (lr),
mean absolute error in accuracy points (downstream), mean |log2| of the compute multiplier between
two recipes (compare); in brackets the share of held-out values inside the method's 90% interval.
The default rule picks among the methods the registry lists for the protocol
(`analysis.methods(protocol=P)`). How to read it: docs/backtest.md. The zoo is
development data only (../shared/data and our own ladders); held-back public ladders are not in it.
"""


def _fmt(v: float | None, rel: bool) -> str:
    return "—" if v is None else (f"{100 * v:.2f}%" if rel else f"{v:.3f}")


def _cell(row: dict | None, key: str, rel: bool) -> str:
    if row is None or row.get(key) is None:
        return "—"
    return _fmt(row[key], rel) + ("" if row.get("coverage_90") is None else f" ({row['coverage_90']:.0%})")


def _backtest_row(o: Outcome) -> list[str]:
    if o.error is not None:
        return [o.dataset, o.protocol, "—", f"error: {o.error}", "", "", ""]
    key, rel = o.error_key, o.error_key == "mean_abs_rel_error"
    d, b = o.role("default"), o.role("baseline")
    scored = [r for r in o.rows if r[key] is not None]
    return [
        o.dataset,
        o.protocol,
        f"{o.cut.get('what', '')} ({o.cut.get('n_held_out')})",
        f"{d['method']}: {_cell(d, key, rel)}" if d else "—",
        f"{b['method']}: {_cell(b, key, rel)}" if b else "—",
        min(scored, key=lambda r: r[key])["method"] if scored else "—",
        "; ".join(f"{r['method']} {_cell(r, key, rel)}" for r in o.rows),
    ]


# Why a protocol's default is not the rule's pick (the evidence is in the tables of docs/zoo.md)
EXCEPTIONS: dict[str, str] = {
    "budget": "the point fit is Huber 1e-3, Hoffmann et al.'s protocol, which reproduces Epoch's published "
    "fit and has the lower mean error here; least squares is better by > 10% on two synthetic Kaplan "
    "ladders (docs/fit.md, 'How fits work').",
    "size": "as budget: Huber 1e-3 (2.48% vs least squares' 3.25% mean), worse by > 10% on 7 of 34 "
    "(Gadre's Paloma losses and two synthetic Kaplan ladders); `fit` without --law keeps Chinchilla's "
    "form, `auto` on repeated data.",
    "epochs": "fit's default on repeated data is `auto`: Chinchilla unless a data-constrained form beats "
    "it by 10% on both the epochs and the size folds of the runs' own table. A fixed data-constrained "
    "default wins our synthetic ladders (they follow its form) but lost to Chinchilla on a held-back "
    "public ladder (docs/fit.md, 'Repeated data').",
    "lr": "the lr row's default is the law fit-hparams fitted before it chose per table; fit-hparams now "
    "runs these folds on the user's own runs and keeps baseline_log_linear unless the law beats it by "
    '10% on every fold (docs/fit.md, "Which method fit-hparams fits").',
    "batch": "fit_hparams is the one command for both hyperparameters; on the batch ladders its own form "
    "choice lands within 0.01 dex of form_N_D's, which it may choose itself.",
    "downstream": "fit-task keeps `auto`: `average` wins these three 5-task ladders, but on the 13 Gadre "
    "tasks above chance it is worse (4.01 vs 3.52 points) with intervals 20% wider (docs/downstream.md).",
    "compare": "compare keeps `auto`: `auto_shrunk` alone has the lower mean error on the zoo, but on the "
    "held-back comparisons (fitted on budgets <= 5e17, predicted 1e18-2.6e19) it lost to no difference "
    "(0.545 vs 0.254 log2) with named winners right 14 times in 26; `auto` reports its multiplier only where "
    "the user's own folds show it beating no difference, and every winner it named here was right.",
    "cooldown": "cooldown has no command of its own; its default row is fit-curve's `mpl`, which wins the "
    "curve protocol by 9x (0.11% vs 1.01%); on the one cooldown ladder the branch-ratio baseline wins.",
}
TIE_RTOL = 0.02  # a method within 2% of the best error on a dataset ties with it (it does not win there)


def best_methods(o: Outcome, rtol: float = 0.0) -> list[str]:
    """The methods with the lowest error on one backtest (ties within `rtol` of it included)."""
    scored = [r for r in o.rows if o.error_key and r[o.error_key] is not None]
    if not scored:
        return []
    low = min(r[o.error_key] for r in scored)
    return [r["method"] for r in scored if r[o.error_key] <= low * (1 + rtol) + 1e-15]


def methods_section(outcomes: list[Outcome]) -> list[str]:
    """Every registered method besides the baselines: its role and where it is best, the rule that
    keeps it (a default, or best on a dataset by more than TIE_RTOL over every other method)."""
    for p in backtest.Protocol:  # every protocol's module registers its family's methods
        registered(p)
    rows = []
    for m in methods():
        if m.role == "baseline":
            continue
        mine = [o for o in outcomes if o.protocol in m.protocols]
        alone = sum(best_methods(o, TIE_RTOL) == [m.name] for o in mine)
        tied = sum(m.name in best_methods(o) for o in mine)
        keep = "default" if m.role == "default" else (f"best alone on {alone}" if alone else "")
        keep = keep or (f"ties the best on {tied}" if tied else "**never best**")
        rows.append([str(m.family), m.name, str(m.role), ", ".join(m.protocols) or "—", tied, alone, keep])
    picks = {r["protocol"]: r for r in decisions(outcomes)}
    notes = [
        f"- {p}: the default is {r['default'].split(':')[0]}, the rule picks {r['pick']}. "
        + EXCEPTIONS.get(p, "No exception stated: the default should become the rule's pick.")
        for p, r in picks.items()
        if r["pick"] not in r["default"].split(":")[0].split("/")
    ]
    return [
        "",
        "## The registered methods (scored by a protocol) and why each stays",
        "",
        f"`analysis.methods()`: {sum(1 for m in methods() if m.role != 'baseline')} methods besides the "
        f"baselines. Best on: the backtests where its error is the lowest (ties counted); alone: lower "
        f"than every other method's by more than {TIE_RTOL:.0%}.",
        "",
        *_table(["family", "method", "role", "protocols", "best on", "alone", "why it stays"], rows),
        "",
        "## Where the default is not the rule's pick",
        "",
        *(notes or ["Nowhere: every protocol's default is the rule's pick."]),
    ]


def winners_section(outcomes: list[Outcome]) -> list[str]:
    """compare: per method, over every compare backtest, the budgets where its 90% interval excludes
    1 (it names a winner) and the share of those on the measured multiplier's side of 1 (the named
    winners' precision), beside its mean |log2| error and the datasets where it loses to the
    baseline by more than MARGIN."""
    by: dict[str, list] = {}
    for o in outcomes:
        b = o.role("baseline")
        if o.protocol != "compare" or o.error_key is None or b is None:
            continue
        for r in o.rows:
            if r[o.error_key] is not None and "winners_named" in r:
                by.setdefault(r["method"], []).append((r, b, o.error_key))
    if not by:
        return []
    rows = []
    for m, xs in by.items():
        named = sum(r["winners_named"] for r, _, _ in xs)
        right = sum(r["winners_right"] for r, _, _ in xs)
        worse = sum(_worse(r[k], b[k]) for r, b, k in xs)
        role = "default" if xs[0][0]["default"] else "baseline" if xs[0][0]["baseline"] else ""
        prec = f"{right / named:.0%}" if named else "—"
        err = float(np.mean([r[k] for r, _, k in xs]))
        rows.append([m, role, len(xs), f"{err:.3f}", worse, f"{right} / {named}", prec])
    return [
        "",
        "## compare: the named winners' precision",
        "",
        "Over every compare backtest: a method names a winner at a hidden budget when its 90% interval",
        "of the multiplier excludes 1; precision is the share of those named on the measured",
        "multiplier's side of 1. `compare` prints a winner only there (elsewhere: no clear winner).",
        "",
        *_table(
            ["method", "role", "datasets", r"mean \|log2 error\|"]
            + [f"worse than the baseline by > {MARGIN:.0%}", "named winners right / named", "precision"],
            rows,
        ),
    ]


def markdown(outcomes: list[Outcome], seconds: float, bootstrap: int) -> str:
    rel = lambda p: p not in ("lr", "batch", "downstream", "compare")  # relative errors
    cov = lambda v: "—" if v is None else f"{v:.0%}"
    summary_rows = [
        [s["protocol"], s["n"], *(_fmt(s[k], rel(s["protocol"])) for k in ("default", "baseline"))]
        + [cov(s["default_cov"]), cov(s["baseline_cov"]), s["default_worse"]]
        for s in summary(outcomes)
    ]
    rule_rows = [
        [r["protocol"], r["n"], r["pick"], *(_fmt(r[k], rel(r["protocol"])) for k in ("lodo", "baseline"))]
        + [r["worst"] or "—", r["default"]]
        for r in decisions(outcomes)
    ]
    lines = [
        HEADER,
        f"{len(outcomes)} backtests, bootstrap {bootstrap} per candidate fit, "
        f"{seconds / 60:.0f} min of backtests on a 2-core VM.",
        "",
        "## Summary: the default against the baseline, mean over datasets",
        "",
        *_table(
            ["protocol", "datasets", "default", "baseline", "default 90% coverage", "baseline 90% coverage"]
            + [f"datasets where the default is worse by > {MARGIN:.0%}"],
            summary_rows,
        ),
        "",
        f"## The default rule: no worse than the baseline by more than {MARGIN:.0%} on any dataset",
        "",
        "The method that passes on every dataset with the lowest mean error, else the baseline; its",
        "leave-one-dataset-out error is the rule's pick made without a dataset, scored on it.",
        "",
        *_table(
            ["protocol", "datasets", "rule's pick", "leave-one-dataset-out error", "baseline"]
            + ["worst dataset vs baseline", "the default without flags, against the rule"],
            rule_rows,
        ),
        *methods_section(outcomes),
        *winners_section(outcomes),
        *coverage_section(outcomes),
        "",
        "## Every backtest",
        "",
        *_table(
            ["dataset", "protocol", "held out (n)", "default", "baseline", "best method", "every method"],
            [_backtest_row(o) for o in outcomes],
        ),
    ]
    return "\n".join(lines) + "\n"


def cache_file(path: str, bootstrap: int, only_default: bool) -> pathlib.Path:
    """`--cache PATH`, or the default file of these settings under $SCALELAB_CACHE/zoo."""
    if path:
        return pathlib.Path(path)
    root = pathlib.Path(os.environ.get("SCALELAB_CACHE") or "~/.cache/scalelab").expanduser()
    return root / "zoo" / f"bootstrap{bootstrap}{'-only-default' if only_default else ''}.json"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one dataset per protocol")
    ap.add_argument("--bootstrap", type=int, default=50)
    ap.add_argument("--only", default="", help="run the cases whose dataset or protocol contains this")
    ap.add_argument("--only-default", action="store_true", help="score the baseline and the default only")
    ap.add_argument("--cache", nargs="?", const="", help="reuse and extend this JSON of finished backtests")
    ap.add_argument("--markdown", help="write the zoo table here (docs/zoo.md)")
    args = ap.parse_args(argv)
    if not SHARED.is_dir():
        print(f"error: the zoo needs {SHARED}", file=sys.stderr)
        return 2
    path = None if args.cache is None else cache_file(args.cache, args.bootstrap, args.only_default)
    cache = {}
    if path is not None and path.exists():
        cache = {o.key: o for o in (Outcome(**d) for d in json.loads(path.read_text()))}
    outcomes = []
    for case in cases():
        if (args.quick and not case.quick) or args.only not in f"{case.dataset} {case.protocol}":
            continue
        o = cache.get(f"{case.dataset} | {case.protocol}")
        o = o or run_case(case, args.bootstrap, args.only_default)
        outcomes.append(o)
        cache[o.key] = o
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_json(path, [dataclasses.asdict(x) for x in cache.values()])
        d, b = o.role("default"), o.role("baseline")
        txt = f"default {d and d['method']} {d and d[o.error_key]}  baseline {b and b[o.error_key]}"
        txt = f"error: {o.error}" if o.error else txt
        print(f"{o.dataset:34s} {o.protocol:10s} {txt}  [{o.seconds:.0f} s]", flush=True)
    for s in summary(outcomes):
        print(
            f"summary {s['protocol']:10s} n={s['n']:2d} default {s['default']} baseline {s['baseline']} "
            f"worse on {s['default_worse']}"
        )
    for protocol, names in unregistered(outcomes).items():
        print(f"not registered for {protocol} (the rule skips them): {', '.join(names)}")
    if args.markdown:
        seconds = sum(o.seconds for o in outcomes)
        pathlib.Path(args.markdown).write_text(markdown(outcomes, seconds, args.bootstrap))
    return 0


if __name__ == "__main__":
    sys.exit(main())
