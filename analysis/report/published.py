"""Published compute-optimal allocations the report sets beside the fitted law.

The report answers "how large a model, on how many tokens, at budget C"; a reader's first question
about that answer is how it compares with the laws everyone quotes. Each law here gives
N_opt(C) (and D_opt = C / (6 N_opt), the C = 6ND convention all three papers use) from its own
published constants, cited where they are defined:

* Hoffmann et al. 2022, "Training Compute-Optimal Large Language Models" (arXiv:2203.15556),
  Approach 3 (Section 3.3): L(N, D) = E + A/N^alpha + B/D^beta with E = 1.69, A = 406.4,
  B = 410.7, alpha = 0.34, beta = 0.28 as printed; the optimum is their eq. (4),
  N_opt(C) = G (C/6)^a with a = beta/(alpha+beta), G = (alpha A / (beta B))^(1/(alpha+beta)).
* Besiroglu et al. 2024, "Chinchilla Scaling: A replication attempt" (Epoch AI,
  arXiv:2404.10102): their refit of Approach 3 to the points read off Hoffmann et al.'s Figure 4,
  E = 1.82, A = 482.01, B = 2085.43, alpha = 0.3478, beta = 0.3658; the optimum by the same eq. (4).
* Kaplan et al. 2020, "Scaling Laws for Neural Language Models" (arXiv:2001.08361), Section 6.1,
  Figure 14 and Table 6: N_opt = 1.3e9 (C_min / 1 PF-day)^0.73 non-embedding parameters,
  1 PF-day = 8.64e19 FLOPs. C_min is their compute at the critical batch size, and N excludes the
  embeddings: the comparison reads it as total N at C, which is how it is usually quoted.

The fitted law's own frontier uses the law's FLOPs per parameter-token (6 unless the runs say
otherwise), so the comparison is like for like in C.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

import numpy as np

from analysis.laws.allocation import CHINCHILLA_NAMES, closed_form_optimum

FLOPS_PER_PARAM_TOKEN = 6.0  # C = 6ND in all three papers
PF_DAY = 1e15 * 86400  # FLOPs in a petaflop/s-day: Kaplan et al. 2020's unit of compute

# Hoffmann et al. 2022 (arXiv:2203.15556), Section 3.3, Approach 3, as printed.
HOFFMANN_2022 = {"E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.34, "beta": 0.28}
# Besiroglu et al. 2024 (arXiv:2404.10102), Epoch AI's refit of Approach 3.
BESIROGLU_2024 = {"E": 1.82, "A": 482.01, "B": 2085.43, "alpha": 0.3478, "beta": 0.3658}
# Kaplan et al. 2020 (arXiv:2001.08361), Section 6.1, Figure 14 / Table 6: N = 1.3e9 C_min^0.73,
# C_min in PF-days.
KAPLAN_2020 = {"N_e": 1.3e9, "p_N": 0.73}


@dataclasses.dataclass(frozen=True)
class PublishedLaw:
    """One published compute-optimal allocation: `n_opt(C)` in parameters for budgets C in FLOPs."""

    key: str  # report.json's name: hoffmann2022, besiroglu2024, kaplan2020
    name: str  # as the report's tables and figures name it
    citation: str  # the paper, its arXiv number and where the constants are printed
    constants: str  # the constants as printed, short
    formula: str  # the allocation as used here, with its constants
    exponent: float  # a in N_opt ∝ C^a
    n_opt: Callable[[np.ndarray], np.ndarray]

    def at(self, budgets: Sequence[float]) -> list[dict]:
        """[{C, N_opt, D_opt, tokens_per_param}] at each budget (D_opt = C / 6 N_opt)."""
        C = np.asarray(budgets, dtype=float)
        N = self.n_opt(C)
        D = C / (FLOPS_PER_PARAM_TOKEN * N)
        return [
            {"C": float(c), "N_opt": float(n), "D_opt": float(d), "tokens_per_param": float(d / n)}
            for c, n, d in zip(C, N, D)
        ]

    def as_dict(self, budgets: Sequence[float]) -> dict:
        return {
            "key": self.key,
            "name": self.name,
            "citation": self.citation,
            "constants": self.constants,
            "formula": self.formula,
            "a": self.exponent,
            "at": self.at(budgets),
        }


def _chinchilla(p: dict) -> Callable[[np.ndarray], np.ndarray]:
    row = np.array([p[k] for k in CHINCHILLA_NAMES])
    return lambda C: closed_form_optimum(row, np.asarray(C, float), FLOPS_PER_PARAM_TOKEN)["N_opt"]


def _chinchilla_formula(p: dict) -> str:
    return (
        f"L = {p['E']} + {p['A']}/N^{p['alpha']} + {p['B']}/D^{p['beta']}; "
        "N_opt = G (C/6)^a, a = beta/(alpha+beta), G = (alpha A / (beta B))^(1/(alpha+beta))"
    )


def _constants(p: dict) -> str:
    return ", ".join(f"{k} = {p[k]}" for k in ("E", "A", "B", "alpha", "beta"))


def _a(p: dict) -> float:
    return p["beta"] / (p["alpha"] + p["beta"])


LAWS: tuple[PublishedLaw, ...] = (
    PublishedLaw(
        "hoffmann2022",
        "Hoffmann et al. 2022 (Chinchilla, Approach 3)",
        "Hoffmann et al. 2022, arXiv:2203.15556, Section 3.3 (Approach 3), optimum by eq. (4)",
        _constants(HOFFMANN_2022),
        _chinchilla_formula(HOFFMANN_2022),
        _a(HOFFMANN_2022),
        _chinchilla(HOFFMANN_2022),
    ),
    PublishedLaw(
        "besiroglu2024",
        "Besiroglu et al. 2024 (Epoch refit)",
        "Besiroglu et al. 2024 (Chinchilla Scaling: A replication attempt), arXiv:2404.10102, their "
        "Approach 3 refit, optimum by Hoffmann et al.'s eq. (4)",
        _constants(BESIROGLU_2024),
        _chinchilla_formula(BESIROGLU_2024),
        _a(BESIROGLU_2024),
        _chinchilla(BESIROGLU_2024),
    ),
    PublishedLaw(
        "kaplan2020",
        "Kaplan et al. 2020",
        "Kaplan et al. 2020, arXiv:2001.08361, Section 6.1, Figure 14 and Table 6",
        "N_opt = 1.3e9 (C / 1 PF-day)^0.73, 1 PF-day = 8.64e19 FLOPs, N without embeddings; D = C / 6N",
        f"N_opt = {KAPLAN_2020['N_e']:.2g} (C / 8.64e19 FLOPs)^{KAPLAN_2020['p_N']} (C in PF-days; "
        "non-embedding N); D = C / 6N",
        KAPLAN_2020["p_N"],
        lambda C: KAPLAN_2020["N_e"] * (np.asarray(C, float) / PF_DAY) ** KAPLAN_2020["p_N"],
    ),
)


def published(budgets: Sequence[float]) -> list[dict]:
    """report.json's `published`: every law of `LAWS` with its allocation at `budgets`."""
    return [law.as_dict(budgets) for law in LAWS]
