"""Downstream-task prediction: compute -> task loss -> accuracy, with 90% intervals (docs/downstream.md).

`fit_downstream(ladder_df)` fits a ladder (columns N, D, task, task_loss, accuracy; optional run,
chance, C) and returns a `DownstreamFit`; its `predict(targets_df)` gives, per target row, the
predicted task loss, accuracy, interval, method and warnings. Modules, one job each:
`data` (tables, runs, chance), `taskloss` (step 1), `sigmoid` (step 2 and the direct form, batched
least squares), `candidates` (the predictors), `holdout` (held-out errors and the choice),
`intervals` (error model), `flags` (warnings), `fitting` (the pipeline), `methods` (the family's
registered methods: average, auto, baseline_linear_log_c).
"""

from analysis.downstream.fitting import DownstreamFit, TaskFit, TaskPrediction, fit_downstream

__all__ = ["DownstreamFit", "TaskFit", "TaskPrediction", "fit_downstream"]
