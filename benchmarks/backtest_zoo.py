"""The development zoo: every backtest protocol that applies, on every table in ../shared/data and on
our own ladders, with the default and the simple baseline side by side.

A method becomes a default only when this zoo shows it no worse than the baseline on every dataset
(DEVELOPERS.md). The zoo is for development: held-back public ladders are not in it.

Datasets (each a table and the protocols that apply to it):
- Epoch's reconstruction of the Chinchilla runs (5 highest losses dropped): budget, frontier
  (C > 1e20);
- Gadre et al. 2024, per corpus (C4, RedPajama, RefinedWeb) and per validation loss (8): size (the
  1.4B and 6.9B models from <= 412M); per corpus on the C4 loss: budget, frontier; downstream;
- Luo et al. 2025's MPL curves, 25M and 100M: curve;
- Gemstones (McLeish et al. 2025): the cooldown branches' end losses (budget, frontier, size), the
  hot checkpoints every ~50B tokens (budget, size), hot + half-LR re-runs (lr: 2 learning rates per
  rung, which the protocol must refuse in one line);
- Gemstones' and Luo et al.'s curves, cut at 25% of each run (curve-prefix): the hot runs' loss at
  350B tokens from the shapes under 6e8 parameters, full vs half learning rate at ~100B tokens, the
  MPL 25M / 100M run lengths from each other (schedules known);
- recipe pairs (compare): Gadre et al.'s corpora pairwise on three validation losses, Gemstones at
  full vs half learning rate, two synthetic IsoFLOP pairs (a constant multiplier of 2, one drifting
  as C^0.1 through 1 at 1e18), our two learning-rate recipes (`recipes_lr.csv`: a `sweep.recipes`
  demo sweep, docs/sweeps.md, "Recipes");
- mixture of experts (moe): synthetic routed ladders generated here (seeded): Clark et al.'s form at
  their five sizes x ten expert counts with fixed tokens (two seeds), the same with an irreducible
  loss, the log-bilinear form of the moe check, and an (N, D, E) ladder in the joint form;
- ours: synthetic repeated data (Muennighoff et al.'s form, R_D = 15: epochs), synthetic
  misspecified ladders (Kaplan's surface, not additive: budget, frontier, size), a synthetic LR
  ladder (lr), and runs tables of our presets when present under benchmarks/data/zoo/
  (`demo.csv`, `data_limited.csv`, `hparam_ladder.csv`: `python -m analysis collect` of a sweep).

Usage: python benchmarks/backtest_zoo.py [--quick] [--bootstrap 50] [--json OUT]
           [--markdown docs/backtests.md]
`--quick` runs one dataset per protocol (the test's subset).
"""

from __future__ import annotations

import argparse
import dataclasses
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

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import frontier_eval  # noqa: E402

from analysis import backtests as backtest  # noqa: E402
from analysis.laws import moe_forms  # noqa: E402
from models.base.errors import AnalysisError  # noqa: E402
from models.base.jsonio import write_json  # noqa: E402

SHARED = pathlib.Path(os.environ.get("SCALELAB_SHARED_DATA") or ROOT.parent / "shared" / "data")
OWN = ROOT / "benchmarks" / "data" / "zoo"
CORPORA = {"c4_original": "C4", "rpj": "RedPajama", "rw_original": "RefinedWeb"}
GADRE_MAIN = "loss_c4_val"


@dataclass(frozen=True)
class Case:
    """One (dataset, protocol) of the zoo."""

    dataset: str
    protocol: str
    load: Callable[[], object]  # the table (or a path, for curves)
    options: dict = field(default_factory=dict)
    quick: bool = False  # in the test's subset


# ---- tables --------------------------------------------------------------------------------------
def epoch() -> pd.DataFrame:
    d = pd.read_csv(SHARED / "chinchilla_epoch" / "svg_extracted_data.csv")
    d = d[d.loss < d.loss.nlargest(5).min()]
    out = pd.DataFrame({"N": d["Model Size"], "C": d["Training FLOP"], "loss": d.loss})
    out["D"] = out.C / (6 * out.N)
    return out.reset_index(drop=True)


