"""`python -m analysis layout-eval LAYOUTS.csv --json OUT.json` — cost-model predictions per row.

One layout per CSV row. Required columns: n_layers, d_model, n_heads, seq_len, vocab_size,
global_batch (sequences per optimizer step), hardware (catalogue name or YAML path; or pass
--hardware). Optional columns and their defaults:
  micro_batch=1, tp=1, pp=1, dp=n_devices/(tp·pp), n_devices=dp·tp·pp, sp=0, zero_stage=1,
  act_ckpt=none (none|selective|full), flash_attn=1 (1 → FlashAttention-2, 0 → naive softmax),
  attention (naive|fused_softmax|flash1|flash2; overrides flash_attn), fused_norm=1, cp=1
  (context parallel ranks; n_devices = dp·tp·pp·cp),
  interleave=1, offload_optimizer=0, d_ff (Llama rule 8/3·d rounded up to 256),
  n_kv_heads=n_heads, mlp=swiglu, tied_embeddings=0,
  pipeline_schedule=1f1b (1f1b|gpipe|interleaved|breadth_first; interleave = looped stages),
  framework (megatron|deepspeed|fsdp|jax; default --framework, jax = this repository's trainer):
  the stack's efficiency profile and program (sharding/costmodel/frameworks.py).
Mixed clusters: hardware `a100-80gb:256,h100-sxm:128` (no n_devices column) with
  mixed_mode=data (default; every group whole replicas with the row's tp, pp, its batch split by
  throughput) or mixed_mode=pipeline (every group whole pipeline stages with the row's tp, dp;
  stage_layers=`10;10;14;14` fixes the layers per stage, else they are balanced to the devices'
  speed); adds pred_batch_per_group / pred_dp_per_group or pred_layers_per_stage /
  pred_stage_hardware, and pred_hfu is empty.
Writes {"rows": [...], "mfu_convention": ...} in input order; each row repeats its inputs and adds
pred_step_time_s, pred_tokens_per_s, pred_mfu, mfu_convention (the FLOPs pred_mfu counts:
PaLM's 6N + 12LHQT, "palm_6N+12LHQT"; the trainer's summary.json MFU counts causal attention,
see models/flops.py), pred_hfu, pred_mem_gb_per_device and pred_fits.

Calibration on your own measurements (calibrate, then predict, in one command):
- `--calibrate MEASURED.csv`: rows of the layout columns above with a measured
  `measured_step_time_s` or `measured_tokens_per_s` (and optionally `oom` 0/1) of one
  framework; its profile is refitted to them (few-shot: pulled towards the profile, so 3-5 rows
  suffice), the leave-one-out error over those rows gives the MFU interval (wider with fewer
  rows), and LAYOUTS.csv's rows of that framework are predicted with the refit (`--out EFF.json`
  keeps it). Without LAYOUTS.csv the measured rows themselves are predicted;
- older form, kept: `LAYOUTS.csv --calibrate EFF.json` fits the constants to LAYOUTS.csv's own
  measured columns (all constants, from the shared fit) and writes them to EFF.json;
- a trainer sweep: `python -m analysis layout-eval --calibrate SWEEP_DIR [--hardware HW]` reads
  every run under SWEEP_DIR (summary.json: model, mesh, tokens/s; .hydra/config.yaml: batch
  sizes), rebuilds each run's layout as the cost model sees the trainer's program
  (analysis.planning.trainer.run_layout), fits the constants to the measured step times (runs that
  failed out of memory count as OOM labels) and writes SWEEP_DIR/efficiency.json (or `--out`).
  `--hardware` names the devices when their `device_kind` is not in the catalogue (a CPU host:
  pass a YAML describing it). A LAYOUTS.csv given with it is then predicted with the fit.
`--efficiency EFF.json` uses such a file for the predictions (and `plan --efficiency` for plans).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import pathlib
import statistics
from typing import Any

from analysis.commands._options import add_json_argument, emit_json
from models.base.errors import AnalysisError
from models.base.jsonio import write_json
from sharding.costmodel import (
    BF16_MIXED,
    DEFAULT_EFFICIENCY,
    FP32_PARAMS,
    MFU_CONVENTION,
    Efficiency,
    Layout,
    LayoutError,
    ModelShape,
    estimate_step,
    load_hardware,
)
from sharding.costmodel.frameworks import (
    DEFAULT_FRAMEWORK,
    FRAMEWORKS,
    Framework,
    apply_framework,
    framework_efficiency,
    parse_framework,
)
from sharding.costmodel.spec import nearest_mesh

REQUIRED = ("n_layers", "d_model", "n_heads", "seq_len", "vocab_size", "global_batch")
PRECISIONS = {"bf16-mixed": BF16_MIXED, "fp32-params": FP32_PARAMS}


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "layout-eval",
        help="predict step time, MFU and memory per layout row",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "csv",
        type=pathlib.Path,
        nargs="?",
        help="one layout per row (see columns above); omit with --calibrate SWEEP_DIR",
    )
    add_json_argument(p, "{'rows': [...], 'efficiency': {...}}")
    p.add_argument("--hardware", help="default hardware for rows without a `hardware` column")
    p.add_argument(
        "--precision",
        choices=sorted(PRECISIONS),
        default="bf16-mixed",
        help="bf16-mixed (default: bf16 compute, fp32 master weights) or fp32-params",
    )
    p.add_argument(
        "--efficiency",
        type=pathlib.Path,
        help="efficiency constants JSON (replaces the framework profiles' constants)",
    )
    p.add_argument(
        "--framework",
        default=DEFAULT_FRAMEWORK.value,
        help=f"framework of rows without a `framework` column: {' | '.join(FRAMEWORKS)} "
        f"(default {DEFAULT_FRAMEWORK.value}: this repository's trainer)",
    )
    p.add_argument(
        "--calibrate",
        type=pathlib.Path,
        metavar="MEASURED.csv|SWEEP_DIR",
        help="refit the framework's profile to measured rows (a CSV with measured_step_time_s "
        "or measured_tokens_per_s) or to a trainer sweep's runs, then predict; older form: "
        "EFF.json = fit the CSV's own measured columns and write the constants there",
    )
    p.add_argument(
        "--out",
        type=pathlib.Path,
        metavar="EFF.json",
        help="with --calibrate MEASURED.csv|SWEEP_DIR: where to write the refitted constants "
        "(default for a sweep: SWEEP_DIR/efficiency.json)",
    )
    p.set_defaults(func=run)


def _missing(v: Any) -> bool:
    """An empty CSV cell: None or NaN."""
    return v is None or (isinstance(v, float) and math.isnan(v))


def _int(row: dict, key: str, default: Any, i: int) -> int:
    v = row.get(key, default)
    if _missing(v):
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
    return None if _missing(row.get(key)) else _int(row, key, None, i)


def _str(row: dict, key: str, default: str | None) -> str | None:
    v = row.get(key)
    if _missing(v) or str(v).strip() == "":
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
        if dp_default is None and _missing(row.get("dp")):
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
    from sharding.costmodel.hetero import parse_cluster

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
    from sharding.costmodel.hetero import is_mixed

    try:
        shape = _shape(row, i)
        hw_name = _str(row, "hardware", default_hw)
        if hw_name is None:
            raise LayoutError("no hardware: add a `hardware` column or pass --hardware")
        if is_mixed(hw_name):
            if not _missing(row.get("n_devices")):
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
            if not _missing(row.get(col)):
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
    if _missing(v):
        return None
    if hasattr(v, "item"):
        return v.item()
    return v


def _check_framework_arg(args: argparse.Namespace) -> Framework:
    """`--framework` as a `Framework` (its LayoutError is an AnalysisError: one line, exit 2)."""
    return parse_framework(args.framework, "--framework")


def run(args: argparse.Namespace) -> int:
    default_fw = _check_framework_arg(args)
    cal = args.calibrate
    if cal is not None and cal.is_dir():
        return _run_sweep(args)
    if cal is not None and cal.suffix.lower() != ".json":
        return _run_measured(args, default_fw)
    if args.csv is None:
        raise AnalysisError(
            "give a layouts CSV, or --calibrate MEASURED.csv|SWEEP_DIR to refit the profile to measurements"
        )
    if args.out is not None and cal is not None:
        raise AnalysisError(
            "--out goes with --calibrate MEASURED.csv|SWEEP_DIR; "
            "with --calibrate EFF.json that file is the output"
        )
    rows = read_rows(args.csv)
    prec = PRECISIONS[args.precision]
    hw_cache: dict = {}
    parsed = [parse_row(r, i + 1, args.hardware, hw_cache, default_fw) for i, r in enumerate(rows)]
    if cal is not None:
        eff = _calibrate(rows, parsed, prec, load_efficiency(args.efficiency), cal)
        effs = {fw: eff for fw in Framework}
    else:
        effs = profile_effs(args.efficiency)
    fws, out = _predict_rows(rows, parsed, default_fw, effs, prec)
    _print_table(parsed, out)
    used = sorted(set(fws))
    emit_json(
        args,
        {
            "rows": out,
            "mfu_convention": MFU_CONVENTION,
            "efficiency": effs[used[0]].as_dict(),
            "profiles": {fw.value: effs[fw].as_dict() for fw in used},
        },
    )
    return 0


def _predict_rows(
    rows: list[dict], parsed: list, default_fw: Framework, effs: dict[Framework, Efficiency], prec
) -> tuple[list[Framework], list[dict]]:
    """(each row's framework, its prediction with that framework's constants in `effs`)."""
    fws = [row_framework(r, default_fw) for r in rows]
    out = [
        _predict_row(r, shape, layout, hw, prec, effs[fw], fw)
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
    from sharding.costmodel.hetero import estimate_hetero_step
    from sharding.costmodel.hetero_pipeline import estimate_hetero_pipeline

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


def _predict_row(row: dict, shape, layout, hw, prec, eff: Efficiency, fw: Framework | None = None) -> dict:
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


def _print_table(parsed: list, out: list[dict]) -> None:
    print(f"{'row':>4} {'layout':28s} {'step s':>9} {'tok/s':>11} {'MFU':>6} {'mem GB':>7} fits")
    for i, ((_, lo, _), rec) in enumerate(zip(parsed, out)):
        lay = f"dp{lo.dp} tp{lo.tp} pp{lo.pp} mb{lo.micro_batch} z{lo.zero_stage} {lo.act_ckpt}"
        print(
            f"{i + 1:>4} {lay:28s} {rec['pred_step_time_s']:9.3f} {rec['pred_tokens_per_s']:11.0f} "
            f"{rec['pred_mfu']:6.3f} {rec['pred_mem_gb_per_device']:7.1f} "
            f"{'yes' if rec['pred_fits'] else 'OOM'}"
        )
    print(f"MFU convention: {MFU_CONVENTION} (model FLOPs per token 6N + 12·L·H·Q·T, N = all parameters)")


def _measured_step_time(row: dict, shape, layout) -> float | None:
    """measured_step_time_s, else global_batch·seq_len / measured_tokens_per_s, else None."""
    step = row.get("measured_step_time_s")
    if not _missing(step):
        return float(step)
    tps = row.get("measured_tokens_per_s")
    if _missing(tps) or float(tps) <= 0:
        return None
    return layout.global_batch * shape.seq_len / float(tps)


def _calibrate(rows: list[dict], parsed: list, prec, base: Efficiency, out_path: pathlib.Path) -> Efficiency:
    """Fit constants to the rows' measured step times / tokens per second and OOM flags."""
    # SciPy-based calibration loads only when asked for, keeping `python -m analysis --help` fast.
    from sharding.costmodel.calibrate import Measurement, calibrate, score

    ms = []
    for i, (r, (shape, layout, hw)) in enumerate(zip(rows, parsed)):
        if isinstance(hw, MixedCluster):
            raise AnalysisError(
                f"row {i + 1}: --calibrate fits one device type at a time; "
                f"calibrate on single-hardware rows (this row is {hw.name})"
            )
        step = _measured_step_time(r, shape, layout)
        oom = bool(_int(r, "oom", 0, i + 1)) if "oom" in r else False
        if step is None and not oom:
            continue
        ms.append(Measurement(shape, layout, hw, None if oom else float(step), oom, prec))
    if sum(m.step_time_s is not None for m in ms) < 3:
        raise AnalysisError("--calibrate needs >= 3 rows with measured_step_time_s or measured_tokens_per_s")
    eff = calibrate(ms, base, provenance=f"fitted to {len(ms)} rows of {out_path.name}")
    eff, how = _with_error_model(eff, ms, _leave_one_out(ms, base))
    s = score(ms, eff)
    write_json(out_path, {"efficiency": eff.as_dict(), "scores": s.as_dict()})
    print(
        f"calibrated on {len(ms)} rows: Spearman rho(MFU, {MFU_CONVENTION}) {s.spearman_mfu:.3f}, "
        f"median |MFU err| {100 * s.median_abs_mfu_error:.2f} pts, OOM accuracy {100 * s.oom_accuracy:.1f}% "
        f"(in-sample) -> {out_path}"
    )
    print(
        f"MFU error interval (measured / predicted, 5%-95%): [{eff.mfu_ratio_lo:.2f}, "
        f"{eff.mfu_ratio_hi:.2f}], {how}"
    )
    return eff


