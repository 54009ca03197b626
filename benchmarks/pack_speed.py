"""What packed runs and WSD cooldown branches save, measured through the real sweep command.

(a) **Packs.** K = 1, 2, 4, 8 LR variants of one demo shape (12k and 108k parameters) at one
budget (1e11 FLOPs), trained by `python -m experiments.train -m +sweep=isoflop ...` through the
demo's launcher (`hydra/launcher=parallel`, one pinned core per job) as separate processes
(`sweep.pack=1`) and as one pack (`sweep.pack=K`). Every sweep gets a fresh `hydra.sweep.dir`;
the wall time is that of the whole command (process start-up, planning, compiling, training,
evals, checkpoints). This VM's speed drifts by up to 2x within minutes, so only *ratios* of
measurements taken alternately are reported: solo and packed run back to back, their order
flipped every repeat (ABBA), and the per-(shape, K) figure is the median of solo_s / packed_s
over the repeats (> 1 = packing is faster). K = 1 is the control: both sides are the same sweep,
so its ratio shows the noise. The packed members' final eval losses are compared with the solo
runs' (same run ids).

(b) **Branches.** An IsoFLOP sweep of 4 shapes x 3 doubling budgets (1e11, 2e11, 4e11) with
`optim.schedule=wsd sweep.branches=true` against the same sweep as separate cosine runs: the
FLOPs ratio from sweep_plan.json (`flops_to_train` / `flops_if_separate` of the branched sweep;
0.66x is the arithmetic bound at decay_fraction 0.2), the wall ratio (branched / separate,
< 1 = branches are cheaper), and both laws side by side: `python -m analysis collect` +
`python -m analysis fit --law chinchilla --json`, the allocation exponent `a` (N* ~ C^a) of each
with its bootstrap CI and whether each lies inside the other's CI, and a held-out check (fitted on
C <= 3e11, predicting the 4e11 runs: `fit --holdout-above`).

Both parts run with a private persistent XLA cache (SCALELAB_JAX_CACHE under the work dir),
warmed by one short untimed sweep of the same shapes, so no timed side pays a cold compile the
other does not.

    python benchmarks/pack_speed.py [--repeats N] [--part a|b|both] [--json pack_speed.json] [--keep]
    python benchmarks/pack_speed.py --quick --json /tmp/pack_speed_quick.json   # smoke run (the test's)

--quick is a smoke run of every step, not a measurement: (a) the 12k shape at 1e10 FLOPs, K = 2
(no K = 1 control), no warm-up sweep; (b) two shapes at 1e10, 2e10, 4e10 FLOPs, 20 bootstrap resamples (the
fits may refuse so few runs: recorded as their one-line error). --part a or b runs one part.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

REPO = Path(__file__).resolve().parents[1]

# The demo's shapes (conf/sweep/demo.yaml) by parameter count, as `sweep.shapes` entries.
PACK_SHAPES = {
    "12k": "{n_layers:1,d_model:16,n_heads:2}",
    "108k": "{n_layers:3,d_model:48,n_heads:6}",
}
BRANCH_SHAPES = (
    "{n_layers:1,d_model:16,n_heads:2}",
    "{n_layers:2,d_model:24,n_heads:3}",
    "{n_layers:2,d_model:32,n_heads:4}",
    "{n_layers:3,d_model:48,n_heads:6}",
)
# --quick: the 26k and 49k shapes (fewest steps for their FLOPs: a tiny run's steps are
# overhead-bound, so the 12k shape's steps would take most of the smoke run)
QUICK_BRANCH_SHAPES = slice(1, 3)
PACK_BUDGET, QUICK_PACK_BUDGET = 1e11, 1e10
BRANCH_BUDGETS, QUICK_BRANCH_BUDGETS = (1e11, 2e11, 4e11), (1e10, 2e10, 4e10)
# The held-out fit predicts the largest budget's runs: the threshold lies between the budgets,
# since a run's FLOPs round to whole steps (a "2e11" run spends up to 2.0002e11).
HOLDOUT_ABOVE, QUICK_HOLDOUT_ABOVE = 3e11, 3e10
BASE_LR = 1e-2  # the demo's optim.lr
# The K - 1 LR-probe variants beside BASE_LR: moderate values (none diverges at these shapes), so
# every member trains its full length on both sides.
PROBE_LRS = (3e-3, 3e-2, 5e-3, 2e-2, 7e-3, 1.5e-2, 4e-3)
KS, QUICK_KS = (1, 2, 4, 8), (2,)
EVAL_EVERY = 200  # the demo's train.eval_every
# Untimed warm-up: the same shapes at a budget short enough to cost seconds; min_steps 1 keeps
# every shape in the plan (the 108k shape gets ~14 steps).
WARMUP_BUDGET, WARMUP_MIN_STEPS = 1e10, 1
TARGET_PACK_K4 = 1.5  # solo / packed wall at K = 4 (issue 31)
TARGET_PACK_FLOOR = 1.0  # never slower than solo
TARGET_BRANCH_FLOPS = 0.70  # branched / separate FLOPs
LOG_TAIL = 3  # lines of a failed command's log quoted in its one-line error


class BenchError(RuntimeError):
    """A sweep or fit the benchmark ran failed; the message names the command's log."""


