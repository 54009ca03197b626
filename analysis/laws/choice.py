"""The record of `--law auto`'s choice (`FitResult.law_selection`; the rule is in selection.py).

Its own module so that fitting.py (which holds it) and selection.py (which fills it) both import it
without importing each other."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from analysis.core import validation

BASELINE = "chinchilla"  # kept unless a candidate beats it on every fold
PARSIMONY = validation.PARSIMONY  # a more complex form must predict forward >10% better to be chosen
EPOCH_CRITERION = (
    "repeated data: |log error| on the folds of `backtest --protocol epochs` (runs of more than 4 "
    "epochs, fitted on the others) and `--protocol size` (the largest models); "
    f"{BASELINE} unless a form beats it by the parsimony margin on both"
)


@dataclass(frozen=True)
class LawChoice:
    """Which law `--law auto` chose, and why (the `law_selection` object of `fit --json`)."""

    chosen: str  # the law fitted and reported
    fold_mae: dict[str, float]  # candidate -> mean |log error| over its folds
    skipped: dict[str, str]  # candidate -> why it could not be fitted (e.g. a fixed parameter it lacks)
    fold_errors: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)  # per fold
    baseline: str = BASELINE
    disagreement: str | None = None  # the candidates' predictions beyond their intervals (a warning)
    family: str = "auto"  # the --law word that asked for the choice (auto, moe)
    note: str | None = None  # too few folds to tell: the baseline kept (one `note:` line)
    parsimony: float = PARSIMONY
    criterion: str = (
        f"forward-chaining folds: {BASELINE} unless a form beats it by the parsimony margin on every "
        "fold; then the simplest within the margin of the best"
    )

    def to_dict(self) -> dict[str, Any]:
        return {
            "family": self.family,
            "chosen": self.chosen,
            "baseline": self.baseline,
            "disagreement": self.disagreement,
            "fold_mae": dict(self.fold_mae),
            "fold_errors": {k: dict(v) for k, v in self.fold_errors.items()},
            "skipped": dict(self.skipped),
            "note": self.note,
            "parsimony": self.parsimony,
            "criterion": self.criterion,
        }

    @property
    def message(self) -> str:
        scores = ", ".join(f"{k} {v:.3%}" for k, v in self.fold_mae.items())
        what = (
            "error on the epochs and size backtests' held-out runs"
            if self.criterion == EPOCH_CRITERION
            else "forward-chaining error"
        )
        return f"--law {self.family} chose {self.chosen} ({what}: {scores})"
