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

Calibration on your own measurements (`--calibrate` is always an input; `--out DIR` writes the
refitted constants to DIR/efficiency.json):
- `--calibrate MEASURED.csv`: rows of the layout columns above with a measured
  `measured_step_time_s` or `measured_tokens_per_s` (and optionally `oom` 0/1) of one
  framework; its profile is refitted to them (few-shot, 3-5 rows suffice), the leave-one-out
  error gives the MFU interval, and LAYOUTS.csv's rows (else the measured rows) are predicted;
- `--calibrate SWEEP_DIR [--hardware HW]`: a trainer sweep's runs, each rebuilt as the cost
  model sees the trainer's program; writes SWEEP_DIR/efficiency.json unless --out DIR;
- `LAYOUTS.csv --fit-all --out DIR`: every constant fitted to LAYOUTS.csv's own measured columns
  (in-sample).
`--efficiency DIR/efficiency.json` uses such a file (and `plan --efficiency` for plans).
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import sys
from typing import TYPE_CHECKING

from analysis.commands._flags import add_costmodel_arguments, add_json_argument
from analysis.commands._options import CommandOptions, emit_json
from analysis.planning.text import layout_table_lines, run_table_lines
from models.base.errors import AnalysisError
from models.base.jsonio import write_json
from sharding.costmodel import MFU_CONVENTION, Efficiency
from sharding.costmodel.frameworks import Framework, parse_framework
from sharding.costmodel.rows import (
    PRECISIONS,
    load_efficiency,
    parse_rows,
    predict_rows,
    profile_effs,
    read_rows,
)

if TYPE_CHECKING:
    from sharding.costmodel.measured import Calibration


