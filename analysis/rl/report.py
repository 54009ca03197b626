"""The RL section of the report: learning curves with fitted laws and bands, a prediction card,
reward-vs-KL, and a ranking of recipes (by ceiling A, then by efficiency B at a common A).

    from analysis.rl.report import rl_section
    markdown = rl_section("sweeps/rl_recipes", "report/rl")     # writes PNGs into report/rl

Also `python -m analysis rl-report RUNS_DIR OUT_DIR [--json PATH]` (prints the markdown).
In a notebook: `fits = fit_recipes(runs_dir)`, then `curves_figure(fits)`,
`prediction_card_figure(fits)` and `reward_vs_kl_figure(fits)` return matplotlib Figures
(made without pyplot, so they never switch the notebook's backend).

Runs are grouped into recipes by their configuration minus the seed and the run length
(`summary.json` -> config_fields), so seeds and compute-ladder rungs of one recipe pool into one
fit. A recipe whose fit is flagged (pre_midpoint, A_unbounded, unstable) is never given a
ceiling: it is ranked after the identified ones, by its observed gain per decade of compute.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import pathlib
from typing import Any, Sequence

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from analysis.rl.curves import RLCurve, load_curve
from analysis.rl.fitting import RLFitOptions, fit_recipe, recipe_points
from analysis.rl.laws import GaoFit, band, bootstrap_params, fit_gao, predict
from models.base.errors import AnalysisError
from models.base.fingerprint import fingerprint
from models.base.jsonio import write_figure_atomic, write_text_atomic
from models.base.rundir import RunDir, iter_run_dirs

DPI = 130
FIGURE_FILES = {
    "curves": "rl_curves.png",
    "prediction_card": "rl_prediction_card.png",
    "reward_vs_kl": "rl_reward_vs_kl.png",
}


@dataclasses.dataclass(frozen=True)
class Recipe:
    label: str
    runs: tuple[pathlib.Path, ...]
    curves: tuple[RLCurve, ...]
    config: dict


def find_rl_runs(root: str | pathlib.Path) -> list[pathlib.Path]:
    """RL run directories under `root` (those with metrics.jsonl rows carrying flops_rl)."""
    root = pathlib.Path(root)
    if not root.is_dir():
        raise AnalysisError(f"{root}: not a directory of RL runs")
    return sorted(rd.path for rd in iter_run_dirs(root) if "flops_rl" in (rd.first_metrics_record() or {}))


def group_recipes(runs: Sequence[pathlib.Path]) -> list[Recipe]:
    """The runs grouped by their configuration minus the seed and the run length, labelled
    task/algo (with a key suffix where two recipes share it)."""
    groups: dict[str, list[pathlib.Path]] = {}
    configs, names = {}, {}
    for r in runs:
        s = RunDir(r).read_summary()
        fields = copy.deepcopy((s.config_fields if s is not None else None) or {})
        rl = fields.get("rl") or {}
        rl.pop("seed", None)
        rl.pop("steps", None)
        key = fingerprint(fields, 8)
        groups.setdefault(key, []).append(r)
        configs[key] = fields
        names[key] = f"{(rl.get('task') or {}).get('name', '?')}/{(rl.get('algo') or {}).get('name', 'run')}"
    dup = {n for n in names.values() if list(names.values()).count(n) > 1}
    recipes = []
    for key, rs in groups.items():
        curves = []
        for r in rs:
            try:
                curves.append(load_curve(r))
            except AnalysisError:
                continue  # a run that has not evaluated 3 times yet
        if curves:
            label = names[key] + (f"#{key[:4]}" if names[key] in dup else "")
            recipes.append(Recipe(label, tuple(rs), tuple(curves), configs[key]))
    return sorted(recipes, key=lambda x: x.label)


def rank(results: dict[str, dict]) -> list[str]:
    """Identified recipes by A (desc); neighbours whose A intervals overlap are a tie in A and
    ordered by B (desc: reaches the ceiling with less compute). Flagged recipes follow, by their
    observed gain per decade."""
    ok = [k for k, r in results.items() if not r["flags"]]
    ok.sort(key=lambda k: -results[k]["params"]["A"])
    changed = True
    while changed:  # bubble B-order within overlapping-A neighbours
        changed = False
        for i in range(len(ok) - 1):
            a, b = results[ok[i]], results[ok[i + 1]]
            overlap = a["ci"]["A"][0] <= b["ci"]["A"][1] and b["ci"]["A"][0] <= a["ci"]["A"][1]
            if overlap and b["params"]["B"] > a["params"]["B"]:
                ok[i], ok[i + 1] = ok[i + 1], ok[i]
                changed = True
    flagged = [k for k in results if results[k]["flags"]]
    flagged.sort(key=lambda k: -((results[k].get("gain_per_decade") or {}).get("value") or -math.inf))
    return ok + flagged


@dataclasses.dataclass(frozen=True)
class RLFits:
    """Every recipe under a runs directory with its two fits: on all compute (`results`) and on
    the first `fit_until_frac` of it (`preds`, judged on the rest); `errors` holds the recipes
    that could not be fitted, with why."""

    runs_dir: str
    recipes: tuple[Recipe, ...]
    results: dict[str, dict]
    preds: dict[str, dict]
    errors: dict[str, str]
    fit_until_frac: float

    def recipe(self, label: str) -> Recipe:
        return next(r for r in self.recipes if r.label == label)

    def as_dict(self) -> dict[str, Any]:
        """JSON form (`rl-report --json`): recipes in rank order, then the unfitted ones."""
        ranked = rank(self.results)
        rows = [
            {
                "rank": i,
                "label": label,
                "runs": [str(r) for r in self.recipe(label).runs],
                "fit": self.results[label],
                "prediction_fit": self.preds.get(label),
            }
            for i, label in enumerate(ranked, 1)
        ]
        rows += [
            {"rank": None, "label": label, "runs": [str(r) for r in self.recipe(label).runs], "error": msg}
            for label, msg in self.errors.items()
        ]
        ok = [k for k in ranked if not self.results[k]["flags"]]
        return {
            "runs_dir": self.runs_dir,
            "fit_until_frac": self.fit_until_frac,
            "winner": ok[0] if ok else None,
            "recipes": rows,
        }


def fit_recipes(runs_dir: str | pathlib.Path, fit_until_frac: float = 0.5) -> RLFits:
    """Group the RL runs under `runs_dir` into recipes and fit each on all and on early compute."""
    recipes = group_recipes(find_rl_runs(runs_dir))
    if not recipes:
        raise AnalysisError(f"{runs_dir}: no RL runs with evaluations found")
    opts = RLFitOptions()
    results, preds, errors = {}, {}, {}
    for rc in recipes:
        try:
            results[rc.label] = fit_recipe(rc.curves, opts)
            preds[rc.label] = fit_recipe(rc.curves, dataclasses.replace(opts, fit_until_frac=fit_until_frac))
        except AnalysisError as e:
            errors[rc.label] = str(e)
    return RLFits(str(runs_dir), tuple(recipes), results, preds, errors, fit_until_frac)


def _colors() -> list[str]:
    return matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]


def curves_figure(fits: RLFits) -> Figure:
    """Figure 1: every recipe's evaluations, its fitted sigmoid and a 95% bootstrap band."""
    fig = Figure(figsize=(7.5, 4.8))
    ax = fig.subplots()
    colors = _colors()
    for i, (label, res) in enumerate(fits.results.items()):
        col = colors[i % len(colors)]
        rc = fits.recipe(label)
        dots = {"fmt": "o", "ms": 2.5, "color": col, "alpha": 0.45, "lw": 0.6}
        for c in rc.curves:
            ax.errorbar(c.compute, c.pass_rate, np.nan_to_num(c.stderr), **dots)
        c_max = max(c.final_compute for c in rc.curves)
        c_min = min(c.compute[c.compute > 0].min() for c in rc.curves)
        flagged = bool(res["flags"])
        grid = np.geomspace(c_min, c_max * (1.0 if flagged else 3.0), 200)
        lo, hi = band(bootstrap_params(recipe_points(rc.curves)[0], n_boot=40), grid)
        ax.fill_between(grid, lo, hi, color=col, alpha=0.15, lw=0)
        p = res["params"]
        tag = f"no ceiling ({', '.join(res['flags'])})" if flagged else f"A={p['A']:.3f}, B={p['B']:.2f}"
        ax.plot(grid, predict(p, grid), "--" if flagged else "-", color=col, lw=1.6, label=f"{label}: {tag}")
    ax.set_xscale("log")
    ax.set_xlabel("RL compute C (FLOPs, evaluation excluded)")
    ax.set_ylabel("held-out pass@1")
    ax.set_title("RL compute-performance: ScaleRL sigmoid fits, 95% bootstrap bands")
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def prediction_card_figure(fits: RLFits) -> Figure:
    """Figure 2: per recipe, the law fitted on the first part of compute against the rest."""
    frac = fits.fit_until_frac
    n = max(1, len(fits.preds))
    fig = Figure(figsize=(4.6 * n, 3.8))
    axes = fig.subplots(1, n, squeeze=False)
    for ax, (label, pr) in zip(axes[0], fits.preds.items()):
        rc = fits.recipe(label)
        for c in rc.curves:
            early = c.compute <= frac * c.final_compute
            ax.plot(c.compute[early], c.pass_rate[early], "o", ms=3, color="C0", alpha=0.6)
            ax.plot(c.compute[~early], c.pass_rate[~early], "o", ms=3, color="C3", alpha=0.6)
        c_end = max(c.final_compute for c in rc.curves)
        grid = np.linspace(0, c_end, 200)
        ax.plot(grid, predict(pr["params"], grid), "k--", lw=1.2)
        ax.axvline(frac * c_end, color="gray", lw=0.8)
        p = pr["prediction"]
        verdict = ("FLAGGED: " + ", ".join(pr["flags"])) if pr["flags"] else "identified"
        ax.set_title(
            f"{label}\npred {p['final_pred']:.3f} vs actual {p['final_actual']:.3f} "
            f"(|err| {p['final_abs_error']:.3f})\n{verdict}",
            fontsize=8,
        )
        ax.set_xlabel("RL compute C")
        ax.set_ylabel("pass@1")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def gao_fits(fits: RLFits) -> dict[str, tuple[np.ndarray, np.ndarray, GaoFit | None]]:
    """Per fitted recipe with >= 3 positive-KL evaluations: (sqrt KL, pass@1 gain over the start,
    Gao et al.'s RL-form fit d (alpha - beta log d), or None when it fails)."""
    out = {}
    for label in fits.results:
        rc = fits.recipe(label)
        kl = np.concatenate([c.extra["kl"] for c in rc.curves])
        gain = np.concatenate([c.pass_rate - c.pass_rate[0] for c in rc.curves])
        ok = np.isfinite(kl) & (kl > 0)
        if ok.sum() < 3:
            continue
        try:
            g = fit_gao(kl[ok], gain[ok], "log")
        except AnalysisError:
            g = None
        out[label] = (np.sqrt(kl[ok]), gain[ok], g)
    return out