def gadre(corpus: str, loss: str = GADRE_MAIN) -> Callable[[], pd.DataFrame]:
    def load() -> pd.DataFrame:
        r = pd.read_csv(SHARED / "gadre2024_overtraining" / "runs.csv")
        x = r[r.dataset == corpus]
        return pd.DataFrame({"N": x.n_params, "D": x.tokens, "loss": x[loss]}).dropna().reset_index(drop=True)

    return load


def gadre_runs(corpus: str) -> Callable[[], pd.DataFrame]:
    def load() -> pd.DataFrame:
        r = pd.read_csv(SHARED / "gadre2024_overtraining" / "runs.csv")
        return r[r.dataset == corpus].reset_index(drop=True)

    return load


DOWNSTREAM_TASKS = ("hellaswag", "arc_easy", "piqa", "copa", "lambada_openai")


def gadre_ladder(corpus: str | None) -> Callable[[], pd.DataFrame]:
    """fit-task's ladder (N, D, task, task_loss, accuracy) of one corpus (None: all three): the
    interface check's five tasks, the C4 validation loss as every task's loss."""

    def load() -> pd.DataFrame:
        r = pd.read_csv(SHARED / "gadre2024_overtraining" / "runs.csv")
        r = r if corpus is None else r[r.dataset == corpus]
        rows = [
            dict(
                run=x.run,
                N=float(x.n_params),
                D=float(x.tokens),
                task=t,
                task_loss=x.loss_c4_val,
                accuracy=getattr(x, f"acc_{t}"),
            )
            for x in r.itertuples()
            for t in DOWNSTREAM_TASKS
        ]
        return pd.DataFrame(rows)

    return load


def gemstones_cooldowns() -> pd.DataFrame:
    c = pd.read_csv(SHARED / "gemstones" / "cooldowns.csv")
    return pd.DataFrame({"N": c.N, "D": c.tokens_end, "loss": c.loss_end})


def gemstones_folder() -> str:
    """The Gemstones folder (hot curves and cooldown branches): what the cooldown protocol reads."""
    return str(SHARED / "gemstones")


def gemstones_hot() -> pd.DataFrame:
    h = pd.read_csv(SHARED / "gemstones" / "hot_checkpoints.csv")
    h = h[h.step % (477 * 25) == 0]
    return pd.DataFrame({"N": h.N, "D": h.tokens, "loss": h.loss}).reset_index(drop=True)


def gemstones_lr() -> pd.DataFrame:
    """Hot and half-LR runs at matched checkpoints: two learning rates per (shape, tokens) rung."""
    h = pd.read_csv(SHARED / "gemstones" / "hot_checkpoints.csv").assign(lr=1.0)
    c = pd.read_csv(SHARED / "gemstones" / "half_lr_checkpoints.csv").assign(lr=0.5)
    both = pd.concat([h, c])
    both = both[both.step % (477 * 25) == 0]
    return pd.DataFrame({"N": both.N, "D": both.tokens, "lr": both.lr, "loss": both.loss}).reset_index(
        drop=True
    )


def repeated(seed: int = 0, r_d: float = 15.0) -> pd.DataFrame:
    """Muennighoff et al.'s data-constrained form (R_D = 15 by default) on 6 sizes x 2 unique-token
    counts."""
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


def kaplan_ladder(seed: int) -> Callable[[], pd.DataFrame]:
    """Kaplan et al. 2020's eq. 1.5 surface (not of the additive Chinchilla form), 12 budgets x 7
    shapes, 0.5% noise: a misspecified ladder (frontier_eval's)."""
    return lambda: frontier_eval.kaplan_ladder(seed)


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


def gemstones_prefix_350b() -> pd.DataFrame:
    """The hot runs as a curves table (protocol `curve-prefix`): each shape to 350B tokens at its
    constant learning rate, one rung per shape (optim.lr 1: the relative peak rate)."""
    h = pd.read_csv(SHARED / "gemstones" / "hot_checkpoints.csv").rename(columns={"tokens": "D"})
    return h.assign(run=h.model, total_steps=h.step.max(), **{"optim.lr": 1.0})


