"""The commands a docs page gives, for the tests that follow a page as a user would (e2e/test_install_docs.py,
e2e/test_kube_prometheus_stack.py)."""

from __future__ import annotations

import re
from pathlib import Path


def commands(page: Path, section: str) -> list[str]:
    """The shell commands of the section's first ```sh block, continuation lines joined, comments out."""
    text = page.read_text()
    start = text.index(section)
    block = re.search(r"```sh\n(.*?)```", text[start:], re.S)
    assert block, f"{page}: no sh block under {section!r}"
    joined = block.group(1).replace("\\\n", " ")
    return [ln.strip() for ln in joined.splitlines() if ln.strip() and not ln.strip().startswith("#")]
