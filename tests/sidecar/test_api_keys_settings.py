"""API_KEY, API_KEY_ID, API_KEYS_FILE and MODEL_NAME: one clear problem each, never a key in a message."""

from __future__ import annotations

from pathlib import Path

import pytest

from capture_sidecar.settings import SettingsError, key_fingerprint, load_settings

BASE = {"UPSTREAM_URL": "http://127.0.0.1:8000", "CAPTURE_S3_URI": "s3://bucket/p/"}
KEY_A = "a-key-that-is-long-enough-1"
KEY_B = "b-key-that-is-long-enough-2"


def problems(**env: str) -> list[str]:
    with pytest.raises(SettingsError) as raised:
        load_settings({**BASE, **env})
    return raised.value.problems


def test_api_key_alone_is_named_by_its_fingerprint_or_api_key_id() -> None:
    (entry,) = load_settings({**BASE, "API_KEY": KEY_A}).api_keys
    assert entry.caller_id == key_fingerprint(KEY_A) == "key-" + entry.caller_id[4:]
    assert len(entry.caller_id) == 16 and KEY_A not in repr(entry)
    (named,) = load_settings({**BASE, "API_KEY": KEY_A, "API_KEY_ID": "platform"}).api_keys
    assert named.caller_id == "platform"
    assert load_settings(BASE).api_keys == ()


def test_the_keys_file_gives_each_caller_its_key(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    path.write_text(f"# comment\n\nteam-a:{KEY_A}\n  team.b : {KEY_B}  \n")
    settings = load_settings({**BASE, "API_KEYS_FILE": str(path), "API_KEY": "c-key-that-is-long-enough-3"})
    assert [(entry.caller_id, entry.key) for entry in settings.api_keys][1:] == [("team-a", KEY_A), ("team.b", KEY_B)]
    assert KEY_A not in repr(settings)


def test_every_bad_line_of_the_keys_file_is_one_problem_without_its_key(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    path.write_text(
        "\n".join(
            [
                KEY_A,  # no caller id
                f"bad id!:{KEY_B}",
                "team-c:short-secret",
                f"team-a:{KEY_A}",
                f"team-d:{KEY_A}",  # another caller's key
            ]
        )
    )
    found = problems(API_KEYS_FILE=str(path))
    assert len(found) == 4, found
    assert "line 1 (not shown): must be caller_id:key" in found[0]
    assert "line 2 (not shown)" in found[1]
    assert "line 3, caller 'team-c' (key not shown)" in found[2]
    assert "caller 'team-d': its key (not shown) is also the key of 'team-a'" in found[3]
    assert not any(secret in problem for problem in found for secret in (KEY_A, KEY_B, "short-secret", "bad id"))


def test_a_caller_may_hold_several_keys_during_a_rotation(tmp_path: Path) -> None:
    """The synced Secret lists the current, pending and previous key of one caller: one id for all of them, and a
    key that is current and still pending for a moment (the same line twice) counts once."""
    path = tmp_path / "keys"
    path.write_text(f"server-api-key:{KEY_B}\nserver-api-key:{KEY_B}\nserver-api-key:{KEY_A}\n")
    settings = load_settings({**BASE, "API_KEYS_FILE": str(path)})
    assert [(entry.caller_id, entry.key) for entry in settings.api_keys] == [
        ("server-api-key", KEY_B), ("server-api-key", KEY_A)]
    assert settings.api_keys_file == str(path) and settings.api_keys_reload_seconds == 5
    never = load_settings({**BASE, "API_KEYS_FILE": str(path), "API_KEYS_RELOAD_SECONDS": "0"})
    assert never.api_keys_reload_seconds == 0
    assert problems(API_KEYS_FILE=str(path), API_KEYS_RELOAD_SECONDS="-1") == [
        "API_KEYS_RELOAD_SECONDS='-1': must be a number from 0 to 3600"]


def test_keys_file_problems_of_the_file_itself(tmp_path: Path) -> None:
    assert problems(API_KEYS_FILE="relative/keys") == ["API_KEYS_FILE='relative/keys': must be absolute"]
    missing = str(tmp_path / "missing")
    assert problems(API_KEYS_FILE=missing) == [f"API_KEYS_FILE={missing!r}: cannot be read (No such file or directory)"]
    empty = tmp_path / "empty"
    empty.write_text("# nobody yet\n")
    assert problems(API_KEYS_FILE=str(empty)) == [f"API_KEYS_FILE={str(empty)!r}: holds no caller_id:key line"]


def test_api_key_id_needs_api_key_and_model_name_is_checked() -> None:
    assert problems(API_KEY_ID="platform") == ["API_KEY_ID='platform': names the caller of API_KEY, which is not set"]
    assert problems(API_KEY=KEY_A, API_KEY_ID="no spaces please")[0].startswith("API_KEY_ID='no spaces please'")
    assert problems(MODEL_NAME='bad"name') == ["MODEL_NAME='bad\"name': must be 1-128 letters, digits and '._:/@+-'"]
    assert load_settings(BASE).model_name == "unknown"
    assert load_settings({**BASE, "MODEL_NAME": "Qwen/Qwen2.5-7B-Instruct"}).model_name == "Qwen/Qwen2.5-7B-Instruct"
