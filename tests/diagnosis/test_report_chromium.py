"""The report's HTML opened in headless Chromium (Debian's `chromium`): the DOM it builds holds the
plots (SVG with drawn lines), the probable cause and the marked log excerpt, and the screenshot is not
blank. Skipped without chromium, failed under TRAINGUARD_REQUIRE_TOOLS=1 (.ci/run installs it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.diagnosis.chromium import Dom, find_chromium, png_pixels, run_headless
from tests.diagnosis.report_inputs import TRACE_ID, report_input
from trainguard.diagnosis.report import PLOTS, build

pytestmark = pytest.mark.tools


@pytest.fixture(scope="module")
def chromium() -> str:
    return find_chromium()


def test_the_page_shows_plots_cause_and_logs(chromium: str, tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    page.write_text(build(report_input()).html, encoding="utf-8")
    dom = run_headless(chromium, tmp_path, "--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    parsed = Dom()
    parsed.feed(dom.stdout)
    assert set(parsed.figures) == {p.key for p in PLOTS}
    assert all(n >= 1 for n in parsed.figures.values()), parsed.figures
    assert parsed.causes == ["throughput-data-loading"]
    assert parsed.marks == ["nccl-timeout", "traceback", "oom", "cuda-error"]
    assert "Watchdog caught collective operation timeout" in parsed.log_text
    assert TRACE_ID in dom.stdout

    shot = tmp_path / "report.png"
    run = run_headless(chromium, tmp_path, f"--screenshot={shot}", "--window-size=1200,1800", "--hide-scrollbars",
               page.as_uri())  # fmt: skip
    assert run.returncode == 0 and shot.exists(), run.stderr[-2000:]
    width, height, channels, rows = png_pixels(shot.read_bytes())
    assert (width, height) == (1200, 1800)
    colours = {row[i : i + 3] for row in rows[::7] for i in range(0, len(row), channels * 11)}
    assert len(colours) > 20, "the screenshot is blank or nearly"
    # the red of a marked error line or a cause's border is on the page
    assert any(c[0] > 180 and c[1] < 90 and c[2] < 90 for c in colours)
