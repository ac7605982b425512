"""The report's HTML opened in headless Chromium (Debian's `chromium`): the DOM it builds holds the
plots (SVG with drawn lines), the probable cause and the marked log excerpt, and the screenshot is not
blank. Skipped without chromium, failed under TRAINGUARD_REQUIRE_TOOLS=1 (.ci/run installs it)."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import zlib
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.diagnosis.report_inputs import TRACE_ID, report_input
from trainguard.diagnosis.report import PLOTS, build

pytestmark = pytest.mark.tools


@pytest.fixture(scope="module")
def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        if os.environ.get("TRAINGUARD_REQUIRE_TOOLS"):
            pytest.fail("chromium is required (TRAINGUARD_REQUIRE_TOOLS is set) but not on PATH")
        pytest.skip("chromium is not installed (.ci/run installs it: apt-get install chromium)")
    return path


def _run(chromium: str, tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
           f"--user-data-dir={tmp / 'profile'}", "--no-first-run", *args]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


class _Dom(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.figures: dict[str, int] = {}
        self.causes: list[str] = []
        self.marks: list[str] = []
        self.log_text = ""
        self._figure = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "figure":
            self._figure = a.get("data-plot") or ""
            self.figures[self._figure] = 0
        if tag == "polyline" and self._figure:
            self.figures[self._figure] += 1
        if tag == "div" and a.get("data-cause"):
            self.causes.append(a["data-cause"] or "")
        if tag == "mark":
            self.marks.append(a.get("data-kind") or "")
        self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag == "figure":
            self._figure = ""
        if self.stack:
            self.stack.pop()

    def handle_data(self, data: str) -> None:
        if "pre" in self.stack:
            self.log_text += data


def _pixels(png: bytes) -> tuple[int, int, int, list[bytes]]:
    """Width, height, channels and unfiltered rows of an 8-bit RGB(A) PNG, as Chromium writes its screenshots."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height, channels = 8, b"", 0, 0, 0
    while pos < len(png):
        (length,), kind = struct.unpack(">I", png[pos : pos + 4]), png[pos + 4 : pos + 8]
        data = png[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", data[:10])
            assert depth == 8 and colour in (2, 6)
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += data
        pos += 12 + length
    raw, stride, rows, prev = zlib.decompress(idat), width * channels, [], bytearray(width * channels)
    for y in range(height):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b, c = prev[i], prev[i - channels] if i >= channels else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, channels, rows


def test_the_page_shows_plots_cause_and_logs(chromium: str, tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    page.write_text(build(report_input()).html, encoding="utf-8")
    dom = _run(chromium, tmp_path, "--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    parsed = _Dom()
    parsed.feed(dom.stdout)
    assert set(parsed.figures) == {p.key for p in PLOTS}
    assert all(n >= 1 for n in parsed.figures.values()), parsed.figures
    assert parsed.causes == ["throughput-data-loading"]
    assert parsed.marks == ["nccl-timeout", "traceback", "oom", "cuda-error"]
    assert "Watchdog caught collective operation timeout" in parsed.log_text
    assert TRACE_ID in dom.stdout

    shot = tmp_path / "report.png"
    run = _run(chromium, tmp_path, f"--screenshot={shot}", "--window-size=1200,1800", "--hide-scrollbars",
               page.as_uri())  # fmt: skip
    assert run.returncode == 0 and shot.exists(), run.stderr[-2000:]
    width, height, channels, rows = _pixels(shot.read_bytes())
    assert (width, height) == (1200, 1800)
    colours = {row[i : i + 3] for row in rows[::7] for i in range(0, len(row), channels * 11)}
    assert len(colours) > 20, "the screenshot is blank or nearly"
    # the red of a marked error line or a cause's border is on the page
    assert any(c[0] > 180 and c[1] < 90 and c[2] < 90 for c in colours)