def _sweep_measurements(sweep: pathlib.Path, hardware: str | None):
    """(Measurement list, one record per run) of the trainer runs under `sweep`."""
    from analysis.planning.trainer import TRAINER_PRECISION, run_layout
    from analysis.runs import find_run_dirs, read_run
    from models.base.rundir import SUMMARY_FILE, RunStatus
    from sharding.costmodel.calibrate import Measurement
    from sharding.costmodel.hardware import hardware_for_device_kind

    hw_fixed = load_hardware(hardware) if hardware else None
    ms, recs, skipped = [], [], []
    for run_dir in find_run_dirs([sweep]):
        summary, config = read_run(run_dir)
        if summary is None:
            skipped.append(f"{run_dir.name} (no {SUMMARY_FILE})")
            continue
        status, error = summary.get("status"), str(summary.get("error", "")).lower()
        oom = status == RunStatus.FAILED and ("resource_exhausted" in error or "out of memory" in error)
        tps, per_step = summary.get("tokens_per_s"), summary.get("tokens_per_step")
        if not oom and (status != RunStatus.COMPLETED or not tps or not per_step):
            skipped.append(f"{run_dir.name} ({status}, no throughput)")
            continue
        try:
            shape, layout, act_bytes = run_layout(summary, config)
        except LayoutError as e:
            raise AnalysisError(f"{run_dir}: {e}") from None
        kind = str((summary.get("mesh") or {}).get("device_kind", "?"))
        hw = hw_fixed or hardware_for_device_kind(kind)
        if hw is None:
            raise AnalysisError(
                f"{run_dir.name} ran on {kind!r}, which is not in the hardware "
                f"catalogue; pass --hardware NAME or a YAML describing it"
            )
        prec = dataclasses.replace(TRAINER_PRECISION, act_bytes=act_bytes)
        if act_bytes == 4 and hw.peak_flops_float32:  # float32 matmuls run at their own peak
            hw = dataclasses.replace(hw, peak_flops=hw.peak_flops_float32)
        step = None if oom else float(per_step) / float(tps)
        ms.append(Measurement(shape, layout, hw, step, oom, prec, label=run_dir.name))
        recs.append(
            {
                "run": str(run_dir),
                "status": status,
                "oom": oom,
                "measured_step_time_s": step,
                "measured_tokens_per_s": None if oom else float(tps),
                "hardware": hw.name,
                "dp": layout.dp,
                "tp": layout.tp,
                "pp": layout.pp,
                "cp": layout.cp,
                "sp": layout.sp,
                "zero_stage": layout.zero_stage,
                "micro_batch": layout.micro_batch,
                "global_batch": layout.global_batch,
                "act_ckpt": layout.act_ckpt,
                "n_layers": shape.n_layers,
                "d_model": shape.d_model,
                "seq_len": shape.seq_len,
            }
        )
    return ms, recs, skipped


