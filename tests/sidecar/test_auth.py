"""The sidecar's keys -> caller id mapping (``capture_sidecar.auth``), the one entry point per-caller features build
on: a key yields its caller's id, every key of a caller the same id, and a set that lost every key refuses all."""

from __future__ import annotations

from capture_sidecar.auth import KeySet, authenticate, key_label
from capture_sidecar.settings import ApiKey
from tests.support.rotation import rotation

A_OLD = "team-a-old-0123456789abcdefghijklmnopqrstuvwxyz"
A_NEW = "team-a-new-0123456789abcdefghijklmnopqrstuvwxyz"
B = "team-b-key-0123456789abcdefghijklmnopqrstuvwxyz"
KEYS = KeySet([ApiKey("team-a", A_OLD), ApiKey("team-a", A_NEW), ApiKey("team-b", B)])


def bearer(key: str) -> list[tuple[bytes, bytes]]:
    return [(b"Host", b"x"), (b"authorization", f"Bearer {key}".encode())]


def test_each_key_yields_its_callers_id_and_every_key_of_a_caller_the_same() -> None:
    assert authenticate(bearer(A_OLD), KEYS) == authenticate(bearer(A_NEW), KEYS) == "team-a"
    assert authenticate(bearer(B), KEYS) == "team-b"
    assert authenticate([(b"Authorization", f"bearer  {B} ".encode())], KEYS) == "team-b"  # scheme in any case
    assert KEYS.callers() == {"team-a", "team-b"} and len(KEYS) == 3


def test_a_wrong_missing_or_doubled_key_yields_no_caller() -> None:
    assert authenticate(bearer(B[:-1]), KEYS) is None
    assert authenticate(bearer(B + "x"), KEYS) is None
    assert authenticate([(b"Authorization", f"Basic {B}".encode())], KEYS) is None
    assert authenticate([], KEYS) is None
    assert authenticate([*bearer(B), *bearer(A_OLD)], KEYS) is None  # which one a server behind reads is unknown


def test_a_set_without_keys_refuses_once_authentication_was_on_and_fingerprints_name_no_key() -> None:
    assert not KeySet([]).required
    assert KeySet([], required=True).required and KeySet([], required=True).caller_of(b"Bearer x") is None
    fingerprints = KEYS.fingerprints()
    assert fingerprints == {key_label(A_OLD): "team-a", key_label(A_NEW): "team-a", key_label(B): "team-b"}
    assert all(len(label) == 12 and label not in (A_OLD, A_NEW, B) for label in fingerprints)


def test_the_sidecar_and_the_rotation_function_fingerprint_a_key_alike() -> None:
    for key in ("k" * 48, "0123456789abcdefghijKLMNOPQRSTuvwxyz0123456789AB", A_OLD):
        assert key_label(key) == rotation.key_fingerprint(key)
