"""A layout CSV's rows -> the cost model's inputs and predictions (`python -m analysis layout-eval`).

One layout per row; the columns and their defaults are layout-eval's (`python -m analysis
layout-eval --help`, analysis/commands/layout_eval.py). `parse_row` gives a row's
(ModelShape, Layout, Hardware or MixedCluster), `predict_rows` the `pred_*` columns under each
row's framework profile (or fitted constants); a row's measured columns (`measured_step_time`,
`oom_label`) feed the refits of measured.py. Every error is one line naming the row.
"""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib
from typing import Any

from models.base.errors import AnalysisError
from sharding.costmodel import (
    BF16_MIXED,
    DEFAULT_EFFICIENCY,
    FP32_PARAMS,
    Efficiency,
    Layout,
    LayoutError,
    ModelShape,
    Precision,
    estimate_step,
    load_hardware,
)
from sharding.costmodel.frameworks import (
    DEFAULT_FRAMEWORK,
    Framework,
    apply_framework,
    framework_efficiency,
    parse_framework,
)
from sharding.costmodel.hetero import estimate_hetero_step, is_mixed, parse_cluster
from sharding.costmodel.hetero_pipeline import estimate_hetero_pipeline
from sharding.costmodel.spec import nearest_mesh

REQUIRED = ("n_layers", "d_model", "n_heads", "seq_len", "vocab_size", "global_batch")
PRECISIONS: dict[str, Precision] = {"bf16-mixed": BF16_MIXED, "fp32-params": FP32_PARAMS}
MEASURED_COLUMNS = ("measured_step_time_s", "measured_tokens_per_s")


def missing(v: Any) -> bool:
    """An empty CSV cell: None or NaN."""
    return v is None or (isinstance(v, float) and math.isnan(v))


def _int(row: dict, key: str, default: Any, i: int) -> int:
    v = row.get(key, default)
    if missing(v):
        v = default
    if v is None:
        raise AnalysisError(f"row {i}: column {key!r} is required")
    try:
        f = float(v)
    except (TypeError, ValueError):
        if str(v).strip().lower() in ("true", "false"):
            return int(str(v).strip().lower() == "true")
        raise AnalysisError(f"row {i}: {key}={v!r} is not a number")
    if not f.is_integer():
        raise AnalysisError(f"row {i}: {key}={v!r} must be a whole number")
    return int(f)


def _optional_int(row: dict, key: str, i: int) -> int | None:
    return None if missing(row.get(key)) else _int(row, key, None, i)


def _str(row: dict, key: str, default: str | None) -> str | None:
    v = row.get(key)
    if missing(v) or str(v).strip() == "":
        return default
    return str(v).strip()


def _shape(row: dict, i: int) -> ModelShape:
    return ModelShape(
        n_layers=_int(row, "n_layers", None, i),
        d_model=_int(row, "d_model", None, i),
        n_heads=_int(row, "n_heads", None, i),
        seq_len=_int(row, "seq_len", None, i),
        vocab_size=_int(row, "vocab_size", None, i),
        d_ff=_optional_int(row, "d_ff", i),
        n_kv_heads=_optional_int(row, "n_kv_heads", i),
        mlp=_str(row, "mlp", "swiglu"),
        tied_embeddings=bool(_int(row, "tied_embeddings", 0, i)),
    )


def _layout(row: dict, i: int) -> Layout:
    """The row's layout; dp defaults to n_devices / (tp·pp), and the product must match n_devices."""
    tp, pp = _int(row, "tp", 1, i), _int(row, "pp", 1, i)
    n_dev = _optional_int(row, "n_devices", i)
    dp_default = None
    if n_dev is not None:
        dp_default = n_dev // (tp * pp) if tp * pp and n_dev % (tp * pp) == 0 else None
        if dp_default is None and missing(row.get("dp")):
            raise LayoutError(f"n_devices={n_dev} is not divisible by tp×pp = {tp * pp}")
    dp = _int(row, "dp", dp_default if dp_default is not None else 1, i)
    attention = _str(row, "attention", None) or ("flash2" if _int(row, "flash_attn", 1, i) else "naive")
    layout = Layout(
        dp=dp,
        tp=tp,
        pp=pp,
        cp=_int(row, "cp", 1, i),
        micro_batch=_int(row, "micro_batch", 1, i),
        global_batch=_int(row, "global_batch", None, i),
        sp=bool(_int(row, "sp", 0, i)),
        zero_stage=_int(row, "zero_stage", 1, i),
        act_ckpt=_str(row, "act_ckpt", "none"),
        attention=attention,
        fused_norm=bool(_int(row, "fused_norm", 1, i)),
        interleave=_int(row, "interleave", 1, i),
        offload_optimizer=bool(_int(row, "offload_optimizer", 0, i)),
        pipeline_schedule=_str(row, "pipeline_schedule", "1f1b"),
    )
    if n_dev is not None and layout.n_devices != n_dev:
        raise LayoutError(
            f"dp×tp×pp = {dp}×{tp}×{pp} = {layout.n_devices} does not match "
            f"n_devices={n_dev}; nearest valid mesh: {nearest_mesh(n_dev, tp, pp)}"
        )
    return layout


