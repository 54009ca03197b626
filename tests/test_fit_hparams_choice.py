"""`fit-hparams` without a method flag chooses each parameter's method on the table's own
forward-chaining folds (the `lr` protocol: hide the largest size, then the two largest, ...):
the baseline `baseline_log_linear` unless a law beats it by the parsimony margin on every fold.

Tables: `test_hparams.lr_sweep` (the hparams.sh generator: a jittered x2.8 grid of 7 LRs around
lr* = c N^p D^q, 0.2% loss noise), 7 sizes 1e7..1e9 x D = 20, 40, 80 N unless said."""

import json

import numpy as np
import pandas as pd
from test_hparams import LR, lr_sweep, split

from analysis.cli import main
from analysis.hparams import fit_hparams
from analysis.hparams.methods import BASELINE, options

CHOICE_KEYS = {"chosen", "baseline", "candidates", "fold_errors", "note"}


def _cli(tmp_path, d, *extra):
    d.to_csv(tmp_path / "runs.csv", index=False)
    argv = ["fit-hparams", str(tmp_path / "runs.csv"), "--hparam", LR, *extra]
    assert main([*argv, "--json", str(tmp_path / "hp.json")]) == 0
    return json.loads((tmp_path / "hp.json").read_text())


def test_the_baseline_is_kept_where_the_law_does_not_win_every_fold(tmp_path, capsys):
    """The hparams.sh ladder: the law is better on the first fold (0.052 vs 0.118 dex) but worse on
    the last (0.047 vs 0.033), so the baseline stays, and --predict writes the baseline's law."""
    fit_df, targets = split(lr_sweep(seed=0))
    targets[["N", "D"]].to_csv(tmp_path / "targets.csv", index=False)
    j = _cli(tmp_path, fit_df, "--predict", str(tmp_path / "targets.csv"))
    c = j["method_choice"]
    assert CHOICE_KEYS <= set(c) and c["chosen"] == c["baseline"] == BASELINE and c["note"] is None
    assert c["candidates"][0] == BASELINE and "fit_hparams" in c["candidates"]
    folds = c["fold_errors"]
    assert len(folds[BASELINE]) >= 2 and set(folds["fit_hparams"]) == set(folds[BASELINE])
    assert any(folds["fit_hparams"][f] > 0.9 * e for f, e in folds[BASELINE].items())
    assert c["by_param"][LR]["chosen"] == BASELINE
    # the JSON's law and predictions are the baseline's: ln lr* linear in ln N through best values
    assert j["law_form"][LR] == "N" and j["laws"][LR]["optimum"] == "best_tried"
    direct = fit_hparams(fit_df, [LR], options(BASELINE)).laws()
    for p in j["predictions"]:
        v, lo, hi = direct.predict(LR, p["N"], p["D"])
        assert np.allclose([p["value"], *p["interval"]], [v, lo, hi], rtol=1e-9)
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("hyperparameter laws") and out[1].startswith(f"method: {LR}: {BASELINE}")
    assert not any(line.startswith("note:") for line in out)


def test_the_law_is_chosen_where_it_wins_every_fold(tmp_path):
    """lr* falls with D (q = -0.3) over D = 10..160 N: the baseline's line in N alone misses each
    rung by the D term, the N_D law does not (0.05 vs 0.13-0.15 dex on both folds)."""
    d = lr_sweep(seed=0, law=dict(c=0.5, p=-0.35, q=-0.3), d_ratios=(10, 40, 160))
    j = _cli(tmp_path, split(d)[0])
    c = j["method_choice"]
    assert c["chosen"] in ("fit_hparams", "form_N_D") and c["note"] is None
    base = c["fold_errors"][BASELINE]
    assert len(base) >= 2
    assert all(c["fold_errors"][c["chosen"]][f] <= 0.9 * e for f, e in base.items())
    assert j["law_form"][LR] == "N_D" and j["laws"][LR]["optimum"] == "vertex"


def test_too_few_folds_keep_the_baseline_with_one_note_line(tmp_path, capsys):
    """Three model sizes leave one fold (the largest hidden, two below): too few to tell."""
    j = _cli(tmp_path, lr_sweep(seed=1, n_sizes=3).drop(columns="lr_true"))
    c = j["method_choice"]
    assert c["chosen"] == BASELINE and "2 are needed" in c["note"]
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and "kept the baseline" in notes[0]
    # a method flag forces the method: no folds, no note line
    j = _cli(tmp_path, pd.read_csv(tmp_path / "runs.csv"), "--method", "form_N_D")
    assert j["method_choice"]["chosen"] == "form_N_D" and j["method_choice"]["fold_errors"] == {}
    assert j["law_form"][LR] == "N_D"
    assert not any(line.startswith("note:") for line in capsys.readouterr().out.splitlines())