@dataclasses.dataclass(frozen=True)
class PackMeasurement:
    """One alternate pair of part (a).

    shape: key of PACK_SHAPES; k: LR variants (= pack size); rep: repeat index;
    packed_first: which side ran first in this pair; solo_s / packed_s: wall seconds of the two
    sweep commands; loss_rel_diff: max |packed - solo| / solo final eval loss over the runs.
    """

    shape: str
    k: int
    rep: int
    packed_first: bool
    solo_s: float
    packed_s: float
    loss_rel_diff: float

    @property
    def ratio(self) -> float:
        return self.solo_s / self.packed_s


# ---- running sweeps ---------------------------------------------------------------------------


def run_cmd(cmd: Sequence[str], log: Path, env: dict[str, str]) -> float:
    """Run `cmd` in the repository root, output to `log`; its wall seconds, or BenchError."""
    t0 = time.perf_counter()
    with open(log, "w") as fh:
        rc = subprocess.run(list(cmd), cwd=REPO, stdout=fh, stderr=subprocess.STDOUT, env=env).returncode
    wall = time.perf_counter() - t0
    if rc != 0:
        tail = " | ".join(log.read_text(errors="replace").strip().splitlines()[-LOG_TAIL:])
        raise BenchError(f"command failed (exit {rc}, log {log}): {tail}")
    return wall


def sweep(overrides: Sequence[str], sweep_dir: Path, env: dict[str, str]) -> float:
    """One `python -m experiments.train -m` sweep through the demo's launcher into `sweep_dir`."""
    cmd = [sys.executable, "-m", "experiments.train", "-m", "+sweep=isoflop", "hydra/launcher=parallel"]
    cmd += [f"train.eval_every={EVAL_EVERY}", *overrides, f"hydra.sweep.dir={sweep_dir}"]
    return run_cmd(cmd, sweep_dir.with_suffix(".log"), env)


def pack_overrides(shape: str, k: int, pack: int, budget: float = PACK_BUDGET) -> list[str]:
    """K LR variants of `shape` at `budget`: optim.lr plus K - 1 LR-probe runs."""
    probe = ",".join(f"{lr:g}" for lr in PROBE_LRS[: k - 1])
    return [
        f"sweep.budgets=[{budget!r}]",
        f"sweep.shapes=[{shape}]",
        f"sweep.lr_probe={{lrs:[{probe}],budgets:null}}" if k > 1 else "sweep.lr_probe=null",
        f"optim.lr={BASE_LR:g}",
        f"sweep.pack={pack}",
    ]


def branch_overrides(
    shapes: Sequence[str], branched: bool, budgets: Sequence[float] = BRANCH_BUDGETS
) -> list[str]:
    """The IsoFLOP sweep of part (b): WSD with branches, or separate cosine runs."""
    return [
        f"sweep.budgets=[{','.join(repr(float(b)) for b in budgets)}]",
        f"sweep.shapes=[{','.join(shapes)}]",
        f"optim.lr={BASE_LR:g}",
        "optim.schedule=wsd" if branched else "optim.schedule=cosine",
        f"sweep.branches={str(branched).lower()}",
    ]


def summaries(sweep_dir: Path) -> dict[str, dict[str, Any]]:
    """Run id -> summary.json of every run directory of a sweep (pack directories left out)."""
    out = {}
    for p in sweep_dir.glob("*/summary.json"):
        out[p.parent.name] = json.loads(p.read_text())
    return out


