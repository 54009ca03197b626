"""Orbax checkpoints of (params, optimizer state) plus a JSON record (step, tokens, fingerprint).

Layout: `<run_dir>/checkpoints/<step>/{state,meta}`; Orbax writes each step to a temporary
directory and renames it when complete, so a kill mid-save leaves the previous checkpoint intact.
Restoring takes abstract targets with shardings, so a checkpoint can be restored onto another mesh.

For analysis code: `load_params(run_dir)` returns (ModelConfig, graphdef, params) on one device.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import orbax.checkpoint as ocp
from flax import nnx
from jax.sharding import SingleDeviceSharding

from models.config import ModelConfig
from models.transformer import Transformer, split_params

CKPT_SUBDIR = "checkpoints"


class Checkpointer:
    """Orbax CheckpointManager of one run directory: save / restore / read the JSON record."""

    def __init__(self, run_dir: Path, keep: int = 2):
        self.directory = (Path(run_dir) / CKPT_SUBDIR).resolve()
        self._mngr = ocp.CheckpointManager(
            self.directory,
            options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=True,
                                                 enable_async_checkpointing=False),
            item_names=("state", "meta"),
        )

    def latest_step(self) -> int | None:
        return self._mngr.latest_step()

    def save(self, step: int, params: Any, opt_state: Any, meta: dict[str, Any]) -> None:
        self._mngr.save(step, args=ocp.args.Composite(
            state=ocp.args.StandardSave({"params": params, "opt_state": opt_state}),
            meta=ocp.args.JsonSave(meta)), force=True)
        self._mngr.wait_until_finished()

    def restore(self, step: int, abstract_params: Any, abstract_opt_state: Any) -> tuple[Any, Any, dict]:
        out = self._mngr.restore(step, args=ocp.args.Composite(
            state=ocp.args.StandardRestore({"params": abstract_params, "opt_state": abstract_opt_state}),
            meta=ocp.args.JsonRestore()))
        return out.state["params"], out.state["opt_state"], dict(out.meta)

    def read_meta(self, step: int) -> dict[str, Any]:
        out = self._mngr.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))
        return dict(out.meta)

    def close(self) -> None:
        self._mngr.close()


def load_params(run_dir: Path, step: int | None = None):
    """(ModelConfig, graphdef, params) of a run's checkpoint, on the default device.

    Use with `models.transformer.apply(graphdef, params, tokens_BxL)`.
    """
    run_dir = Path(run_dir)
    ck = Checkpointer(run_dir)
    step = ck.latest_step() if step is None else step
    if step is None:
        raise FileNotFoundError(f"no checkpoint under {ck.directory}")
    meta = ck.read_meta(step)
    cfg = ModelConfig(**meta["model"])
    sh = SingleDeviceSharding(jax.devices()[0])
    graphdef, _ = nnx.split(nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0))), nnx.Param)
    p_shapes = jax.eval_shape(lambda: split_params(Transformer(cfg, rngs=nnx.Rngs(0)))[1])
    target = jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh), p_shapes)
    out = ck._mngr.restore(step, args=ocp.args.Composite(
        state=ocp.args.PyTreeRestore({"params": target}, partial_restore=True,
                                     restore_args=ocp.checkpoint_utils.construct_restore_args({"params": target}))))
    ck.close()
    return cfg, graphdef, out.state["params"]
