"""Headless Chromium for the diagnostic report's page (tests/diagnosis/test_report_chromium.py and
e2e/test_report_pipeline.py): finding it, running it, and reading back what it gives (the DOM it built,
the pixels of its screenshot)."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import zlib
from html.parser import HTMLParser
from pathlib import Path

import pytest


def find_chromium() -> str:
    """Debian's `chromium` (or `chromium-browser`): skips the test without one, or fails it where CI
    requires the tools (TRAINGUARD_REQUIRE_TOOLS)."""
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        if os.environ.get("TRAINGUARD_REQUIRE_TOOLS"):
            pytest.fail("chromium is required (TRAINGUARD_REQUIRE_TOOLS is set) but not on PATH")
        pytest.skip("chromium is not installed (.ci/run installs it: apt-get install chromium)")
    return path


def run_headless(chromium: str, tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Chromium headless on a fresh profile under `tmp`, with `args` (--dump-dom, --screenshot ...)."""
    cmd = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
           f"--user-data-dir={tmp / 'profile'}", "--no-first-run", *args]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


class Dom(HTMLParser):
    """What a report page's DOM holds: each plot's drawn lines (figure data-plot -> polylines), the
    probable causes (data-cause), the marked log lines (mark data-kind) and the log excerpt's text."""

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


def png_pixels(png: bytes) -> tuple[int, int, int, list[bytes]]:
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