def loss_rel_diff(solo_dir: Path, packed_dir: Path) -> float:
    """Max relative difference of final eval loss between the same runs solo and packed."""
    solo, packed = summaries(solo_dir), summaries(packed_dir)
    if set(solo) != set(packed) or not solo:
        raise BenchError(f"run ids differ: solo {sorted(solo)} vs packed {sorted(packed)}")
    return max(
        abs(packed[r]["final_eval_loss"] - solo[r]["final_eval_loss"]) / abs(solo[r]["final_eval_loss"])
        for r in solo
    )


# ---- (a) packs --------------------------------------------------------------------------------


def measure_packs(
    shapes: Sequence[str],
    ks: Sequence[int],
    repeats: int,
    work: Path,
    env: dict[str, str],
    budget: float = PACK_BUDGET,
    warm_up: bool = True,
) -> list[PackMeasurement]:
    """Part (a): every (shape, K) pair `repeats` times, solo and packed back to back, the side
    that goes first alternating from pair to pair (and flipped each repeat)."""
    for name in shapes if warm_up else ():  # untimed: fills the private XLA cache with each shape's programs
        warm = [
            *pack_overrides(PACK_SHAPES[name], 2, 2, WARMUP_BUDGET),
            f"sweep.min_steps={WARMUP_MIN_STEPS}",
        ]
        sweep(warm, work / f"warmup_{name}", env)
    out = []
    for rep in range(repeats):
        for pair, (name, k) in enumerate((n, k) for n in shapes for k in ks):
            out.append(measure_pair(name, k, rep, (pair + rep) % 2 == 1, work, env, budget))
    return out


def measure_pair(
    name: str,
    k: int,
    rep: int,
    packed_first: bool,
    work: Path,
    env: dict[str, str],
    budget: float = PACK_BUDGET,
) -> PackMeasurement:
    """Solo (sweep.pack=1) and packed (sweep.pack=K) sweeps of K LR variants, back to back."""
    tag = f"{name}_K{k}_r{rep}"
    walls = {}
    for side in ("packed", "solo") if packed_first else ("solo", "packed"):
        pack = k if side == "packed" else 1
        walls[side] = sweep(pack_overrides(PACK_SHAPES[name], k, pack, budget), work / f"{tag}_{side}", env)
    diff = loss_rel_diff(work / f"{tag}_solo", work / f"{tag}_packed")
    m = PackMeasurement(name, k, rep, packed_first, walls["solo"], walls["packed"], diff)
    print(
        f"  (a) {name} K={k} rep {rep}: solo {m.solo_s:.1f} s, packed {m.packed_s:.1f} s "
        f"-> {m.ratio:.2f}x ({'packed' if packed_first else 'solo'} first), loss diff {diff:.1e}",
        flush=True,
    )
    return m


def pack_table(ms: Sequence[PackMeasurement]) -> dict[str, dict[str, dict[str, float]]]:
    """shape -> K -> {median_ratio, min_ratio, max_ratio, n, max_loss_rel_diff} over the repeats."""
    groups: dict[tuple[str, int], list[PackMeasurement]] = {}
    for m in ms:
        groups.setdefault((m.shape, m.k), []).append(m)
    table: dict[str, dict[str, dict[str, float]]] = {}
    for (shape, k), g in groups.items():
        r = [m.ratio for m in g]
        table.setdefault(shape, {})[str(k)] = {
            "median_ratio": statistics.median(r),
            "min_ratio": min(r),
            "max_ratio": max(r),
            "n": len(r),
            "max_loss_rel_diff": max(m.loss_rel_diff for m in g),
        }
    return table


def print_pack_table(table: dict[str, dict[str, dict[str, float]]]) -> None:
    print("(a) packed vs separate processes (hydra/launcher=parallel), wall ratio solo / packed:")
    for shape, per_k in table.items():
        for k, c in per_k.items():
            verdict = (
                "control (same sweep both sides)" if k == "1" else _pack_verdict(int(k), c["median_ratio"])
            )
            print(
                f"  {shape:5s} K={k}: {c['median_ratio']:.2f}x median of {c['n']} "
                f"[{c['min_ratio']:.2f}-{c['max_ratio']:.2f}], loss diff {c['max_loss_rel_diff']:.1e}; "
                f"{verdict}"
            )


def _pack_verdict(k: int, ratio: float) -> str:
    floor = "ok" if ratio >= TARGET_PACK_FLOOR else "SLOWER than solo"
    if k == 4:
        hit = "met" if ratio >= TARGET_PACK_K4 else "missed"
        return f"target >= {TARGET_PACK_K4}x at K=4 {hit}; never slower than solo: {floor}"
    return f"never slower than solo: {floor}"


