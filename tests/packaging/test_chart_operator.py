"""What the chart runs: the operator's Deployment, Service, certificates and webhook configuration,
checked against the operator's real command line and its own rendering of the webhook."""

from __future__ import annotations

import argparse
import base64
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.conftest import monitor
from tests.packaging.chart import GOLDEN_VALUES, by_kind, objects, one, run_helm, template, template_args
from trainguard import IMAGE
from trainguard.api import AlertPolicy, parse_object
from trainguard.cli import build_parser
from trainguard.render.sidecar import EXPORTER, inject
from trainguard.render.webhook import (
    EVICTION_CONFIG_NAME,
    WEBHOOK_CONFIG_NAME,
    eviction_webhook_configuration,
    mutating_webhook_configuration,
)

CERT_MANAGER = "webhook.certificates.source=certManager"


def operator_container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert isinstance(container, dict)
    return container


def parsed_args(container: dict[str, Any]) -> argparse.Namespace:
    """The container's command line through the real `trainguard` parser: an unknown flag fails."""
    assert container["command"][0] == "trainguard"
    return build_parser().parse_args([*container["command"][1:], *container["args"]])


@pytest.fixture(scope="module", params=["default", "cert-manager", "secret-certs"])
def rendered(request: pytest.FixtureRequest, helm: str) -> list[dict[str, Any]]:
    return objects(template(helm, values=GOLDEN_VALUES / f"{request.param}.values.yaml"))


def test_the_operator_accepts_every_flag_the_chart_passes(rendered: list[dict[str, Any]]) -> None:
    args = parsed_args(operator_container(rendered))
    assert args.command == "operator"
    assert args.namespace == "trainguard-system"
    assert args.self_managed_certs or (args.webhook_cert and args.webhook_key and args.webhook_ca)


def test_the_chart_passes_the_shared_groups_only_when_split(helm: str) -> None:
    default = parsed_args(operator_container(objects(template(helm, "alerts.ruleForm=shared"))))
    assert (default.rule_form, default.shared_rule_groups) == ("shared", 1)
    sets = ("alerts.ruleForm=shared", "alerts.sharedRuleGroups=4")
    split = parsed_args(operator_container(objects(template(helm, *sets))))
    assert (split.rule_form, split.shared_rule_groups) == ("shared", 4)


def test_the_schema_refuses_more_shared_groups_than_the_operator_takes(helm: str) -> None:
    result = run_helm(
        helm, *template_args("alerts.ruleForm=shared", "alerts.sharedRuleGroups=17"), check=False
    )
    assert result.returncode != 0 and "sharedRuleGroups" in result.stderr


def test_the_chart_passes_the_annotation_lookups_only_when_asked(helm: str) -> None:
    default = parsed_args(operator_container(objects(template(helm, "alerts.ruleForm=shared"))))
    assert default.shared_annotation_lookups is False
    sets = ("alerts.ruleForm=shared", "alerts.sharedAnnotationLookups=true")
    assert parsed_args(operator_container(objects(template(helm, *sets)))).shared_annotation_lookups is True


@pytest.mark.parametrize("value", ["alerts.sharedRuleGroups=2", "alerts.sharedAnnotationLookups=true"])
def test_the_schema_refuses_the_shared_groups_options_without_the_shared_form(helm: str, value: str) -> None:
    """At install, not as an operator that exits 2 at start and crash-loops."""
    key = value.split("=", maxsplit=1)[0].split(".")[1]
    result = run_helm(helm, *template_args(value), check=False)
    assert result.returncode != 0 and key in result.stderr, result.stderr
    run_helm(helm, *template_args("alerts.ruleForm=shared", value))


@pytest.mark.parametrize(
    ("sets", "image"),
    [
        ((), IMAGE),
        (("image.tag=0.2.0",), "ghcr.io/trainguard/trainguard:0.2.0"),
        (("image.repository=registry.example/tg", f"image.digest=sha256:{'b' * 64}"),
         f"registry.example/tg@sha256:{'b' * 64}"),
    ],
)  # fmt: skip
def test_the_sidecars_the_operator_injects_run_its_own_image(
    helm: str, sets: tuple[str, ...], image: str
) -> None:
    """One version: `helm upgrade --set image.tag=...` moves the operator's Deployment and, through its
    --sidecar-image, the exporter of every pod admitted after it, unless a monitor overrides the image."""
    c = operator_container(objects(template(helm, *sets)))
    assert c["image"] == image
    args = parsed_args(c)
    assert args.sidecar_image == image
    pod = {"metadata": {"namespace": "ml", "labels": {"app": "llama-pretrain"}}, "spec": {"containers": []}}
    changes = inject(
        pod, monitor(), fallback_trace="t", receiver_url=args.receiver_url, sidecar_image=args.sidecar_image
    )
    assert changes is not None
    (exporter,) = [x for x in changes["spec"]["initContainers"] if x["name"] == EXPORTER]
    assert exporter["image"] == image


