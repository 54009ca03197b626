"""The curve-prefix protocol on the zoo's Gemstones cases (analysis/backtests/zoo.py; McLeish et al.
2025, ../shared/data/gemstones): each larger shape's loss at 350B tokens from its first 25%, learning
from the shapes under 6e8 parameters, and full against half learning rate at ~100B tokens. The
default (`forecast` without --method) must beat the baseline (the loss at the cut x the finished
curves' median ratio: the lowest loss at the cut as its pick), cover as a 90% interval may, and pick
each rung's better learning rate. Needs ../shared/data (fails under CI=true when it is missing)."""

from __future__ import annotations

import pytest

from analysis.backtests import zoo


def _case(name: str) -> zoo.Outcome:
    (case,) = [c for c in zoo.cases() if c.protocol == "curve-prefix" and c.dataset == name]
    out = zoo.run_case(case, 0, only_default=True)
    assert out.error is None, out.error
    return out


@pytest.mark.parametrize(
    "name, n, max_err", [("gemstones hot 350B", 6, 0.004), ("gemstones full vs half LR", 12, 0.006)]
)
def test_gemstones_forecasts_beat_the_lowest_loss_at_the_cut(shared_data, name, n, max_err):
    o = _case(name)
    d, b = o.role("default"), o.role("baseline")
    assert d["method"] == "auto" and d["n"] == b["n"] == n
    # measured: 0.24% vs 1.96% (350B), 0.42% vs 3.66% (100B); coverage 5/6 and 10/12
    assert d["mean_abs_rel_error"] < max_err and d["mean_abs_rel_error"] < b["mean_abs_rel_error"] / 4
    assert zoo.consistent_with_90(round(d["coverage_90"] * n), n)
    if name.startswith("gemstones full"):  # 6 rungs: the full learning rate ends better in each
        assert d["mean_loss_penalty"] == 0.0 and b["mean_loss_penalty"] == 0.0
