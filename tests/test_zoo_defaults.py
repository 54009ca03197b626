"""The default rule at the zoo's figures, one test per protocol (docs/zoo.md; issue "Defaults
that generalize"): on each zoo dataset of the protocol, the default (what the command does without
flags) is no worse than the protocol's simple baseline by more than 10% of the baseline's error,
and its 90% intervals cover the held-out values as a 90% interval may (k of n consistent with 90%
by a two-sided binomial test at 5%: with 3 points, 2 or 3 inside; pooled over the datasets, too),
except on the datasets listed in MISCALIBRATED, where they are known not to (the list is the open
part of the issue; its coverage is not asserted either way, since a borderline case moves by one
point between machines: R_D=5 seed 1 measured 36/36 here, 35/36 in CI).

Each test runs the zoo's own cases (`analysis.backtests.zoo`), the larger protocols on a fixed
subset (one ladder per source) to keep the suite short; `python -m analysis.backtests.zoo` runs
them all. Every assertion can fail: before this issue, the Huber-1e-3 default lost to the baseline
on 10 of 39 budget/size backtests and the full data-constrained law on data_limited's largest
models (8.1% vs 5.9%).
"""

from __future__ import annotations

import pytest

from analysis.backtests import zoo

pytestmark = pytest.mark.slow
BOOTSTRAP = 20  # per candidate fit: enough for the intervals' percentiles at these sizes

# the datasets each protocol is tested on (substrings of the zoo's dataset names); None = all
SUBSETS = {
    "budget": ("epoch", "gadre RefinedWeb/c4_val", "ours demo"),
    "size": (
        "gadre RedPajama/paloma_code",  # Huber 1e-3 lost here by 2.9x
        "synthetic repeated R_D=5",
        "ours data_limited",  # the full data-constrained law lost here (8.1% vs 5.9%)
    ),
    "epochs": ("synthetic repeated R_D=5", "synthetic repeated R_D=40", "ours data_limited"),
    "lr": ("synthetic LR ladder", "ours hparam_ladder", "synthetic LR x batch grid"),
    "batch": ("synthetic LR x batch grid",),
}
# (protocol, dataset) whose default intervals are NOT calibrated yet (docs/zoo.md, "Coverage
# of the default's 90% intervals, per dataset"): left out of the coverage assertions
MISCALIBRATED = {
    ("size", "ours data_limited"),  # 9/15: the largest models' offset is larger than the folds saw
    ("epochs", "synthetic repeated R_D=40 seed 2"),  # 17/36: R_D untested at <= 4 epochs
    ("epochs", "synthetic repeated R_D=5 seed 1"),  # 35-36/36: the drift is wider than needed
}


# (protocol, dataset) where the default is known to lose to the baseline by more than the margin,
# the stated exceptions of docs/zoo.md: the largest ratio allowed there, and why
EXCEPTED = {
    # Huber 1e-3 (the published protocol; lower mean error on the zoo's budget and size backtests,
    # 2.48% vs 3.25%) against least squares: 2.9x on this one
    ("size", "gadre RedPajama/paloma_code"): 3.2,
    # the runs' own folds keep Chinchilla (Huber) where the least-squares baseline is 17% better
    ("epochs", "synthetic repeated R_D=40 seed 2"): 1.3,
}


def cases(protocol: str) -> list[zoo.Case]:
    picks = SUBSETS[protocol]
    out = [
        c
        for c in zoo.cases()
        if c.protocol == protocol and (picks is None or any(p in c.dataset for p in picks))
    ]
    assert out, f"no zoo case for {protocol}"
    return out


def check_rule_and_coverage(protocol: str) -> None:
    inside = held = 0
    for case in cases(protocol):
        o = zoo.run_case(case, BOOTSTRAP, only_default=True)  # the two roles under test
        assert o.error is None, (case.dataset, o.error)
        d, b = o.role("default"), o.role("baseline")
        key = o.error_key
        allowed = EXCEPTED.get((protocol, case.dataset), 1 + zoo.MARGIN)
        assert d[key] <= allowed * b[key] + 1e-4, (case.dataset, d["method"], d[key], b[key])
        if d["coverage_90"] is not None:
            k, n = round(d["coverage_90"] * d["n"]), int(d["n"])
            calibrated = zoo.consistent_with_90(k, n)
            if (protocol, case.dataset) in MISCALIBRATED:
                continue
            assert calibrated, (case.dataset, f"{k}/{n} inside the 90% intervals")
            inside, held = inside + k, held + n
    if held:
        assert zoo.consistent_with_90(inside, held), (protocol, f"pooled {inside}/{held}")


@pytest.mark.parametrize("protocol", sorted(SUBSETS))
def test_the_default_passes_the_rule_with_calibrated_intervals(shared_data, protocol):
    check_rule_and_coverage(protocol)
