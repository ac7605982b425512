"""What the Kubernetes API answers when it refuses, read in one place, so that no other room needs the
client's exception types to tell a missing object from a refusal or a busy apiserver."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

import urllib3.exceptions
from kubernetes.client.exceptions import ApiException as ApiError
from kubernetes.config import ConfigException as ConfigError

__all__ = [
    "ApiError",
    "ConfigError",
    "MissingAPI",
    "NotSynced",
    "Stale",
    "api_status",
    "is_conflict",
    "is_not_found",
    "namespace_terminating",
    "on_conflict",
    "retryable",
    "transient",
]

T = TypeVar("T")
CONFLICT_RETRIES = 5


class MissingAPI(Exception):
    """A kind the cluster does not serve (for example prometheus-operator's CRDs are not installed)."""


class NotSynced(Exception):
    """A watch cache has not finished its first list: reading it now would take "none" for an answer."""


class Stale(Exception):
    """A watch cache that should hear from the API every few seconds has not: what it holds may be old,
    and a decision that reads absence of change as a fault must not rest on it."""


def api_status(exc: ApiError) -> dict[str, Any]:
    """The metav1.Status the API answered with ({} when the body is not one: a proxy's page, nothing)."""
    try:
        status = json.loads(exc.body or "")
    except (ValueError, TypeError):
        return {}
    return status if isinstance(status, dict) else {}


def is_not_found(exc: BaseException) -> bool:
    return isinstance(exc, ApiError) and exc.status == 404


def is_conflict(exc: BaseException) -> bool:
    """Someone wrote the object since it was read (a resourceVersion precondition failed, or a create
    found it there)."""
    return isinstance(exc, ApiError) and exc.status == 409


def namespace_terminating(exc: BaseException) -> bool:
    """The refusal of the apiserver's NamespaceLifecycle admission: a 403 whose Status names the cause
    NamespaceTerminating (a 403 of RBAC has no such cause)."""
    if not isinstance(exc, ApiError) or exc.status != 403:
        return False
    details = api_status(exc).get("details")
    causes = (details.get("causes") if isinstance(details, dict) else None) or []
    # a StatusCause's Type is serialised as "reason"
    return any(isinstance(c, dict) and c.get("reason") == "NamespaceTerminating" for c in causes)


def transient(exc: ApiError) -> bool:
    """Worth retrying soon: the API was unavailable or busy, not refusing the object."""
    return exc.status is None or exc.status in {0, 429} or exc.status >= 500


def retryable(exc: BaseException) -> bool:
    """Any failure worth trying again soon: a transient refusal, or the API not reached at all (the
    connection refused or lost, a timeout), which the client raises as urllib3's errors."""
    if isinstance(exc, ApiError):
        return transient(exc)
    return isinstance(exc, urllib3.exceptions.HTTPError | OSError)


def on_conflict(fn: Callable[[], T], retries: int = CONFLICT_RETRIES) -> T:
    """Run a read-modify-write; a 409 (someone wrote in between) reads again."""
    for attempt in range(retries):
        try:
            return fn()
        except ApiError as exc:
            if not is_conflict(exc) or attempt == retries - 1:
                raise
    raise AssertionError("unreachable")