def _leave_one_out(ms: list, base: Efficiency, max_runs: int = 40) -> list[float] | None:
    """measured / predicted MFU (= predicted / measured step time) of each timed run, predicted
    by constants fitted to the other runs (None above `max_runs` timed runs, where it would cost
    a fit per run, or below 4)."""
    from sharding.costmodel.calibrate import calibrate

    timed = [i for i, m in enumerate(ms) if m.step_time_s is not None]
    if not 4 <= len(timed) <= max_runs:
        return None
    ratios = []
    for i in timed:
        eff = calibrate(ms[:i] + ms[i + 1 :], base)
        m = ms[i]
        ratios.append(
            estimate_step(m.model, m.layout, m.hardware, m.precision, eff).step_time_s / m.step_time_s
        )
    return ratios


def _with_error_model(eff: Efficiency, ms: list, loo: list[float] | None) -> tuple[Efficiency, str]:
    """`eff` with its MFU error interval (5%-95% of measured / predicted MFU): the leave-one-out
    ratios `loo` when there are some, else in-sample (narrower than the truth), and words saying
    which."""

    from analysis import validation
    from sharding.costmodel.calibrate import score

    if loo is not None:
        lo, hi = validation.percentile_bounds(loo, 0.90)
        how = f"leave-one-run-out over {len(loo)} runs"
    else:
        s = score(ms, eff)
        lo, hi = s.mfu_ratio_q05, s.mfu_ratio_q95
        how = f"in-sample over {s.n_timed} runs (narrower than on new layouts)"
    return eff.replace(mfu_ratio_lo=float(lo), mfu_ratio_hi=float(hi)), how


