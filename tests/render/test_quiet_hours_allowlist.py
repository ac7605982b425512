"""The quiet-hours allowlist: its defaults (OOM risk and error, node offline, an interrupted training),
the operator's own alerts it may name, its strict validation, the CRD default the apiserver fills, and
that the operator's alerts on it page at night."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import policy
from tests.render.amconfig import routes_test, write_config
from trainguard.api import InvalidInput
from trainguard.api.crd import schema_for
from trainguard.api.policy import DEFAULT_ALLOWLIST, OPERATOR_ALERT_NAMES, AlertPolicy, QuietHours
from trainguard.catalog import ALERT_NAMES
from trainguard.catalog.alerts import (
    BREAKER_OPEN,
    NODE_CORDONED,
    NODE_MAINTENANCE,
    TRAINING_INTERRUPTED,
    WITHHELD,
)
from trainguard.catalog.severity import grade_labels

R = "ml/default/"
JOB = {"namespace": "ml", "training_job": "llama-pretrain"}


def test_the_default_allowlist_pages_for_oom_node_offline_and_interrupted_training() -> None:
    assert QuietHours().allowlist == [
        "GPUMemoryCritical",
        "GPUNodeDown",
        "GPUOutOfMemory",
        "TrainingInterrupted",
    ]
    assert list(DEFAULT_ALLOWLIST) == QuietHours().allowlist
    assert QuietHours().allowlist is not QuietHours().allowlist, "each policy has its own list"


def test_operator_alert_names_are_the_ones_the_operator_posts() -> None:
    # api may not import remediation or controller: this pins its copy of their names
    assert set(OPERATOR_ALERT_NAMES) == {
        TRAINING_INTERRUPTED,
        WITHHELD,
        NODE_CORDONED,
        BREAKER_OPEN,
        NODE_MAINTENANCE,
    }
    assert not set(OPERATOR_ALERT_NAMES) & set(ALERT_NAMES)


@pytest.mark.parametrize("name", [TRAINING_INTERRUPTED, WITHHELD, NODE_CORDONED, "GPUOutOfMemory", "GPULost"])
def test_catalogue_and_operator_alerts_are_accepted(name: str) -> None:
    assert policy(
        **{"spec.quietHours": {"enabled": True, "allowlist": [name]}}
    ).spec.quiet_hours.allowlist == [name]


@pytest.mark.parametrize("name", ["TrainguardMorningReport", "gpuoutofmemory", "", "GPUNodeDown|.*"])
def test_other_names_are_refused_naming_the_field_and_the_valid_names(name: str) -> None:
    with pytest.raises(InvalidInput) as err:
        policy(**{"spec.quietHours": {"enabled": True, "allowlist": ["GPUNodeDown", name]}})
    (problem,) = err.value.problems
    assert problem.path == "spec.quietHours.allowlist[1]"
    assert "'GPUOutOfMemory'" in problem.message and f"'{TRAINING_INTERRUPTED}'" in problem.message


def test_the_crd_defaults_the_allowlist_to_the_models_default() -> None:
    # the apiserver fills a quietHours without allowlist from the CRD: an empty default there would
    # silence every alert at night
    quiet = schema_for(AlertPolicy)["properties"]["spec"]["properties"]["quietHours"]
    assert quiet["properties"]["allowlist"]["default"] == list(DEFAULT_ALLOWLIST)
    assert quiet["default"]["allowlist"] == list(DEFAULT_ALLOWLIST)
    assert set(quiet["properties"]["allowlist"]["items"]["enum"]) == set(ALERT_NAMES) | set(
        OPERATOR_ALERT_NAMES
    )


@pytest.mark.tools
@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        # the defaults: a day route and a night route for the phone and IM
        (
            {"alertname": TRAINING_INTERRUPTED, **grade_labels("P0")},
            ["oncall-phone", "oncall-phone", "im+resolved", "im+resolved"],
        ),
        (
            {"alertname": "GPUOutOfMemory", **grade_labels("P0")},
            ["oncall-phone", "oncall-phone", "im+resolved", "im+resolved"],
        ),
        # not allowlisted by default: the day routes only
        ({"alertname": WITHHELD, **grade_labels("P0")}, ["oncall-phone", "im+resolved"]),
        ({"alertname": NODE_CORDONED, **grade_labels("P2")}, ["email", "ticket"]),
    ],
)
def test_operator_alerts_on_the_default_allowlist_page_at_night(
    amtool: str, tmp_path: Path, labels: dict[str, str], expected: list[str]
) -> None:
    config = write_config(tmp_path, **{"spec.quietHours": {"enabled": True}})
    routes_test(amtool, config, JOB | labels, [R + r for r in expected])


@pytest.mark.tools
def test_a_p2_operator_notice_on_the_allowlist_pages_at_night(amtool: str, tmp_path: Path) -> None:
    config = write_config(tmp_path, **{"spec.quietHours": {"enabled": True, "allowlist": [NODE_CORDONED]}})
    routes_test(amtool, config, JOB | {"alertname": NODE_CORDONED, **grade_labels("P2"), "node": "n1"},
                [R + "email", R + "ticket", R + "oncall-phone"])  # fmt: skip