MIXED_MODES = ("data", "pipeline")


@dataclasses.dataclass(frozen=True)
class MixedCluster:
    """A row's mixed hardware (`a100-80gb:256,h100-sxm:128`) and how the layout spans it."""

    groups: tuple
    mode: str  # data: each group whole replicas (hetero.py); pipeline: each group whole stages
    stage_layers: tuple[int, ...] | None  # pipeline: layers per stage (None: balanced to speed)

    @property
    def name(self) -> str:
        return ",".join(f"{g.hardware.name}:{g.count}" for g in self.groups)


def _mixed(row: dict, hw_name: str, i: int) -> MixedCluster:
    mode = _str(row, "mixed_mode", "data")
    if mode not in MIXED_MODES:
        raise LayoutError(f"mixed_mode must be one of {MIXED_MODES} (got {mode!r})")
    layers = _str(row, "stage_layers", None)
    if layers is not None and mode != "pipeline":
        raise LayoutError("stage_layers goes with mixed_mode=pipeline")
    try:
        split = None if layers is None else tuple(int(x) for x in layers.split(";"))
    except ValueError:
        raise LayoutError(f"stage_layers must be layer counts separated by ';' (got {layers!r})")
    return MixedCluster(parse_cluster(hw_name), mode, split)


def parse_row(
    row: dict, i: int, default_hw: str | None, hw_cache: dict, default_fw: Framework | str = DEFAULT_FRAMEWORK
):
    """(ModelShape, Layout, Hardware or MixedCluster) of CSV row i (1-based for messages).

    A mixed `hardware` (`name:count,...`) spans device groups: `mixed_mode=data` (default) gives
    every group whole replicas with the row's tp and pp (its dp is per group, n / (tp·pp));
    `mixed_mode=pipeline` gives every group whole pipeline stages with the row's tp and dp (pp is
    the number of stages, Σ n / (tp·dp)); `stage_layers` (e.g. `10;10;14;14`) fixes the layers
    per stage, else they are balanced to the devices' speed."""
    try:
        shape = _shape(row, i)
        hw_name = _str(row, "hardware", default_hw)
        if hw_name is None:
            raise LayoutError("no hardware: add a `hardware` column or pass --hardware")
        if is_mixed(hw_name):
            if not missing(row.get("n_devices")):
                raise LayoutError(
                    "a mixed-hardware row takes its device counts from `hardware`; leave n_devices empty"
                )
            return (
                shape,
                # mixed-device stages are Megatron-style (hetero_pipeline.py): no GSPMD pipeline
                apply_framework(_layout(row, i), row_framework(row, default_fw)).replace(
                    gspmd_pipeline=False
                ),
                _mixed(row, hw_name, i),
            )
        for col in ("mixed_mode", "stage_layers"):
            if not missing(row.get(col)):
                raise LayoutError(f"{col} goes with a mixed `hardware` (name:count,...)")
        layout = apply_framework(_layout(row, i), row_framework(row, default_fw))
        if hw_name not in hw_cache:
            hw_cache[hw_name] = load_hardware(hw_name)
        return shape, layout, hw_cache[hw_name]
    except AnalysisError as e:
        raise AnalysisError(f"row {i}: {e}") from None


def row_framework(row: dict, default: Framework | str = DEFAULT_FRAMEWORK) -> Framework:
    """The row's `framework` column, else `default` (one-line error naming the choices)."""
    return parse_framework(_str(row, "framework", None) or default)


def load_efficiency(path: pathlib.Path | None) -> Efficiency:
    if path is None:
        return DEFAULT_EFFICIENCY
    if not pathlib.Path(path).is_file():
        raise AnalysisError(f"efficiency file not found: {path}")
    try:
        data = json.loads(pathlib.Path(path).read_text())
    except json.JSONDecodeError as e:
        raise AnalysisError(f"efficiency file {path} is not valid JSON ({e.msg})")
    if not isinstance(data, dict):
        raise AnalysisError(f"efficiency file {path} must hold a JSON object")
    return Efficiency.from_mapping(data.get("efficiency", data))