GEMSTONES_LR_STEPS = 477 * 50  # the half-LR runs' length (~100B tokens; they end at step 23840)


def gemstones_prefix_lr() -> pd.DataFrame:
    """Full and half learning rate at ~100B tokens as a curves table (protocol `curve-prefix`): the
    hot runs up to the half-LR runs' length (a constant-LR run of that length) and the half-LR runs,
    the 20 shapes that have both, one rung per shape (optim.lr 1 and 0.5, relative peak rates)."""
    h = pd.read_csv(SHARED / "gemstones" / "hot_checkpoints.csv").assign(**{"optim.lr": 1.0})
    c = pd.read_csv(SHARED / "gemstones" / "half_lr_checkpoints.csv").assign(**{"optim.lr": 0.5})
    h = h[h.model.isin(c.model.unique()) & (h.step <= GEMSTONES_LR_STEPS)]
    both = pd.concat([h, c]).rename(columns={"tokens": "D"})
    return both.assign(run=both.model + "_lr" + both["optim.lr"].astype(str), total_steps=GEMSTONES_LR_STEPS)


def own(name: str) -> Callable[[], pd.DataFrame]:
    return lambda: pd.read_csv(OWN / f"{name}.csv")


# ---- recipe pairs (protocol `compare`: a table with a `recipe` column, REF's rows first) ------------
COMPARE_LOSSES = ("loss_c4_val", "loss_paloma_c4_en", "loss_openlm_eval")
CORPUS_PAIRS = (("rw_original", "c4_original"), ("rw_original", "rpj"), ("c4_original", "rpj"))


def gadre_pair(ref: str, other: str, loss: str) -> Callable[[], pd.DataFrame]:
    """Two of Gadre et al.'s corpora as recipes, on one validation loss (the same shapes trained
    on each corpus, every model scored on the same sets)."""

    def load() -> pd.DataFrame:
        r = pd.read_csv(SHARED / "gadre2024_overtraining" / "runs.csv")
        parts = [r[r.dataset == c].assign(recipe=CORPORA[c]) for c in (ref, other)]
        x = pd.concat(parts)
        return pd.DataFrame({"recipe": x.recipe, "N": x.n_params, "D": x.tokens, "loss": x[loss]}).dropna()

    return load


def gemstones_lr_pair() -> pd.DataFrame:
    """Gemstones at full and at half learning rate (REF full): the 20 models both were run for,
    checkpoints every ~10B tokens up to the half-LR runs' 100B (McLeish et al. 2025)."""
    h = pd.read_csv(SHARED / "gemstones" / "hot_checkpoints.csv").assign(recipe="full LR")
    c = pd.read_csv(SHARED / "gemstones" / "half_lr_checkpoints.csv").assign(recipe="half LR")
    h = h[h.model.isin(set(c.model)) & (h.tokens <= c.tokens.max())]
    both = pd.concat([h, c])
    both = both[both.step % (477 * 5) == 0]
    out = pd.DataFrame({"recipe": both.recipe, "N": both.N, "D": both.tokens, "loss": both.loss})
    return out.reset_index(drop=True)


REF_LAW = (1.8, 480.0, 2100.0, 0.34, 0.37)  # E, A, B, alpha, beta of the synthetic pairs' REF


def _isoflop(law, budgets, rng, noise: float, k: float = 6.0) -> list[dict]:
    E, A, B, al, be = law
    G = (al * A / (be * B)) ** (1 / (al + be))
    rows = []
    for C in budgets:
        n_opt = G * (C / k) ** (be / (al + be))
        for N in n_opt * np.geomspace(0.25, 4, 7):
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
        f = _frontier_gap((E, A, B, al, be), cross) / _frontier_gap((E, A, B, al2, be2), cross)
        other = (E, A * f, B * f, al2, be2)
    budgets = np.geomspace(1e17, 1e20, 7)
    ref_rows = [dict(r, recipe="ref") for r in _isoflop(REF_LAW, budgets, rng, 0.005)]
    oth_rows = [dict(r, recipe="other") for r in _isoflop(other, budgets, rng, 0.005)]
    return pd.DataFrame(ref_rows + oth_rows)