def gao_lines(gao: dict[str, tuple[np.ndarray, np.ndarray, GaoFit | None]]) -> list[str]:
    return [
        f"{label}: gain = d({g.alpha:.3f} {'-' if g.beta >= 0 else '+'} {abs(g.beta):.3f} log d)"
        for label, (_, _, g) in gao.items()
        if g is not None
    ]


def reward_vs_kl_figure(fits: RLFits, gao: dict | None = None) -> Figure:
    """Figure 3: pass@1 gain against sqrt(KL to the reference), with Gao et al.'s RL form."""
    gao = gao_fits(fits) if gao is None else gao
    fig = Figure(figsize=(5.5, 3.8))
    ax = fig.subplots()
    colors = _colors()
    for i, label in enumerate(fits.results):
        if label not in gao:
            continue
        d, gain, g = gao[label]
        col = colors[i % len(colors)]
        ax.plot(d, gain, "o", ms=3, color=col, alpha=0.5)
        if g is not None:
            dg = np.linspace(d.min(), d.max(), 100)
            ax.plot(dg, g.predict(dg), color=col, label=label)
    ax.set_xlabel("d = sqrt(KL to reference)")
    ax.set_ylabel("pass@1 gain over start")
    ax.set_title("Reward vs KL (Gao et al. RL form: d(α − β log d))", fontsize=9)
    ax.grid(alpha=0.3)
    if gao_lines(gao):
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def _ranking_row(fits: RLFits, rank_no: int, label: str) -> str:
    """One row of the ranking table: ceiling (or flags and gain per decade), prediction error."""
    r, pr = fits.results[label], fits.preds.get(label, {})
    p = pr.get("prediction")
    final = np.mean([c.pass_rate[-1] for c in fits.recipe(label).curves])
    if r["flags"]:
        g = r.get("gain_per_decade") or {}
        a_txt = b_txt = c_txt = "—"
        f_txt = f"{', '.join(r['flags'])}; {g.get('value', math.nan):+.3f} ± {g.get('stderr', math.nan):.3f}"
    else:
        a_txt = f"{r['params']['A']:.3f} [{r['ci']['A'][0]:.3f}, {r['ci']['A'][1]:.3f}]"
        b_txt, c_txt, f_txt = f"{r['params']['B']:.2f}", f"{r['params']['C_mid']:.3g}", "none"
    p_txt = "—"
    if p:
        p_txt = f"{p['final_pred']:.3f} vs {p['final_actual']:.3f} ({p['final_abs_error']:.3f})"
        p_txt += " — flagged" if pr["flags"] else ""
    return (
        f"| {rank_no} | {label} | {len(fits.recipe(label).runs)} | {a_txt} | {b_txt} | {c_txt} "
        f"| {f_txt} | {final:.3f} | {p_txt} |"
    )


