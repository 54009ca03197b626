"""scalelab's Hydra plugins: the planning sweeper (isoflop / model_ladder / data_ladder / layouts)
and a joblib launcher that pins each parallel run to its own CPU cores.

Hydra imports every module under `hydra_plugins` at start-up, so these modules stay light (no JAX);
the planning logic lives in experiments/sweeps/ (imported where used).
"""
