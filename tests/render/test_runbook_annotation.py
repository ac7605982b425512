"""Every catalogue alert links its runbook under `runbook_url`, the annotation Alertmanager templates and
on-call tools read as a link: the policy's runbookBaseUrl and the alert's heading in docs/alerts.md."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import monitor, policy
from trainguard.render.policy import effective_policy
from trainguard.render.prometheus import rule_group

ALERTS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "alerts.md"


def runbooks(**changes: object) -> dict[str, str]:
    m = monitor()
    group = rule_group(m, effective_policy(m, [policy(**changes)]))
    return {r["alert"]: r["annotations"]["runbook_url"] for r in group["rules"] if "alert" in r}


def test_each_alert_links_its_heading_in_the_alerts_page() -> None:
    headings = {h.lower() for h in re.findall(r"^### (\S+)$", ALERTS_PAGE.read_text(), re.M)}
    urls = runbooks()
    assert urls
    for alert, url in urls.items():
        base, _, anchor = url.partition("#")
        assert base == "https://github.com/trainguard/trainguard/blob/main/docs/alerts.md", alert
        assert anchor == alert.lower() and anchor in headings, (
            f"{alert}: no runbook heading in docs/alerts.md"
        )


def test_the_policy_points_them_at_its_own_runbooks() -> None:
    urls = runbooks(**{"spec.runbookBaseUrl": "https://wiki.example.com/gpu-runbooks"})
    assert urls["GPUCriticalXid"] == "https://wiki.example.com/gpu-runbooks#gpucriticalxid"