def _frontier_gap(law, C: float, k: float = 6.0) -> float:
    """L*(C) - E of a Chinchilla law (its IsoFLOP minimum above the floor)."""
    E, A, B, al, be = law
    G = (al * A / (be * B)) ** (1 / (al + be))
    N = G * (C / k) ** (be / (al + be))
    return A / N**al + B / (C / (k * N)) ** be


def true_log_m(multiplier: float, drift: float, C: np.ndarray, cross: float = 1e18) -> np.ndarray:
    """The exact log multiplier of `recipe_pair` at budgets C."""
    C = np.asarray(C, float)
    return np.full(C.shape, np.log(multiplier)) if drift == 0 else drift * np.log(C / cross)


# ---- mixture-of-experts ladders (protocol `moe`: the largest model size hidden) ---------------------
# Synthetic, seeded; shaped like the routed ladders MoE laws are fitted on: Clark et al. 2022's five
# dense-equivalent sizes (15M-1.3B) at ten expert counts (1-512, dense = 1) and one token count; an
# (N, D, E) ladder in the joint law's form. Truths from analysis/laws/moe_forms.py's forms.
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


def moe_cases() -> list[Case]:
    """The MoE ladders, each with its largest model size hidden (protocol `moe`)."""
    return [
        Case("synthetic MoE Clark form, fixed tokens", "moe", moe_fixed_tokens(0, "clark"), quick=True),
        Case("synthetic MoE Clark form, fixed tokens, seed 1", "moe", moe_fixed_tokens(1, "clark")),
        Case("synthetic MoE irreducible loss, fixed tokens", "moe", moe_fixed_tokens(2, "floor")),
        Case(
            "synthetic MoE log-bilinear (moe.sh), fixed tokens", "moe", moe_fixed_tokens(3, "bilinear", 0.003)
        ),
        Case("synthetic MoE joint form, (N, D, E)", "moe", moe_tokens),
    ]


