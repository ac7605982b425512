"""The operator's signed calls to a sidecar (catalog/control_auth.py): what a copied, altered, late or
foreign request gets."""

from __future__ import annotations

from trainguard.catalog import control_auth
from trainguard.catalog.control_auth import MAX_NONCES, MAX_SKEW_S, Call, Nonces, authorization, check

T = 1_800_000_000.0
TOKEN = "t0k3n"


class Clock:
    def __init__(self, now: float = T) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_a_signed_call_is_taken_once() -> None:
    nonces = Nonces(Clock())
    call = Call("POST", "/v1/control", b'{"pause": true}')
    header = authorization(TOKEN, call, now=T)
    assert check(TOKEN, call, header, nonces) == ""
    assert check(TOKEN, call, header, nonces) == "the request was seen before"


def test_the_signature_covers_method_path_body_and_token() -> None:
    call = Call("POST", "/v1/control", b'{"pause": true}')
    header = authorization(TOKEN, call, now=T)
    for other in (
        Call("GET", "/v1/control", call.body),
        Call("POST", "/v1/hardware", call.body),
        Call("POST", "/v1/control", b'{"pause": false}'),
    ):
        assert check(TOKEN, other, header, Nonces(Clock())) == "the signature does not match"
    assert check("another", call, header, Nonces(Clock())) == "the signature does not match"


def test_a_call_outside_the_clock_window_is_refused_either_way() -> None:
    call = Call("GET", "/v1/hardware")
    for skew in (MAX_SKEW_S + 1, -MAX_SKEW_S - 1):
        header = authorization(TOKEN, call, now=T + skew)
        assert "from the sidecar's clock" in check(TOKEN, call, header, Nonces(Clock()))
    assert check(TOKEN, call, authorization(TOKEN, call, now=T + MAX_SKEW_S), Nonces(Clock())) == ""


def test_a_bearer_token_or_a_malformed_header_is_not_a_signature() -> None:
    call = Call("GET", "/v1/control")
    for header in ("", f"Bearer {TOKEN}", "TrainguardHMAC ts=1,nonce=x,sig=y", control_auth.SCHEME):
        assert check(TOKEN, call, header, Nonces(Clock())).startswith("a signed TrainguardHMAC")
    assert check("", call, authorization("", call, now=T), Nonces(Clock())) == (
        "the sidecar has no token to check calls with"
    )


def test_nonces_are_forgotten_once_their_time_could_not_pass_and_a_flood_is_refused() -> None:
    clock = Clock()
    nonces = Nonces(clock)
    assert nonces.take("a") and not nonces.take("a")
    for i in range(MAX_NONCES - 1):
        assert nonces.take(f"n{i}")
    assert not nonces.take("one-more"), "full: refused, not remembered past the bound"
    clock.now += 2 * MAX_SKEW_S + 1
    assert nonces.take("one-more") and not nonces.take("one-more")
