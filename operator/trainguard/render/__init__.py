"""Pure renderers: validated custom resources in, Kubernetes objects or Prometheus files out.

No I/O and no clocks: the same input gives byte-identical output, so GitOps diffs stay clean. The
names below load on first use, so that `trainguard --help` (which reads render/command.py's flags)
needs none of the renderers' dependencies.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainguard.render.documents import dump_stream, dump_yaml, render_kubernetes, render_prometheus
    from trainguard.render.policy import EffectivePolicy, effective_policy

_WHERE = {
    "dump_stream": "trainguard.render.documents",
    "dump_yaml": "trainguard.render.documents",
    "render_kubernetes": "trainguard.render.documents",
    "render_prometheus": "trainguard.render.documents",
    "EffectivePolicy": "trainguard.render.policy",
    "effective_policy": "trainguard.render.policy",
}

__all__ = [
    "EffectivePolicy",
    "dump_stream",
    "dump_yaml",
    "effective_policy",
    "render_kubernetes",
    "render_prometheus",
]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'trainguard.render' has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name]), name)
