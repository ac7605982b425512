"""values.schema.json: a wrong value stops `helm template` (and so `helm install`) with a message that
names the value and what is wrong with it, before anything reaches the cluster."""

from __future__ import annotations

import re

import pytest

from tests.packaging.chart import CHART, REPO, run_helm, template_args

BAD_VALUES = [
    # (--set, the text the error must contain)
    ("replicas=two", "/replicas"),
    ("replicas=0", "/replicas"),
    ("webhook.certificates.source=vault", "/webhook/certificates/source"),
    ("logLevel=verbose", "/logLevel"),
    ("image.pullPolicy=Sometimes", "/image/pullPolicy"),
    ("receiver.port=70000", "/receiver/port"),
    ("image.digest=latest", "/image/digest"),
    ("alertmanagerUrl=alertmanager:9093", "/alertmanagerUrl"),
    ("operator.resyncSeconds=0", "/operator/resyncSeconds"),
    # a misspelt key is refused, not silently ignored
    ("replica=3", "replica"),
    ("webhook.certificate.source=secret", "certificate"),
    # a Secret source needs the Secret's name
    ("webhook.certificates.source=secret", "/webhook/certificates/secretName"),
    # a default policy needs somewhere to go
    ("defaultPolicy.enabled=true", "/defaultPolicy/namespaces"),
    ("rbac.secretWritePolicy=maybe", "/rbac/secretWritePolicy"),
    # a NetworkPolicy peer with a misspelt key, or an ipBlock without its CIDR
    ("networkPolicy.metrics.from[0].namespace=monitoring", "/networkPolicy/metrics/from/0"),
    ("networkPolicy.receiver.from[0].ipBlock.except[0]=10.0.0.0/8", "/networkPolicy/receiver/from/0/ipBlock"),
    # the pod's and the container's securityContext: known fields only, of their types
    ("podSecurityContext.runAsUsr=1000", "runAsUsr"),
    ("podSecurityContext.runAsUser=-1", "/podSecurityContext/runAsUser"),
    ("securityContext.readOnlyRootFilesystem=maybe", "/securityContext/readOnlyRootFilesystem"),
    ("securityContext.seccompProfile.type=Default", "/securityContext/seccompProfile/type"),
    ("extraArgs[0]=node-lease-grace-seconds=30", "/extraArgs/0"),
    ("extraEnv[0].value=x", "/extraEnv/0"),
    ("topologySpreadConstraints[0].maxSkew=1", "/topologySpreadConstraints/0"),
    ("podLabels.team=a b", "/podLabels"),
    ("prometheusRule.runbookBaseUrl=docs/operator.md", "/prometheusRule/runbookBaseUrl"),
]


@pytest.mark.parametrize(("setting", "names"), BAD_VALUES, ids=[s for s, _ in BAD_VALUES])
def test_a_wrong_value_fails_with_its_path(helm: str, setting: str, names: str) -> None:
    proc = run_helm(helm, *template_args(setting), check=False)
    assert proc.returncode != 0, f"--set {setting} was accepted:\n{proc.stdout[:2000]}"
    assert "values don't meet the specifications of the schema" in proc.stderr, proc.stderr
    assert names in proc.stderr, proc.stderr
    assert not proc.stdout.strip(), "nothing is rendered when a value is wrong"


def test_the_defaults_and_good_overrides_pass(helm: str) -> None:
    for settings in [
        (),
        ("replicas=3", "logLevel=debug", "image.tag=0.1.1"),
        ("webhook.certificates.source=secret", "webhook.certificates.secretName=my-tls"),
        ("defaultPolicy.enabled=true", "defaultPolicy.namespaces={ml}"),
        ("resources.limits.cpu=2", "resources.requests.memory=1Gi"),
        (
            "podSecurityContext.runAsUser=null",
            "podSecurityContext.runAsGroup=null",
            "podSecurityContext.fsGroup=null",
        ),
        ("extraArgs={--detect-seconds=5}", "extraEnv[0].name=A", "extraEnv[0].value=b", "podLabels.team=ml"),
        (
            "topologySpreadConstraints[0].maxSkew=1",
            "topologySpreadConstraints[0].topologyKey=topology.kubernetes.io/zone",
            "topologySpreadConstraints[0].whenUnsatisfiable=ScheduleAnyway",
        ),
        (
            "rbac.secretWritePolicy=false",
            "networkPolicy.enabled=true",
            "networkPolicy.health.from[0].ipBlock.cidr=10.0.0.0/8",
        ),
    ]:
        run_helm(helm, *template_args(*settings))


def test_the_helm_docs_show_what_helm_prints(helm: str) -> None:
    """docs/helm.md's example of a refused value is helm's real answer, word for word."""
    page = (REPO / "docs" / "helm.md").read_text()
    block = re.search(r"```\n\$ (helm template [^\n]+)\n(.*?)```", page, re.S)
    assert block, "docs/helm.md shows a refused value"
    command, shown = block.group(1).split(), block.group(2)
    assert command[:4] == ["helm", "template", "trainguard", "charts/trainguard"]
    proc = run_helm(helm, "template", "trainguard", str(CHART), *command[4:], check=False)
    assert proc.returncode != 0
    assert proc.stderr.strip() == shown.strip()
