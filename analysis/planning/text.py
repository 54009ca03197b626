"""A plan as text: the lines `python -m analysis plan` prints (`plan_lines`) and, with
`--emit overrides`, the trainer's plan ending in its command line (`trainer_lines`)."""

from __future__ import annotations

import pathlib

from analysis.planning.planner import Plan, band_text, efficiency_note
from sharding.costmodel import MFU_CONVENTION


def plan_lines(result: Plan) -> list[str]:
    """The plan as `python -m analysis plan` prints it: the law's optimum, the ranked table, the
    best candidate with its intervals, the recipe, the data limit and the notes."""
    out = []
    b = result.best
    if result.n_opt is not None:
        out.append(f"law: {result.law.source}")
        out.append(result.target_text())
        if result.best_loss_text():
            out.append(result.best_loss_text())
    out.append(result.table())
    lo = b.layout
    band = result.loss_band(b)
    ci = (
        f"{result.interval_label} [{band[0]:.3f}, {band[1]:.3f}]"
        if band
        else "CI unavailable: law has no bootstrap samples"
    )
    out.append(
        f"best: {b.shape.n_params / 1e9:.1f}B params (L={b.shape.n_layers}, d={b.shape.d_model}) "
        f"on {b.tokens / 1e12:.2f}T tokens, dp={lo.dp} tp={lo.tp} pp={lo.pp} mb={lo.micro_batch} "
        f"ZeRO-{lo.zero_stage}{' +optimizer offload' if lo.offload_optimizer else ''} ckpt={lo.act_ckpt}: "
        f"MFU {100 * b.mfu:.1f}%{band_text(b.mfu_interval, 100, '.1f')} "
        f"({MFU_CONVENTION}), {b.days:.1f}{band_text(b.days_interval, 1, '.1f')} days on "
        f"{result.n_devices} x {result.hardware.name} "
        f"({b.gpu_hours:.3g}{band_text(b.gpu_hours_interval, 1, '.3g')} "
        f"{result.unit}), loss {b.loss:.3f} ({ci})"
    )
    if b.costs is not None:
        out.append(b.costs.text())
    if result.recipe is not None:
        out += result.recipe.text_lines()
    if result.data_limit is not None:
        out += result.data_limit.text_lines()
    out += [f"note: {n}" for n in result.notes]
    out.append(f"note: {efficiency_note(result.efficiency, result.unit)}")
    return out


def trainer_lines(result: Plan) -> list[str]:
    """The trainer's plan for the best plan: one line on what the best layout needs that the
    trainer lacks (if anything), its layout and predictions, and the command line last
    (`... --emit overrides | tail -1` is the command)."""
    tp = result.trainer
    out: list[str] = []
    if tp.estimate is None:
        return out  # `plan` ends with the reason as its error line
    lo, est, best = tp.layout, tp.estimate, result.best
    mesh = " ".join(f"{k}={v}" for k, v in tp.as_dict()["layout"]["mesh"].items())
    if tp.missing or tp.rank > 1:
        zero = (
            " (its ZeRO: sharding.data = 0, sharding.fsdp = 3, both = hybrid 3)"
            if any(m.startswith("ZeRO") for m in tp.missing)
            else ""
        )
        lacks = (
            f"the best layout needs {', '.join(tp.missing)}, which python -m experiments.train lacks{zero}"
            if tp.missing
            else "the trainer cannot run the best shape"
        )
        shape = (
            ""
            if tp.rank == 1
            else (
                f" of candidate #{tp.rank} ({tp.shape.n_params / 1e9:.3g}B, "
                f"L={tp.shape.n_layers}, d={tp.shape.d_model})"
            )
        )
        out.append(
            f"trainer: {lacks}; emitting the best layout it can run{shape}, at "
            f"{100 * est.tokens_per_s / best.tokens_per_s:.0f}% of the best plan's tokens/s"
        )
    out.append(
        f"trainer layout: {mesh}, micro-batch {lo.micro_batch}/device x {lo.grad_accum} accumulated, "
        f"remat={lo.act_ckpt}: "
        f"{est.memory.total / 1e9:.1f} GB/device, {est.step_time_s:.3g} s/step, MFU {100 * est.mfu:.1f}% "
        f"({est.mfu_convention}), {tp.tokens / est.tokens_per_s / 86400:.1f} days for {tp.tokens:.3g} tokens"
    )
    out.append(tp.command())
    return out


def layout_table_lines(parsed: list, out: list[dict]) -> list[str]:
    """`layout-eval`'s table: one line per layout row, its predicted step time, MFU and memory."""
    lines = [f"{'row':>4} {'layout':28s} {'step s':>9} {'tok/s':>11} {'MFU':>6} {'mem GB':>7} fits"]
    for i, ((_, lo, _), rec) in enumerate(zip(parsed, out)):
        lay = f"dp{lo.dp} tp{lo.tp} pp{lo.pp} mb{lo.micro_batch} z{lo.zero_stage} {lo.act_ckpt}"
        lines.append(
            f"{i + 1:>4} {lay:28s} {rec['pred_step_time_s']:9.3f} {rec['pred_tokens_per_s']:11.0f} "
            f"{rec['pred_mfu']:6.3f} {rec['pred_mem_gb_per_device']:7.1f} "
            f"{'yes' if rec['pred_fits'] else 'OOM'}"
        )
    lines.append(
        f"MFU convention: {MFU_CONVENTION} (model FLOPs per token 6N + 12·L·H·Q·T, N = all parameters)"
    )
    return lines


def run_table_lines(recs: list[dict]) -> list[str]:
    """`layout-eval --calibrate SWEEP`'s table: one line per run, its layout, measured and predicted
    step time."""
    lines = [f"{'run':24s} {'layout':26s} {'measured s':>11} {'predicted s':>12}"]
    for rec in recs:
        sp = " sp" if rec["sp"] else ""
        lay = f"dp{rec['dp']} tp{rec['tp']} pp{rec['pp']} cp{rec['cp']}{sp} mb{rec['micro_batch']}"
        meas = "OOM" if rec["oom"] else f"{rec['measured_step_time_s']:.4f}"
        name = pathlib.PurePath(rec["run"]).name[:24]
        lines.append(f"{name:24s} {lay:26s} {meas:>11} {rec['pred_step_time_s']:12.4f}")
    return lines
