"""`python -m analysis report` on a fixture sweep whose losses follow a known Chinchilla law
(tests/sweep_fake_app.py), plus its one-line errors for bad input."""

import json
import os
import pathlib
import re
import subprocess
import sys
from html import unescape

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]


def env():
    e = {k: v for k, v in os.environ.items() if not k.startswith("HYDRA_")}
    e.update(JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO))
    return e


@pytest.fixture(scope="module")
def fake_sweep(tmp_path_factory):
    """3 budgets x 5 rungs; the 80-wide rung diverges, and is too short (< 10 steps) at 2e10."""
    sw = tmp_path_factory.mktemp("rep") / "sweep"
    p = subprocess.run(
        [
            sys.executable,
            str(REPO / "tests" / "sweep_fake_app.py"),
            "-m",
            "+sweep=isoflop",
            "sweep.budgets=[2e10,6e10,1.8e11]",
            "sweep.min_steps=10",
            "train.eval_every=1000",
            "train.ckpt_every=100000",
            "fake.diverge_d_model=80",
            "sweep.ladder.depths=[1,2,3,4,5]",
            f"hydra.sweep.dir={sw}",
            f"hydra.searchpath=[file://{REPO}/conf]",
        ],
        env=env(),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    return sw


@pytest.mark.slow
def test_report_on_a_known_law(fake_sweep, tmp_path):
    out = tmp_path / "rep"
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "analysis",
            "report",
            str(fake_sweep),
            "--out",
            str(out),
            "--budget",
            "1e12",
            "--bootstrap",
            "100",
        ],
        env=env(),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    assert "Traceback" not in p.stderr
    rep = json.loads((out / "report.json").read_text())
    # the fake trainer's eval loss is exactly 1.01 x (1.7 + 400/N^0.34 + 900/D^0.30)
    law = rep["law"]["params"]
    assert abs(law["alpha"] - 0.34) < 0.02 and abs(law["beta"] - 0.30) < 0.02 and abs(law["E"] - 1.717) < 0.05
    h = rep["holdout"]
    assert h["held_out_budget"] == 1.8e11 and h["mean_rel_error"] < 0.005 and h["n_points"] >= 3
    assert rep["law"]["allocation"]["budgets"][0]["C"] == 1e12
    # every run is in the table, including the diverged ones, and they are named in a warning
    statuses = [r["status"] for r in rep["runs"]]
    assert statuses.count("diverged") >= 1 and statuses.count("completed") == rep["n_completed"]
    assert any("did not complete" in w and "diverged" in w for w in rep["warnings"])
    assert rep["skipped_shapes"] and all("sweep.min_steps" in s["reason"] for s in rep["skipped_shapes"])
    html = (out / "report.html").read_text()
    # every figure once: the run-level ones interactive (Plotly), the others embedded PNGs
    assert html.count("<img") + html.count('class="ifig"') == len(rep["figures"]) >= 7
    assert html.count('class="ifig"') >= 5 and html.count("Plotly.newPlot(") == 1
    assert not re.search(r"<img[^>]+src=['\"](?!data:image/png;base64,)", html), "HTML must be self-contained"
    assert "<script src" not in html
    md = (out / "report.md").read_text()
    for name, rel in rep["figures"].items():
        assert f"]({rel})" in md and (out / rel).stat().st_size > 10_000
    assert md.count("| completed |") == rep["n_completed"]
    assert "held-out check: fitted on C <= 6e+10" in p.stdout


def test_report_flags_edge_minima_and_missing_holdout(fake_sweep, tmp_path):
    """Only the two smallest budgets: no held-out check (needs 3), and the law of the fake
    trainer puts the optimum at the ladder's smallest rung -> an edge warning."""
    import shutil

    sw = tmp_path / "two"
    sw.mkdir()
    for d in fake_sweep.iterdir():
        if d.name.startswith(("C2e10", "C6e10")):
            shutil.copytree(d, sw / d.name)
    from analysis.report.build import build_report

    rep = build_report(sw, tmp_path / "out", bootstrap=0)
    assert rep["holdout"] is None
    # report.json is strict JSON: without bootstrap the CIs are NaN, written as null
    from test_analysis_cli import strict_loads

    on_disk = strict_loads((tmp_path / "out" / "report.json").read_text())
    assert on_disk["law"]["ci"]["alpha"] == [None, None] and on_disk["warnings"] == rep["warnings"]
    assert any("at least three compute budgets" in w for w in rep["warnings"])
    assert any("lowest loss is at the" in w for w in rep["warnings"])
    assert len(rep["figures"]) >= 5
    # a plan without flops_to_train / flops_if_separate (older sweeps): the report says nothing
    assert rep["compute"] is None and "compute:" not in (tmp_path / "out" / "report.html").read_text()


