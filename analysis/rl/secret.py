"""The secret-sigmoid-law protocol that judges `fit-rl`'s intervals and flags.

A draw is a random ScaleRL sigmoid (A ~ U[0.5, 0.8], B ~ U[1.2, 2.4], C_mid ~ U[1e3, 4e3],
R0 ~ U[0.1, 0.3]) evaluated at 60 log-spaced computes from C_mid/20 to 30 C_mid, each pass rate
the mean of 1,000 Bernoulli samples, stderr the binomial one from the measured rate
(sqrt(p (1 - p) / 1000)), exactly as `../shared/checks/rl.sh` writes its CSVs. The "early"
window keeps C < C_mid / 2: a window that ends before the midpoint, which must be flagged.

Why here and not in the benchmark: `benchmarks/rl_coverage.py` (200 draws, the published
figures) and `tests/test_rl_laws.py` (a smaller seeded set, the targets as assertions) must draw
the same laws and fit them through the same entry point the CLI uses (`fit_recipe` on an
`RLCurve` read as a CSV table), so that what they measure is what a user gets.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from analysis.rl.curves import RLCurve
from analysis.rl.fitting import RLFitOptions, fit_recipe

A_RANGE = (0.5, 0.8)
B_RANGE = (1.2, 2.4)
C_MID_RANGE = (1e3, 4e3)
R0_RANGE = (0.1, 0.3)
N_POINTS = 60
SPAN = (1 / 20, 30.0)  # the computes run from C_mid * SPAN[0] to C_mid * SPAN[1]
N_SAMPLES = 1000  # Bernoulli samples behind each pass rate
EARLY_END = 0.5  # the early window keeps C < EARLY_END * C_mid
PARAMS = ("A", "B", "C_mid", "R0")
IDENTIFIABILITY_FLAGS = ("pre_midpoint", "A_unbounded")


@dataclasses.dataclass(frozen=True)
class Draw:
    """One secret law and its noisy evaluations (`C`, pass rate `p`, binomial stderr `s`)."""

    truth: dict[str, float]  # A, B, C_mid, R0
    C: np.ndarray
    p: np.ndarray
    s: np.ndarray

    def curve(self, early: bool = False) -> RLCurve:
        """The draw as `fit-rl` reads its CSV (a table: no burn-in); `early`: C < C_mid / 2."""
        keep = self.C < EARLY_END * self.truth["C_mid"] if early else np.ones(self.C.shape, bool)
        name = "early" if early else "full"
        return RLCurve(name, self.C[keep], self.p[keep], self.s[keep], is_run=False)


def draw(seed: int, index: int) -> Draw:
    """Draw `index` of the seeded set `seed` (independent of how many draws are taken)."""
    rng = np.random.default_rng([seed, index])
    t = {
        "A": rng.uniform(*A_RANGE),
        "B": rng.uniform(*B_RANGE),
        "C_mid": rng.uniform(*C_MID_RANGE),
        "R0": rng.uniform(*R0_RANGE),
    }
    C = np.geomspace(t["C_mid"] * SPAN[0], t["C_mid"] * SPAN[1], N_POINTS)
    R = t["R0"] + (t["A"] - t["R0"]) / (1 + (t["C_mid"] / C) ** t["B"])
    p = rng.binomial(N_SAMPLES, R) / N_SAMPLES
    return Draw(t, C, p, np.sqrt(p * (1 - p) / N_SAMPLES))


def score(d: Draw, res: dict[str, Any]) -> dict[str, Any]:
    """What one fit got right: per parameter whether its 95% interval holds the truth (None when
    the fit gives no interval for it), the interval's width, the error, and the flags."""
    row: dict[str, Any] = {"flags": list(res["flags"])}
    row["flagged"] = any(f in IDENTIFIABILITY_FLAGS for f in res["flags"])
    for k in PARAMS:
        ci = res["ci"].get(k)
        est = res["params"].get(k)
        row[f"{k}_err"] = None if est is None else float(est - d.truth[k])
        row[f"{k}_inside"] = None if ci is None else bool(ci[0] <= d.truth[k] <= ci[1])
        row[f"{k}_width"] = None if ci is None else float(ci[1] - ci[0])
    return row


def evaluate(seed: int, index: int, opts: RLFitOptions = RLFitOptions()) -> dict[str, Any]:
    """Fit draw (seed, index) on its full and its early window with `fit_recipe`, as
    `python -m analysis fit-rl FILE.csv` does, and score both. Module-level and picklable: a
    process pool can run it."""
    d = draw(seed, index)
    return {
        "index": index,
        "truth": d.truth,
        "full": score(d, fit_recipe([d.curve()], opts)),
        "early": score(d, fit_recipe([d.curve(early=True)], opts)),
    }
