"""scalelab's Hydra plugins: the planning sweeper (isoflop / model_ladder / data_ladder / layouts)
and a joblib launcher that pins each parallel run to its own CPU cores.

Hydra imports every module under `hydra_plugins` at start-up, so these modules stay light (no JAX,
no NumPy): the planning logic lives in experiments/sweeps/, its light modules imported at the top,
those that load NumPy or the trainer's config (`packing`, `corpus`), and joblib and Ray, where used.
"""
