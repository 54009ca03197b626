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
    assert html.count("<img") == len(rep["figures"]) >= 7
    assert not re.search(r"<img[^>]+src=['\"](?!data:image/png;base64,)", html), "HTML must be self-contained"
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
    assert html.count("<img") == len(rep["figures"]) + 3  # + RL curves, card, reward-vs-KL
    assert not re.search(r"<img[^>]+src=['\"](?!data:image/png;base64,)", html)
    assert "<h2>Planning</h2>" in html and "<h2>RL scaling</h2>" in html

    rl_rep = build_report(sw / "rl", tmp_path / "rl_rep")
    assert rl_rep["rl_only"] and (tmp_path / "rl_rep" / "report.html").read_text().count("<img") == 3


# the first screen of report.html (issue 31): a summary table that reads at 1280 px without scrolling
VIEW_WIDTH = 1280
VIEW_HEIGHT = 900  # a laptop's first screen: the summary table must end above it
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


def test_report_first_screen_is_a_summary_table(first_screen):
    """Before the first figure: a table with the law's CIs, the target budget's N*, D* and loss
    with its 90% interval, the held-out verdict and the sweep's compute; no wide <pre>, no wide table."""
    from analysis.report.render import _count, _iv, headline, summary_sections

    rep, head, page = first_screen
    assert '<table class="summary">' in head
    law = rep["law"]
    for k in ("E", "A", "alpha", "B", "beta"):
        assert f"<td>{k}</td>" in head and f"<td>{_iv(law['ci'][k])}</td>" in head
    (r,) = law["allocation"]["budgets"]
    assert r["C"] == 1e12 and "At C = 1e12 FLOPs" in head
    assert f"<td>{_iv(r['loss_interval'])}</td>" in head and f"<td>{_iv(r['N_opt_ci'], _count)}</td>" in head
    h = rep["holdout"]
    assert h["target"] == 0.03 and f"{100 * h['mean_rel_error']:.2f}%" in head
    assert (
        "PASS: target ≤ 3%" in head
        and f"{round(h['coverage'] * h['n_points'])} of {h['n_points']} inside" in head
    )
    c = rep["compute"]
    assert c == {"flops_to_train": 4.6e12, "flops_if_separate": 7e12, "ratio": pytest.approx(4.6 / 7)}
    assert "compute: 4.6e12 FLOPs trained, 0.66x the 7e12 of separate runs" in head
    for pre in re.findall(r"<pre[^>]*>(.*?)</pre>", head, flags=re.S):
        assert max(map(len, pre.splitlines()), default=0) <= MAX_PRE_LINE
    for table in re.findall(r"<table.*?</table>", head, flags=re.S):
        for row in re.findall(r"<tr.*?</tr>", table, flags=re.S):
            spans = [int(n or 1) for n in re.findall(r"<t[dh](?: colspan=['\"](\d+)['\"])?[^>]*>", row)]
            assert sum(spans) <= MAX_COLUMNS
    # the console headline is unchanged: plain text, the law and the held-out check
    lines = headline(rep)
    assert lines[0].startswith("law: L(N,D) = ") and any(
        ln.startswith("held-out check: fitted on C <=") for ln in lines
    )
    # ... and follows the lead figure, in the Markdown and so in the HTML
    assert "law: L(N,D) = " not in head and "law: L(N,D) = " in page.read_text()
    section = '<tr class="sec">\n<th colspan="5">Law L(N,D) = E + A/N^alpha + B/D^beta'
    assert head.count('<tr class="sec">') == len(summary_sections(rep)) == 4 and section in head


def test_report_html_is_its_markdown_rendered(first_screen):
    """One renderer: report.html's body is report.md rendered by markdown-it-py, and no table,
    figure or warning of the page is written by hand."""
    from analysis.report.render import markdown_to_html

    _, _, page = first_screen
    md = (page.parent / "report.md").read_text()
    body = page.read_text().split("<body>\n", 1)[1].rsplit("</body>", 1)[0]
    assert body == markdown_to_html(md, page.parent)
    assert body.count("<table") == md.count("\n|---|") >= 4
    assert body.count("<figure>") == body.count("<figcaption>") == md.count("![")
    assert body.count('<div class="warn">') == md.count("\n- warning: ") > 0


def _browser() -> str | None:
    import shutil

    names = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome")
    return next((b for b in map(shutil.which, names) if b), None)


# appended to the page: records every element before the first figure that overflows its box
PROBE = """<script>(function(){var bad=[],bottom=0,els=document.body.querySelectorAll('*');
for(var i=0;i<els.length;i++){var e=els[i];if(e.tagName==='FIGURE')break;
if(e.clientWidth>0&&e.scrollWidth>e.clientWidth+1)bad.push(e.tagName+' '+e.scrollWidth+'>'+e.clientWidth);
if(e.tagName==='TABLE')bottom=Math.max(bottom,e.getBoundingClientRect().bottom);}
var o=document.createElement('output');o.id='probe';o.textContent=JSON.stringify(
{page:document.documentElement.scrollWidth,view:window.innerWidth,overflowing:bad,table_bottom:bottom});
document.body.appendChild(o);})();</script></body>"""


def test_report_first_screen_in_a_headless_browser(first_screen, tmp_path):
    """Opened at 1280 px in headless Chromium (where one is installed: apt's chromium-headless-shell),
    the page does not scroll sideways, no element before the first figure overflows its box and
    the summary table ends within the first screen; the screenshot is kept beside the report."""
    browser = _browser()
    if browser is None:
        pytest.skip("no headless Chromium installed (apt-get install chromium-headless-shell)")
    _, _, page = first_screen
    probe = tmp_path / "probe.html"
    probe.write_text(page.read_text().replace("</body>", PROBE))
    flags = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
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
    assert 0 < got["table_bottom"] <= VIEW_HEIGHT, got
    shot = page.parent / "first_screen.png"
    subprocess.run([*flags, f"--screenshot={shot}", page.as_uri()], capture_output=True, timeout=120)
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and int.from_bytes(png[16:20], "big") == VIEW_WIDTH


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