# ---- the zoo ------------------------------------------------------------------------------------
def cases() -> list[Case]:
    out = [
        Case("epoch", "budget", epoch, quick=True),
        Case("epoch", "frontier", epoch, {"holdout_above": 1e20}, quick=True),
    ]
    losses = [
        c
        for c in pd.read_csv(SHARED / "gadre2024_overtraining" / "runs.csv", nrows=1).columns
        if c.startswith("loss_")
    ]
    for corpus, name in CORPORA.items():
        for loss in losses:
            quick = corpus == "rw_original" and loss == GADRE_MAIN
            out.append(
                Case(f"gadre {name}/{loss[5:]}", "size", gadre(corpus, loss), {"holdout_above_n": 5e8}, quick)
            )
        out.append(Case(f"gadre {name}/c4_val", "budget", gadre(corpus)))
        out.append(Case(f"gadre {name}/c4_val", "frontier", gadre(corpus)))
        out.append(
            Case(
                f"gadre {name} (5 tasks)",
                "downstream",
                gadre_ladder(corpus),
                {"holdout_above_n": 5e8},
                quick=corpus == "rw_original",
            )
        )
    for size in ("25", "100"):
        out.append(
            Case(
                f"mpl {size}M",
                "curve",
                lambda s=size: str(SHARED / "mpl_loss_curves" / f"csv_{s}"),
                quick=size == "25",
            )
        )
    out += [
        Case("gemstones cooldowns", "budget", gemstones_cooldowns),
        Case("gemstones cooldowns", "frontier", gemstones_cooldowns),
        Case("gemstones cooldowns", "size", gemstones_cooldowns, {"holdout_above_n": 1.5e9}),
        Case("gemstones cooldowns", "cooldown", gemstones_folder, {"holdout_above_n": 1.5e9}),
        Case("gemstones hot", "budget", gemstones_hot),
        Case("gemstones hot", "size", gemstones_hot, {"holdout_above_n": 1.5e9}),
        Case("gemstones hot+half-LR", "lr", gemstones_lr),
        Case("synthetic repeated", "epochs", repeated, quick=True),
        Case("synthetic repeated R_D=5 seed 1", "epochs", lambda: repeated(1, 5.0)),
        Case("synthetic repeated R_D=40 seed 2", "epochs", lambda: repeated(2, 40.0)),
        # repeated data, larger models: the law fitted on the smaller sizes predicts the largest
        Case("synthetic repeated", "size", repeated),
        Case("synthetic repeated R_D=5 seed 1", "size", lambda: repeated(1, 5.0)),
        Case("synthetic repeated R_D=40 seed 2", "size", lambda: repeated(2, 40.0)),
        Case("synthetic LR ladder", "lr", lr_ladder, {"holdout_above_n": 4e8}, quick=True),
        Case("synthetic LR x batch grid", "lr", lr_batch_ladder, {"holdout_above_n": 4.3e8}),
        Case("synthetic LR x batch grid", "batch", lr_batch_ladder, {"holdout_above_n": 4.3e8}),
        Case(
            "synthetic LR x batch grid, skewed, 15% cells missing, seed 1",
            "lr",
            lambda: lr_batch_ladder(1, skew=0.004, drop=0.15),
            {"holdout_above_n": 4.3e8},
        ),
        Case(
            "synthetic LR x batch grid, skewed, 15% cells missing, seed 1",
            "batch",
            lambda: lr_batch_ladder(1, skew=0.004, drop=0.15),
            {"holdout_above_n": 4.3e8},
        ),
    ]
    for seed in range(3):
        for protocol, opts in (
            ("budget", {}),
            ("frontier", {"holdout_above": 5.1e17}),
            ("size", {"holdout_above_n": 3e8}),
        ):
            out.append(Case(f"synthetic Kaplan seed {seed}", protocol, kaplan_ladder(seed), opts))
    for ref, other in CORPUS_PAIRS:
        for loss in COMPARE_LOSSES:
            quick = (ref, other, loss) == ("rw_original", "c4_original", "loss_paloma_c4_en")
            name = f"gadre {CORPORA[other]} vs {CORPORA[ref]}/{loss[5:]}"
            out.append(Case(name, "compare", gadre_pair(ref, other, loss), quick=quick))
    out += [
        Case("gemstones half vs full LR", "compare", gemstones_lr_pair),
        Case("synthetic pair m=2", "compare", lambda: recipe_pair(0, 2.0)),
        Case("synthetic pair drift 0.1", "compare", lambda: recipe_pair(1, drift=0.1)),
    ]
    if (OWN / "recipes_lr.csv").exists():
        out.append(Case("ours recipes lr 3e-3 vs 1e-2", "compare", own("recipes_lr")))
    # forecasts from the first 25% of a run (`forecast`, sweep.early_stop): the larger shapes from the
    # smaller ones' finished curves; MPL: each run length from the others, schedules known
    out += [
        Case(
            "gemstones hot 350B", "curve-prefix", gemstones_prefix_350b, {"holdout_above_n": 6e8}, quick=True
        ),
        Case("gemstones full vs half LR", "curve-prefix", gemstones_prefix_lr, {"holdout_above_n": 6e8}),
    ]
    out += [
        Case(f"mpl {s}M", "curve-prefix", lambda s=s: str(SHARED / "mpl_loss_curves" / f"csv_{s}"))
        for s in ("25", "100")
    ]
    if (OWN / "hparam_ladder_curves.csv.gz").exists():  # python benchmarks/early_stop_replay.py --curves
        out.append(
            Case("ours hparam_ladder", "curve-prefix", lambda: str(OWN / "hparam_ladder_curves.csv.gz"))
        )
    out += moe_cases()
    for name, protocols in (
        ("demo", ("budget", "frontier", "lr")),
        ("data_limited", ("epochs", "size")),
        ("hparam_ladder", ("lr", "batch")),
        ("moe", ("moe",)),  # +sweep=moe (3 shapes x E 1-8 x 2 budgets; N = active parameters)
    ):
        if (OWN / f"{name}.csv").exists():
            out += [Case(f"ours {name}", p, own(name)) for p in protocols]
    return out


@dataclass(frozen=True)
class Outcome:
    """One backtest's summary (what the zoo table shows; cached by `--cache`)."""

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
    except AnalysisError as e:
        return Outcome(case.dataset, case.protocol, None, {}, [], str(e), time.perf_counter() - t0)
    secs = time.perf_counter() - t0
    return Outcome(case.dataset, case.protocol, bt.error_key(), bt.cut, bt.rows(), None, secs)


