"""The RL section of the report: learning curves with fitted laws and bands, a prediction card,
reward-vs-KL, and a ranking of recipes (by ceiling A, then by efficiency B at a common A).

    from analysis.rl.report import rl_section
    markdown = rl_section("sweeps/rl_recipes", "report/rl")     # writes PNGs into report/rl

Also `python -m analysis.rl.report RUNS_DIR OUT_DIR` (prints the markdown).

Runs are grouped into recipes by their configuration minus the seed and the run length
(`summary.json` -> config_fields), so seeds and compute-ladder rungs of one recipe pool into one
fit. A recipe whose fit is flagged (pre_midpoint, A_unbounded, unstable) is never given a
ceiling: it is ranked after the identified ones, by its observed gain per decade of compute.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import pathlib
import sys
from typing import Any, Sequence

import numpy as np

from models.base.errors import AnalysisError
from analysis.rl.curves import RLCurve, burn_in_cutoff, fit_points, load_curve
from analysis.rl.fitting import FitOptions, fit_recipe
from analysis.rl.laws import Points, fit_gao, fit_params, predict
from models.base.fingerprint import fingerprint


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
    out = []
    for m in sorted(root.rglob("metrics.jsonl")):
        first = m.read_text().split("\n", 1)[0]
        try:
            if "flops_rl" in json.loads(first):
                out.append(m.parent)
        except json.JSONDecodeError:
            continue
    return out


def group_recipes(runs: Sequence[pathlib.Path]) -> list[Recipe]:
    groups: dict[str, list[pathlib.Path]] = {}
    configs: dict[str, dict] = {}
    for r in runs:
        try:
            s = json.loads((r / "summary.json").read_text())
        except (OSError, json.JSONDecodeError):
            s = {}
        fields = copy.deepcopy(s.get("config_fields") or {})
        rl = fields.get("rl") or {}
        rl.pop("seed", None)
        rl.pop("steps", None)
        key = fingerprint(fields, 8)
        groups.setdefault(key, []).append(r)
        configs[key] = fields
    names = {}
    for key, fields in configs.items():
        rl = fields.get("rl") or {}
        algo = (rl.get("algo") or {}).get("name", "run")
        task = (rl.get("task") or {}).get("name", "?")
        names[key] = f"{task}/{algo}"
    dup = {n for n in names.values() if list(names.values()).count(n) > 1}
    recipes = []
    for key, rs in groups.items():
        label = names[key] + (f"#{key[:4]}" if names[key] in dup else "")
        curves = []
        for r in rs:
            try:
                curves.append(load_curve(r))
            except AnalysisError:
                continue             # a run that has not evaluated 3 times yet
        if curves:
            recipes.append(Recipe(label, tuple(rs), tuple(curves), configs[key]))
    return sorted(recipes, key=lambda x: x.label)


def rank(results: dict[str, dict]) -> list[str]:
    """Identified recipes by A (desc); neighbours whose A intervals overlap are a tie in A and
    ordered by B (desc: reaches the ceiling with less compute). Flagged recipes follow, by their
    observed gain per decade."""
    ok = [k for k, r in results.items() if not r["flags"]]
    ok.sort(key=lambda k: -results[k]["params"]["A"])
    changed = True
    while changed:                      # bubble B-order within overlapping-A neighbours
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


def _band(curves: Sequence[RLCurve], opts: FitOptions, C_grid: np.ndarray, n_boot: int = 40,
          seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Pointwise 95% band of the fitted curve: refits on evaluation points resampled with
    replacement (pooled over seeds)."""
    pts = [fit_points(c, burn_in_cutoff(c, opts.burn_in, opts.burn_in_frac), keep_start=True)
           for c in curves]
    P = Points.make(np.concatenate([p.C for p in pts]), np.concatenate([p.y for p in pts]),
                    np.concatenate([p.s for p in pts]))
    rng = np.random.default_rng(seed)
    draws = []
    for _ in range(n_boot):
        idx = np.sort(rng.integers(0, len(P), len(P)))
        sub = Points(P.C[idx], P.y[idx], P.s[idx], P.s_known)
        if len(np.unique(sub.C)) < 4:
            continue
        draws.append(predict("sigmoid", fit_params(sub, "sigmoid", n_starts=1), C_grid))
    if not draws:
        return np.full_like(C_grid, np.nan), np.full_like(C_grid, np.nan)
    d = np.asarray(draws)
    return np.quantile(d, 0.025, axis=0), np.quantile(d, 0.975, axis=0)


