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

from analysis import backtest  # noqa: E402
from analysis.backtest.result import Backtest  # noqa: E402
from models.base.errors import AnalysisError  # noqa: E402
from models.base.jsonio import write_json  # noqa: E402

SHARED = ROOT.parent / "shared" / "data"
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


def gadre_ladder(corpus: str) -> Callable[[], pd.DataFrame]:
    """fit-task's ladder (N, D, task, task_loss, accuracy) of one corpus: the interface check's five
    tasks, the C4 validation loss as every task's loss."""

    def load() -> pd.DataFrame:
        r = pd.read_csv(SHARED / "gadre2024_overtraining" / "runs.csv")
        r = r[r.dataset == corpus]
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


def repeated(seed: int = 0) -> pd.DataFrame:
    """Muennighoff et al.'s data-constrained form (R_D = 15) on 6 sizes x 2 unique-token counts."""
    rng = np.random.default_rng(seed)
    rows = []
    for N in np.geomspace(2e7, 6e8, 6):
        for U in (1e9, 4e9):
            for ep in (0.5, 1, 2, 4, 8, 16, 32):
                D = ep * U
                Ue, R = min(D, U), max(D / U - 1, 0)
                Dp = Ue + Ue * 15 * (1 - np.exp(-R / 15))
                loss = (1.8 + 480 / N**0.34 + 2100 / Dp**0.37) * np.exp(rng.normal(0, 0.003))
                rows.append(dict(N=N, D=D, U=U, loss=loss))
    return pd.DataFrame(rows)


def kaplan_ladder(seed: int) -> Callable[[], pd.DataFrame]:
    """Kaplan et al. 2020's eq. 1.5 surface (not of the additive Chinchilla form), 12 budgets x 7
    shapes, 0.5% noise: a misspecified ladder."""

    def load() -> pd.DataFrame:
        rng = np.random.default_rng(seed)
        rows = []
        for C in np.geomspace(1e16, 2.5e19, 12):
            for f in np.geomspace(0.25, 4, 7):
                N = np.sqrt(C / 6 / 20) * f
                D = C / 6 / N
                L = 1.8 + 0.9 * ((8.8e13 / N) ** (0.076 / 0.095) + 5.4e13 / D) ** 0.095
                rows.append(dict(N=N, D=D, C=C, loss=L * np.exp(rng.normal(0, 0.005))))
        return pd.DataFrame(rows)

    return load


def lr_ladder(seed: int = 1) -> pd.DataFrame:
    """An irregular LR sweep: 6 sizes, 5-7 log-spaced learning rates per size, shifted per rung; the
    optimum follows lr* = 3e-3 (N / 1e8)^-0.3 and the loss is quadratic in ln lr around it."""
    rng = np.random.default_rng(seed)
    rows = []
    for i, N in enumerate(np.geomspace(2e7, 1e9, 6)):
        star = 3e-3 * (N / 1e8) ** -0.3
        for lr in np.exp(np.log(star) + np.linspace(-1.5, 1.5, 5 + i % 3) + rng.normal(0, 0.2)):
            loss = (2 + 400 / N**0.34) * (1 + 0.02 * np.log(lr / star) ** 2) * np.exp(rng.normal(0, 0.002))
            rows.append(dict(N=N, D=20 * N, lr=lr, loss=loss))
    return pd.DataFrame(rows)


def own(name: str) -> Callable[[], pd.DataFrame]:
    return lambda: pd.read_csv(OWN / f"{name}.csv")


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
        Case("gemstones hot", "budget", gemstones_hot),
        Case("gemstones hot", "size", gemstones_hot, {"holdout_above_n": 1.5e9}),
        Case("gemstones hot+half-LR", "lr", gemstones_lr),
        Case("synthetic repeated", "epochs", repeated, quick=True),
        Case("synthetic LR ladder", "lr", lr_ladder, {"holdout_above_n": 4e8}, quick=True),
    ]
    for seed in range(3):
        for protocol, opts in (("budget", {}), ("frontier", {"holdout_above": 5.1e17}), ("size", {})):
            out.append(Case(f"synthetic Kaplan seed {seed}", protocol, kaplan_ladder(seed), opts))
    for name, protocols in (
        ("demo", ("budget", "frontier", "lr")),
        ("data_limited", ("epochs",)),
        ("hparam_ladder", ("lr",)),
    ):
        if (OWN / f"{name}.csv").exists():
            out += [Case(f"ours {name}", p, own(name)) for p in protocols]
    return out


@dataclass
class Outcome:
    case: Case
    result: Backtest | None
    error: str | None
    seconds: float


def run_case(case: Case, bootstrap: int) -> Outcome:
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            bt = backtest.run(
                case.load(), case.protocol, backtest.Options(bootstrap=bootstrap, **case.options)
            )
        return Outcome(case, bt, None, time.perf_counter() - t0)
    except AnalysisError as e:
        return Outcome(case, None, str(e), time.perf_counter() - t0)


# ---- the report ---------------------------------------------------------------------------------
def _cell(row: dict | None, key: str, rel: bool) -> str:
    if row is None or row.get(key) is None:
        return "—"
    v = row[key]
    cov = "" if row.get("coverage_90") is None else f" ({100 * row['coverage_90']:.0f}%)"
    return (f"{100 * v:.2f}%" if rel else f"{v:.3f}") + cov