# ---- the report ---------------------------------------------------------------------------------
def _fmt(v: float | None, rel: bool) -> str:
    return "—" if v is None else (f"{100 * v:.2f}%" if rel else f"{v:.3f}")


def _cell(row: dict | None, key: str, rel: bool) -> str:
    if row is None or row.get(key) is None:
        return "—"
    cov = "" if row.get("coverage_90") is None else f" ({100 * row['coverage_90']:.0f}%)"
    return _fmt(row[key], rel) + cov


def summary(outcomes: list[Outcome]) -> list[dict]:
    """Per protocol: mean over datasets of the default's and the baseline's error and coverage, and
    on how many datasets the default is worse than the baseline by more than MARGIN."""
    out = []
    for protocol in dict.fromkeys(o.protocol for o in outcomes):
        d, b, dc, bc, worse = [], [], [], [], 0
        for o in outcomes:
            dr, br = o.role("default"), o.role("baseline")
            if (
                o.protocol != protocol
                or not dr
                or not br
                or dr[o.error_key] is None
                or br[o.error_key] is None
            ):
                continue
            d.append(dr[o.error_key])
            b.append(br[o.error_key])
            dc += [dr["coverage_90"]] if dr["coverage_90"] is not None else []
            bc += [br["coverage_90"]] if br["coverage_90"] is not None else []
            worse += dr[o.error_key] > (1 + MARGIN) * br[o.error_key] + 1e-12
        mean = lambda v: float(np.mean(v)) if v else None  # noqa: E731
        out.append(
            dict(
                protocol=protocol,
                n=len(d),
                default=mean(d),
                baseline=mean(b),
                default_cov=mean(dc),
                baseline_cov=mean(bc),
                default_worse=worse,
            )
        )
    return out


MARGIN = 0.10  # a default may lose to the baseline on a dataset by at most this share of its error


def _errors(outcomes: list[Outcome], protocol: str) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """(method -> dataset -> error, dataset -> baseline error) of one protocol's scored backtests."""
    by_method: dict[str, dict[str, float]] = {}
    base: dict[str, float] = {}
    for o in outcomes:
        b = o.role("baseline")
        if o.protocol != protocol or b is None or b[o.error_key] is None:
            continue
        base[o.dataset] = b[o.error_key]
        for r in o.rows:
            if not r["baseline"] and r[o.error_key] is not None:
                by_method.setdefault(r["method"], {})[o.dataset] = r[o.error_key]
    return by_method, base


def rule(by_method: dict, base: dict, datasets: list[str]) -> str | None:
    """The method no worse than the baseline by more than MARGIN on every dataset of `datasets`
    with the lowest mean error there; None (the baseline) when no method is, or without datasets."""
    if not datasets:
        return None
    ok = [
        m
        for m, e in by_method.items()
        if all(d in e and e[d] <= (1 + MARGIN) * base[d] + 1e-12 for d in datasets)
    ]
    return min(ok, key=lambda m: np.mean([by_method[m][d] for d in datasets])) if ok else None


def _default_record(outcomes: list[Outcome], protocol: str) -> str:
    """What the command does without flags on this protocol's datasets, against the rule: its
    method(s), and on how many datasets it is worse than the baseline by more than MARGIN."""
    names, fails, n = [], [], 0
    for o in outcomes:
        d, b = o.role("default"), o.role("baseline")
        if o.protocol != protocol or not d or not b or d[o.error_key] is None or b[o.error_key] is None:
            continue
        n += 1
        names.append(d["method"])
        if d[o.error_key] > (1 + MARGIN) * b[o.error_key] + 1e-12:
            fails.append(f"{o.dataset} {d[o.error_key] / b[o.error_key]:.2f}x")
    what = "/".join(dict.fromkeys(names)) or "—"
    return f"{what}: passes on {n - len(fails)} of {n}" + (f" (fails: {'; '.join(fails)})" if fails else "")