def _add_predictions(recs: list[dict], ms: list, eff: Efficiency) -> None:
    """Add the cost model's step time, MFU and memory under `eff` to each run's record."""
    for rec, m in zip(recs, ms):
        est = estimate_step(m.model, m.layout, m.hardware, m.precision, eff)
        rec.update(
            pred_step_time_s=est.step_time_s,
            pred_mfu=est.mfu,
            mfu_convention=est.mfu_convention,
            pred_mem_gb_per_device=est.memory.total / 1e9,
            pred_fits=bool(est.fits),
        )


def _print_run_table(recs: list[dict]) -> None:
    """One line per run: its layout, measured and predicted step time."""
    print(f"{'run':24s} {'layout':26s} {'measured s':>11} {'predicted s':>12}")
    for rec in recs:
        lay = (
            f"dp{rec['dp']} tp{rec['tp']} pp{rec['pp']} cp{rec['cp']}"
            f"{' sp' if rec['sp'] else ''} mb{rec['micro_batch']}"
        )
        meas = "OOM" if rec["oom"] else f"{rec['measured_step_time_s']:.4f}"
        print(
            f"{pathlib.Path(rec['run']).name[:24]:24s} {lay:26s} {meas:>11} {rec['pred_step_time_s']:12.4f}"
        )


