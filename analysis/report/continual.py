"""The report's "Continual pre-training" section, for a sweep with continued runs (`+sweep=cpt`:
runs started from another run, `train.init_from`, and scored on two corpora, `eval_loss/<corpus>`).

- The figure: both domains' final loss against the new tokens D_B, one color per replay ratio, for
  the largest model (measured runs and the fitted `cpt` law with its 90% interval), and forgetting
  against replay per model size.
- The law: `fit --law cpt` (analysis/laws/cpt.py) on the completed runs, its formula and parameters.
- Forgetting against replay (measured): the old-domain loss over the base model's, at the largest
  D_B, per size and replay ratio; and what a lower re-warm peak changed where the ladder has one.
- The verdict: `plan --continue-from` at its defaults for the largest base model (continue or
  retrain, analysis/planning/continual.py).

`continual_section(done, out, bootstrap, seed, warn)` returns the section ({title, markdown,
continual: {...}, figure, figures}) or None for a sweep without continued runs.
"""

from __future__ import annotations

import pathlib
from typing import Any

import numpy as np
import pandas as pd

from analysis.laws.cpt import CPT, PREFIX, cpt_table, fit_cpt_table, main_peak
from analysis.laws.cpt_figure import forgetting_figure, loss_figure
from analysis.planning.continual import DEFAULT_FORGETTING, plan_continual, read_base
from models.base.errors import AnalysisError
from models.base.jsonio import write_figure_atomic

TITLE = "Continual pre-training"
FIGURE, FORGETTING_FIGURE = "cpt_losses.png", "cpt_forgetting.png"


def is_continual(done: pd.DataFrame) -> bool:
    """Whether the runs hold continued runs scored on two corpora."""
    parents = pd.to_numeric(done.get("init_from_tokens", pd.Series(dtype=float)), errors="coerce")
    domains = [c for c in done.columns if isinstance(c, str) and c.startswith(PREFIX)]
    return bool(parents.notna().any()) and len(domains) == 2


def base_only(table: pd.DataFrame) -> pd.DataFrame:
    """The base runs of a continual-pre-training sweep (neither continued nor on a mixture): what
    the report's other sections fit; any other table unchanged."""
    if not is_continual(table):
        return table
    parents = pd.to_numeric(
        table.get("init_from_tokens", pd.Series(np.nan, index=table.index)), errors="coerce"
    )
    mixed = np.zeros(len(table), bool)
    for c in table.columns:
        if isinstance(c, str) and c.startswith("data.mixture."):
            mixed |= pd.to_numeric(table[c], errors="coerce").notna().to_numpy()
    return table[(parents.isna().to_numpy()) & ~mixed].reset_index(drop=True)


def forgetting_table(t: pd.DataFrame) -> pd.DataFrame:
    """Measured forgetting, L_old / L_old(base) - 1, of each continued run at the largest D_B:
    one row per size, one column per (replay, peak)."""
    cont = t[(t.kind == "cpt") & np.isclose(t.D_B, t.D_B[t.kind == "cpt"].max())]
    base = t[t.kind == "base"].set_index("N").loss_old
    rows = cont.assign(forgetting=cont.loss_old / cont.N.map(base) - 1)
    return rows.pivot_table(index="N", columns=["r", "peak"], values="forgetting")


def _peak_lines(t: pd.DataFrame) -> list[str]:
    """What a lower re-warm peak changed, per run that has a partner at the main peak."""
    peak = main_peak(t)
    cont = t[t.kind == "cpt"]
    others = cont[~np.isclose(cont.peak, peak)] if peak is not None else cont.iloc[0:0]
    out = []
    for _, o in others.sort_values(["N", "r"]).iterrows():
        m = cont[
            np.isclose(cont.peak, peak)
            & np.isclose(cont.N, o.N)
            & np.isclose(cont.r, o.r)
            & np.isclose(cont.D_B, o.D_B)
        ]
        if len(m):
            m = m.iloc[0]
            out.append(
                f"| {o.N:,.0f} | {o.r:g} | {o.peak:g} vs {peak:g} | {o.loss_old / m.loss_old - 1:+.2%} | "
                f"{o.loss_new / m.loss_new - 1:+.2%} |"
            )
    if not out:
        return []
    return [
        "",
        "A lower re-warm peak against the main one (same model, replay and D_B; negative = lower loss):",
        "",
        "| N | replay | peak | old-domain loss | new-domain loss |",
        "|---|---|---|---|---|",
        *out,
    ]