def decisions(outcomes: list[Outcome]) -> list[dict]:
    """Per protocol: the rule's pick on every dataset, and its leave-one-dataset-out record (the
    pick made without dataset d, scored on d) against the baseline's."""
    out = []
    for protocol in dict.fromkeys(o.protocol for o in outcomes):
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


COVERAGE_RANGE = (0.80, 0.95)  # the target for a 90% interval on each dataset


def consistent_with_90(k: int, n: int, alpha: float = 0.05) -> bool:
    """Whether k of n inside a 90% interval is consistent with a true 90% (two-sided binomial test
    at `alpha`): with n = 3, 2/3 and 3/3 are; with n = 30, 24-30 are."""
    from scipy.stats import binomtest

    return n > 0 and binomtest(k, n, 0.9).pvalue >= alpha


def coverage_section(outcomes: list[Outcome]) -> list[str]:
    """Per protocol and dataset: the default's 90% coverage, its held-out count, and the verdict
    (in 80-95%; else whether the count is consistent with 90% at all, few points decide nothing)."""
    lines = [
        "",
        "## Coverage of the default's 90% intervals, per dataset",
        "",
        f"In range: {COVERAGE_RANGE[0]:.0%}-{COVERAGE_RANGE[1]:.0%}. With few held-out points a",
        "dataset's coverage is coarse (3 points: 0, 33, 67 or 100%), so each row also says whether",
        "k of n is consistent with a true 90% (two-sided binomial test, 5%).",
        "",
        "| protocol | dataset | default | inside / held out | coverage | verdict |",
        "|---|---|---|---|---|---|",
    ]
    for o in outcomes:
        d = o.role("default")
        if o.error is not None or not d or d.get("coverage_90") is None:
            continue
        n = int(d["n"])
        k = round(d["coverage_90"] * n)
        cov = d["coverage_90"]
        verdict = (
            "in range"
            if COVERAGE_RANGE[0] <= cov <= COVERAGE_RANGE[1]
            else ("out of range; consistent with 90%" if consistent_with_90(k, n) else "**miscalibrated**")
        )
        row = f"| {o.protocol} | {o.dataset} | {d['method']} | {k} / {n} | {100 * cov:.0f}% | {verdict} |"
        lines.append(row)
    return lines


HEADER = """# Backtests: the development zoo

Written by `python benchmarks/backtest_zoo.py --markdown docs/backtests.md` (do not edit by hand).
Each row hides the top of one ladder (`python -m analysis backtest DATA --protocol P`), fits every
candidate method below the cut and scores it on what it did not see. Errors: mean |relative error|
of the loss (budget, frontier, size, epochs, curve), mean |log10| of the learning-rate optimum (lr),
mean absolute error in accuracy points (downstream), mean |log2| of the compute multiplier between
two recipes (compare); in brackets the share of held-out values inside the method's 90% interval.
How to read it: docs/analysis.md, "Backtesting". The zoo is development data only (../shared/data
and our own ladders); held-back public ladders are not in it.
"""


