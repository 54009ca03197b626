"""Hyperparameter laws: the optimal learning rate / batch size per rung and their power laws.

`rungs` locates each rung's optimum (a quadratic in the log of the value), `laws` fits and chooses
the power-law forms with prediction intervals, `fitting` ties them to a runs table and reads an
HP.json back (`load_hparams`) for sweeps (`sweep.hparams`) and plans (`plan --hparams`); `methods`
registers the family's methods (fit_hparams, form_N_D, baseline_log_linear).
"""

from analysis.hparams.fitting import HparamFit, HparamLaws, HparamOptions, fit_hparams, load_hparams

__all__ = ["HparamFit", "HparamLaws", "HparamOptions", "fit_hparams", "load_hparams"]