def read_rows(path: pathlib.Path) -> list[dict]:
    import pandas as pd  # here, not at import: keeps `python -m analysis --help` fast

    if not path.is_file():
        raise AnalysisError(f"file not found: {path}")
    try:
        df = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        raise AnalysisError(f"{path} is empty; expected a CSV with columns {', '.join(REQUIRED)}")
    except (pd.errors.ParserError, UnicodeDecodeError) as e:
        raise AnalysisError(f"{path} is not a readable CSV ({str(e).splitlines()[0]})")
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise AnalysisError(f"{path} lacks column(s) {missing}; required: {', '.join(REQUIRED)}")
    if df.empty:
        raise AnalysisError(f"{path} has no rows")
    return df.to_dict(orient="records")


def _clean(v: Any) -> Any:
    if missing(v):
        return None
    if hasattr(v, "item"):
        return v.item()
    return v


def predict_rows(
    rows: list[dict], parsed: list, default_fw: Framework, effs: dict[Framework, Efficiency], prec
) -> tuple[list[Framework], list[dict]]:
    """(each row's framework, its prediction with that framework's constants in `effs`)."""
    fws = [row_framework(r, default_fw) for r in rows]
    out = [
        predict_row(r, shape, layout, hw, prec, effs[fw], fw)
        for r, (shape, layout, hw), fw in zip(rows, parsed, fws)
    ]
    return fws, out


def profile_effs(path: pathlib.Path | None) -> dict[Framework, Efficiency]:
    """Efficiency per framework: the profiles, or every framework `path`'s constants."""
    if path is not None:
        eff = load_efficiency(path)
        return {fw: eff for fw in Framework}
    return {fw: framework_efficiency(fw) for fw in Framework}


def _predict_mixed(row: dict, shape, layout, mixed: MixedCluster, prec, eff: Efficiency) -> dict:
    """A mixed-hardware row: the step on its device groups (pred_hfu is not modelled there)."""
    rec = {k: _clean(v) for k, v in row.items()}
    if mixed.mode == "pipeline":
        est = estimate_hetero_pipeline(shape, layout, mixed.groups, mixed.stage_layers, prec, eff)
        rec["pred_layers_per_stage"] = ";".join(map(str, est.layers_per_stage()))
        rec["pred_stage_hardware"] = ";".join(st.hardware for st in est.stages)
    else:
        est = estimate_hetero_step(shape, layout, mixed.groups, prec, eff)
        rec["pred_batch_per_group"] = ";".join(map(str, est.batch_split()))
        rec["pred_dp_per_group"] = ";".join(str(e.layout.dp) for e in est.per_group)
    rec.update(
        pred_step_time_s=est.step_time_s,
        pred_tokens_per_s=est.tokens_per_s,
        pred_mfu=est.mfu,
        mfu_convention=est.mfu_convention,
        pred_hfu=None,
        pred_mem_gb_per_device=est.mem_bytes_per_device / 1e9,
        pred_fits=bool(est.fits),
    )
    return rec


def predict_row(row: dict, shape, layout, hw, prec, eff: Efficiency, fw: Framework | None = None) -> dict:
    """The row's inputs plus the cost model's predictions (pred_* columns)."""
    if isinstance(hw, MixedCluster):
        try:
            rec = _predict_mixed(row, shape, layout, hw, prec, eff)
        except LayoutError as e:
            raise AnalysisError(f"mixed hardware {hw.name}: {e}") from None
        if fw is not None:
            rec["framework"] = fw.value
        return rec
    est = estimate_step(shape, layout, hw, prec, eff)
    rec = {k: _clean(v) for k, v in row.items()}
    if fw is not None:
        rec["framework"] = fw.value
    rec.update(
        pred_step_time_s=est.step_time_s,
        pred_tokens_per_s=est.tokens_per_s,
        pred_mfu=est.mfu,
        mfu_convention=est.mfu_convention,
        pred_hfu=est.hfu,
        pred_mem_gb_per_device=est.memory.total / 1e9,
        pred_fits=bool(est.fits),
    )
    return rec


def measured_step_time(row: dict, shape, layout) -> float | None:
    """measured_step_time_s, else global_batch·seq_len / measured_tokens_per_s, else None."""
    step = row.get("measured_step_time_s")
    if not missing(step):
        return float(step)
    tps = row.get("measured_tokens_per_s")
    if missing(tps) or float(tps) <= 0:
        return None
    return layout.global_batch * shape.seq_len / float(tps)


def parse_rows(
    rows: list[dict], default_hw: str | None, default_fw: Framework | str = DEFAULT_FRAMEWORK
) -> list[tuple]:
    """`parse_row` of every row (numbered from 1), each hardware loaded once."""
    hw_cache: dict = {}
    return [parse_row(r, i + 1, default_hw, hw_cache, default_fw) for i, r in enumerate(rows)]


def oom_label(row: dict, i: int) -> bool:
    """The row's `oom` column (0/1), False without one."""
    return bool(_int(row, "oom", 0, i)) if "oom" in row else False
