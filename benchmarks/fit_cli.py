"""What `python -m analysis fit` costs on the command line, as a multiple of JAX's own start-up.

A command-line fit pays for everything a warm notebook does not: importing JAX and pandas,
tracing the optimiser's programs and loading them from the persistent compile cache, then the
fit itself. This times, as whole processes, on Epoch AI's 240 Chinchilla runs (the 5 highest
losses dropped, as the Epoch replication does):

- `jax`: `python -c 'import jax.numpy as j; j.ones(3).block_until_ready()'`, the floor;
- `fit --bootstrap 0`: the 4,500-start grid search and the forward-chaining refits;
- `fit` (default, 1,000 bootstrap resamples).

Every command runs once untimed first (so the compile cache is warm, as on any second call),
then the commands are alternated `--runs` times (a drift in the machine's speed hits all of them
alike). Printed: median wall and CPU seconds per command and their ratios to `jax`, the figure
the issue's target is stated in (fit wall <= 2x JAX start-up).

    python benchmarks/fit_cli.py [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import pandas as pd

ROOT = pathlib.Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "chinchilla_epoch" / "svg_extracted_data.csv"
JAX_START = [sys.executable, "-c", "import jax.numpy as j; j.ones(3).block_until_ready()"]


def epoch_csv(path: pathlib.Path) -> pathlib.Path:
    """Epoch's runs as a plain N, D, loss table (D = C / 6N), the 5 highest losses dropped."""
    d = pd.read_csv(DATA)
    d = d[d.loss < d.loss.nlargest(5).min()]
    table = pd.DataFrame(
        {"N": d["Model Size"], "D": d["Training FLOP"] / (6 * d["Model Size"]), "loss": d.loss}
    )
    table.to_csv(path, index=False)
    return path


def timed(cmd: list[str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one run of `cmd` as a child process (its output discarded)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="timed runs of each command (default 3)")
    args = ap.parse_args()
    if not DATA.is_file():
        print(f"data not found: {DATA}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        csv = epoch_csv(pathlib.Path(tmp) / "epoch.csv")
        fit = [sys.executable, "-m", "analysis", "fit", str(csv), "--json", os.path.join(tmp, "fit.json")]
        commands = {"jax": JAX_START, "fit --bootstrap 0": [*fit, "--bootstrap", "0"], "fit": fit}
        for cmd in commands.values():  # warm-up: fills the compile cache, loads the files
            timed(cmd)
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
        for _ in range(max(1, args.runs)):
            for name, cmd in commands.items():
                times[name].append(timed(cmd))
    base_wall = statistics.median(w for w, _ in times["jax"])
    base_cpu = statistics.median(c for _, c in times["jax"])
    print(f"{'command':<20} {'wall s':>8} {'cpu s':>8} {'wall / jax':>11} {'cpu / jax':>10}")
    for name, runs in times.items():
        wall = statistics.median(w for w, _ in runs)
        cpu = statistics.median(c for _, c in runs)
        print(f"{name:<20} {wall:8.2f} {cpu:8.2f} {wall / base_wall:10.2f}x {cpu / base_cpu:9.2f}x")
    print(f"(median of {max(1, args.runs)} alternated runs after one warm-up each; {os.cpu_count()} cores)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
