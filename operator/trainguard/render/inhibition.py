"""Alertmanager inhibition rules: which firing alert silences which."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainguard.api.monitor import TrainingJobMonitor
from trainguard.catalog import ALERTS, ALERTS_BY_NAME
from trainguard.catalog.alerts import NODE_CORDONED
from trainguard.catalog.severity import PRIORITY
from trainguard.render.matchers import Matcher, eq, ne, one_of
from trainguard.render.policy import EffectivePolicy

"""remediation/notices.py's notice (render may not import remediation; a test pins the two)."""
PATH_LABEL = "trainguard_path"
FASTPATH = "fastpath"
"""The label the operator puts on a P0 it pages from the sidecar's fast path (remediation/paging.py)."""


@dataclass(frozen=True)
class InhibitRule:
    source: tuple[Matcher, ...]
    target: tuple[Matcher, ...]
    equal: tuple[str, ...]

    def plain(self) -> dict[str, Any]:
        """alertmanager.yml's form."""
        return {
            "source_matchers": [m.text() for m in self.source],
            "target_matchers": [m.text() for m in self.target],
            "equal": list(self.equal),
        }

    def resource(self) -> dict[str, Any]:
        """An AlertmanagerConfig's form."""
        return {
            "sourceMatch": [m.resource() for m in self.source],
            "targetMatch": [m.resource() for m in self.target],
            "equal": list(self.equal),
        }


NODE_DOWN_INHIBIT = InhibitRule(
    # a node that is down explains every other alert on it, whichever job raised it; the target must
    # have a node, since Alertmanager counts two missing labels as equal
    source=(eq("alertname", "GPUNodeDown"),),
    target=(ne("alertname", "GPUNodeDown"), Matcher("node", "=~", ".+")),
    equal=("node",),
)


def inhibit_rules(
    monitor: TrainingJobMonitor, policy: EffectivePolicy, match_namespace: bool = True
) -> list[InhibitRule]:
    """The monitor's inhibitions. The node-down rule is cluster-wide, so not among them when
    `match_namespace` (plain Alertmanager: added once, see alertmanager_yml); prometheus-operator
    scopes an AlertmanagerConfig's rules to its namespace anyway."""
    job: tuple[Matcher, ...] = (eq("training_job", monitor.name),)
    if match_namespace:
        job = (eq("namespace", monitor.namespace), *job)
    rules: list[InhibitRule] = []
    if policy.inhibition.node_down and not match_namespace:
        rules.append(NODE_DOWN_INHIBIT)
    if policy.inhibition.job_p0:
        rules.append(
            InhibitRule(
                # an operator-escalated copy of a P1 must not mute the job's other alerts
                # on `priority`, the grade in every severity style (catalog/severity.py)
                source=(*job, eq(PRIORITY, "P0"), eq("escalated_from", "")),
                # the operator's notice that it cordoned a node follows the P0 that made it: held back
                # for as long as that P0 fires (the fast path's page holds five minutes) it came too late
                target=(*job, one_of(PRIORITY, ["P1", "P2", "P3"]), ne("alertname", NODE_CORDONED)),
                equal=("namespace", "training_job"),
            )
        )
    # a fault the operator paged from the sidecar's fast path pages once: its rule's later copy is muted
    rules.append(
        InhibitRule(
            source=(*job, eq(PATH_LABEL, FASTPATH)),
            target=(*job, ne(PATH_LABEL, FASTPATH)),
            equal=("namespace", "training_job", "alertname", "node", "gpu"),
        )
    )
    if policy.inhibition.supersede:
        enabled = {a.name for a in policy.enabled_alerts()}
        for a in ALERTS:
            # equal on the labels both scopes identify by: a rack event carries no node or gpu, and
            # silences the job's per-GPU heat alerts (Alertmanager counts a label missing on one side as
            # unequal, so `rack` cannot be among them)
            by_equal: dict[tuple[str, ...], list[str]] = {}
            for t in a.supersedes:
                if t in enabled and a.name in enabled:
                    shared = tuple(x for x in a.scope.labels if x in ALERTS_BY_NAME[t].scope.labels)
                    by_equal.setdefault(shared, []).append(t)
            for equal, targets in by_equal.items():
                rules.append(
                    InhibitRule(
                        source=(*job, eq("alertname", a.name)),
                        target=(*job, one_of("alertname", targets)),
                        equal=equal,
                    )
                )
    return rules