# ---- (b) branches -----------------------------------------------------------------------------


def measure_branches(
    shapes: Sequence[str],
    work: Path,
    env: dict[str, str],
    bootstrap: int,
    budgets: Sequence[float] = BRANCH_BUDGETS,
    holdout_above: float = HOLDOUT_ABOVE,
    warm_up: bool = True,
) -> dict[str, Any]:
    """Part (b): the branched WSD sweep and the separate cosine sweep (alternate order: the
    branched one first), their FLOPs and wall ratios, and both laws."""
    if warm_up:
        warm = [*branch_overrides(shapes, False, (WARMUP_BUDGET,)), f"sweep.min_steps={WARMUP_MIN_STEPS}"]
        sweep(warm, work / "warmup_branches", env)
    walls = {}
    for side, branched in (("branches", True), ("separate", False)):
        walls[side] = sweep(branch_overrides(shapes, branched, budgets), work / f"iso_{side}", env)
        print(f"  (b) {side}: {walls[side]:.1f} s", flush=True)
    plan = json.loads((work / "iso_branches" / "sweep_plan.json").read_text())
    laws = {side: fit_laws(work / f"iso_{side}", work, env, bootstrap, holdout_above) for side in walls}
    return {
        "shapes": list(shapes),
        "budgets": list(budgets),
        "flops_to_train": plan["flops_to_train"],
        "flops_if_separate": plan["flops_if_separate"],
        "flops_ratio": plan["flops_to_train"] / plan["flops_if_separate"],
        "wall_s": walls,
        "wall_ratio": walls["branches"] / walls["separate"],
        "laws": laws,
        "a_within_other_ci": {
            "branches_a_in_separate_ci": _inside(laws["branches"]["a"], laws["separate"]["a_ci"]),
            "separate_a_in_branches_ci": _inside(laws["separate"]["a"], laws["branches"]["a_ci"]),
        },
    }


def fit_laws(
    sweep_dir: Path, work: Path, env: dict[str, str], bootstrap: int, holdout_above: float = HOLDOUT_ABOVE
) -> dict[str, Any]:
    """Collect a sweep and fit the Chinchilla law on all runs and on C <= `holdout_above`:
    {a, a_ci, params, ci, n_points, error, holdout: {threshold, n_points, mean_rel_error,
    max_rel_error, error}}. A fit the runs cannot support (too few points, as with --quick's 2
    shapes) is recorded with its one-line `error`, not a failed benchmark."""
    name = sweep_dir.name
    csv = work / name / "runs.csv"  # collect --out DIR writes DIR/runs.csv
    run_cmd(
        [sys.executable, "-m", "analysis", "collect", str(sweep_dir), "--out", str(csv.parent)],
        work / f"{name}_collect.log",
        env,
    )
    f = _fit(csv, work / f"{name}_fit", env, bootstrap, [])
    h = _fit(csv, work / f"{name}_holdout", env, bootstrap, ["--holdout-above", f"{holdout_above:g}"])
    al, ho = f.get("allocation") or {}, h.get("holdout") or {}
    held = {k: ho.get(k) for k in ("threshold", "n_points", "mean_rel_error", "max_rel_error")}
    return {
        "a": al.get("a", math.nan),
        "a_ci": al.get("a_ci", [math.nan, math.nan]),
        "params": f.get("params"),
        "ci": f.get("ci"),
        "n_points": f.get("n_points"),
        "error": f.get("error"),
        "holdout": held | {"threshold": held["threshold"] or holdout_above, "error": h.get("error")},
    }


def _fit(csv: Path, stem: Path, env: dict[str, str], bootstrap: int, extra: list[str]) -> dict[str, Any]:
    """`python -m analysis fit CSV --law chinchilla --json` (its JSON), or {"error": the fit's
    last line} when it refuses the data."""
    out = stem.with_suffix(".json")
    cmd = [sys.executable, "-m", "analysis", "fit", str(csv), "--law", "chinchilla"]
    try:
        run_cmd(
            [*cmd, "--bootstrap", str(bootstrap), *extra, "--json", str(out)], stem.with_suffix(".log"), env
        )
    except BenchError:
        lines = stem.with_suffix(".log").read_text(errors="replace").strip().splitlines()
        return {"error": lines[-1] if lines else "fit failed"}
    return json.loads(out.read_text())


def _inside(x: float, ci: Sequence[float]) -> bool | None:
    """Whether x lies in ci; None when either is unknown (a fit that failed)."""
    if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in (x, *ci)):
        return None
    return bool(ci[0] <= x <= ci[1])