MEASURED_COLUMNS = ("measured_step_time_s", "measured_tokens_per_s")


@dataclasses.dataclass(frozen=True)
class Calibration:
    """A profile refitted to measured rows (`--calibrate MEASURED.csv|SWEEP_DIR`): which
    framework, on how many rows, and the refit constants with their error model."""

    framework: Framework
    efficiency: Efficiency
    n_rows: int  # timed rows the profile was refitted on
    n_oom: int  # OOM-labelled rows among them
    source: str
    error_model: str  # how the MFU interval was measured
    loo_median_abs_mfu_error: float | None  # leave-one-out over the rows, MFU fraction

    def text(self) -> str:
        loo = (
            ""
            if self.loo_median_abs_mfu_error is None
            else f"; leave-one-out median |ΔMFU| {100 * self.loo_median_abs_mfu_error:.1f} pts"
        )
        iv = self.efficiency.mfu_ratio_interval
        band = "" if iv is None else f"; MFU error interval [{iv[0]:.2f}, {iv[1]:.2f}] ({self.error_model})"
        return (
            f"calibrated: {self.framework.value} profile refitted on {self.n_rows} measured rows of "
            f"{self.source}" + (f" (+{self.n_oom} OOM labels)" if self.n_oom else "") + loo + band
        )

    def as_dict(self) -> dict:
        return {
            "framework": self.framework.value,
            "n_rows": self.n_rows,
            "n_oom": self.n_oom,
            "source": self.source,
            "error_model": self.error_model,
            "loo_median_abs_mfu_error": self.loo_median_abs_mfu_error,
            "mfu_ratio_interval": list(self.efficiency.mfu_ratio_interval or []) or None,
        }


def _read_measured(path: pathlib.Path) -> list[dict]:
    """The rows of a MEASURED.csv (one-line errors naming the flag, the columns and the fix)."""
    need = f"the layout columns ({', '.join(REQUIRED)}) and {' or '.join(MEASURED_COLUMNS)} per row"
    if not path.exists():
        raise AnalysisError(f"--calibrate {path}: not found; give MEASURED.csv with {need}, or a SWEEP_DIR")
    try:
        rows = read_rows(path)
    except AnalysisError as e:
        raise AnalysisError(f"--calibrate {e}; it needs {need}") from None
    if not any(c in rows[0] for c in MEASURED_COLUMNS):
        raise AnalysisError(
            f"--calibrate {path} has no {' or '.join(MEASURED_COLUMNS)} column; add the measured seconds "
            "per optimizer step or tokens per second of each row"
        )
    return rows


