"""report.html in a real browser: Playwright drives Debian's Chromium (/usr/bin/chromium, which
.ci/run installs) on the report of Epoch's Chinchilla points (../shared/data). At 1280x800 the
verdict is visible on the first screen and comes before the first figure; hovering a run of an
interactive figure shows its hover label (name, N, D, C, loss); a dragged box zooms; the page asks
the network for nothing (plotly.js is embedded, no CDN).

Without Chromium the tests skip with one line; under CI=true they fail (CI installs it)."""

import os
import pathlib
import re
import sys

import pytest

CHROMIUM = pathlib.Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VIEW = {"width": 1280, "height": 800}
# what the external check counts as a figure: the first of these strings in the HTML text
FIGURE_MARKERS = ("<img", "<svg", "plotly", "vega")


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def chromium() -> str:
    """Debian's Chromium, or a skip (a laptop without it) / a failure (CI=true: .ci/run installs it)."""
    if CHROMIUM.is_file() and os.access(CHROMIUM, os.X_OK):
        return str(CHROMIUM)
    message = f"no {CHROMIUM} (apt-get install chromium)"
    if in_ci():
        pytest.fail(message + "; CI=true: .ci/run installs it", pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="module")
def epoch_report(shared_data, tmp_path_factory) -> pathlib.Path:
    """report.html of Epoch's Chinchilla points (the runs table as published), few resamples."""
    from analysis.report.build import build_report

    out = tmp_path_factory.mktemp("epoch") / "rep"
    build_report(shared_data / "chinchilla_epoch" / "svg_extracted_data.csv", out, bootstrap=20)
    return out / "report.html"


@pytest.fixture(scope="module")
def page(epoch_report, tmp_path_factory):
    """The report opened at 1280x800 in headless Chromium with a fresh profile; every request that
    is not the file itself is recorded and refused."""
    exe = chromium()
    from playwright.sync_api import sync_playwright

    profile = tmp_path_factory.mktemp("profile")
    with sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(
            str(profile), executable_path=exe, args=CHROMIUM_ARGS, headless=True, viewport=VIEW
        )
        try:
            pg = ctx.new_page()
            asked: list[str] = []

            def refuse(route):
                if route.request.url != epoch_report.as_uri():
                    asked.append(route.request.url)
                    return route.abort()
                return route.continue_()

            pg.route("**/*", refuse)
            pg.goto(epoch_report.as_uri())
            pg.wait_for_selector("#ifig-isoflop .main-svg", timeout=60_000)
            pg.asked = asked
            yield pg
        finally:
            ctx.close()


def test_verdict_is_on_the_first_screen_before_any_figure(page, epoch_report):
    text = epoch_report.read_text()
    first_figure = min([i for i in (text.find(m) for m in FIGURE_MARKERS) if i >= 0] or [len(text)])
    assert 0 <= text.find('id="verdict"') < first_figure
    verdict = page.locator("#verdict")
    assert verdict.is_visible()
    box = verdict.bounding_box()
    assert box and box["x"] >= 0 and box["y"] >= 0, box
    assert box["x"] + box["width"] <= VIEW["width"] and box["y"] + box["height"] <= VIEW["height"], box
    assert re.match(
        r"At \S+ FLOPs train \S+ parameters on \S+ tokens \(\S+ tokens/param\)", verdict.inner_text()
    )
    # in the page as laid out, too: the verdict precedes every figure element
    before = page.evaluate(
        """() => { const v = document.getElementById('verdict');
        const f = document.querySelector('img, svg, div.ifig, figure');
        return !!f && !!(v.compareDocumentPosition(f) & Node.DOCUMENT_POSITION_FOLLOWING); }"""
    )
    assert before
    assert page.evaluate("document.documentElement.scrollWidth") <= VIEW["width"]  # no sideways scroll
    page.screenshot(path=str(epoch_report.parent / "first_screen.png"))


def test_hovering_a_run_shows_its_details(page):
    fig = page.locator("#ifig-isoflop")
    fig.scroll_into_view_if_needed()
    point = fig.locator(".scatterlayer .trace .points path.point").first
    box = point.bounding_box()
    assert box, "no data point drawn in the IsoFLOP figure"
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    label = fig.locator(".hoverlayer .hovertext").first
    label.wait_for(state="visible", timeout=5_000)
    text = label.text_content()
    for what in ("row ", "N = ", "D = ", "C = ", "loss = "):
        assert what in text, text
    page.mouse.move(0, 0)


def test_a_dragged_box_zooms(page):
    fig = page.locator("#ifig-loss_vs_compute")
    fig.scroll_into_view_if_needed()
    before = page.evaluate("document.getElementById('ifig-loss_vs_compute')._fullLayout.xaxis.range.slice()")
    drag = fig.locator(".nsewdrag").first.bounding_box()
    x0, y0 = drag["x"] + drag["width"] * 0.3, drag["y"] + drag["height"] * 0.3
    page.mouse.move(x0, y0)
    page.mouse.down()
    page.mouse.move(x0 + drag["width"] * 0.2, y0 + drag["height"] * 0.2, steps=8)
    page.mouse.up()
    page.wait_for_timeout(300)
    after = page.evaluate("document.getElementById('ifig-loss_vs_compute')._fullLayout.xaxis.range.slice()")
    assert after[1] - after[0] < 0.5 * (before[1] - before[0]), (before, after)


def test_the_page_is_self_contained(page, epoch_report):
    assert page.asked == [], page.asked
    text = epoch_report.read_text()
    assert "<script src" not in text and text.count("Plotly.newPlot(") == 1
    drawn = page.evaluate(
        "Array.from(document.querySelectorAll('div.ifig')).filter(e => e.querySelector('.main-svg')).length"
    )
    assert drawn == text.count('class="ifig"') >= 5


def test_a_missing_chromium_fails_under_ci(monkeypatch, tmp_path):
    """The rule every browser test follows: skip on a laptop without Chromium, fail under CI=true."""
    monkeypatch.setattr(sys.modules[__name__], "CHROMIUM", tmp_path / "no-chromium")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true"):
        chromium()
    monkeypatch.setenv("CI", "")
    with pytest.raises(pytest.skip.Exception, match="apt-get install chromium"):
        chromium()