def _markdown(t: pd.DataFrame, fit: Any, err: str | None, plan: dict | None, rel: list[str]) -> str:
    old, new = t.attrs["old"], t.attrs["new"]
    lines = [
        f"## {TITLE}",
        "",
        f"Base models trained on **{old}**, continued on **{new}** with a replay share r of {old} "
        f"({(t.kind == 'cpt').sum()} continued runs, {(t.kind == 'base').sum()} base models, "
        f"{(t.kind == 'scratch').sum()} trained from scratch on both).",
        "",
        f"![both domains' loss against the new tokens per replay ratio]({rel[0]})",
        f"![forgetting against replay]({rel[1]})",
        "",
    ]
    if fit is None:
        lines.append(f"No continual law: {err}")
    else:
        params = ", ".join(f"{k} = {v:.4g}" for k, v in fit.params.items())
        lines += [
            f"**Law** (`fit --law {CPT}`, {fit.n_runs} runs): {fit.form.formula}.",
            "",
            f"Parameters: {params}. Scatter {fit.residual_sd:.2%} (log sd), drift beyond the largest "
            f"continued model {fit.drift_sd:.2%} ({fit.n_folds} forward fold(s) in N).",
        ]
    ft = forgetting_table(t)
    head = " | ".join(
        f"r={r:g}" + ("" if np.isclose(p, main_peak(t) or p) else f" (peak {p:g})") for r, p in ft.columns
    )
    lines += [
        "",
        f"**Forgetting** after D_B = {t.D_B[t.kind == 'cpt'].max():.3g} new tokens, measured "
        f"(L_old / L_old(base) - 1):",
        "",
        f"| N | {head} |",
        "|---" * (len(ft.columns) + 1) + "|",
        *[f"| {n:,.0f} | " + " | ".join(f"{v:+.1%}" for v in row) + " |" for n, row in ft.iterrows()],
    ]
    lines += _peak_lines(t)
    if plan is not None:
        c, r = plan["continue"], plan["retrain"]
        lines += [
            "",
            "**Verdict** (`plan --continue-from`, the largest base model, "
            f"L_new <= {plan['target_loss_new']:.4f}, "
            f"forgetting <= {plan['max_forgetting']:.0%}): **{plan['verdict']}**. {plan['reason']}.",
        ]
        for key, o in (("continue", c), ("retrain", r)):
            if o["feasible"]:
                li = o["loss_new_interval"]
                lines.append(
                    f"- {key}: {o['tokens']:.3g} tokens, {o['flops']:.3g} FLOPs, L_new {o['loss_new']:.4f} "
                    f"[{li[0]:.4f}, {li[1]:.4f}], forgetting {o['forgetting']:+.2%}"
                )
    return "\n".join(lines)


def continual_section(
    done: pd.DataFrame, out: pathlib.Path, bootstrap: int, seed: int, warn: list[str]
) -> dict | None:
    """The section for a sweep with continued runs; None without them (module docstring)."""
    if not is_continual(done):
        return None
    t = cpt_table(done)
    fit, err, plan = None, None, None
    try:
        fit = fit_cpt_table(t, CPT, bootstrap=bootstrap, seed=seed)
        plan = plan_continual(fit, read_base(None, fit), None, DEFAULT_FORGETTING)
    except AnalysisError as e:
        err = str(e)
        warn.append(f"no continual law: {e}")
    (out / "figures").mkdir(parents=True, exist_ok=True)
    rel = [f"figures/{FIGURE}", f"figures/{FORGETTING_FIGURE}"]
    write_figure_atomic(out / rel[0], loss_figure(fit, t), dpi=120)
    write_figure_atomic(out / rel[1], forgetting_figure(fit, t), dpi=120)
    return {
        "title": TITLE,
        "markdown": _markdown(t, fit, err, plan, rel),
        "continual": {
            "law": None if fit is None else fit.to_dict(),
            "forgetting": {
                f"{n:g}": {f"r={r:g},peak={p:g}": v for (r, p), v in row.items()}
                for n, row in forgetting_table(t).iterrows()
            },
            "plan": plan,
        },
        "figure": rel[0],
        "figures": rel,
    }