def measured_calibration(
    path: pathlib.Path,
    default_fw: Framework | str,
    hardware: str | None,
    prec,
    efficiency: pathlib.Path | None = None,
) -> Calibration:
    """Refit the rows' framework profile (or `efficiency`'s constants) to a MEASURED.csv:
    few-shot (pulled towards the profile), with the leave-one-out error over the rows as its
    MFU interval (a Student-t prediction interval: wider with fewer rows)."""
    from sharding.costmodel.calibrate import (
        FEW_SHOT_MIN_ROWS,
        Measurement,
        few_shot_error_model,
        refit_profile,
    )

    rows = _read_measured(path)
    hw_cache: dict = {}
    try:
        parsed = [parse_row(r, i + 1, hardware, hw_cache, default_fw) for i, r in enumerate(rows)]
    except AnalysisError as e:
        raise AnalysisError(f"--calibrate {path}: {e}") from None
    fws = sorted({row_framework(r, default_fw) for r in rows})
    if len(fws) > 1:
        raise AnalysisError(
            f"--calibrate {path} mixes frameworks ({', '.join(fws)}); refit one framework at a time "
            "(one file per framework, or fix the `framework` column)"
        )
    ms = []
    for i, (r, (shape, layout, hw)) in enumerate(zip(rows, parsed)):
        if isinstance(hw, MixedCluster):
            raise AnalysisError(
                f"--calibrate {path}: row {i + 1} is a mixed cluster ({hw.name}); calibrate on "
                "single-hardware rows"
            )
        step = _measured_step_time(r, shape, layout)
        oom = bool(_int(r, "oom", 0, i + 1)) if "oom" in r else False
        if step is not None and not step > 0:
            raise AnalysisError(
                f"--calibrate {path}: row {i + 1}: the measured time must be > 0 (got {step})"
            )
        if step is None and not oom:
            continue
        ms.append(
            Measurement(shape, layout, hw, None if oom else float(step), oom, prec, label=f"row {i + 1}")
        )
    n_timed = sum(m.step_time_s is not None for m in ms)
    if n_timed < FEW_SHOT_MIN_ROWS + 1:
        raise AnalysisError(
            f"--calibrate {path} has {n_timed} row(s) with {' or '.join(MEASURED_COLUMNS)}; the refit "
            f"and its leave-one-out error need at least {FEW_SHOT_MIN_ROWS + 1}"
        )
    fw = fws[0]
    profile = load_efficiency(efficiency) if efficiency is not None else framework_efficiency(fw)
    eff = refit_profile(
        ms, profile, provenance=f"{fw.value} profile refitted on {n_timed} measured rows of {path}"
    )
    em = few_shot_error_model(ms, profile)
    eff = eff.replace(mfu_ratio_lo=em.lo, mfu_ratio_hi=em.hi)
    how = f"5%-95%, Student-t over {em.n} leave-one-out predictions: wider with fewer rows"
    return Calibration(fw, eff, n_timed, len(ms) - n_timed, str(path), how, em.median_abs_mfu_error)


def _run_measured(args: argparse.Namespace, default_fw: Framework) -> int:
    """`layout-eval [LAYOUTS.csv] --calibrate MEASURED.csv`: refit, then predict."""
    prec = PRECISIONS[args.precision]
    cal = measured_calibration(args.calibrate, default_fw, args.hardware, prec, args.efficiency)
    print(cal.text())
    if args.out is not None:
        write_json(args.out, {"efficiency": cal.efficiency.as_dict(), "calibration": cal.as_dict()})
        print(f"wrote {args.out}; plan with it: python -m analysis plan ... --efficiency {args.out}")
    target = args.csv if args.csv is not None else args.calibrate
    _predict_file(args, target, default_fw, cal)
    return 0


def _predict_file(
    args: argparse.Namespace, path: pathlib.Path, default_fw: Framework, cal: Calibration
) -> None:
    """Predict `path`'s rows: the calibrated framework's with the refit, the others with their profiles."""
    rows = read_rows(path)
    hw_cache: dict = {}
    parsed = [parse_row(r, i + 1, args.hardware, hw_cache, default_fw) for i, r in enumerate(rows)]
    effs = profile_effs(args.efficiency)
    effs[cal.framework] = cal.efficiency
    fws, out = _predict_rows(rows, parsed, default_fw, effs, PRECISIONS[args.precision])
    for rec, fw in zip(out, fws):
        iv = effs[fw].rate_interval(rec["pred_mfu"], rec["pred_mfu"])
        rec["pred_mfu_interval"] = list(iv) if iv else None
    _print_table(parsed, out)
    emit_json(
        args,
        {
            "rows": out,
            "mfu_convention": MFU_CONVENTION,
            "efficiency": cal.efficiency.as_dict(),
            "calibration": cal.as_dict(),
        },
    )


