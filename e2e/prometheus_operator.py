"""What prometheus-operator and its config-reloader do with the objects trainguard reconciles, for a
plain Prometheus and Alertmanager run as local processes.

A stand-in: prometheus-operator needs a kubelet that runs its StatefulSets, and the local control
plane has none. It covers only the fields trainguard renders and refuses any other, so a field the
renderer starts to emit cannot be dropped here without a test failing. The conversion follows
prometheus-operator's documented behaviour (pkg/alertmanager/amcfg.go, pkg/prometheus/promcfg.go):
- AlertmanagerConfig: receivers and time intervals are renamed `<namespace>/<name>/<original>`; the
  top route gets a `namespace="<ns>"` matcher and `continue: true` and hangs under a root route whose
  receiver is "null"; inhibit rules get the namespace matcher on both sides; secret references are
  resolved (the CA to a file, as the operator mounts it).
- PodMonitor: a scrape job per endpoint, with the relabel_configs prometheus-operator writes (namespace,
  container, pod, job, endpoint, then the endpoint's relabelings), its metricRelabelings as
  metric_relabel_configs and honor_labels only where honorLabels says so; its targets are the pods its
  selector matches, on the named container port, fed through file_sd with the __meta_kubernetes_*
  labels kubernetes_sd would give them, so the real Prometheus does the relabeling.
- PrometheusRule: its groups, verbatim.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

Obj = dict[str, Any]

_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")
_TIMING = {"groupWait", "groupInterval", "repeatInterval"}
_TIME_FIELDS = {"times", "weekdays", "daysOfMonth", "months", "years", "location"}
_WEBHOOK_FIELDS = {"url", "sendResolved", "httpConfig", "maxAlerts"}
_ROUTE_FIELDS = {"receiver", "matchers", "groupBy", "continue", "routes", "muteTimeIntervals",
                 "activeTimeIntervals", *_TIMING}  # fmt: skip


class Unsupported(ValueError):
    """A field this stand-in does not convert: extend it rather than let the field vanish."""


def snake(key: str) -> str:
    return _CAMEL.sub("_", key).lower()


def matcher(m: Obj) -> str:
    value = str(m.get("value", "")).replace("\\", "\\\\").replace('"', '\\"')
    return f'{m["name"]}{m.get("matchType", "=")}"{value}"'


def _only(obj: Obj, allowed: set[str], where: str) -> None:
    extra = set(obj) - allowed
    if extra:
        raise Unsupported(f"{where}: {sorted(extra)} not converted by the prometheus-operator stand-in")


def _route(route: Obj, prefix: Callable[[str], str], where: str) -> Obj:
    _only(route, _ROUTE_FIELDS, where)
    out: Obj = {}
    if "receiver" in route:
        out["receiver"] = prefix(route["receiver"])
    if route.get("matchers"):
        out["matchers"] = [matcher(m) for m in route["matchers"]]
    if "groupBy" in route:
        out["group_by"] = list(route["groupBy"])
    for key in sorted(_TIMING & set(route)):
        out[snake(key)] = route[key]
    for key in ("muteTimeIntervals", "activeTimeIntervals"):
        if route.get(key):
            out[snake(key)] = [prefix(n) for n in route[key]]
    if route.get("continue"):
        out["continue"] = True
    if route.get("routes"):
        out["routes"] = [_route(r, prefix, f"{where}.routes[{i}]") for i, r in enumerate(route["routes"])]
    return out


def _secret_value(secrets: dict[str, Obj], ref: Obj, where: str) -> bytes:
    secret = secrets.get(ref["name"])
    if secret is None or ref["key"] not in (secret.get("data") or {}):
        raise Unsupported(f"{where}: Secret {ref['name']} has no key {ref['key']!r}")
    return base64.b64decode(secret["data"][ref["key"]])


def _write_whole(path: Path, data: bytes) -> None:
    """Alertmanager reads a webhook's CA file at each notification, and the config sync runs every second:
    the file is written only when it changes, and then replaced whole, never truncated under a reader."""
    if path.exists() and path.read_bytes() == data:
        return
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def _webhook(hook: Obj, secrets: dict[str, Obj], files: Path, ns: str, where: str) -> Obj:
    _only(hook, _WEBHOOK_FIELDS, where)
    out: Obj = {"url": hook["url"], "send_resolved": bool(hook.get("sendResolved", True))}
    if "maxAlerts" in hook:
        out["max_alerts"] = hook["maxAlerts"]
    http = hook.get("httpConfig")
    if http:
        _only(http, {"authorization", "tlsConfig"}, f"{where}.httpConfig")
        conf: Obj = {}
        if auth := http.get("authorization"):
            token = _secret_value(secrets, auth["credentials"], f"{where}.authorization")
            conf["authorization"] = {
                "type": auth.get("type", "Bearer"),
                "credentials": token.decode().strip(),
            }
        if tls := http.get("tlsConfig"):
            _only(tls, {"ca"}, f"{where}.tlsConfig")
            ref = tls["ca"]["secret"]
            # one file per namespace: every test's namespace has a Secret of that name
            path = files / f"{ns}-{ref['name']}-{ref['key']}"
            _write_whole(path, _secret_value(secrets, ref, f"{where}.tlsConfig.ca"))
            conf["tls_config"] = {"ca_file": str(path)}
        out["http_config"] = conf
    return out


def alertmanager_yml(amcs: list[Obj], secrets: dict[tuple[str, str], Obj], files: Path) -> Obj:
    """alertmanager.yml for the given AlertmanagerConfigs (secrets keyed by namespace and name)."""
    receivers: list[Obj] = [{"name": "null"}]
    routes: list[Obj] = []
    inhibits: list[Obj] = []
    intervals: list[Obj] = []
    for amc in sorted(amcs, key=lambda o: (o["metadata"]["namespace"], o["metadata"]["name"])):
        ns, name = amc["metadata"]["namespace"], amc["metadata"]["name"]
        spec = amc["spec"]
        _only(spec, {"route", "receivers", "inhibitRules", "muteTimeIntervals"}, f"{ns}/{name}.spec")
        own = {k[1]: v for k, v in secrets.items() if k[0] == ns}

        def prefix(n: str, ns: str = ns, name: str = name) -> str:
            return f"{ns}/{name}/{n}"

        for r in spec.get("receivers") or []:
            _only(r, {"name", "webhookConfigs"}, f"{ns}/{name}.receivers.{r['name']}")
            out: Obj = {"name": prefix(r["name"])}
            if r.get("webhookConfigs"):
                out["webhook_configs"] = [
                    _webhook(h, own, files, ns, f"{ns}/{name}.receivers.{r['name']}")
                    for h in r["webhookConfigs"]
                ]
            receivers.append(out)
        top = _route(spec["route"], prefix, f"{ns}/{name}.route")
        top["matchers"] = [f'namespace="{ns}"', *top.get("matchers", [])]
        top["continue"] = True
        routes.append(top)
        for rule in spec.get("inhibitRules") or []:
            _only(rule, {"sourceMatch", "targetMatch", "equal"}, f"{ns}/{name}.inhibitRules")
            inhibits.append({
                "source_matchers": [f'namespace="{ns}"', *[matcher(m) for m in rule.get("sourceMatch") or []]],
                "target_matchers": [f'namespace="{ns}"', *[matcher(m) for m in rule.get("targetMatch") or []]],
                **({"equal": list(rule["equal"])} if rule.get("equal") else {}),
            })  # fmt: skip
        for ti in spec.get("muteTimeIntervals") or []:
            entries = []
            for entry in ti["timeIntervals"]:
                _only(entry, _TIME_FIELDS, f"{ns}/{name}.muteTimeIntervals.{ti['name']}")
                conv: Obj = {}
                for key, value in entry.items():
                    conv[snake(key)] = (
                        [{"start_time": t["startTime"], "end_time": t["endTime"]} for t in value]
                        if key == "times"
                        else value
                    )
                entries.append(conv)
            intervals.append({"name": prefix(ti["name"]), "time_intervals": entries})
    config: Obj = {
        "route": {"receiver": "null", "group_by": ["namespace"], "routes": routes},
        "receivers": receivers,
        "inhibit_rules": inhibits,
    }
    if intervals:
        config["time_intervals"] = intervals
    return config


def rules_yml(rules: list[Obj]) -> Obj:
    ordered = sorted(rules, key=lambda o: (o["metadata"]["namespace"], o["metadata"]["name"]))
    return {"groups": [g for r in ordered for g in r["spec"].get("groups") or []]}


def _selected(selector: Obj, labels: dict[str, str], where: str) -> bool:
    _only(selector, {"matchLabels"}, f"{where}.selector")
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


_META = (
    "__meta_kubernetes_namespace",
    "__meta_kubernetes_pod_name",
    "__meta_kubernetes_pod_node_name",
    "__meta_kubernetes_pod_ip",
    "__meta_kubernetes_pod_container_name",
    "__meta_kubernetes_pod_container_port_name",
)
"""The discovery labels each target carries, as kubernetes_sd's pod role names them: a relabeling may read
these (or a label already set), and reading any other __meta_ label is refused rather than left empty."""
_RELABEL_FIELDS = {"sourceLabels", "separator", "targetLabel", "regex", "modulus", "replacement", "action"}
_ENDPOINT_FIELDS = {"port", "path", "interval", "honorLabels", "relabelings", "metricRelabelings"}


def relabel_config(rule: Obj, where: str) -> Obj:
    """A PodMonitor RelabelConfig as Prometheus' relabel_config: the same fields in snake_case, the
    action lower-cased (prometheus-operator accepts either case)."""
    _only(rule, _RELABEL_FIELDS, where)
    unknown = [s for s in rule.get("sourceLabels") or [] if s.startswith("__meta_") and s not in _META]
    if unknown:
        raise Unsupported(f"{where}: the stand-in's targets carry no {unknown}")
    out = {snake(k): v for k, v in rule.items()}
    if "action" in out:
        out["action"] = str(out["action"]).lower()
    return out


def _endpoints(podmonitors: list[Obj]) -> Iterator[tuple[str, str, Obj, Obj]]:
    """(job name, targets file name, PodMonitor, endpoint) of every endpoint, in a stable order."""
    for pm in sorted(podmonitors, key=lambda o: (o["metadata"]["namespace"], o["metadata"]["name"])):
        ns, name = pm["metadata"]["namespace"], pm["metadata"]["name"]
        _only(pm["spec"], {"selector", "podMetricsEndpoints"}, f"PodMonitor {ns}/{name}.spec")
        for i, endpoint in enumerate(pm["spec"]["podMetricsEndpoints"]):
            _only(endpoint, _ENDPOINT_FIELDS, f"PodMonitor {ns}/{name}.podMetricsEndpoints[{i}]")
            yield f"podMonitor/{ns}/{name}/{i}", f"podmonitor-{ns}-{name}-{i}.json", pm, endpoint


def scrape_configs(podmonitors: list[Obj], targets_dir: Path) -> list[Obj]:
    """prometheus.yml's scrape_configs: one job per PodMonitor endpoint, as prometheus-operator writes it,
    with file_sd (scrape_targets' files in `targets_dir`) in place of kubernetes_sd. Its relabel_configs set
    what prometheus-operator sets on every target (namespace, container, pod, job, endpoint), then the
    endpoint's relabelings; its metricRelabelings become metric_relabel_configs; honor_labels is false
    unless the endpoint says honorLabels. Selecting the pods and the port, which prometheus-operator does
    with `keep` relabelings, is done by scrape_targets."""
    jobs: list[Obj] = []
    for job, file, pm, endpoint in _endpoints(podmonitors):
        ns, name = pm["metadata"]["namespace"], pm["metadata"]["name"]
        where = f"PodMonitor {ns}/{name}"
        relabels: list[Obj] = [
            {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
            {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
            {"target_label": "job", "replacement": f"{ns}/{name}"},
            {"target_label": "endpoint", "replacement": endpoint["port"]},
            *(relabel_config(r, f"{where}.relabelings[{i}]") for i, r in enumerate(endpoint.get("relabelings") or [])),
        ]  # fmt: skip
        out: Obj = {
            "job_name": job,
            "honor_labels": bool(endpoint.get("honorLabels", False)),
            "metrics_path": endpoint.get("path", "/metrics"),
            "file_sd_configs": [{"files": [str(targets_dir / file)], "refresh_interval": "1s"}],
            "relabel_configs": relabels,
        }
        if endpoint.get("interval"):
            out["scrape_interval"] = endpoint["interval"]
        metric = endpoint.get("metricRelabelings") or []
        if metric:
            out["metric_relabel_configs"] = [
                relabel_config(r, f"{where}.metricRelabelings[{i}]") for i, r in enumerate(metric)
            ]
        jobs.append(out)
    return jobs


def scrape_targets(podmonitors: list[Obj], pods: list[Obj]) -> dict[str, list[Obj]]:
    """file_sd target groups by targets file name (see scrape_configs): the running pods each endpoint's
    selector matches, on the container port of its name, each with the discovery labels kubernetes_sd
    would give it; Prometheus applies the relabelings."""
    files: dict[str, list[Obj]] = {}
    for _, file, pm, endpoint in _endpoints(podmonitors):
        ns, name = pm["metadata"]["namespace"], pm["metadata"]["name"]
        groups = files.setdefault(file, [])
        for pod in pods:
            meta, spec, status = pod["metadata"], pod["spec"], pod.get("status") or {}
            if (meta["namespace"] != ns or meta.get("deletionTimestamp") or status.get("phase") != "Running"
                    or not status.get("podIP")
                    or not _selected(pm["spec"]["selector"], meta.get("labels") or {}, f"PodMonitor {ns}/{name}")):  # fmt: skip
                continue
            for c in [*(spec.get("initContainers") or []), *spec["containers"]]:
                port = next((p for p in c.get("ports") or [] if p.get("name") == endpoint["port"]), None)
                if port is None:
                    continue
                sd = dict(zip(_META, (ns, meta["name"], spec.get("nodeName", ""), status["podIP"], c["name"],
                                      endpoint["port"]), strict=True))  # fmt: skip
                groups.append({"targets": [f"{status['podIP']}:{port['containerPort']}"], "labels": sd})
    return files
