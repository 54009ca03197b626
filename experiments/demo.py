"""`python -m experiments.demo`: the main job, sweep -> collect -> fit -> report, on a laptop CPU.

It runs the `demo` sweep preset (conf/sweep/demo.yaml: an IsoFLOP sweep of 7 budgets (1e11-1e12
FLOPs) x 6 shapes (6k-246k parameters) as WSD cooldown branches of one trunk per shape, plus an LR
probe at the smallest budget, in packs of 4, on the embedded stdlib corpus, two jobs at a time,
each pinned to its own core; shapes with fewer than 100 steps
or more than one epoch at a budget are skipped) through the
real command line, `python -m experiments.train -m +sweep=demo`, then writes the fitted-law
report (analysis/report/build.py): Chinchilla law + IsoFLOP profiles with bootstrap CIs, a held-out
check that fits the smaller budgets and predicts the largest, figures, HTML and Markdown. The runs
also measure two downstream tasks (`eval.tasks` in the preset), and the report predicts their
accuracy, with a 90% interval, at the law's compute-optimal (N*, D*) for 10x the largest budget.

Idempotent: the sweep lives at a fixed path, so running the demo again reuses every finished
run (and resumes an interrupted one from its checkpoint); only the report is rebuilt. Progress
is printed as runs start and finish; the full sweep log is in <out>/sweep.log. Ends by printing
the report's path and the headline numbers.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import pathlib
import signal
import subprocess
import sys
import time

from models.base.errors import AnalysisError

# the sweep's lines the demo echoes: its plan, its count lines (the same five words at the start and at
# the end) and one `sweep progress:` line per finished run (experiments/sweeps/monitor.py)
SHOW = ("[launch]", "[reuse", "[skip", "sweep plan:", "sweep progress:", "sweep done", "error", "launching ")


def _die_with_parent() -> None:
    """Child side of Popen: get SIGKILL when the demo dies, so a killed demo leaves no orphans."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _fmt_t(s: float) -> str:
    return f"{int(s) // 60}:{int(s) % 60:02d}"


def run_sweep(sweep_dir: pathlib.Path, log_path: pathlib.Path, extra: list[str], t0: float) -> int:
    """Run the demo sweep as a child process, echoing the plan and each run's end."""
    cmd = [
        sys.executable,
        "-m",
        "experiments.train",
        "-m",
        "+sweep=demo",
        f"hydra.sweep.dir={sweep_dir}",
        *extra,
    ]
    print(f"[demo] sweep: {' '.join(cmd[1:])}", flush=True)
    repo = pathlib.Path(__file__).resolve().parents[1]
    env = dict(
        os.environ,
        PYTHONUNBUFFERED="1",
        PYTHONPATH=os.pathsep.join([str(repo), *filter(None, [os.environ.get("PYTHONPATH")])]),
    )
    with open(log_path, "a") as log:
        p = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=repo,
            env=env,
            bufsize=1,
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
        )
        assert p.stdout is not None
        for line in p.stdout:
            log.write(line)
            s = line.rstrip()
            if s.startswith("completed:"):
                print(f"[demo {_fmt_t(time.time() - t0)}] run {s}", flush=True)
            elif any(k in s for k in SHOW) and "#" not in s[:40]:
                print(f"[demo {_fmt_t(time.time() - t0)}] {s.split('] ', 1)[-1]}", flush=True)
        rc = p.wait()
    return rc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.demo", description=__doc__.splitlines()[0])
    ap.add_argument(
        "--out",
        default="outputs/demo",
        help="demo directory: sweep/, report/, sweep.log (default outputs/demo)",
    )
    ap.add_argument(
        "--budget", type=float, default=1e13, help="compute budget (FLOPs) to state N*/D* for (default 1e13)"
    )
    ap.add_argument(
        "--bootstrap", type=int, default=1000, help="bootstrap resamples for the CIs (default 1000)"
    )
    ap.add_argument(
        "overrides",
        nargs="*",
        help="extra Hydra overrides for the sweep, e.g. 'sweep.budgets=[1e11,3e11,1e12]'",
    )
    args = ap.parse_args(argv)
    if not (args.budget > 0 and args.budget < float("inf")):
        print(f"error: --budget must be a positive FLOP count (got {args.budget})", file=sys.stderr)
        return 2
    t0 = time.time()
    out = pathlib.Path(args.out).resolve()
    sweep_dir, report_dir = out / "sweep", out / "report"
    out.mkdir(parents=True, exist_ok=True)
    rc = run_sweep(sweep_dir, out / "sweep.log", args.overrides, t0)
    if rc != 0:
        print(
            f"error: the sweep failed (exit {rc}); see {out / 'sweep.log'}; run the demo again to resume it",
            file=sys.stderr,
        )
        return 1
    t_sweep = time.time() - t0
    print(
        f"[demo {_fmt_t(t_sweep)}] sweep finished; fitting laws ({args.bootstrap} bootstrap resamples) and "
        "writing the report",
        flush=True,
    )
    # The analysis stack (JAX, pandas, matplotlib) loads only now, after the sweep: the demo's
    # parent process stays small while its children train.
    from analysis.report.build import build_report
    from analysis.report.render import headline
    from models.base.jaxcache import enable_compile_cache

    enable_compile_cache()  # the fits' XLA programs are the same every time: a rerun starts faster
    try:
        rep = build_report(
            sweep_dir,
            report_dir,
            budgets=[args.budget],
            bootstrap=args.bootstrap,
            title="scalelab demo: IsoFLOP sweep on the Python stdlib corpus",
        )
    except AnalysisError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    total = time.time() - t0
    print()
    print(
        f"=== scalelab demo: {rep['n_completed']} runs, budgets "
        f"{', '.join(f'{b:.3g}' for b in rep['budgets_swept'])} FLOPs; "
        f"sweep {_fmt_t(t_sweep)}, total {_fmt_t(total)} ==="
    )
    for line in headline(rep):
        print(line)
    for n in rep.get("notes", []):
        print(f"note: {n}")
    for w in rep["warnings"]:
        print(f"warning: {w}")
    print(f"report: {rep['paths']['html']}")
    print(f"        {rep['paths']['md']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
