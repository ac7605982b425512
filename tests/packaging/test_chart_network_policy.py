"""networkPolicy: off by default; on, ingress to the operator's pods only on the four ports its
container serves, each from the peers given for it (none given: any source)."""

from __future__ import annotations

from tests.packaging.chart import by_kind, objects, one, run_helm, template_args


def test_there_is_no_network_policy_by_default(helm: str) -> None:
    assert not by_kind(objects(run_helm(helm, *template_args()).stdout), "NetworkPolicy")


def test_each_served_port_admits_its_peers_and_nothing_else_is_admitted(helm: str) -> None:
    monitoring = '[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}}}]'
    args = template_args("networkPolicy.enabled=true", "receiver.port=9000", "operator.metricsPort=9100")
    docs = objects(run_helm(helm, *args, "--set-json", f"networkPolicy.metrics.from={monitoring}").stdout)
    policy = one(docs, "NetworkPolicy")["spec"]
    pod = one(docs, "Deployment")["spec"]["template"]
    assert policy["policyTypes"] == ["Ingress"], "egress is not limited"
    assert policy["podSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    # the ports by the container's names for them, so a port number set in values is followed
    served = {p["name"] for p in pod["spec"]["containers"][0]["ports"]}
    rules = {rule["ports"][0]["port"]: rule for rule in policy["ingress"]}
    assert set(rules) == served == {"webhook", "receiver", "metrics", "health"}
    assert all(len(rule["ports"]) == 1 and rule["ports"][0]["protocol"] == "TCP" for rule in rules.values())
    assert rules["metrics"]["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    ]
    for port in ("webhook", "receiver", "health"):
        assert "from" not in rules[port], f"{port}: no peers given, any source"
