"""Downstream-task prediction: compute -> task loss -> accuracy, with 90% intervals (docs/downstream.md).

`fit_downstream(ladder_df)` fits a ladder (columns N, D, task, task_loss, accuracy; optional run,
chance, C) and returns a `DownstreamFit`; its `predict(targets_df)` gives, per target row, the
predicted task loss, accuracy, interval, method and warnings. Modules, one job each:
`data` (tables, runs, chance), `taskloss` (step 1), `sigmoid` (step 2 and the direct form, batched
least squares), `methods` (the candidates), `holdout` (held-out check and selection),
`intervals` (error model), `flags` (warnings), `fitting` (the pipeline).
"""

from analysis.downstream.fitting import DownstreamFit, Prediction, TaskFit, fit_downstream

__all__ = ["DownstreamFit", "Prediction", "TaskFit", "fit_downstream"]