def _sigmoid_log_compute(p: dict, R: np.ndarray) -> np.ndarray:
    """log C at which a fitted sigmoid reaches reward R: -inf at or below R0, +inf at or above A."""
    A, B, C_mid, R0 = (float(p[k]) for k in ("A", "B", "C_mid", "R0"))
    with np.errstate(all="ignore"):
        out = math.log(C_mid) - np.log((A - R0) / (np.asarray(R, float) - R0) - 1) / B
    return np.where(R <= R0, -np.inf, np.where(R >= A, np.inf, out))


def multiplier(ref: dict, other: dict, C: np.ndarray) -> np.ndarray:
    """The compute multiplier of `other` over `ref` (fitted sigmoid parameters) at compute C: the
    compute `ref` needs to reach `other`'s reward at C, divided by C (> 1: `other` is better), as
    `python -m analysis compare` defines it for pretraining ladders; capped to [1e-6, 1e6]."""
    C = np.asarray(C, float)
    log_m = _sigmoid_log_compute(ref, predict(other, C)) - np.log(C)
    return np.exp(np.clip(log_m, -math.log(1e6), math.log(1e6)))


def winner_lines(fits: RLFits, reach: float = 100.0) -> list[str]:
    """The winner (rank 1) and each other identified recipe's multiplier over it at the largest
    compute both reached, with the crossover (where the winner changes) up to `reach` x that
    compute: the words of `python -m analysis compare` (multiplier, interval, winner, crossover)."""
    ok = [k for k in rank(fits.results) if not fits.results[k]["flags"]]
    if not ok:
        return []
    lines = ["", f"Winner: {ok[0]} (rank 1: the highest ceiling A, or at a tie in A the most efficient B)."]
    if len(ok) < 2:
        return lines
    win = fits.results[ok[0]]["params"]
    parts = []
    for label in ok[1:]:
        common = min(max(float(c.compute[-1]) for c in fits.recipe(x).curves) for x in (ok[0], label))
        grid = np.geomspace(common / 1e3, common * reach, 200)
        m = multiplier(win, fits.results[label]["params"], grid)
        at = float(multiplier(win, fits.results[label]["params"], np.array([common]))[0])
        sign = np.sign(np.log(m))
        cross = np.flatnonzero(sign[:-1] * sign[1:] < 0)
        where = f"crossover at C = {grid[cross[0] + 1]:.3g}" if cross.size else "no crossover"
        parts.append(f"{label}: multiplier {at:.3g} at C = {common:.3g}, {where}")
    lines += [
        "",
        f"Multiplier of each recipe over the winner: the compute {ok[0]} needs to reach the recipe's fitted "
        "reward at C, divided by C (> 1: the recipe is better there), at the largest compute both reached; "
        f"crossover: where the winner changes, from C/1000 to {reach:g}x C. From the fitted curves (point "
        "estimates; the interval column is A's 95% profile-likelihood interval): " + "; ".join(parts) + ".",
    ]
    return lines