def rl_section(runs_dir: str | pathlib.Path, out_dir: str | pathlib.Path,
               fit_until_frac: float = 0.5) -> str:
    """Write RL figures into `out_dir` and return the markdown section that references them."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    recipes = group_recipes(find_rl_runs(runs_dir))
    if not recipes:
        raise AnalysisError(f"{runs_dir}: no RL runs with evaluations found")
    opts = FitOptions()
    results, preds, errors = {}, {}, {}
    for rc in recipes:
        try:
            results[rc.label] = fit_recipe(rc.curves, opts)
            preds[rc.label] = fit_recipe(rc.curves, dataclasses.replace(opts, fit_until_frac=fit_until_frac))
        except AnalysisError as e:
            errors[rc.label] = str(e)
    by_label = {rc.label: rc for rc in recipes}

    # ---- figure 1: curves, fits and bands ---------------------------------------------------
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (label, res) in enumerate(results.items()):
        col = colors[i % len(colors)]
        rc = by_label[label]
        for c in rc.curves:
            ax.errorbar(c.compute, c.pass_rate, yerr=np.nan_to_num(c.stderr), fmt="o", ms=2.5,
                        color=col, alpha=0.45, lw=0.6)
        c_max = max(c.final_compute for c in rc.curves)
        c_min = min(c.compute[c.compute > 0].min() for c in rc.curves)
        flagged = bool(res["flags"])
        grid = np.geomspace(c_min, c_max * (1.0 if flagged else 3.0), 200)
        y = predict("sigmoid", res["params"], grid)
        lo, hi = _band(rc.curves, opts, grid)
        ax.fill_between(grid, lo, hi, color=col, alpha=0.15, lw=0)
        tag = (f"no ceiling ({', '.join(res['flags'])})" if flagged else
               f"A={res['params']['A']:.3f}, B={res['params']['B']:.2f}")
        ax.plot(grid, y, "--" if flagged else "-", color=col, lw=1.6, label=f"{label}: {tag}")
    ax.set_xscale("log")
    ax.set_xlabel("RL compute C (FLOPs, evaluation excluded)")
    ax.set_ylabel("held-out pass@1")
    ax.set_title("RL compute-performance: ScaleRL sigmoid fits, 95% bootstrap bands")
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "rl_curves.png", dpi=130)
    plt.close(fig)

    # ---- figure 2: prediction card (fit on the first half, judged on the rest) ----------------
    n = max(1, len(preds))
    fig, axes = plt.subplots(1, n, figsize=(4.6 * n, 3.8), squeeze=False)
    for ax, (label, pr) in zip(axes[0], preds.items()):
        rc = by_label[label]
        cut = fit_until_frac * max(c.final_compute for c in rc.curves)
        for c in rc.curves:
            early = c.compute <= fit_until_frac * c.final_compute
            ax.plot(c.compute[early], c.pass_rate[early], "o", ms=3, color="C0", alpha=0.6)
            ax.plot(c.compute[~early], c.pass_rate[~early], "o", ms=3, color="C3", alpha=0.6)
        grid = np.linspace(0, max(c.final_compute for c in rc.curves), 200)
        ax.plot(grid, predict("sigmoid", pr["params"], grid), "k--", lw=1.2)
        ax.axvline(cut, color="gray", lw=0.8)
        p = pr["prediction"]
        verdict = ("FLAGGED: " + ", ".join(pr["flags"])) if pr["flags"] else "identified"
        ax.set_title(f"{label}\npred {p['final_pred']:.3f} vs actual {p['final_actual']:.3f} "
                     f"(|err| {p['final_abs_error']:.3f})\n{verdict}", fontsize=8)
        ax.set_xlabel("RL compute C")
        ax.set_ylabel("pass@1")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "rl_prediction_card.png", dpi=130)
    plt.close(fig)

    # ---- figure 3: reward gain vs KL (Gao et al.) ---------------------------------------------
    gao_lines = []
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for i, label in enumerate(results):
        rc = by_label[label]
        kl = np.concatenate([c.extra["kl"] for c in rc.curves])
        gain = np.concatenate([c.pass_rate - c.pass_rate[0] for c in rc.curves])
        ok = np.isfinite(kl) & (kl > 0)
        if ok.sum() < 3:
            continue
        ax.plot(np.sqrt(kl[ok]), gain[ok], "o", ms=3, color=colors[i % len(colors)], alpha=0.5)
        try:
            g = fit_gao(kl[ok], gain[ok], "log")
        except AnalysisError:
            continue
        d = np.linspace(np.sqrt(kl[ok]).min(), np.sqrt(kl[ok]).max(), 100)
        ax.plot(d, g.predict(d), color=colors[i % len(colors)], label=label)
        gao_lines.append(f"{label}: gain = d({g.alpha:.3f} {'-' if g.beta >= 0 else '+'} "
                         f"{abs(g.beta):.3f} log d)")
    ax.set_xlabel("d = sqrt(KL to reference)")
    ax.set_ylabel("pass@1 gain over start")
    ax.set_title("Reward vs KL (Gao et al. log form)", fontsize=9)
    ax.grid(alpha=0.3)
    if gao_lines:
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "rl_reward_vs_kl.png", dpi=130)
    plt.close(fig)

    # ---- markdown ---------------------------------------------------------------------------
    lines = ["## RL scaling", "",
             f"Runs: {sum(len(r.runs) for r in recipes)} in {len(recipes)} recipe(s) under "
             f"`{runs_dir}`. Fit: ScaleRL sigmoid R(C) = R0 + (A − R0)/(1 + (C_mid/C)^B), R0 "
             "anchored by the step-0 evaluation, burn-in = min(10% of final compute, one pass over "
             "the prompts), 95% profile-likelihood intervals. A flagged fit gives no ceiling, only "
             "the gain per decade of compute observed so far.", "",
             "Ranking: by ceiling A; recipes whose A intervals overlap are ordered by efficiency B; "
             "flagged recipes last, by observed gain per decade.", "",
             "| rank | recipe | runs | A [95% CI] | B | C_mid | flags / gain per decade | final pass@1 | "
             f"prediction from {fit_until_frac:g} of C: pred vs actual (abs err) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for i, label in enumerate(rank(results), 1):
        r, p = results[label], preds.get(label, {}).get("prediction")
        final = np.mean([c.pass_rate[-1] for c in by_label[label].curves])
        if r["flags"]:
            g = r.get("gain_per_decade") or {}
            a_txt, b_txt, c_txt = "—", "—", "—"
            f_txt = f"{', '.join(r['flags'])}; {g.get('value', float('nan')):+.3f} ± {g.get('stderr', float('nan')):.3f}"
        else:
            a_txt = f"{r['params']['A']:.3f} [{r['ci']['A'][0]:.3f}, {r['ci']['A'][1]:.3f}]"
            b_txt, c_txt, f_txt = f"{r['params']['B']:.2f}", f"{r['params']['C_mid']:.3g}", "none"
        p_txt = (f"{p['final_pred']:.3f} vs {p['final_actual']:.3f} ({p['final_abs_error']:.3f})"
                 + (" — flagged" if preds[label]["flags"] else "")) if p else "—"
        lines.append(f"| {i} | {label} | {len(by_label[label].runs)} | {a_txt} | {b_txt} | {c_txt} "
                     f"| {f_txt} | {final:.3f} | {p_txt} |")
    for label, res in results.items():
        sp = res.get("seed_spread")
        if not sp:
            continue
        if sp["n_flagged"] == 0:
            a = sp["A"]
            lines.append(f"\n{label}: seed-to-seed A (per-seed fits) {a['mean']:.3f} ± {a['std']:.3f} "
                         f"(n={a['n']}).")
        else:
            g = sp["gain_per_decade"]
            lines.append(f"\n{label}: {sp['n_flagged']} of {g['n']} per-seed fits flagged, so no "
                         f"per-seed ceilings; seed-to-seed gain per decade {g['mean']:+.3f} ± "
                         f"{g['std']:.3f}.")
    for label, msg in errors.items():
        lines.append(f"\n{label}: not fitted ({msg}).")
    if gao_lines:
        lines += ["", "Reward vs KL (Gao et al.): " + "; ".join(gao_lines) + "."]
    lines += ["", "![RL curves](rl_curves.png)", "", "![prediction card](rl_prediction_card.png)",
              "", "![reward vs KL](rl_reward_vs_kl.png)", ""]
    md = "\n".join(lines)
    (out / "rl_section.md").write_text(md)
    return md


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) != 2:
        print("usage: python -m analysis.rl.report RUNS_DIR OUT_DIR", file=sys.stderr)
        return 2
    try:
        print(rl_section(argv[0], argv[1]))
    except AnalysisError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
