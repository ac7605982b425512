"""Which of the API's failures are worth trying again soon (kube/errors.py `retryable`): a busy or
unavailable apiserver and a connection that never got an answer, not a refusal of what was asked."""

from __future__ import annotations

import pytest
import urllib3.exceptions

from tests.kube.fakes import refused
from trainguard.kube.errors import retryable


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (refused(503, "etcdserver: leader changed"), True),
        (refused(500, "Internal error"), True),
        (refused(429, "too many requests"), True),
        (refused(422, "denied by a ValidatingAdmissionPolicy"), False),
        (refused(403, "forbidden"), False),
        (refused(409, "the object has been modified"), False),
        (urllib3.exceptions.MaxRetryError(None, "/apis", "connection refused"), True),  # type: ignore[arg-type]
        (urllib3.exceptions.ReadTimeoutError(None, "/apis", "read timed out"), True),  # type: ignore[arg-type]
        (ConnectionResetError("reset by peer"), True),
        (ValueError("a bug"), False),
    ],
)
def test_retryable(exc: BaseException, expected: bool) -> None:
    assert retryable(exc) is expected