def _seed_spread_lines(fits: RLFits) -> list[str]:
    lines = []
    for label, res in fits.results.items():
        sp = res.get("seed_spread")
        if not sp:
            continue
        a, g = sp["A"], sp["gain_per_decade"]
        lines.append(
            f"\n{label}: seed-to-seed A (per-seed fits) {a['mean']:.3f} ± {a['std']:.3f} (n={a['n']})."
            if sp["n_flagged"] == 0
            else f"\n{label}: {sp['n_flagged']} of {g['n']} per-seed fits flagged, so no per-seed ceilings; "
            f"seed-to-seed gain per decade {g['mean']:+.3f} ± {g['std']:.3f}."
        )
    return lines


def section_markdown(fits: RLFits, gao: list[str]) -> str:
    """The markdown section: method, ranking table, seed spread, unfitted recipes, Gao fits, figures."""
    lines = [
        "## RL scaling",
        "",
        f"Runs: {sum(len(r.runs) for r in fits.recipes)} in {len(fits.recipes)} recipe(s) under "
        f"`{fits.runs_dir}`. Fit: ScaleRL sigmoid R(C) = R0 + (A − R0)/(1 + (C_mid/C)^B), R0 "
        "anchored by the step-0 evaluation, burn-in = min(10% of final compute, one pass over "
        "the prompts), 95% profile-likelihood intervals. A flagged fit gives no ceiling, only "
        "the gain per decade of compute observed so far.",
        "",
        "Ranking: by ceiling A; recipes whose A intervals overlap are ordered by efficiency B; "
        "flagged recipes last, by observed gain per decade.",
        "",
        "| rank | recipe | runs | A [95% interval] | B | C_mid | flags / gain per decade | final pass@1 | "
        f"prediction from {fits.fit_until_frac:g} of C: pred vs actual (abs err) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [_ranking_row(fits, i, label) for i, label in enumerate(rank(fits.results), 1)]
    lines += winner_lines(fits)
    lines += _seed_spread_lines(fits)
    lines += [f"\n{label}: not fitted ({msg})." for label, msg in fits.errors.items()]
    if gao:
        lines += ["", "Reward vs KL (Gao et al. 2023, RL form, d = sqrt(KL)): " + "; ".join(gao) + "."]
    for name, alt in (
        ("curves", "RL curves"),
        ("prediction_card", "prediction card"),
        ("reward_vs_kl", "reward vs KL"),
    ):
        lines += ["", f"![{alt}]({FIGURE_FILES[name]})"]
    return "\n".join(lines + [""])


def rl_report(
    runs_dir: str | pathlib.Path, out_dir: str | pathlib.Path, fit_until_frac: float = 0.5
) -> dict[str, Any]:
    """Fit, write the three figures and rl_section.md into `out_dir`; return
    {"markdown", "figures": {name: file}, **RLFits.as_dict()}."""
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    fits = fit_recipes(runs_dir, fit_until_frac)
    gao = gao_fits(fits)
    for name, fig in (
        ("curves", curves_figure(fits)),
        ("prediction_card", prediction_card_figure(fits)),
        ("reward_vs_kl", reward_vs_kl_figure(fits, gao)),
    ):
        write_figure_atomic(out / FIGURE_FILES[name], fig, dpi=DPI)
    md = section_markdown(fits, gao_lines(gao))
    write_text_atomic(out / "rl_section.md", md)
    return {"markdown": md, "figures": dict(FIGURE_FILES), **fits.as_dict()}


def rl_section(runs_dir: str | pathlib.Path, out_dir: str | pathlib.Path, fit_until_frac: float = 0.5) -> str:
    """Write RL figures into `out_dir` and return the markdown section that references them."""
    return rl_report(runs_dir, out_dir, fit_until_frac)["markdown"]
