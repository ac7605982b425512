"""The one Kubernetes layer: the only room that imports the `kubernetes` client.

- `config`: where the API is (in-cluster, else a kubeconfig) and the credentials for kopf's login;
- `client.Kube`: reads by name and every write (server-side apply, conditional patches, status,
  Events, the operator's own Secrets);
- `watch.Informer` and `cache.ClusterCache`: watch-backed caches that the operator's passes, planner
  and webhook read instead of listing;
- `objects`: pure readings of objects as the API's JSON;
- `errors`: the API's refusals, read without the client's exception types.

Rooms above depend on narrow Protocols of their own, which these classes satisfy (docs/architecture.md).
"""

from trainguard.kube.cache import ClusterCache
from trainguard.kube.client import FIELD_MANAGER, HASH_ANNOTATION, Kube, content_hash, with_hash
from trainguard.kube.config import ApiClient, Credentials, api_client, client_configuration, credentials
from trainguard.kube.errors import (
    ApiError,
    ConfigError,
    MissingAPI,
    NotSynced,
    Stale,
    api_status,
    is_conflict,
    is_not_found,
    namespace_terminating,
    on_conflict,
    transient,
)

__all__ = [
    "FIELD_MANAGER",
    "HASH_ANNOTATION",
    "ApiClient",
    "ApiError",
    "ClusterCache",
    "ConfigError",
    "Credentials",
    "Kube",
    "MissingAPI",
    "NotSynced",
    "Stale",
    "api_client",
    "api_status",
    "client_configuration",
    "content_hash",
    "credentials",
    "is_conflict",
    "is_not_found",
    "namespace_terminating",
    "on_conflict",
    "transient",
    "with_hash",
]
