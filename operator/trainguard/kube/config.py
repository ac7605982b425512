"""Where the API is and who we are to it: in-cluster credentials, else a kubeconfig. Every command and
the operator build their client here, so they all find the cluster the same way."""

from __future__ import annotations

import os
from dataclasses import dataclass

from kubernetes import client, config

from trainguard import __version__

Configuration = client.Configuration
ApiClient = client.ApiClient


def client_configuration(kubeconfig: str | None, context: str | None = None) -> client.Configuration:
    """A fresh client configuration: in-cluster, or from the kubeconfig file read now. Built anew at
    each login, so a rotated ServiceAccount token or an exec plugin's new credential is picked up.
    A `context` (kubectl's --context) names one of the kubeconfig's contexts instead of its
    current-context, and so reads the kubeconfig (KUBECONFIG, ~/.kube/config) even in a pod."""
    cfg = client.Configuration()
    if kubeconfig or context:
        # KUBECONFIG is read now: the client read it once, when it was imported
        path = kubeconfig or os.environ.get("KUBECONFIG") or None
        config.load_kube_config(config_file=path, context=context, client_configuration=cfg)
        return cfg
    try:
        config.load_incluster_config(client_configuration=cfg)
    except config.ConfigException:
        config.load_kube_config(client_configuration=cfg)
    return cfg


def user_agent(component: str) -> str:
    """trainguard/<version> (<component>): what the apiserver's audit log and metrics name us by,
    apart from kopf (kopf/<version>) in the same process."""
    return f"trainguard/{__version__} ({component})"


def api_client(
    kubeconfig: str | None,
    *,
    context: str | None = None,
    pool: int | None = None,
    component: str = "cli",
) -> client.ApiClient:
    """A client on `client_configuration(kubeconfig, context)`; `pool` widens urllib3's connection pool
    (the operator's threads and watches share it)."""
    cfg = client_configuration(kubeconfig, context)
    if pool is not None:
        cfg.connection_pool_maxsize = pool
    api = client.ApiClient(cfg)
    api.user_agent = user_agent(component)
    return api


@dataclass(frozen=True)
class Credentials:
    """What a login needs, read from a configuration (kopf's ConnectionInfo is built from it)."""

    server: str
    ca_path: str | None
    insecure: bool
    username: str | None
    password: str | None
    scheme: str | None
    token: str | None
    certificate_path: str | None
    private_key_path: str | None


def credentials(kubeconfig: str | None, context: str | None = None) -> Credentials:
    """The current credentials: the token is read through get_api_key_with_prefix, which runs the
    client's refresh hook (exec plugins, token files)."""
    cfg = client_configuration(kubeconfig, context)
    header = cfg.get_api_key_with_prefix("BearerToken") or cfg.get_api_key_with_prefix("authorization")
    parts = header.split(" ", 1) if header else []
    scheme, token = (
        (None, None) if not parts else (None, parts[0]) if len(parts) == 1 else (parts[0], parts[1])
    )
    return Credentials(
        server=cfg.host,
        ca_path=cfg.ssl_ca_cert,
        insecure=not cfg.verify_ssl,
        username=cfg.username or None,
        password=cfg.password or None,
        scheme=scheme,
        token=token,
        certificate_path=cfg.cert_file,
        private_key_path=cfg.key_file,
    )
