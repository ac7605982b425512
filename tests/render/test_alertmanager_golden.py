"""The rendered Alertmanager configuration, byte for byte, for a policy that uses every routing feature.

Catches any unintended change to alertmanager.yml or an AlertmanagerConfig. When a change is intended,
regenerate the files and review their diff:

    TRAINGUARD_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/render/test_alertmanager_golden.py
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from trainguard.api.load import load_documents
from trainguard.render import dump_yaml
from trainguard.render.alertmanager import alertmanager_config_spec, alertmanager_yml
from trainguard.render.policy import effective_policy

GOLDEN = Path(__file__).parent / "golden"
INPUT = GOLDEN / "alertmanager_input.yaml"
UPDATE = "TRAINGUARD_UPDATE_GOLDEN"

# what the operator resolves the rack-b window's nodeSelector to (the CLI cannot)
RESOLVED = {("ml", "llama-pretrain"): {"rack-b": ["gpu-node-9", "gpu-node-3"]}}


def rendered() -> dict[str, str]:
    docs = load_documents([(INPUT.name, INPUT.read_text())])
    monitors = sorted(docs.monitors, key=lambda m: (m.namespace, m.name))
    pairs = [(m, effective_policy(m, docs.policies_for(m))) for m in monitors]
    out = {"alertmanager.yml": dump_yaml(alertmanager_yml(pairs, RESOLVED))}
    for m, p in pairs:
        spec = alertmanager_config_spec(
            m, p, f"trainguard-{m.name}-receivers", RESOLVED.get((m.namespace, m.name))
        )
        out[f"alertmanagerconfig-{m.namespace}-{m.name}.yaml"] = dump_yaml(spec)
    return out


@pytest.mark.parametrize("name", sorted(rendered()))
def test_alertmanager_output_matches_the_golden_file(name: str) -> None:
    actual = rendered()[name]
    path = GOLDEN / name
    if os.environ.get(UPDATE):
        path.write_text(actual)
    assert path.exists(), f"{path} is missing; create it with {UPDATE}=1 (see this module's docstring)"
    assert actual == path.read_text(), (
        f"rendered {name} differs from {path}. If the change is intended, regenerate with\n"
        f"  {UPDATE}=1 .venv/bin/python -m pytest tests/render/{Path(__file__).name}\n"
        "and review the diff of tests/render/golden/ before committing."
    )


def test_every_golden_file_is_still_rendered() -> None:
    stale = {p.name for p in GOLDEN.iterdir() if p != INPUT} - set(rendered())
    assert not stale, f"golden files nothing renders any more: {sorted(stale)}; delete them"