def print_branches(b: dict[str, Any]) -> None:
    ok = "met" if b["flops_ratio"] <= TARGET_BRANCH_FLOPS else "missed"
    print(
        f"(b) IsoFLOP {len(b['shapes'])} shapes x {len(b['budgets'])} budgets, WSD branches vs separate "
        f"cosine runs: FLOPs {b['flops_ratio']:.3f}x (target <= {TARGET_BRANCH_FLOPS}x {ok}; bound 0.66x), "
        f"wall {b['wall_ratio']:.2f}x (branches {b['wall_s']['branches']:.0f} s / separate "
        f"{b['wall_s']['separate']:.0f} s, one alternate pair)"
    )
    for side, law in b["laws"].items():
        lo, hi = law["a_ci"]
        h = law["holdout"]
        held = (
            f"held-out {h['n_points']} runs above {h['threshold']:.0e}: mean {h['mean_rel_error']:.2%}, "
            f"max {h['max_rel_error']:.2%}"
            if h.get("mean_rel_error") is not None
            else f"held-out: n/a ({h.get('error') or 'no held-out runs'})"
        )
        print(f"  {side:9s} a = {law['a']:.3f} [{lo:.3f}, {hi:.3f}] ({law['n_points']} runs); {held}")
    w = b["a_within_other_ci"]
    print(
        f"  a(branches) inside separate's CI: {w['branches_a_in_separate_ci']}; "
        f"a(separate) inside branches' CI: {w['separate_a_in_branches_ci']}"
    )


# ---- main -------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: (a) the 12k shape at 1e10 FLOPs, K = 2; (b) 2 shapes at 1e10-4e10; no warm-ups",
    )
    ap.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="alternate pairs per (shape, K); the ratio is their median (default 1: ~7 min a repeat)",
    )
    ap.add_argument("--part", choices=("a", "b", "both"), default="both", help="which part to run")
    ap.add_argument(
        "--bootstrap",
        type=int,
        default=None,
        help="bootstrap resamples of each fit (default 200; --quick 20)",
    )
    ap.add_argument(
        "--json", "--out", dest="out", type=Path, default=None, help="write the results as JSON here"
    )
    ap.add_argument("--work", type=Path, default=None, help="work directory (default: a new temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (sweeps, logs, fits)")
    args = ap.parse_args(argv)
    args.repeats = args.repeats or 1
    args.bootstrap = args.bootstrap if args.bootstrap is not None else (20 if args.quick else 200)
    if args.repeats < 1:
        ap.error(f"--repeats must be >= 1 (got {args.repeats})")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="pack_speed."))
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "SCALELAB_JAX_CACHE": str(work / "jax")}
    shapes = ["12k"] if args.quick else list(PACK_SHAPES)
    ks = QUICK_KS if args.quick else KS
    branch_shapes = BRANCH_SHAPES[QUICK_BRANCH_SHAPES] if args.quick else BRANCH_SHAPES
    result: dict[str, Any] = {
        "benchmark": "pack_speed",
        "settings": {"quick": args.quick, "repeats": args.repeats, "cpus": os.cpu_count(), "work": str(work)},
    }
    t0 = time.perf_counter()
    try:
        if args.part in ("a", "both"):
            budget = QUICK_PACK_BUDGET if args.quick else PACK_BUDGET
            ms = measure_packs(shapes, ks, args.repeats, work, env, budget, warm_up=not args.quick)
            result["packs"] = {
                "measurements": [dataclasses.asdict(m) | {"ratio": m.ratio} for m in ms],
                "table": pack_table(ms),
            }
        if args.part in ("b", "both"):
            budgets, above = (
                (QUICK_BRANCH_BUDGETS, QUICK_HOLDOUT_ABOVE) if args.quick else (BRANCH_BUDGETS, HOLDOUT_ABOVE)
            )
            result["branches"] = measure_branches(
                branch_shapes, work, env, args.bootstrap, budgets, above, warm_up=not args.quick
            )
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    result["wall_s"] = time.perf_counter() - t0
    print(f"pack_speed: {result['wall_s']:.0f} s in all; work dir {work}")
    if "packs" in result:
        print_pack_table(result["packs"]["table"])
    if "branches" in result:
        print_branches(result["branches"])
    if args.out:
        args.out.write_text(json.dumps(result, indent=1, default=str) + "\n")
        print(f"results in {args.out}")
    if not args.keep and args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