def test_deployment_is_hardened_and_replicated(helm: str) -> None:
    docs = objects(template(helm))
    deploy = one(docs, "Deployment")
    assert deploy["spec"]["replicas"] == 2
    pod = deploy["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "trainguard-operator"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    c = operator_container(docs)
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    for part in ("requests", "limits"):
        assert set(c["resources"][part]) == {"cpu", "memory"}
    pdb = one(docs, "PodDisruptionBudget")
    assert pdb["spec"]["selector"] == deploy["spec"]["selector"]
    assert pdb["spec"]["minAvailable"] == 1


def test_probes_hit_the_endpoints_the_operator_serves(rendered: list[dict[str, Any]]) -> None:
    c = operator_container(rendered)
    args = parsed_args(c)
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    liveness = urlsplit(args.liveness)
    for probe in ("livenessProbe", "startupProbe"):
        get = c[probe]["httpGet"]
        assert (get["path"], ports[get["port"]]) == (liveness.path, liveness.port), probe
    # ready once the admission webhook listens
    assert ports[c["readinessProbe"]["tcpSocket"]["port"]] == args.webhook_port
    assert ports["receiver"] == args.receiver_port


def test_service_routes_webhook_and_receiver_to_the_operator(rendered: list[dict[str, Any]]) -> None:
    c = operator_container(rendered)
    args = parsed_args(c)
    deploy = one(rendered, "Deployment")
    svc = one(rendered, "Service")
    pod_labels = deploy["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    container_ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    ports = {p["name"]: p for p in svc["spec"]["ports"]}
    assert container_ports[ports["webhook"]["targetPort"]] == args.webhook_port
    receiver = urlsplit(args.receiver_url)
    assert receiver.scheme == "https"
    assert receiver.hostname == f"{svc['metadata']['name']}.{svc['metadata']['namespace']}.svc"
    assert ports["receiver"]["port"] == receiver.port
    assert container_ports[ports["receiver"]["targetPort"]] == args.receiver_port


def test_cert_manager_certificate_covers_the_service_and_is_mounted(helm: str) -> None:
    docs = objects(template(helm, CERT_MANAGER))
    svc = one(docs, "Service")
    name, ns = svc["metadata"]["name"], svc["metadata"]["namespace"]
    certs = {c["metadata"]["name"]: c for c in by_kind(docs, "Certificate")}
    serving = certs["trainguard-operator-tls"]["spec"]
    assert f"{name}.{ns}.svc" in serving["dnsNames"]
    issuer = {i["metadata"]["name"]: i for i in by_kind(docs, "Issuer")}[serving["issuerRef"]["name"]]
    assert issuer["spec"]["ca"]["secretName"] == certs["trainguard-operator-ca"]["spec"]["secretName"]
    assert certs["trainguard-operator-ca"]["spec"]["isCA"] is True
    volumes = one(docs, "Deployment")["spec"]["template"]["spec"]["volumes"]
    assert {"name": "tls", "secret": {"secretName": serving["secretName"]}} in volumes


def test_cert_manager_mode_the_chart_owns_the_webhook_configuration(helm: str) -> None:
    """The operator would apply its own configuration at startup and fight the chart's (and
    cert-manager's injected caBundle): with the chart's, it runs with --no-manage-webhook."""
    docs = objects(template(helm, CERT_MANAGER))
    args = parsed_args(operator_container(docs))
    assert args.no_manage_webhook is True
    mwc = one(docs, "MutatingWebhookConfiguration")
    assert mwc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == (
        "trainguard-system/trainguard-operator-tls"
    )
    # the object the operator itself would apply, but for the caBundle cert-manager injects
    svc = one(docs, "Service")
    port = next(p["port"] for p in svc["spec"]["ports"] if p["name"] == "webhook")
    own = mutating_webhook_configuration(
        b"ca",
        service=("trainguard-system", svc["metadata"]["name"], port),
        operator_namespace="trainguard-system",
    )
    assert base64.b64decode(own["webhooks"][0]["clientConfig"].pop("caBundle")) == b"ca"
    assert mwc["webhooks"] == own["webhooks"]
    assert mwc["metadata"]["name"] == own["metadata"]["name"] == WEBHOOK_CONFIG_NAME
    # the eviction gate of planned maintenance, likewise
    vwc = one(docs, "ValidatingWebhookConfiguration")
    assert vwc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == (
        "trainguard-system/trainguard-operator-tls"
    )
    gate = eviction_webhook_configuration(
        b"ca",
        service=("trainguard-system", svc["metadata"]["name"], port),
        operator_namespace="trainguard-system",
    )
    gate["webhooks"][0]["clientConfig"].pop("caBundle")
    assert vwc["webhooks"] == gate["webhooks"]
    assert vwc["metadata"]["name"] == gate["metadata"]["name"] == EVICTION_CONFIG_NAME


def test_webhook_configuration_spares_the_install_namespace(helm: str) -> None:
    mwc = one(objects(template(helm, CERT_MANAGER, namespace="gpu-ops")), "MutatingWebhookConfiguration")
    own = mutating_webhook_configuration(
        b"ca", service=("gpu-ops", "trainguard-operator", 443), operator_namespace="gpu-ops"
    )
    own["webhooks"][0]["clientConfig"].pop("caBundle")
    assert mwc["webhooks"] == own["webhooks"]


def test_secret_mode_the_operator_owns_the_webhook_configuration(helm: str) -> None:
    docs = objects(template(helm, values=GOLDEN_VALUES / "secret-certs.values.yaml"))
    assert not by_kind(docs, "MutatingWebhookConfiguration")
    assert not by_kind(docs, "ValidatingWebhookConfiguration")
    assert not by_kind(docs, "Certificate") and not by_kind(docs, "Issuer")
    c = operator_container(docs)
    args = parsed_args(c)
    assert args.no_manage_webhook is False
    svc = one(docs, "Service")
    port = next(p["port"] for p in svc["spec"]["ports"] if p["name"] == "webhook")
    assert args.webhook_service == f"{svc['metadata']['name']}:{port}"
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == "trainguard-webhook-tls"
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    # the operator key from the named Secret, its `key` as the file --key-file reads
    assert volumes["key"]["secret"] == {
        "secretName": "trainguard-operator-key",
        "items": [{"key": "key", "path": "key"}],
    }
    assert args.key_file == f"{mounts['key']}/key"
    assert args.alertmanager_url == "http://alertmanager-operated.monitoring.svc:9093"
    assert args.log_level == "debug"
    assert c["image"].endswith("@sha256:" + "0123456789abcdef" * 4)


def test_without_a_key_secret_the_operator_keeps_its_own(helm: str) -> None:
    args = parsed_args(operator_container(objects(template(helm))))
    assert args.key_file is None  # the operator creates and reads Secret trainguard-receiver-key
    assert args.alertmanager_url is None


def test_the_default_alert_policy_is_one_trainguard_accepts_in_each_namespace(helm: str) -> None:
    docs = objects(template(helm, values=GOLDEN_VALUES / "secret-certs.values.yaml"))
    policies = by_kind(docs, "AlertPolicy")
    assert sorted(p["metadata"]["namespace"] for p in policies) == ["ml", "research"]
    for raw in policies:
        parsed = parse_object(raw)
        assert isinstance(parsed, AlertPolicy)
        assert [r.name for r in parsed.spec.receivers] == ["oncall", "tickets"]
    assert not by_kind(objects(template(helm)), "AlertPolicy")


def test_one_replica_has_no_disruption_budget(helm: str) -> None:
    docs = objects(template(helm, "replicas=1"))
    assert one(docs, "Deployment")["spec"]["replicas"] == 1
    assert not by_kind(docs, "PodDisruptionBudget")


def test_the_peering_object_is_the_one_the_operator_joins(rendered: list[dict[str, Any]]) -> None:
    args = parsed_args(operator_container(rendered))
    peering = one(rendered, "ClusterKopfPeering")
    assert peering["metadata"]["name"] == args.peering
    assert args.standalone is False


@pytest.mark.parametrize("quoted", [True, False])
def test_pod_logs_are_read_only_where_the_rbac_allows_it(helm: str, quoted: bool) -> None:
    """reports.podLogs: false drops get on pods/log and runs the operator with --no-pod-logs, so its
    reports say the logs were not read rather than failing to read them."""
    docs = objects(template(helm, f"reports.podLogs={str(quoted).lower()}"))
    granted = [
        rule
        for role in by_kind(docs, "ClusterRole")
        for rule in role["rules"]
        if "pods/log" in rule["resources"]
    ]
    assert bool(granted) is quoted
    assert parsed_args(operator_container(docs)).no_pod_logs is not quoted


def pod_spec(docs: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = one(docs, "Deployment")["spec"]["template"]["spec"]
    return spec


def test_the_platform_may_leave_the_user_and_groups_to_openshift(helm: str, tmp_path: Path) -> None:
    """OpenShift's restricted SCCs assign the user and fsGroup from the namespace's range and refuse a
    pod that names others: null in the values leaves them out, and the rest of the hardening stays."""
    values = tmp_path / "openshift.yaml"
    values.write_text("podSecurityContext:\n  runAsUser: null\n  runAsGroup: null\n  fsGroup: null\n")
    docs = objects(template(helm, values=values))
    assert pod_spec(docs)["securityContext"] == {
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert operator_container(docs)["securityContext"]["readOnlyRootFilesystem"] is True


def test_the_security_contexts_can_be_replaced(helm: str) -> None:
    docs = objects(
        template(
            helm, "securityContext.runAsUser=1001", "podSecurityContext.fsGroupChangePolicy=OnRootMismatch"
        )
    )
    assert operator_container(docs)["securityContext"]["runAsUser"] == 1001
    assert pod_spec(docs)["securityContext"]["fsGroupChangePolicy"] == "OnRootMismatch"
    assert pod_spec(docs)["securityContext"]["runAsUser"] == 65532, "the other defaults stay"


def test_extra_args_and_env_come_after_the_charts_and_reach_the_operator(helm: str) -> None:
    docs = objects(template(helm, "extraArgs={--detect-seconds=5,--no-pod-logs}", "extraEnv[0].name=HTTPS_PROXY",
                            "extraEnv[0].value=http://proxy:3128"))  # fmt: skip
    c = operator_container(docs)
    args = parsed_args(c)
    assert c["args"][-2:] == ["--detect-seconds=5", "--no-pod-logs"]
    assert args.detect_seconds == 5.0, "the chart passes --detect-seconds too: the later flag wins"
    assert args.no_pod_logs
    assert c["env"][0]["name"] == "POD_NAME" and c["env"][-1] == {
        "name": "HTTPS_PROXY",
        "value": "http://proxy:3128",
    }


def test_pod_labels_join_the_charts_but_cannot_replace_them(helm: str) -> None:
    deploy = one(objects(template(helm, "podLabels.team=ml-platform")), "Deployment")
    labels = deploy["spec"]["template"]["metadata"]["labels"]
    assert labels["team"] == "ml-platform"
    assert "team" not in deploy["spec"]["selector"]["matchLabels"]
    assert deploy["spec"]["selector"]["matchLabels"].items() <= labels.items()
    proc = run_helm(helm, *template_args("podLabels.app\\.kubernetes\\.io/name=other"), check=False)
    assert proc.returncode != 0
    assert "podLabels.app.kubernetes.io/name: the chart sets this label" in proc.stderr, proc.stderr


def test_topology_spread_counts_the_operators_pods_unless_told_otherwise(helm: str) -> None:
    zone = ("topologySpreadConstraints[0].maxSkew=1", "topologySpreadConstraints[0].topologyKey=topology.kubernetes.io/zone",
            "topologySpreadConstraints[0].whenUnsatisfiable=ScheduleAnyway")  # fmt: skip
    docs = objects(template(helm, *zone))
    deploy = one(docs, "Deployment")
    (constraint,) = pod_spec(docs)["topologySpreadConstraints"]
    assert constraint == {
        "maxSkew": 1,
        "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {"matchLabels": deploy["spec"]["selector"]["matchLabels"]},
    }
    own = objects(template(helm, *zone, "topologySpreadConstraints[0].labelSelector.matchLabels.tier=ops"))
    assert pod_spec(own)["topologySpreadConstraints"][0]["labelSelector"] == {"matchLabels": {"tier": "ops"}}
    assert "topologySpreadConstraints" not in pod_spec(objects(template(helm)))


def test_scheduling_values_reach_the_pod(helm: str) -> None:
    docs = objects(template(helm, "priorityClassName=system-cluster-critical", "nodeSelector.pool=system",
                            "tolerations[0].key=dedicated", "tolerations[0].operator=Exists"))  # fmt: skip
    spec = pod_spec(docs)
    assert spec["priorityClassName"] == "system-cluster-critical"
    assert spec["nodeSelector"] == {"pool": "system"}
    assert spec["tolerations"] == [{"key": "dedicated", "operator": "Exists"}]


def test_the_hardening_stays_when_the_values_lack_it(helm: str) -> None:
    """`helm upgrade --reuse-values` from a chart without podSecurityContext and securityContext renders
    with that chart's values, which lack them: the templates' own defaults, values.yaml's, still apply."""
    default, absent = (
        objects(template(helm)),
        objects(template(helm, "podSecurityContext=null", "securityContext=null")),
    )
    assert pod_spec(absent)["securityContext"] == pod_spec(default)["securityContext"]
    assert operator_container(absent)["securityContext"] == operator_container(default)["securityContext"]
    assert pod_spec(default)["securityContext"]["runAsNonRoot"] is True
