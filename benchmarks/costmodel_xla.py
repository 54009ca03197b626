"""The cost model against XLA's compiled train step, as a table (8 simulated CPU devices).

    python benchmarks/costmodel_xla.py [--markdown]

For every layout of tests/test_costmodel_xla.py (data, fsdp, tensor, sequence-, context- and
pipeline-parallel) prints predicted / compiled ratios of: parameter + optimizer-state bytes,
total per-device memory (memory_analysis arguments + temporaries), reduction bytes
(all-reduce + reduce-scatter), gather bytes, and for pipelines the stage-to-stage sends against
the tick loop's collective-permutes, plus what XLA does that the model has no term for
(all-to-all, and collectives outside the tick loop of a pipeline). The test asserts the same
figures; this script is how the table in docs/costmodel.md was made.
"""

from __future__ import annotations

import os
import pathlib
import sys

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from hlo_collectives import hlo_collective_bytes  # noqa: E402
from test_costmodel_xla import LAYOUTS, _estimate, compile_layout  # noqa: E402


def row(name: str) -> dict[str, float | str]:
    exe, batch_dev = compile_layout(name)
    pipe = LAYOUTS[name][1]
    ma = exe.memory_analysis()
    hlo = hlo_collective_bytes(exe.as_text())
    loop = hlo_collective_bytes(exe.as_text(), loops_only=True)
    est = _estimate(name)
    pred = est.collective_bytes()
    mem = est.memory
    out: dict[str, float | str] = {
        "layout": name,
        "state": (mem.params + mem.optimizer) / (ma.argument_size_in_bytes - batch_dev),
        "memory": mem.total / (ma.argument_size_in_bytes + ma.temp_size_in_bytes - batch_dev),
        "reduce_MB": (hlo["all_reduce"] + hlo["reduce_scatter"]) / 1e6,
        "reduce": (pred.get("all_reduce", 0) + pred.get("reduce_scatter", 0))
        / max(hlo["all_reduce"] + hlo["reduce_scatter"], 1),
        "gather_MB": hlo["all_gather"] / 1e6,
        "gather": pred.get("all_gather", 0) / max(hlo["all_gather"], 1),
        "p2p": (pred.get("p2p", 0) / loop["collective_permute"]) if pipe else float("nan"),
        "unmodelled_MB": (
            hlo["all_to_all"]
            + (hlo["collective_permute"] - loop["collective_permute"] if pipe else hlo["collective_permute"])
        )
        / 1e6,
    }
    return out


def main() -> int:
    md = "--markdown" in sys.argv
    cols = ["layout", "state", "memory", "reduce_MB", "reduce", "gather_MB", "gather", "p2p", "unmodelled_MB"]
    rows = [row(n) for n in LAYOUTS]
    if md:
        print("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
    else:
        print(" ".join(f"{c:>13s}" for c in cols))
    for r in rows:
        cells = [str(r[c]) if isinstance(r[c], str) else f"{r[c]:.3f}" for c in cols]
        print("| " + " | ".join(cells) + " |" if md else " ".join(f"{c:>13s}" for c in cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
