"""The P0 detection's pod reads at scale: every monitor's pods from the pod cache, once a second.

ClusterCache.pods keeps each (namespace, selector)'s answer until an event or a list changes that
namespace's pods. This times one pass over every monitor's pods with the answers kept (a steady
cluster) side by side with the same pass where every namespace changed before it (a list anew) (the answers read anew
and kept again) and with the read as it was before (matched every time), on a cache filled by hand: no
apiserver, the reads alone. Prints milliseconds per pass and the ratios.

    .venv/bin/python bench/pod_reads.py [--monitors 2000] [--pods-per-monitor 8] [--per-namespace 10]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from trainguard.api.common import LabelSelector
from trainguard.kube import ClusterCache
from trainguard.kube.objects import labels_of


def filled(
    monitors: int, pods_per_monitor: int, per_namespace: int
) -> tuple[ClusterCache, list[tuple[str, LabelSelector]]]:
    cache = ClusterCache(api=None)  # type: ignore[arg-type]  # never started: filled by hand
    wanted: list[tuple[str, LabelSelector]] = []
    pods: list[dict[str, Any]] = []
    for m in range(monitors):
        ns, app = f"team-{m // per_namespace}", f"job-{m}"
        wanted.append((ns, LabelSelector.model_validate({"matchLabels": {"app": app}})))
        pods += [{"metadata": {"name": f"{app}-{p}", "namespace": ns, "labels": {
            "app": app, "batch.kubernetes.io/job-completion-index": str(p)}}} for p in range(pods_per_monitor)]  # fmt: skip
    cache.pods_informer.replace(pods)
    return cache, wanted


def one_pass(cache: ClusterCache, wanted: list[tuple[str, LabelSelector]], *, changed: bool) -> float:
    informer = cache.pods_informer
    if changed:  # as a list anew: every namespace's kept answers stale
        informer.replace(informer.items())
    t = time.perf_counter()
    for ns, selector in wanted:
        cache.pods(ns, selector)
    return time.perf_counter() - t


def unkept_pass(cache: ClusterCache, wanted: list[tuple[str, LabelSelector]]) -> float:
    """The read as it was before answers were kept: the namespace's pods matched each time."""
    informer = cache.pods_informer
    t = time.perf_counter()
    for ns, selector in wanted:
        [p for p in informer.items(ns) if selector.matches(labels_of(p))]
    return time.perf_counter() - t


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--monitors", type=int, default=2000)
    p.add_argument("--pods-per-monitor", type=int, default=8)
    p.add_argument("--per-namespace", type=int, default=10, help="monitors per namespace")
    p.add_argument("--passes", type=int, default=20)
    args = p.parse_args()
    cache, wanted = filled(args.monitors, args.pods_per_monitor, args.per_namespace)
    one_pass(cache, wanted, changed=True)  # warm
    every: list[float] = []
    kept: list[float] = []
    before: list[float] = []
    for _ in range(args.passes):  # interleaved, so that a noisy moment hits both alike
        every.append(one_pass(cache, wanted, changed=True))
        kept.append(one_pass(cache, wanted, changed=False))
        before.append(unkept_pass(cache, wanted))
    e, k, b = statistics.median(every), statistics.median(kept), statistics.median(before)
    print(f"{args.monitors} monitors, {args.monitors * args.pods_per_monitor} pods, {args.per_namespace} monitors "
          f"per namespace, median of {args.passes} passes each:")  # fmt: skip
    print(f"  every namespace changed before the pass: {e * 1000:8.1f} ms a pass")
    print(f"  nothing changed (answers kept):          {k * 1000:8.1f} ms a pass")
    print(f"  the read before answers were kept:       {b * 1000:8.1f} ms a pass")
    print(f"  kept / before: {k / b:.3f}; changed / before: {e / b:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