def summary(outcomes: list[Outcome]) -> list[dict]:
    """Per protocol: mean over datasets of the default's and the baseline's error, and on how many
    datasets the default is worse than the baseline."""
    out = []
    for protocol in dict.fromkeys(o.case.protocol for o in outcomes):
        d, b, worse, n = [], [], 0, 0
        for o in outcomes:
            if o.case.protocol != protocol or o.result is None:
                continue
            key = o.result.error_key()
            rows = o.result.rows()
            dr = next((r for r in rows if r["default"]), None)
            br = next((r for r in rows if r["baseline"]), None)
            if dr and br and dr[key] is not None and br[key] is not None:
                d.append(dr[key])
                b.append(br[key])
                worse += dr[key] > br[key]
                n += 1
        out.append(
            dict(
                protocol=protocol,
                n=n,
                default=np.mean(d) if d else None,
                baseline=np.mean(b) if b else None,
                default_worse=worse,
            )
        )
    return out


def markdown(outcomes: list[Outcome], seconds: float, bootstrap: int) -> str:
    lines = [
        "# Backtests: the development zoo",
        "",
        "Written by `python benchmarks/backtest_zoo.py` (do not edit by hand). Each row hides the top",
        "of one ladder (`python -m analysis backtest DATA --protocol P`), fits every candidate method",
        "below the cut and scores it on what it did not see. Errors: mean |relative error| of the loss",
        "(budget, frontier, size, epochs, curve), mean |log10| of the learning-rate optimum (lr), mean",
        "absolute error in accuracy points (downstream); in brackets the share of held-out values inside",
        "the method's 90% interval.",
        'How to read it: docs/analysis.md, "Backtesting".',
        "",
        f"{len(outcomes)} backtests, bootstrap {bootstrap} per candidate fit, "
        f"{seconds / 60:.1f} min on this machine (2-core VM).",
        "",
        "## Summary: the default against the baseline, mean over datasets",
        "",
        "| protocol | datasets | default | baseline | datasets where the default is worse |",
        "|---|---|---|---|---|",
    ]
    for s in summary(outcomes):
        rel = s["protocol"] not in ("lr", "downstream")
        f = lambda v: "—" if v is None else (f"{100 * v:.2f}%" if rel else f"{v:.3f}")
        lines.append(
            f"| {s['protocol']} | {s['n']} | {f(s['default'])} | {f(s['baseline'])} | {s['default_worse']} |"
        )
    lines += [
        "",
        "## Every backtest",
        "",
        "| dataset | protocol | cut | default | baseline | best method | every method |",
        "|---|---|---|---|---|---|---|",
    ]
    for o in outcomes:
        if o.result is None:
            lines.append(f"| {o.case.dataset} | {o.case.protocol} | — | error: {o.error} | | | |")
            continue
        bt = o.result
        key, rel = bt.error_key(), bt.error_key() == "mean_abs_rel_error"
        rows = bt.rows()
        d = next((r for r in rows if r["default"]), None)
        b = next((r for r in rows if r["baseline"]), None)
        scored = [r for r in rows if r[key] is not None]
        best = min(scored, key=lambda r: r[key])["method"] if scored else "—"
        every = "; ".join(f"{r['method']} {_cell(r, key, rel)}" for r in rows)
        dn = f"{d['method']}: {_cell(d, key, rel)}" if d else "—"
        bn = f"{b['method']}: {_cell(b, key, rel)}" if b else "—"
        cut = f"{bt.cut.get('what', '')} ({bt.cut.get('n_held_out')})"
        lines.append(f"| {o.case.dataset} | {o.case.protocol} | {cut} | {dn} | {bn} | {best} | {every} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one dataset per protocol")
    ap.add_argument("--bootstrap", type=int, default=50)
    ap.add_argument("--only", help="run the cases whose dataset or protocol contains this text")
    ap.add_argument("--json", help="write every backtest's JSON here")
    ap.add_argument("--markdown", help="write the zoo table here (docs/backtests.md)")
    args = ap.parse_args(argv)
    if not SHARED.is_dir():
        print(f"error: the zoo needs {SHARED}", file=sys.stderr)
        return 2
    todo = [
        c
        for c in cases()
        if (c.quick or not args.quick) and (not args.only or args.only in f"{c.dataset} {c.protocol}")
    ]
    t0, outcomes = time.perf_counter(), []
    for case in todo:
        o = run_case(case, args.bootstrap)
        outcomes.append(o)
        if o.result is None:
            print(f"{case.dataset:34s} {case.protocol:10s} error: {o.error}  [{o.seconds:.0f} s]", flush=True)
            continue
        key = o.result.error_key()
        rows = {
            ("default" if r["default"] else "baseline"): r
            for r in o.result.rows()
            if r["default"] or r["baseline"]
        }
        txt = "  ".join(f"{k} {r['method']} {r[key]}" for k, r in rows.items())
        print(f"{case.dataset:34s} {case.protocol:10s} {txt}  [{o.seconds:.0f} s]", flush=True)
    seconds = time.perf_counter() - t0
    for s in summary(outcomes):
        print(
            f"summary {s['protocol']:10s} n={s['n']:2d} default {s['default']} baseline {s['baseline']} "
            f"worse on {s['default_worse']}"
        )
    if args.json:
        write_json(
            args.json,
            [
                {
                    "dataset": o.case.dataset,
                    "protocol": o.case.protocol,
                    "error": o.error,
                    "seconds": o.seconds,
                    "backtest": None if o.result is None else o.result.to_dict(),
                }
                for o in outcomes
            ],
        )
    if args.markdown:
        pathlib.Path(args.markdown).write_text(markdown(outcomes, seconds, args.bootstrap))
    return 0


if __name__ == "__main__":
    sys.exit(main())
