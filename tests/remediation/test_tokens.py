"""Per-monitor tokens derived from the operator key: checkable without reading a Secret, worthless
for another monitor, another purpose, or another object under the same monitor's name (its uid)."""

from __future__ import annotations

import base64
import hashlib
import hmac
from pathlib import Path

import pytest

from trainguard.remediation import tokens

KEY = b"k" * 32
UID = "6f1c2e0a-5b7d-4c1e-9a3f-2d8b7e6c5a41"


def test_a_token_is_the_hmac_of_purpose_namespace_name_and_uid_in_urlsafe_base64() -> None:
    mac = hmac.new(KEY, f"events\nml\nllama-pretrain\n{UID}".encode(), hashlib.sha256).digest()
    token = tokens.derive(KEY, "events", "ml", "llama-pretrain", UID)
    assert token == base64.urlsafe_b64encode(mac).decode().rstrip("=")
    assert "=" not in token and len(token) == 43


def test_a_derived_token_verifies_for_its_own_purpose_and_monitor_only() -> None:
    token = tokens.derive(KEY, tokens.EVENTS, "ml", "llama", UID)
    assert tokens.verify(KEY, tokens.EVENTS, "ml", "llama", UID, presented=token)
    assert not tokens.verify(KEY, tokens.ALERTS, "ml", "llama", UID, presented=token)
    assert not tokens.verify(KEY, tokens.EVENTS, "ml", "llama-2", UID, presented=token)
    assert not tokens.verify(KEY, tokens.EVENTS, "ml2", "llama", UID, presented=token)
    assert not tokens.verify(b"j" * 32, tokens.EVENTS, "ml", "llama", UID, presented=token)


def test_a_monitor_created_again_under_its_name_has_other_tokens() -> None:
    """The same namespace and name, another object: the first one's token is worth nothing for it."""
    old = tokens.derive(KEY, tokens.ALERTS, "ml", "llama", UID)
    new_uid = "0b9e4d2c-1a6f-4e8b-b3c7-5f2a9d1e8c60"
    assert not tokens.verify(KEY, tokens.ALERTS, "ml", "llama", new_uid, presented=old)
    assert tokens.verify(
        KEY,
        tokens.ALERTS,
        "ml",
        "llama",
        new_uid,
        presented=tokens.derive(KEY, tokens.ALERTS, "ml", "llama", new_uid),
    )


def test_a_monitor_without_a_uid_has_no_token() -> None:
    with pytest.raises(ValueError, match=r"monitor ml/llama has no metadata.uid"):
        tokens.derive(KEY, tokens.EVENTS, "ml", "llama", "")


def test_namespace_name_and_uid_cannot_be_shifted_into_each_other() -> None:
    assert tokens.derive(KEY, "events", "a-b", "c", UID) != tokens.derive(KEY, "events", "a", "b-c", UID)
    assert tokens.derive(KEY, "events", "a", "b", "c-d") != tokens.derive(KEY, "events", "a", "b-c", "d")


@pytest.mark.parametrize("presented", ["", "x", "é" * 43, " " + tokens.derive(KEY, "alerts", "ml", "j", UID)])
def test_anything_but_the_exact_token_is_refused(presented: str) -> None:
    assert not tokens.verify(KEY, "alerts", "ml", "j", UID, presented=presented)


def test_verify_compares_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    assert not tokens.verify(KEY, "alerts", "ml", "j", UID, presented="wrong")
    assert len(calls) == 1


def test_a_short_key_is_refused_when_deriving() -> None:
    with pytest.raises(ValueError, match="at least 32 bytes"):
        tokens.derive(b"short", "events", "ml", "j", UID)


def test_load_key_strips_the_file_and_wants_32_bytes(tmp_path: Path) -> None:
    good = tmp_path / "key"
    good.write_bytes(b"  " + b"a" * 32 + b"\n")
    assert tokens.load_key(good) == b"a" * 32
    short = tmp_path / "short"
    short.write_bytes(b"a" * 31 + b"\n" + b" " * 10)
    with pytest.raises(ValueError, match=r"holds 31 bytes; at least 32"):
        tokens.load_key(short)
    with pytest.raises(ValueError, match="cannot read the operator key"):
        tokens.load_key(tmp_path / "absent")


def test_new_keys_are_long_random_and_survive_a_file(tmp_path: Path) -> None:
    a, b = tokens.new_key(), tokens.new_key()
    assert a != b and len(a) >= 32
    path = tmp_path / "key"
    path.write_bytes(a + b"\n")
    assert tokens.load_key(path) == a
    assert tokens.verify(
        a, "events", "ml", "j", UID, presented=tokens.derive(tokens.load_key(path), "events", "ml", "j", UID)
    )