EXAMPLES = """\
examples:
  scalelab layout-eval layouts.csv --json pred.json
  scalelab layout-eval layouts.csv --calibrate measured.csv --out calib   # calib/efficiency.json
  scalelab layout-eval --calibrate outputs/sweep --hardware cpu.yaml"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "layout-eval",
        help="predict step time, MFU and memory per layout row",
        description=__doc__.split("Mixed clusters:")[0].strip() + "\n\ndocs/costmodel.md: mixed clusters, "
        "the output columns, calibration.",
        epilog=EXAMPLES,
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
    add_costmodel_arguments(p)
    p.add_argument(
        "--fit-all",
        action="store_true",
        help="fit every constant to LAYOUTS.csv's own measured columns (in-sample); needs --out",
    )
    p.add_argument(
        "--out",
        type=pathlib.Path,
        metavar="DIR",
        help="write the refitted constants to DIR/efficiency.json (a sweep's default: SWEEP_DIR)",
    )
    p.set_defaults(func=run)


@dataclasses.dataclass(frozen=True, kw_only=True)
class LayoutEvalOptions(CommandOptions):
    csv: pathlib.Path | None  # LAYOUTS.csv
    hardware: str | None  # of rows without a `hardware` column
    precision: str  # a key of PRECISIONS
    efficiency: pathlib.Path | None  # EFF.json replacing the profiles' constants
    framework: Framework  # of rows without a `framework` column
    calibrate: pathlib.Path | None  # MEASURED.csv or SWEEP_DIR (an input)
    fit_all: bool = False  # every constant fitted to LAYOUTS.csv's measured columns
    out: pathlib.Path | None  # where a refit is written: the file (out_file turns DIR into it)


def run(args: argparse.Namespace) -> int:
    # a bad --framework is a LayoutError: one line, exit 2
    opts = LayoutEvalOptions.from_args(
        args, framework=parse_framework(args.framework, "--framework"), out=_out_file(args.out)
    )
    if opts.calibrate is not None and opts.calibrate.suffix.lower() == ".json":
        # the older form `LAYOUTS.csv --calibrate EFF.json`: the file was the output
        print("note: --calibrate EFF.json is deprecated: use --fit-all --out DIR", file=sys.stderr)
        opts = dataclasses.replace(opts, calibrate=None, fit_all=True, out=opts.calibrate)
    if opts.fit_all and opts.out is None:
        raise AnalysisError("--fit-all writes the fitted constants: add --out DIR")
    cal = opts.calibrate
    if cal is not None and cal.is_dir():
        return _run_sweep(opts)
    if cal is not None:
        if opts.fit_all:
            raise AnalysisError("--fit-all fits LAYOUTS.csv's own measured columns: drop --calibrate")
        return _run_measured(opts)
    if opts.csv is None:
        raise AnalysisError(
            "give a layouts CSV, or --calibrate MEASURED.csv|SWEEP_DIR to refit the profile to measurements"
        )
    if opts.out is not None and not opts.fit_all:
        raise AnalysisError("--out writes a refit: add --calibrate MEASURED.csv|SWEEP_DIR or --fit-all")
    rows = read_rows(opts.csv)
    prec = PRECISIONS[opts.precision]
    parsed = parse_rows(rows, opts.hardware, opts.framework)
    if opts.fit_all:
        eff = _fit_rows(rows, parsed, opts, opts.out)
        effs = {fw: eff for fw in Framework}
    else:
        effs = profile_effs(opts.efficiency)
    fws, out = predict_rows(rows, parsed, opts.framework, effs, prec)
    print("\n".join(layout_table_lines(parsed, out)))
    used = sorted(set(fws))
    emit_json(
        opts.json,
        {
            "rows": out,
            "mfu_convention": MFU_CONVENTION,
            "efficiency": effs[used[0]].as_dict(),
            "profiles": {fw.value: effs[fw].as_dict() for fw in used},
        },
    )
    return 0


def _out_file(out: pathlib.Path | None) -> pathlib.Path | None:
    """`--out DIR` -> DIR/efficiency.json (DIR made); an older `--out EFF.json` is that file, with a note."""
    if out is None:
        return None
    if out.suffix.lower() == ".json":
        print("note: --out EFF.json is deprecated: --out DIR writes DIR/efficiency.json", file=sys.stderr)
        return out
    out.mkdir(parents=True, exist_ok=True)
    return out / "efficiency.json"


def _fit_rows(rows: list[dict], parsed: list, opts: LayoutEvalOptions, out_path: pathlib.Path) -> Efficiency:
    """`LAYOUTS.csv --fit-all --out DIR`: all constants fitted to the rows' own measured columns,
    written to DIR/efficiency.json."""
    # SciPy-based calibration loads only when asked for, keeping `python -m analysis --help` fast.
    from sharding.costmodel.measured import fit_rows

    base = load_efficiency(opts.efficiency)
    f = fit_rows(rows, parsed, PRECISIONS[opts.precision], base, out_path.name)
    eff, s = f.efficiency, f.scores
    write_json(out_path, {"efficiency": eff.as_dict(), "scores": s.as_dict()})
    print(
        f"calibrated on {f.n_rows} rows: Spearman rho(MFU, {MFU_CONVENTION}) {s.spearman_mfu:.3f}, "
        f"median |MFU err| {100 * s.median_abs_mfu_error:.2f} pts, OOM accuracy {100 * s.oom_accuracy:.1f}% "
        f"(in-sample) -> {out_path}"
    )
    print(
        f"MFU error interval (measured / predicted, 5%-95%): [{eff.mfu_ratio_lo:.2f}, "
        f"{eff.mfu_ratio_hi:.2f}], {f.error_model}"
    )
    return eff


def _run_measured(opts: LayoutEvalOptions) -> int:
    """`layout-eval [LAYOUTS.csv] --calibrate MEASURED.csv`: refit, then predict."""
    # SciPy-based calibration loads only when asked for, keeping `python -m analysis --help` fast.
    from sharding.costmodel.measured import measured_calibration

    prec = PRECISIONS[opts.precision]
    cal = measured_calibration(opts.calibrate, opts.framework, opts.hardware, prec, opts.efficiency)
    print(cal.text())
    if opts.out is not None:
        write_json(opts.out, {"efficiency": cal.efficiency.as_dict(), "calibration": cal.as_dict()})
        print(f"wrote {opts.out}; plan with it: python -m analysis plan ... --efficiency {opts.out}")
    _predict_file(opts, opts.csv if opts.csv is not None else opts.calibrate, cal)
    return 0


def _predict_file(opts: LayoutEvalOptions, path: pathlib.Path, cal: Calibration) -> None:
    """Predict `path`'s rows: the calibrated framework's with the refit, the others with their profiles."""
    rows = read_rows(path)
    parsed = parse_rows(rows, opts.hardware, opts.framework)
    effs = profile_effs(opts.efficiency)
    effs[cal.framework] = cal.efficiency
    fws, out = predict_rows(rows, parsed, opts.framework, effs, PRECISIONS[opts.precision])
    for rec, fw in zip(out, fws):
        iv = effs[fw].rate_interval(rec["pred_mfu"], rec["pred_mfu"])
        rec["pred_mfu_interval"] = list(iv) if iv else None
    print("\n".join(layout_table_lines(parsed, out)))
    emit_json(
        opts.json,
        {
            "rows": out,
            "mfu_convention": MFU_CONVENTION,
            "efficiency": cal.efficiency.as_dict(),
            "calibration": cal.as_dict(),
        },
    )


def _run_sweep(opts: LayoutEvalOptions) -> int:
    """`layout-eval [LAYOUTS.csv] --calibrate SWEEP_DIR`: fit the constants to a trainer
    sweep's runs (then predict LAYOUTS.csv with them)."""
    # SciPy-based calibration loads only when asked for, keeping `python -m analysis --help` fast.
    from sharding.costmodel.measured import add_predictions, sweep_calibration

    sweep = opts.calibrate
    fit = sweep_calibration(sweep, opts.hardware, opts.efficiency)
    if fit.calibration.skipped:
        print(fit.calibration.skipped_text())
    eff, before, after = fit.efficiency, fit.scores_before, fit.scores
    loo_err, how, n_runs = fit.loo_err, fit.calibration.error_model, len(fit.measurements)
    out = opts.out or sweep / "efficiency.json"
    write_json(out, fit.as_dict())
    add_predictions(fit.records, fit.measurements, eff)
    print("\n".join(run_table_lines(fit.records)))
    print(
        f"calibrated on {n_runs} runs: median |MFU err| {100 * before.median_abs_mfu_error:.2f} -> "
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
    print(fit.calibration.text())
    if opts.csv is not None:
        _predict_file(opts, opts.csv, fit.calibration)
        return 0
    emit_json(
        opts.json,
        {
            "rows": fit.records,
            "mfu_convention": MFU_CONVENTION,
            "efficiency": eff.as_dict(),
            "scores": after.as_dict(),
            "scores_before": before.as_dict(),
        },
    )
    return 0