def markdown(outcomes: list[Outcome], seconds: float, bootstrap: int) -> str:
    lines = [
        HEADER,
        f"{len(outcomes)} backtests, bootstrap {bootstrap} per candidate fit, "
        f"{seconds / 60:.0f} min of backtests on a 2-core VM.",
        "",
        "## Summary: the default against the baseline, mean over datasets",
        "",
        "| protocol | datasets | default | baseline | default 90% coverage | baseline 90% coverage "
        f"| datasets where the default is worse by > {MARGIN:.0%} |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in summary(outcomes):
        rel = s["protocol"] not in ("lr", "batch", "downstream", "compare")
        cov = lambda v: "—" if v is None else f"{100 * v:.0f}%"  # noqa: E731
        lines.append(
            f"| {s['protocol']} | {s['n']} | {_fmt(s['default'], rel)} | {_fmt(s['baseline'], rel)} | "
            f"{cov(s['default_cov'])} | {cov(s['baseline_cov'])} | {s['default_worse']} |"
        )
    lines += [
        "",
        f"## The default rule: no worse than the baseline by more than {MARGIN:.0%} on any dataset",
        "",
        "The method that passes on every dataset with the lowest mean error, else the baseline; its",
        "leave-one-dataset-out error is the rule's pick made without a dataset, scored on it.",
        "",
        "| protocol | datasets | rule's pick | leave-one-dataset-out error | baseline "
        "| worst dataset vs baseline | the default without flags, against the rule |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in decisions(outcomes):
        rel = r["protocol"] not in ("lr", "batch", "downstream", "compare")
        lines.append(
            f"| {r['protocol']} | {r['n']} | {r['pick']} | {_fmt(r['lodo'], rel)} "
            f"| {_fmt(r['baseline'], rel)} | {r['worst'] or '—'} | {r['default']} |"
        )
    lines += coverage_section(outcomes)
    lines += [
        "",
        "## Every backtest",
        "",
        "| dataset | protocol | held out (n) | default | baseline | best method | every method |",
        "|---|---|---|---|---|---|---|",
    ]
    for o in outcomes:
        if o.error is not None:
            lines.append(f"| {o.dataset} | {o.protocol} | — | error: {o.error} | | | |")
            continue
        key, rel = o.error_key, o.error_key == "mean_abs_rel_error"
        d, b = o.role("default"), o.role("baseline")
        scored = [r for r in o.rows if r[key] is not None]
        best = min(scored, key=lambda r: r[key])["method"] if scored else "—"
        every = "; ".join(f"{r['method']} {_cell(r, key, rel)}" for r in o.rows)
        dn = f"{d['method']}: {_cell(d, key, rel)}" if d else "—"
        bn = f"{b['method']}: {_cell(b, key, rel)}" if b else "—"
        cut = f"{o.cut.get('what', '')} ({o.cut.get('n_held_out')})"
        lines.append(f"| {o.dataset} | {o.protocol} | {cut} | {dn} | {bn} | {best} | {every} |")
    return "\n".join(lines) + "\n"


def _load_cache(path: pathlib.Path | None) -> dict[str, Outcome]:
    if path is None or not path.exists():
        return {}
    return {o.key: o for o in (Outcome(**d) for d in json.loads(path.read_text()))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one dataset per protocol")
    ap.add_argument("--bootstrap", type=int, default=50)
    ap.add_argument("--only", help="run the cases whose dataset or protocol contains this text")
    ap.add_argument(
        "--only-default", action="store_true", help="score the baseline and the default only (faster)"
    )
    ap.add_argument("--cache", help="JSON of finished backtests: reused, and each new one added at once")
    ap.add_argument("--markdown", help="write the zoo table here (docs/backtests.md)")
    args = ap.parse_args(argv)
    if not SHARED.is_dir():
        print(f"error: the zoo needs {SHARED}", file=sys.stderr)
        return 2
    cache_path = pathlib.Path(args.cache) if args.cache else None
    cache = _load_cache(cache_path)
    todo = [
        c
        for c in cases()
        if (c.quick or not args.quick) and (not args.only or args.only in f"{c.dataset} {c.protocol}")
    ]
    outcomes = []
    for case in todo:
        o = cache.get(f"{case.dataset} | {case.protocol}") or run_case(
            case, args.bootstrap, args.only_default
        )
        outcomes.append(o)
        cache[o.key] = o
        if cache_path is not None:
            write_json(cache_path, [dataclasses.asdict(x) for x in cache.values()])
        d, b = o.role("default"), o.role("baseline")
        txt = (
            f"error: {o.error}"
            if o.error
            else f"default {d and d['method']} {d and d[o.error_key]}  baseline {b and b[o.error_key]}"
        )
        print(f"{o.dataset:34s} {o.protocol:10s} {txt}  [{o.seconds:.0f} s]", flush=True)
    for s in summary(outcomes):
        print(
            f"summary {s['protocol']:10s} n={s['n']:2d} default {s['default']} baseline {s['baseline']} "
            f"worse on {s['default_worse']}"
        )
    if args.markdown:
        seconds = sum(o.seconds for o in outcomes)
        pathlib.Path(args.markdown).write_text(markdown(outcomes, seconds, args.bootstrap))
    return 0


if __name__ == "__main__":
    sys.exit(main())