@pytest.mark.parametrize(
    "args, msg",
    [
        (["/nonexistent/sweep"], "sweep directory not found"),
        (["{empty}"], "no run directories"),
        (["{empty}", "--bootstrap", "-1"], "--bootstrap must be >= 0"),
        (["{empty}", "--budget", "-3"], "budget must be a positive FLOP count"),
    ],
)
def test_report_bad_input_one_line(args, msg, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    args = [a.format(empty=empty) for a in args]
    p = subprocess.run(
        [sys.executable, "-m", "analysis", "report", *args],
        env=env(),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2 and msg in p.stderr and "Traceback" not in p.stderr


@pytest.mark.slow
def test_report_adds_planning_and_rl_sections(fake_sweep, tmp_path):
    """With --budget and --hardware the report gains a planning section; RL runs under the sweep
    get the RL section and stay out of the pretraining fit; a folder of RL runs alone is an RL report."""
    import shutil

    import numpy as np
    from test_rl_report import _write_run

    from analysis.report.build import build_report

    sw = tmp_path / "sweep"
    shutil.copytree(fake_sweep, sw)
    rng = np.random.default_rng(0)
    for s in range(2):
        _write_run(sw / "rl" / f"grpo_s{s}", "grpo", s, 0.7, 2.0, 1e11, 2e12, rng)
    rep = build_report(sw, tmp_path / "rep", budgets=[1e21], bootstrap=50, hardware="a100-80gb", gpus=64)
    assert all("rl/" not in r["run"] and not r["run"].startswith("grpo") for r in rep["runs"])
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "## Planning" in md and "on 64 × a100-80gb" in md and "## RL scaling" in md
    html = (tmp_path / "rep" / "report.html").read_text()
    figures = html.count("<img") + html.count('class="ifig"')
    assert figures == len(rep["figures"]) + 3  # + RL curves, card, reward-vs-KL
    assert not re.search(r"<img[^>]+src=['\"](?!data:image/png;base64,)", html)
    assert "<h2>Planning</h2>" in html and "<h2>RL scaling</h2>" in html

    rl_rep = build_report(sw / "rl", tmp_path / "rl_rep")
    rl_html = (tmp_path / "rl_rep" / "report.html").read_text()
    assert rl_rep["rl_only"] and rl_html.count("<img") == 3
    assert rl_html.index('id="verdict"') < rl_html.index("<img") and rl_rep["verdict"].startswith(
        "RL runs only"
    )


# the first screen of report.html: the verdict, then tables that read at 1280 px without scrolling sideways
VIEW_WIDTH = 1280
VIEW_HEIGHT = 800  # a laptop's first screen: the verdict must end above it
MAX_PRE_LINE = 100  # characters; a longer preformatted line runs off a 1280 px page
MAX_COLUMNS = 8


@pytest.fixture(scope="module")
def first_screen(fake_sweep, tmp_path_factory):
    """(report dict, report.html's text up to its first figure, the HTML path) for the fixture
    sweep with a plan that records the branch sweep's compute."""
    import shutil

    from analysis.report.build import build_report

    sw = tmp_path_factory.mktemp("first") / "sweep"
    shutil.copytree(fake_sweep, sw)
    plan = json.loads((sw / "sweep_plan.json").read_text())
    (sw / "sweep_plan.json").write_text(json.dumps(dict(plan, flops_to_train=4.6e12, flops_if_separate=7e12)))
    out = sw.parent / "rep"
    rep = build_report(sw, out, budgets=[1e12], bootstrap=20)
    page = (out / "report.html").read_text()
    return rep, page[: page.index("<figure")], out / "report.html"


def test_report_opens_with_the_verdict(first_screen):
    """The verdict sentence comes first: report.json `verdict`, the first paragraph of report.md,
    the element id="verdict" of report.html before any figure (no "plotly" before it either); it
    states the budget's N*, D*, tokens per parameter, the loss with its 90% interval and the
    held-out check in words, with the report's own numbers."""
    from analysis.report.render import _count, count3

    rep, head, page = first_screen
    v = rep["verdict"]
    (r,) = rep["law"]["allocation"]["budgets"]
    h = rep["holdout"]
    assert v.startswith(
        f"At 1e12 FLOPs train {count3(r['N_opt'])} parameters on {count3(r['D_opt'])} tokens ("
    )
    assert f"{r['D_opt'] / r['N_opt']:.0f} tokens/param): loss " in v and "(90%)" in v
    assert f"predicted within {max(100 * h['mean_rel_error'], 0.01):.3g}%" in v
    assert f"{h['n_inside']} of {h['n_intervals']} inside" in v and v.endswith(".")
    assert json.loads((page.parent / "report.json").read_text())["verdict"] == v
    md = (page.parent / "report.md").read_text()
    assert md.split("\n\n")[1] == f"**{v}**"  # the title, then the verdict
    html = page.read_text()
    at = html.index('<p id="verdict" class="verdict">')
    assert at < min(i for i in (html.find(m) for m in ("<img", "<svg", "plotly", "vega")) if i >= 0)
    assert '<p id="verdict" class="verdict">' in head
    # no absolute path before the details at the end
    assert str(page.parent.parent) not in html[: html.index("<details>")]
    assert rep["sweep_dir"] in html[html.index("<details>") :]
    assert _count(r["N_opt"]) in head  # the allocation table, with the same numbers


def test_report_first_screen_separates_ci_from_prediction_intervals(first_screen):
    """Before the first figure: predictions with 90% prediction intervals in one table; the
    allocation against the published laws and the law's parameters with 95% CIs in others; one
    best-loss number; the held-out coverage in words with no fixed error target; the compute;
    no wide <pre> or table."""
    from analysis.report.render import _count, _iv, _tpp, headline

    rep, head, page = first_screen
    tables = re.findall(r"<table.*?</table>", head, flags=re.S)
    assert len(tables) == 3
    preds, alloc, law_t = tables
    (r,) = rep["law"]["allocation"]["budgets"]
    assert "90% prediction interval" in preds and "95%" not in preds
    assert f"<td>{_iv(r['loss_interval'])}</td>" in preds and f"<td>{r['loss']:.4g}</td>" in preds
    assert "best loss" not in head.replace("expected best loss", "") and "law minimum" not in head
    for k in ("E", "A", "alpha", "B", "beta"):
        assert f"<td>{k}</td>" in law_t and f"<td>{_iv(rep['law']['ci'][k])}</td>" in law_t
    assert "90%" not in law_t and "95% bootstrap CIs" in head
    assert f"{_count(r['N_opt'])} {_iv(r['N_opt_ci'], _count)}" in alloc
    assert f"<td>{_tpp(r['tokens_per_param'])} {_iv(r['tokens_per_param_ci'], _tpp)}</td>" in alloc
    for name in ("Hoffmann et al. 2022", "Besiroglu et al. 2024", "Kaplan et al. 2020"):
        assert name in alloc
    for cite in (
        "arXiv:2203.15556",
        "arXiv:2404.10102",
        "arXiv:2001.08361",
        "E = 1.69",
        "A = 482.01",
        "0.73",
    ):
        assert cite in head
    h = rep["holdout"]
    assert "target" not in h and "PASS" not in head and "target ≤" not in head
    assert f"{h['n_inside']} of {h['n_intervals']} inside" in head and "binomial p = " in head
    c = rep["compute"]
    assert c == {"flops_to_train": 4.6e12, "flops_if_separate": 7e12, "ratio": pytest.approx(4.6 / 7)}
    assert "compute: 4.6e12 FLOPs trained, 0.66x the 7e12 of separate runs" in head
    for pre in re.findall(r"<pre[^>]*>(.*?)</pre>", head, flags=re.S):
        assert max(map(len, pre.splitlines()), default=0) <= MAX_PRE_LINE
    for table in tables:
        for row in re.findall(r"<tr.*?</tr>", table, flags=re.S):
            spans = [int(n or 1) for n in re.findall(r"<t[dh](?: colspan=['\"](\d+)['\"])?[^>]*>", row)]
            assert sum(spans) <= MAX_COLUMNS
    # the console headline: plain text, the law and the held-out check, now without a target
    lines = headline(rep)
    assert lines[0].startswith("law: L(N,D) = ")
    (held,) = [ln for ln in lines if ln.startswith("held-out check: fitted on C <=")]
    assert "target" not in held and f"{h['n_inside']} of {h['n_intervals']} inside" in held
    # ... collapsed after the lead figure, in the Markdown and so in the HTML
    assert "law: L(N,D) = " not in head and "law: L(N,D) = " in page.read_text()


def test_report_details_are_collapsed_at_the_end(first_screen):
    """Every run, the skipped shapes and the console numbers are <details> (closed); the run list
    names its MFU convention, the planner's."""
    rep, _, page = first_screen
    html = page.read_text()
    details = re.findall(r"<details><summary>(.*?)</summary>(.*?)</details>", html, flags=re.S)
    titles = [t for t, _ in details]
    assert titles[0] == "The same numbers as the command line prints them"
    runs = next(body for t, body in details if t.startswith("All ") and "runs" in t)
    assert runs.count("<td>completed</td>") == rep["n_completed"]
    assert "MFU % (palm_6N+12LHQT)" in runs and "the planner" in runs
    assert any("the sweep skipped" in t for t in titles) and "<details open" not in html
    assert html.index("<h2>Warnings</h2>") < html.index(f"<summary>{titles[1]}</summary>")


def test_report_html_is_its_markdown_rendered(first_screen):
    """One renderer: report.html's body is report.md rendered by markdown-it-py (the interactive
    figures in place of their PNGs), then plotly.js and the figures' script; no table, figure,
    warning or details section of the page is written by hand."""
    from analysis.report.render import markdown_to_html

    rep, _, page = first_screen
    md = (page.parent / "report.md").read_text()
    body = page.read_text().split("<body>\n", 1)[1].rsplit("</body>", 1)[0]
    text, scripts = body.split("<script>", 1)
    interactive = re.findall(r'id="ifig-(\w+)"', text)
    assert set(interactive) == {
        "loss_vs_compute",
        "isoflop",
        "allocation",
        "residuals",
        "holdout",
        "throughput",
    }
    assert text == markdown_to_html(md, page.parent, {rep["figures"][n]: {} for n in interactive})
    assert scripts.count("Plotly.newPlot(") == 1 and all(f'"ifig-{n}":' in scripts for n in interactive)
    assert body.count("<table") == md.count("\n|---|") >= 4
    assert body.count("<figure>") == body.count("<figcaption>") == md.count("![")
    assert body.count('<div class="warn">') == md.count("\n- warning: ") > 0
    assert body.count("<details>") == body.count("</details>") == md.count("\n## Details: ") >= 3


def test_report_first_screen_in_a_headless_browser(first_screen, tmp_path):
    """Opened at 1280 px in Debian's headless Chromium (.ci/run installs it; tests/test_report_browser.py
    says when it is missing), the page does not scroll sideways, no element before the first figure
    overflows its box and the verdict ends within the first screen; the screenshot is kept beside
    the report."""
    from test_report_browser import CHROMIUM_ARGS, chromium

    browser = chromium()
    _, _, page = first_screen
    probe = tmp_path / "probe.html"
    probe.write_text(page.read_text().replace("</body>", PROBE))
    flags = [
        browser,
        *CHROMIUM_ARGS,
        "--hide-scrollbars",
        f"--user-data-dir={tmp_path / 'profile'}",
        f"--window-size={VIEW_WIDTH},{VIEW_HEIGHT}",
    ]
    dom = subprocess.run(
        [*flags, "--dump-dom", probe.as_uri()], capture_output=True, text=True, timeout=120
    ).stdout
    m = re.search(r'<output id="probe">([^<]*)</output>', dom)
    assert m, dom[-2000:]
    got = json.loads(unescape(m.group(1)))
    assert got["view"] == VIEW_WIDTH and got["page"] <= VIEW_WIDTH, got
    assert not got["overflowing"], got
    assert 0 < got["verdict_bottom"] <= VIEW_HEIGHT, got
    shot = page.parent / "first_screen.png"
    subprocess.run([*flags, f"--screenshot={shot}", page.as_uri()], capture_output=True, timeout=120)
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and int.from_bytes(png[16:20], "big") == VIEW_WIDTH


# appended to the page: records every element before the first figure that overflows its box
PROBE = """<script>(function(){var bad=[],els=document.body.querySelectorAll('*');
for(var i=0;i<els.length;i++){var e=els[i];if(e.tagName==='FIGURE')break;
if(e.clientWidth>0&&e.scrollWidth>e.clientWidth+1)bad.push(e.tagName+' '+e.scrollWidth+'>'+e.clientWidth);}
var v=document.getElementById('verdict');
var o=document.createElement('output');o.id='probe';o.textContent=JSON.stringify(
{page:document.documentElement.scrollWidth,view:window.innerWidth,overflowing:bad,
verdict_bottom:v?v.getBoundingClientRect().bottom:-1});
document.body.appendChild(o);})();</script></body>"""


def test_read_compute_from_the_sweep_plan(tmp_path):
    """sweep_plan.json's flops_to_train / flops_if_separate: stated with their ratio; absent (an
    older sweep, or no plan) -> None and no warning; not positive numbers -> None and one warning."""
    from analysis.report.build import read_compute

    warn: list[str] = []
    assert read_compute(tmp_path, warn) is None
    (tmp_path / "sweep_plan.json").write_text(json.dumps({"runs": []}))
    assert read_compute(tmp_path, warn) is None and warn == []
    (tmp_path / "sweep_plan.json").write_text(json.dumps({"flops_to_train": 2e12, "flops_if_separate": 4e12}))
    assert read_compute(tmp_path, warn) == {"flops_to_train": 2e12, "flops_if_separate": 4e12, "ratio": 0.5}
    (tmp_path / "sweep_plan.json").write_text(json.dumps({"flops_to_train": "x", "flops_if_separate": 0}))
    assert read_compute(tmp_path, warn) is None
    assert len(warn) == 1 and "flops_to_train and flops_if_separate must be positive" in warn[0]


def test_markdown_conventions_render_as_the_report_looks(tmp_path):
    """The Markdown conventions report.html is rendered with: a bold-only row with empty cells is
    a section row of a summary table, an image alone is a <figure> with the italic paragraph after
    it as caption (embedded; a missing file is said), "warning: " items are warning boxes; `|` in
    a cell and emphasis characters in a caption stay literal."""
    from analysis.report.render import markdown_to_html, md_escape, md_table, warning_list

    png = b"\x89PNG\r\n\x1a\n" + b"\0" * 16
    (tmp_path / "f.png").write_bytes(png)
    md = "\n".join(
        [
            *md_table(["", "estimate"], [["**Section | one**", ""], ["a|b", "1"]]),
            *md_table(["x", "y"], [["**bold**", "2"]]),
            "![f](f.png)",
            "",
            f"*{md_escape('N* and D*, a_b _c_ *x*')}*",
            "",
            "![g](missing.png)",
            "",
            *warning_list(["one `code`", "two"]),
            "Then:",
            "",
            "- plain item",
            "- warning: mixed",
        ]
    )
    assert "| **Section \\| one** |  |\n| a\\|b | 1 |" in md and md.count("|---|---|") == 2
    html = markdown_to_html(md, tmp_path)
    summary, plain = re.findall(r"<table.*?</table>", html, flags=re.S)
    assert summary.startswith('<table class="summary">') and plain.startswith("<table>\n")
    assert '<tr class="sec">\n<th colspan="2">Section | one</th>\n</tr>' in summary
    assert "<td>a|b</td>" in summary and "<td><strong>bold</strong></td>\n<td>2</td>" in plain
    b64 = __import__("base64").b64encode(png).decode()
    assert (
        f"<figure><img alt='f' src='data:image/png;base64,{b64}'>"
        "<figcaption>N* and D*, a_b _c_ *x*</figcaption>" in html
    )
    assert "<figure>(missing figure missing.png)</figure>" in html
    assert '<div class="warn">one <code>code</code></div>\n<div class="warn">two</div>' in html
    assert "<li>plain item</li>\n<li>warning: mixed</li>" in html and html.count("<ul>") == 1


def test_coverage_is_flagged_only_when_implausibly_low():
    """The held-out check has no fixed error target: its 90% intervals are flagged when fewer runs
    fall inside than such intervals plausibly give (one-sided binomial, p < 0.05)."""
    from scipy.stats import binom

    from analysis.report.build import COVERAGE_ALPHA, coverage_check

    def pts(inside: int, n: int) -> list[dict]:
        return [{"actual": 1.0, "interval": [0.9, 1.1] if i < inside else [1.2, 1.3]} for i in range(n)]

    one = coverage_check(pts(0, 1))
    assert one["n_inside"] == 0 and one["coverage_p"] == pytest.approx(0.1) and not one["too_few_inside"]
    two_of_four = coverage_check(pts(2, 4))  # P(X <= 2 | 4, 0.9) = 0.0523: not flagged
    assert two_of_four["coverage_p"] == pytest.approx(0.0523) and not two_of_four["too_few_inside"]
    low = coverage_check(pts(6, 10))
    assert low["too_few_inside"] and low["coverage_p"] == pytest.approx(binom.cdf(6, 10, 0.9))
    assert low["coverage_p"] < COVERAGE_ALPHA
    assert not coverage_check(pts(10, 10))["too_few_inside"]
    none = coverage_check([{"actual": 1.0}])
    assert none["n_intervals"] == 0 and not none["too_few_inside"]


def test_verdict_words_without_a_law_or_a_holdout():
    """The verdict is a sentence in every case: no allocation (law not fitted) and no held-out
    check say so; a flagged coverage says it in the verdict."""
    from analysis.report.render import verdict

    assert verdict({"law": None, "holdout": None}) == (
        "No compute-optimal answer: the law was not fitted (see the warnings); no held-out check "
        "(it needs three or more compute budgets)."
    )
    law = {
        "allocation": {
            "budgets": [
                {"C": 1e13, "N_opt": 161e3, "D_opt": 11.3e6, "loss": 1.353, "loss_interval": [1.131, 1.652]}
            ]
        }
    }
    hold = {"held_out_budget": 1e12, "mean_rel_error": 0.0188, "n_intervals": 10, "n_inside": 6}
    v = verdict({"law": law, "holdout": dict(hold, too_few_inside=True, coverage_p=0.013)})
    assert v == (
        "At 1e13 FLOPs train 161k parameters on 11.3M tokens (70 tokens/param): loss 1.35 [1.13, 1.65] "
        "(90%); held-out budget (1e12 FLOPs) predicted within 1.88%, 6 of 10 inside their 90% prediction "
        "intervals — fewer than 90% intervals plausibly give (one-sided binomial p = 0.013)."
    )


def test_published_laws_give_their_papers_allocations():
    """The published constants give the allocations their papers state: Hoffmann et al.'s
    Approach 3 a = 0.46 (their Table 2: 0.46), Epoch's refit a = 0.51 (Besiroglu et al.: 0.513),
    Kaplan et al.'s 1.3e9 parameters at one PF-day; D = C / 6N throughout."""
    from analysis.report.published import LAWS, PF_DAY, published

    laws = {law.key: law for law in LAWS}
    assert laws["hoffmann2022"].exponent == pytest.approx(0.4516, abs=1e-4)
    assert laws["besiroglu2024"].exponent == pytest.approx(0.5126, abs=1e-4)
    (k,) = laws["kaplan2020"].at([PF_DAY])
    assert k["N_opt"] == pytest.approx(1.3e9) and k["D_opt"] == pytest.approx(PF_DAY / (6 * 1.3e9))
    # Hoffmann's eq. (4) by hand at 1e24 FLOPs
    G = (0.34 * 406.4 / (0.28 * 410.7)) ** (1 / 0.62)
    (h,) = laws["hoffmann2022"].at([1e24])
    assert h["N_opt"] == pytest.approx(G * (1e24 / 6) ** (0.28 / 0.62), rel=1e-9)
    assert h["tokens_per_param"] == pytest.approx(h["D_opt"] / h["N_opt"])
    rec = published([1e21, 1e23])
    assert [r["key"] for r in rec] == ["hoffmann2022", "besiroglu2024", "kaplan2020"]
    assert all("arXiv:" in r["citation"] and len(r["at"]) == 2 for r in rec)


def test_mfu_is_converted_to_the_planners_convention():
    """The run list's MFU is the planner's (PaLM's 6N + 12·L·H·Q·T): summary.json's causal MFU times
    the ratio of the two FLOP counts; NaN where the model config is missing or the convention is
    another (a mixture of experts' active FLOPs)."""
    import pandas as pd

    from analysis.report.build import MFU_CONVENTION, planner_mfu
    from models.config import ModelConfig
    from models.flops import MFU_ACTIVE, MFU_CAUSAL, flops_per_token, palm_flops_per_token, param_count
    from sharding.costmodel import MFU_CONVENTION as COST_MODEL

    assert MFU_CONVENTION == COST_MODEL
    cfg = ModelConfig(d_model=128, n_layers=4, n_heads=4, seq_len=256)
    n, fpt = param_count(cfg), flops_per_token(cfg)
    runs = pd.DataFrame(
        {
            "mfu": [0.2, 0.2, 0.2, 0.2, None],
            "mfu_convention": [MFU_CAUSAL, None, MFU_ACTIVE, MFU_CAUSAL, MFU_CAUSAL],
            "model": [json.dumps(cfg.to_dict())] * 3 + [None, json.dumps(cfg.to_dict())],
            "n_params": [n] * 5,
            "flops_per_token": [fpt] * 5,
        }
    )
    got = planner_mfu(runs)
    want = 0.2 * palm_flops_per_token(n, 4, 128, 256) / fpt
    assert got[0] == pytest.approx(want) and got[1] == pytest.approx(want) and want > 0.2
    assert got[2:].isna().all()


def test_long_notes_and_warnings_are_summarised():
    """A note ending in many names shows its count (the names are under Details); warnings show
    a short tag each on the first screen."""
    from analysis.report.render import short_note, warning_tags

    names = ", ".join(f"trunk{i}" for i in range(25))
    note = f"left out 25 WSD trunk run(s) (constant LR; their cooldown branches are the runs): {names}"
    assert short_note(note) == (
        "left out 25 WSD trunk run(s) (constant LR; their cooldown branches are the runs) "
        "(25 names, listed under Details)"
    )
    assert short_note("left out: a, b") == "left out: a, b"
    tags = warning_tags(
        ["budget C=1e20: the lowest loss ...", "14 compute budgets have fewer (C=1, 2)", "x" * 99]
    )
    assert tags == "budget C=1e20, 14 compute budgets have fewer, " + "x" * 59 + "…"


def test_interactive_specs_name_each_run_and_embed_safely():
    """A Plotly spec carries each run's name, N, D, C and loss for its hover; NaN becomes null and
    "</" cannot close the page's <script>; plotly.js is embedded once, after the given figures."""
    import numpy as np
    import pandas as pd

    from analysis.report import interactive

    done = pd.DataFrame(
        {
            "run": ["a</script>", "b"],
            "n_params": [1.61e5, 2e6],
            "tokens": [11.3e6, 1e8],
            "flops": [1e13, 1.2e15],
            "final_eval_loss": [1.35, np.nan],
        }
    )
    spec = interactive.loss_vs_compute(done, None)
    (runs,) = spec["data"]
    assert runs["customdata"] == [
        ["a</script>", "161k", "11.3M", "1e13", "1.3500"],
        ["b", "2M", "100M", "1.2e15", "–"],
    ]
    assert "%{customdata[0]}" in runs["hovertemplate"] and spec["layout"]["xaxis"]["type"] == "log"
    text = interactive.figure_json(spec)
    assert "</script>" not in text and "NaN" not in text and json.loads(text)["data"][0]["y"][1] is None
    page = interactive.scripts({"loss_vs_compute": spec})
    assert page.count("<script>") == 2 and page.count("Plotly.newPlot(") == 1
    assert '"ifig-loss_vs_compute":' in page and interactive.scripts({}) == ""
    assert interactive.element("isoflop") == '<div class="ifig" id="ifig-isoflop"></div>'