def sweep_calibration(
    sweep: pathlib.Path, hardware: str | None, efficiency: pathlib.Path | None
) -> tuple[Calibration, list, list, dict]:
    """(Calibration of the jax profile to a trainer sweep's runs, their measurements, one record
    per run, {scores_before, scores, loo_err, how})."""
    from sharding.costmodel.calibrate import calibrate, mfu_pairs, score

    ms, recs, skipped = _sweep_measurements(sweep, hardware)
    if skipped:
        print(
            f"skipped {len(skipped)} run(s): {', '.join(skipped[:5])}" + (" ..." if len(skipped) > 5 else "")
        )
    if sum(m.step_time_s is not None for m in ms) < 3:
        raise AnalysisError(
            f"{sweep} has {sum(m.step_time_s is not None for m in ms)} completed "
            "run(s) with a measured throughput; --calibrate needs >= 3"
        )
    base = load_efficiency(efficiency)
    before = score(ms, base)
    eff = calibrate(ms, base, provenance=f"fitted to {len(ms)} runs of {sweep}")
    after = score(ms, eff)
    loo = _leave_one_out(ms, base)
    loo_err = None if loo is None else float(statistics.median(abs(1 / r - 1) for r in loo))
    eff, how = _with_error_model(eff, ms, loo)
    n_timed = sum(m.step_time_s is not None for m in ms)
    loo_mfu = None
    if loo is not None:  # |ΔMFU| of each left-out run = its MFU · |1 − predicted / measured time|
        a, _, _ = mfu_pairs(ms, eff)
        loo_mfu = float(statistics.median(abs(p * (1 / r - 1)) for p, r in zip(a, loo)))
    cal = Calibration(Framework.JAX, eff, n_timed, len(ms) - n_timed, str(sweep), how, loo_mfu)
    return cal, ms, recs, {"scores_before": before, "scores": after, "loo_err": loo_err, "how": how}


def _run_sweep(args: argparse.Namespace) -> int:
    """`layout-eval [LAYOUTS.csv] --calibrate SWEEP_DIR`: fit the constants to a trainer
    sweep's runs (then predict LAYOUTS.csv with them)."""
    sweep = args.calibrate
    cal, ms, recs, fit = sweep_calibration(sweep, args.hardware, args.efficiency)
    eff, before, after = cal.efficiency, fit["scores_before"], fit["scores"]
    loo_err, how = fit["loo_err"], fit["how"]
    out = args.out or sweep / "efficiency.json"
    write_json(
        out,
        {
            "efficiency": eff.as_dict(),
            "scores": after.as_dict(),
            "scores_before": before.as_dict(),
            "n_runs": len(ms),
            "leave_one_out_median_abs_step_error": loo_err,
            "error_model": how,
        },
    )
    _add_predictions(recs, ms, eff)
    _print_run_table(recs)
    print(
        f"calibrated on {len(ms)} runs: median |MFU err| {100 * before.median_abs_mfu_error:.2f} -> "
        f"{100 * after.median_abs_mfu_error:.2f} pts, Spearman rho(MFU) {before.spearman_mfu:.3f} -> "
        f"{after.spearman_mfu:.3f} (in-sample, {MFU_CONVENTION}) -> {out}"
    )
    if loo_err is not None:
        print(
            f"leave-one-run-out: median |step time error| {100 * loo_err:.1f}% (each run predicted by "
            f"constants fitted to the others; the honest figure for a new layout)"
        )
    print(
        f"MFU error interval (measured / predicted, 5%-95%): [{eff.mfu_ratio_lo:.2f}, "
        f"{eff.mfu_ratio_hi:.2f}], {how}; plan shows it as intervals on MFU, days and GPU-hours"
    )
    print(f"plan with them: python -m analysis plan ... --efficiency {out}")
    print(cal.text())
    if args.csv is not None:
        _predict_file(args, args.csv, _check_framework_arg(args), cal)
        return 0
    emit_json(
        args,
        {
            "rows": recs,
            "mfu_convention": MFU_CONVENTION,
            "efficiency": eff.as_dict(),
            "scores": after.as_dict(),
            "scores_before": before.as_dict(),
        },
    )
    return 0
