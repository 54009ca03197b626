"""Six synthetic scaling-law tasks shaped like the public benchmark tasks `fit --formula` is judged
on (repeated data, data mixtures, learning rate x batch size, routed experts, fine-tuning data,
vocabulary size): generated here from known laws with noise (and a few outliers), each with a test
split at larger scale. Nothing is copied from any benchmark; the laws are the papers' published
forms with made-up constants.

`python -m tests.formula_bench [--tasks a,b] [--search] [--delta D] [--residuals log|linear]`
fits each task's own formula with `analysis.laws.groups.fit_formula` and with a SciPy multistart
(`scipy.optimize.least_squares` from `SCIPY_STARTS` random starts, linear residuals, the best kept)
on the same rows and prints R^2 on the test rows and the coverage of the 90% intervals; `--search`
also runs `--formula search`. tests/test_formula.py uses `task()` for its data.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd

SCIPY_STARTS = 100


@dataclass
class Task:
    name: str
    fit: pd.DataFrame
    test: pd.DataFrame
    targets: list[str]
    formula: list[str]  # one per target
    inputs: dict[str, str]
    group: str | None = None
    shared: tuple[str, ...] = ()
    # SciPy reference: f(x: dict of arrays, theta, groups index) per target, start sampler, names
    scipy: list[tuple[Callable, Callable, list[str]]] = field(default_factory=list)


def _noise(rng, n, sd, outliers=0.02):
    e = rng.normal(0, sd, n)
    bad = rng.random(n) < outliers
    return e + bad * rng.normal(0, 4 * sd, n)


def data_constrained(rng) -> Task:
    N = rng.choice(np.geomspace(1e7, 3e9, 9), 300)
    U = rng.choice(np.geomspace(1e8, 1e10, 5), 300)
    epochs = rng.choice([1, 2, 4, 8, 16, 32, 60], 300)
    D = U * epochs
    RD = 15.0
    Dp = U + RD * U * (1 - np.exp(-(D / U - 1) / RD))
    L = (1.9 + 420 / N**0.34 + 1500 / Dp**0.29) * np.exp(_noise(rng, 300, 0.006))
    df = pd.DataFrame({"params": N, "tokens": D, "unique_tokens": U, "loss": L})
    f = "Dp = U + RD * U * (1 - exp(-(D / U - 1) / RD)); E + A / N**alpha + B / Dp**beta"

    def model(x, t, g=None):
        E, A, al, B, be, rd = t
        dp = x["U"] + rd * x["U"] * (1 - np.exp(-(x["D"] / x["U"] - 1) / rd))
        return E + A / x["N"] ** al + B / dp**be

    def start(r):
        return [
            r.uniform(0, 3),
            10 ** r.uniform(0, 5),
            r.uniform(0, 1),
            10 ** r.uniform(0, 5),
            r.uniform(0, 1),
            10 ** r.uniform(0, 2),
        ]

    return Task(
        "data_constrained",
        df[df.params < 1e9],
        df[df.params >= 1e9],
        ["loss"],
        [f],
        {"N": "params", "D": "tokens", "U": "unique_tokens"},
        scipy=[(model, start, ["E", "A", "alpha", "B", "beta", "RD"])],
    )


def mixture(rng) -> Task:
    n = 240
    N = rng.choice(np.geomspace(7e7, 1.4e9, 5), n)
    r = rng.dirichlet(np.ones(3) * 1.2, n)
    T = np.array([[-1.2, 0.4, 0.3], [0.5, -1.5, 0.2]])
    out = {"params": N, "r1": r[:, 0], "r2": r[:, 1], "r3": r[:, 2]}
    for i, (E, A, a) in enumerate(((1.8, 30.0, 0.2), (2.2, 55.0, 0.22))):
        out[f"loss_{i + 1}"] = (E + A / N**a * np.exp(r @ T[i])) * np.exp(_noise(rng, n, 0.004))
    df = pd.DataFrame(out)
    f = "E + A / N**alpha * exp(t1 * r1 + t2 * r2)"  # r3 = 1 - r1 - r2

    def model(x, t, g=None):
        E, A, al, t1, t2 = t
        return E + A / x["N"] ** al * np.exp(t1 * x["r1"] + t2 * x["r2"])

    def start(r_):
        return [
            r_.uniform(0, 3),
            10 ** r_.uniform(0, 4),
            r_.uniform(0, 1),
            r_.uniform(-3, 3),
            r_.uniform(-3, 3),
        ]

    return Task(
        "mixture",
        df[df.params < 1e9],
        df[df.params >= 1e9],
        ["loss_1", "loss_2"],
        [f, f],
        {"N": "params", "r1": "r1", "r2": "r2"},
        scipy=[(model, start, ["E", "A", "alpha", "t1", "t2"])] * 2,
    )


def lr_batch(rng) -> Task:
    n = 360
    N = rng.choice(np.geomspace(5e7, 2e9, 6), n)
    D = N * rng.choice([20, 40, 80], n)
    lr = 10 ** rng.uniform(-3.7, -2.0, n)
    bsz = rng.choice([64, 128, 256, 512, 1024, 2048], n).astype(float)
    lr_opt = 0.3 * N**-0.3 * bsz**0.25
    b_opt = 0.02 * D**0.35
    L = 1.8 + 380 / N**0.33 + 900 / D**0.3 + 0.04 * np.log(lr / lr_opt) ** 2 + 0.01 * np.log(bsz / b_opt) ** 2
    L = L * np.exp(_noise(rng, n, 0.004))
    df = pd.DataFrame({"params": N, "tokens": D, "lr": lr, "bsz": bsz, "loss": L})
    f = (
        "E + A / N**alpha + B / D**beta + C * (log(lr) - l0 + g * log(N) - h * log(bsz))**2"
        " + F * (log(bsz) - b0 - k * log(D))**2"
    )

    def model(x, t, g_=None):
        E, A, al, B, be, C, l0, g, h, F, b0, k = t
        return (
            E
            + A / x["N"] ** al
            + B / x["D"] ** be
            + C * (np.log(x["lr"]) - l0 + g * np.log(x["N"]) - h * np.log(x["bsz"])) ** 2
            + F * (np.log(x["bsz"]) - b0 - k * np.log(x["D"])) ** 2
        )

    def start(r):
        return [
            r.uniform(0, 3),
            10 ** r.uniform(0, 4),
            r.uniform(0, 1),
            10 ** r.uniform(0, 4),
            r.uniform(0, 1),
            r.uniform(0, 0.2),
            r.uniform(-3, 3),
            r.uniform(0, 1),
            r.uniform(0, 1),
            r.uniform(0, 0.1),
            r.uniform(-6, 0),
            r.uniform(0, 1),
        ]

    return Task(
        "lr_batch",
        df[df.params < 1e9],
        df[df.params >= 1e9],
        ["loss"],
        [f],
        {"N": "params", "D": "tokens", "lr": "lr", "bsz": "bsz"},
        scipy=[(model, start, ["E", "A", "alpha", "B", "beta", "C", "l0", "g", "h", "F", "b0", "k"])],
    )


def moe(rng) -> Task:
    n = 200
    N = rng.choice(np.geomspace(2e7, 2e9, 8), n)
    E = rng.choice([1, 2, 4, 8, 16, 32, 64, 128], n).astype(float)
    lN, lE = np.log(N), np.log(E)
    logL = 2.9 - 0.075 * (lN - 18) - 0.035 * lE + 0.004 * (lN - 18) * lE
    L = np.exp(logL + _noise(rng, n, 0.005))
    df = pd.DataFrame({"dense_params": N, "experts": E, "loss": L})
    f = "exp(d + a * log(N) + b * log(experts) + c * log(N) * log(experts))"

    def model(x, t, g=None):
        d, a, b, c = t
        return np.exp(
            d + a * np.log(x["N"]) + b * np.log(x["experts"]) + c * np.log(x["N"]) * np.log(x["experts"])
        )

    def start(r):
        return [r.uniform(-2, 4), r.uniform(-0.3, 0.1), r.uniform(-0.3, 0.1), r.uniform(-0.05, 0.05)]

    return Task(
        "moe",
        df[df.dense_params < 8e8],
        df[df.dense_params >= 8e8],
        ["loss"],
        [f],
        {"N": "dense_params", "experts": "experts"},
        scipy=[(model, start, ["d", "a", "b", "c"])],
    )


def sft(rng) -> Task:
    rows = []
    for g in range(8):
        A, B, C = 10 ** rng.uniform(1, 2), 10 ** rng.uniform(1, 3), rng.uniform(0.8, 1.6)
        al = 0.45 + rng.normal(0, 0.03)
        for d in np.geomspace(200, 800_000, 13):
            L = (A / (d**al + B) + C) * np.exp(_noise(rng, 1, 0.004)[0])
            rows.append({"model": f"m{g}", "n_examples": d, "loss": L})
    df = pd.DataFrame(rows)
    f = "A / (n_examples**alpha + B) + C"

    def model(x, t, g):
        G = g.max() + 1
        A, B, C = t[:G][g], t[G : 2 * G][g], t[2 * G : 3 * G][g]
        return A / (x["n_examples"] ** t[-1] + B) + C

    def start(r, G=8):
        return [
            *(10 ** r.uniform(0, 3, G)),
            *(10 ** r.uniform(0, 4, G)),
            *r.uniform(0.5, 2, G),
            r.uniform(0.1, 1),
        ]

    return Task(
        "sft",
        df[df.n_examples < 2.5e5],
        df[df.n_examples >= 2.5e5],
        ["loss"],
        [f],
        {},
        group="model",
        shared=("alpha",),
        scipy=[(model, start, ["A*8", "B*8", "C*8", "alpha"])],
    )


def vocab(rng) -> Task:
    n = 360
    N = rng.choice(np.geomspace(3e7, 3e9, 8), n)
    V = rng.choice([4096, 8192, 16384, 32768, 65536, 131072], n).astype(float)
    Nv = V * np.sqrt(N / 12) ** 0.5 * 8  # vocabulary parameters ~ V * width
    D = N * rng.choice([10, 20, 40, 80], n) * 4  # characters
    Lu = -5.6 + 300 / N**0.3 + 45 / Nv**0.35 + 1800 / D**0.3  # a unigram-normalised loss: negative
    Lu = Lu + _noise(rng, n, 0.01)
    df = pd.DataFrame({"non_vocab_params": N, "vocab_params": Nv, "chars": D, "unigram_loss": Lu})
    f = "-E + A / N**alpha + B / Nv**beta + C / D**gamma"

    def model(x, t, g=None):
        E, A, al, B, be, C, ga = t
        return -E + A / x["N"] ** al + B / x["Nv"] ** be + C / x["D"] ** ga

    def start(r):
        return [
            r.uniform(0, 8),
            10 ** r.uniform(0, 4),
            r.uniform(0, 1),
            10 ** r.uniform(0, 4),
            r.uniform(0, 1),
            10 ** r.uniform(0, 4),
            r.uniform(0, 1),
        ]

    return Task(
        "vocab",
        df[df.non_vocab_params < 1e9],
        df[df.non_vocab_params >= 1e9],
        ["unigram_loss"],
        [f],
        {"N": "non_vocab_params", "Nv": "vocab_params", "D": "chars"},
        scipy=[(model, start, ["E", "A", "alpha", "B", "beta", "C", "gamma"])],
    )


TASKS = {f.__name__: f for f in (data_constrained, mixture, lr_batch, moe, sft, vocab)}


def task(name: str, seed: int = 0) -> Task:
    return TASKS[name](np.random.default_rng(seed))


def r2(y, yhat) -> float:
    y, yhat = np.asarray(y, float), np.asarray(yhat, float)
    return float(1 - np.sum((y - yhat) ** 2) / np.sum((y - y.mean()) ** 2))


def _x(t: Task, df: pd.DataFrame) -> dict:
    cols = t.inputs or {"n_examples": "n_examples"}
    return {k: df[c].to_numpy(float) for k, c in cols.items()}


def scipy_fit(t: Task, i: int, starts: int = SCIPY_STARTS, seed: int = 0):
    """Least squares on linear residuals from `starts` random starts; the best kept."""
    from scipy.optimize import least_squares

    model, sampler, _ = t.scipy[i]
    x, y = _x(t, t.fit), t.fit[t.targets[i]].to_numpy(float)
    g = pd.factorize(t.fit[t.group], sort=True)[0] if t.group else None
    rng = np.random.default_rng(seed)
    best = None
    for _ in range(starts):
        x0 = np.asarray(sampler(rng), float)

        def res(th):
            with np.errstate(all="ignore"):
                r = model(x, th, g) - y
            return np.where(np.isfinite(r), r, 1e6)

        try:
            sol = least_squares(res, x0, method="trf", max_nfev=2000)
        except (ValueError, FloatingPointError):
            continue
        if best is None or sol.cost < best.cost:
            best = sol
    gt = (
        pd.factorize(pd.concat([t.fit[t.group], t.test[t.group]]), sort=True)[0][len(t.fit) :]
        if t.group
        else None
    )
    with np.errstate(all="ignore"):
        pred = model(_x(t, t.test), best.x, gt)
    return r2(t.test[t.targets[i]], pred), best


def ours(t: Task, i: int, **options):
    from analysis.laws.groups import FormulaOptions, fit_formula

    opts = FormulaOptions(**{"bootstrap": 100, **options})
    fit = fit_formula(
        t.fit,
        t.formula[i],
        t.targets[i],
        t.inputs,
        group=t.group,
        shared=t.shared,
        options=opts,
        predict_df=t.test,
    )
    rows = fit.prediction_rows(t.test)
    pred = np.array([r["prediction"] for r in rows])
    lo, hi = np.array([r["interval"] for r in rows]).T
    y = t.test[t.targets[i]].to_numpy(float)
    return r2(y, pred), float(np.mean((y >= lo) & (y <= hi))), fit


def searched(t: Task, i: int, **options):
    from analysis.laws import formula_search
    from analysis.laws.groups import FormulaOptions, fit_formula

    opts = FormulaOptions(**{"bootstrap": 100, **options})
    s = formula_search.search(
        t.fit,
        t.targets[i],
        t.inputs or {"n_examples": "n_examples"},
        group=t.group,
        options=opts,
        predict_df=t.test,
    )
    fit = fit_formula(
        t.fit,
        s.formula,
        t.targets[i],
        t.inputs or {"n_examples": "n_examples"},
        group=t.group,
        shared=s.shared,
        options=FormulaOptions(**{**opts.__dict__, "extra_starts": s.starts}),
        predict_df=t.test,
    )
    rows = fit.prediction_rows(t.test)
    pred = np.array([r["prediction"] for r in rows])
    lo, hi = np.array([r["interval"] for r in rows]).T
    y = t.test[t.targets[i]].to_numpy(float)
    return r2(y, pred), float(np.mean((y >= lo) & (y <= hi))), s


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", default=",".join(TASKS))
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--search", action="store_true")
    ap.add_argument("--no-scipy", action="store_true")
    ap.add_argument("--delta", type=float, default=None)
    ap.add_argument("--residuals", default="auto")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    out = []
    opts = {"residuals": a.residuals, **({"delta": a.delta} if a.delta is not None else {})}
    for seed in map(int, a.seeds.split(",")):
        for name in a.tasks.split(","):
            t = task(name, seed)
            for i, target in enumerate(t.targets):
                rec = {
                    "task": name,
                    "seed": seed,
                    "target": target,
                    "n_fit": len(t.fit),
                    "n_test": len(t.test),
                }
                t0 = time.time()
                rec["r2"], rec["coverage"], _ = ours(t, i, **opts)
                rec["seconds"] = round(time.time() - t0, 1)
                if not a.no_scipy:
                    t0 = time.time()
                    rec["scipy_r2"] = scipy_fit(t, i)[0]
                    rec["scipy_seconds"] = round(time.time() - t0, 1)
                if a.search:
                    t0 = time.time()
                    rec["search_r2"], rec["search_coverage"], s = searched(t, i, **opts)
                    rec["search_formula"] = s.formula
                    rec["search_seconds"] = round(time.time() - t0, 1)
                print(json.dumps(rec), flush=True)
                out.append(rec)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
