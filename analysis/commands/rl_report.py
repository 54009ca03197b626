"""`python -m analysis rl-report RUNS_DIR OUT_DIR [--json PATH]`: the RL section of a report.

Groups the RL runs under RUNS_DIR into recipes (configuration minus seed and run length), fits the
ScaleRL sigmoid to each on all compute and on its first part, ranks them (ceiling A, then
efficiency B; flagged fits last), writes rl_curves.png, rl_prediction_card.png,
rl_reward_vs_kl.png and rl_section.md into OUT_DIR, and prints the markdown section.
(Replaces `python -m analysis.rl_report`.)
"""

from __future__ import annotations

import argparse
import dataclasses

from analysis.commands._flags import add_fit_until_frac_argument, add_json_argument
from analysis.commands._options import CommandOptions, emit_json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "rl-report",
        help="rank RL recipes: fits, figures and a markdown section",
        description=__doc__.splitlines()[0],
    )
    p.add_argument("runs_dir", metavar="RUNS_DIR", help="folder of RL run directories (searched recursively)")
    p.add_argument("out_dir", metavar="OUT_DIR", help="where the figures and rl_section.md go")
    add_fit_until_frac_argument(p, 0.5)
    add_json_argument(p, "the ranked recipes with their fits (and the markdown)")
    p.set_defaults(func=run)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RLReportOptions(CommandOptions):
    runs_dir: str
    out_dir: str
    fit_until_frac: float


def run(args: argparse.Namespace) -> int:
    opts = RLReportOptions.from_args(args)
    from analysis.rl.report import rl_report  # SciPy + matplotlib; loaded here to keep --help fast

    rep = rl_report(opts.runs_dir, opts.out_dir, opts.fit_until_frac)
    print(rep["markdown"])
    emit_json(opts.json, rep)
    return 0
