"""Every script in benchmarks/ runs: each in its quick mode (`--quick`: the smallest sizes, a few
steps, one repeat; gpu_check.sh: its CPU dry run) as a subprocess, and the JSON it writes with
`--json PATH` is checked against a schema (required keys, types, finite numbers where a figure
must be one, MFUs never above 1). A benchmark that nothing runs rots: a new script must join
CASES (or ELSEWHERE, with the test that runs it).

The slow ones (over ~20 s of CPU even in quick mode) are marked `slow`; pack_speed's smoke run
launches sweeps that fill every core, so it is `serial` too."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "benchmarks"

# ---- a small schema language ----------------------------------------------------------------
# A schema is a type (isinstance), FINITE / POSITIVE (a real number, not NaN or inf; > 0), a
# predicate (callable: must return True), a dict (an object with at least these keys, each
# checked), a one-item list (a non-empty list, each item checked), or a tuple of alternatives.
FINITE = "finite"
POSITIVE = "positive"
NULL = type(None)


def mfu(x: Any) -> bool:
    """An MFU as the project writes it: a fraction in (0, 1], or null (above 1: a stale peak)."""
    return x is None or (_number(x) and 0 < x <= 1)


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def check(obj: Any, schema: Any, where: str = "$") -> None:
    if isinstance(schema, tuple):
        errors = []
        for alt in schema:
            try:
                return check(obj, alt, where)
            except AssertionError as e:
                errors.append(str(e))
        raise AssertionError(f"{where}: {obj!r} matches none of: {'; '.join(errors)}")
    if isinstance(schema, dict):
        assert isinstance(obj, dict), f"{where}: expected an object, got {type(obj).__name__}"
        missing = sorted(set(schema) - set(obj))
        assert not missing, f"{where}: missing keys {missing}"
        for key, sub in schema.items():
            check(obj[key], sub, f"{where}.{key}")
    elif isinstance(schema, list):
        assert isinstance(obj, list) and obj, f"{where}: expected a non-empty list, got {obj!r}"
        for i, item in enumerate(obj):
            check(item, schema[0], f"{where}[{i}]")
    elif schema in (FINITE, POSITIVE):
        assert _number(obj), f"{where}: expected a finite number, got {obj!r}"
        assert schema == FINITE or obj > 0, f"{where}: expected > 0, got {obj!r}"
    elif isinstance(schema, type):
        assert isinstance(obj, schema), f"{where}: expected {schema.__name__}, got {obj!r}"
    elif callable(schema):
        assert schema(obj), f"{where}: {obj!r} fails {getattr(schema, '__name__', schema)}"
    else:
        assert obj == schema, f"{where}: expected {schema!r}, got {obj!r}"


def test_check_rejects_what_it_must():
    schema = {"a": POSITIVE, "b": [{"m": mfu}], "c": (str, NULL)}
    check({"a": 1.5, "b": [{"m": 0.4}, {"m": None}], "c": None, "extra": 1}, schema)
    for bad in (
        {"a": float("nan"), "b": [{"m": 0.4}], "c": "x"},
        {"a": 1.0, "b": [{"m": 1.2}], "c": "x"},
        {"a": 1.0, "b": [], "c": "x"},
        {"a": 1.0, "b": [{"m": 0.4}], "c": 3},
        {"b": [{"m": 0.4}], "c": "x"},
    ):
        with pytest.raises(AssertionError):
            check(bad, schema)


# ---- the benchmarks' schemas ------------------------------------------------------------------

TRAIN_THROUGHPUT = {
    "benchmark": "train_throughput",
    "quick": True,
    "machine": {"cpu": str, "cores": int, "date": str},
    "peak_flops": POSITIVE,
    "peak_source": str,
    "peak_measured_at": (str, NULL),
    "rows": [
        {
            "size": str,
            "n_params": int,
            "flops_per_token": POSITIVE,
            "framework_tokens_per_s": POSITIVE,
            "framework_flops_per_s": POSITIVE,
            "framework_mfu": mfu,
            "framework_mfu_raw": (NULL, POSITIVE),
            "bare_tokens_per_s": POSITIVE,
            "bare_mfu": mfu,
            "ratio_framework_over_bare": POSITIVE,
            "ratio_per_round": [POSITIVE],
            "ratio_best_chunks": POSITIVE,
        }
    ],
}
FIT_SPEED = {
    "benchmark": "fit_speed",
    "grid_s": POSITIVE,
    "grid_cold_s": POSITIVE,
    "objective": POSITIVE,
    "bootstrap_resamples": int,
    "bootstrap_s": FINITE,  # by subtraction: may dip below 0 at --quick's 50 resamples
    "fit_plus_bootstrap_s": POSITIVE,
    "scipy": {
        "processes": int,
        "grid_s_scaled": POSITIVE,
        "objective_gap": FINITE,
        "bootstrap_s_scaled": {"default tolerances": POSITIVE, "matched tolerances": POSITIVE},
    },
    "grid_speedup": POSITIVE,
}
HAGEMANN = {
    "benchmark": "hagemann_layouts",
    "n_runs": int,
    "held_out": {"spearman_mfu": FINITE, "median_abs_mfu_error": FINITE, "oom_accuracy": FINITE},
    "efficiency": dict,
}
EXTERNAL = {
    "benchmark": "external_layouts",
    "runs": [
        {
            "name": str,
            "predicted_per_gpu": POSITIVE,
            "published_per_gpu": POSITIVE,
            "relative_error": FINITE,
            "predicted_memory_gb": POSITIVE,
            "mfu": mfu,
        }
    ],
    "mpt": {"n": int, "spearman_mfu": FINITE, "median_abs_mfu_error": FINITE},
}
HETERO = {
    "benchmark": "hetero_layouts",
    "rows": [{"layout": str, "measured_s": POSITIVE, "predicted_s": POSITIVE, "balanced_s": POSITIVE}],
    "spearman_rho": FINITE,
    "median_abs_error": FINITE,
}
ATTENTION = {
    "benchmark": "attention_kernels",
    "platform": str,
    "kernels": [{"kernel": str, "median_step_s": POSITIVE, "ratio_to_blocked": POSITIVE}],
}
FRONTIER_PROTOCOL = {
    "chosen": str,
    "n_targets": int,
    "methods": {
        m: {"mean_abs_error": FINITE, "coverage": FINITE, "width": FINITE}
        for m in ("law_minimum", "frontier_power_law", "combined")
    },
}
FRONTIER = {"epoch C<=1e+20": FRONTIER_PROTOCOL, "synthetic seed 0": FRONTIER_PROTOCOL}
GPU_CHECK = {
    "benchmark": "gpu_check",
    "dry_run": True,
    "ok": True,
    "configs": [
        {"gpu": str, "n_gpus": int, "n_params": int, "flops_per_token": POSITIVE, "tokens_per_step": int}
    ],
    "peaks": {"NVIDIA H100 80GB HBM3": POSITIVE, "NVIDIA H200": POSITIVE},
    "report": {"status": "completed", "tokens_per_s": POSITIVE, "mfu": mfu, "median_mfu": mfu},
    "packed_row": {
        "K1": {"wall_s": POSITIVE, "aggregate_mfu": mfu, "packed_members": int},
        "K4": {"wall_s": POSITIVE, "aggregate_mfu": mfu, "packed_members": int},
        "ratio_K4_over_K1": POSITIVE,
    },
}
PACK_LAW = {"a": (FINITE, NULL), "n_points": (int, NULL), "holdout": dict}
PACK_SPEED = {
    "benchmark": "pack_speed",
    "settings": {"quick": True},
    "packs": {
        "measurements": [
            {"k": int, "solo_s": POSITIVE, "packed_s": POSITIVE, "ratio": POSITIVE, "loss_rel_diff": FINITE}
        ],
        "table": dict,
    },
    "branches": {
        "flops_ratio": POSITIVE,
        "wall_ratio": POSITIVE,
        "laws": {"branches": PACK_LAW, "separate": PACK_LAW},
    },
    "wall_s": POSITIVE,
}


def _extra_fit_speed(j: dict) -> None:
    # the two sides minimise the same objective: the grid optima agree (a stale delta once gave +82%)
    assert abs(j["scipy"]["objective_gap"]) <= 1e-6 * j["objective"], j["scipy"]


def _extra_train_throughput(j: dict) -> None:
    for r in j["rows"]:  # null only when the figure is above 1, and then it is kept apart
        assert (r["framework_mfu"] is None) == (r["framework_mfu_raw"] is not None), r


def _extra_pack_speed(j: dict) -> None:
    assert all(m["loss_rel_diff"] <= 1e-4 for m in j["packs"]["measurements"])  # packed = solo


# name: (command after the interpreter, schema, shared data it needs or None, extra check, marks)
Case = tuple[list[str], dict, "str | None", "Callable[[dict], None] | None", list]
CASES: dict[str, Case] = {
    "train_throughput.py": (
        ["benchmarks/train_throughput.py", "--quick"],
        TRAIN_THROUGHPUT,
        None,
        _extra_train_throughput,
        [pytest.mark.slow],
    ),
    "fit_speed.py": (
        ["benchmarks/fit_speed.py", "--quick"],
        FIT_SPEED,
        "chinchilla_epoch",
        _extra_fit_speed,
        [pytest.mark.slow],
    ),
    "hagemann_layouts.py": (
        ["benchmarks/hagemann_layouts.py", "--quick", "--data", "{shared}"],
        HAGEMANN,
        "hagemann2023_layouts",
        None,
        [],
    ),
    "external_layouts.py": (["benchmarks/external_layouts.py", "--quick"], EXTERNAL, None, None, []),
    "hetero_layouts.py": (["benchmarks/hetero_layouts.py", "--quick"], HETERO, None, None, []),
    "attention_kernels.py": (["benchmarks/attention_kernels.py", "--quick"], ATTENTION, None, None, []),
    "frontier_eval.py": (
        ["benchmarks/frontier_eval.py", "--quick"],
        FRONTIER,
        "chinchilla_epoch",
        None,
        [pytest.mark.slow],
    ),
    "gpu_check.sh": (["bash", "benchmarks/gpu_check.sh", "--dry-run"], GPU_CHECK, None, None, []),
    "pack_speed.py": (
        ["benchmarks/pack_speed.py", "--quick"],
        PACK_SPEED,
        None,
        _extra_pack_speed,
        [pytest.mark.slow, pytest.mark.serial],
    ),
}
# Scripts in benchmarks/ run in quick mode by another test, or run by a script above.
ELSEWHERE = {
    "gpu_check.py": "gpu_check.sh's dry run (above) runs it with --dry-run",
}


def test_every_benchmark_runs_somewhere():
    """Each script in benchmarks/ is run in quick mode by this file or by the test ELSEWHERE names."""
    scripts = {p.name for p in BENCH.iterdir() if p.suffix in (".py", ".sh")}
    known = set(CASES) | set(ELSEWHERE)
    assert scripts == known, f"run by no test: {sorted(scripts - known)}; gone: {sorted(known - scripts)}"


def _env() -> dict[str, str]:
    """The test session's environment less its 8 simulated devices: each benchmark sets the
    device count it measures with (fit_speed: one per core; the trainer: what it is given)."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


@pytest.mark.parametrize("name", [pytest.param(n, marks=c[4], id=n) for n, c in CASES.items()])
def test_benchmark_quick_run_writes_its_json(name, tmp_path, request):
    args, schema, data, extra, _ = CASES[name]
    if data is not None:
        shared = request.getfixturevalue("shared_data") / data
        args = [a.replace("{shared}", str(shared)) for a in args]
    out = tmp_path / f"{name}.json"
    cmd = args if args[0] == "bash" else [sys.executable, *args]
    proc = subprocess.run(
        [*cmd, "--json", str(out)], cwd=REPO, env=_env(), capture_output=True, text=True, timeout=1200
    )
    tail = f"\n--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-3000:]}"
    assert proc.returncode == 0, f"{name} exited {proc.returncode}{tail}"
    assert out.is_file(), f"{name} wrote no {out.name}{tail}"
    j = json.loads(out.read_text())
    check(j, schema, name)
    if extra is not None:
        extra(j)
    assert not [ln for ln in proc.stdout.splitlines() if ln.startswith("warning: MFU")], (
        f"{name}: an MFU above 1 (a stale peak){tail}"
    )
