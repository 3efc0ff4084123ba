"""Hostile config files (issue 17): each refused with one problem, its code and place, exit 2 and no traceback,
within seconds and bounded memory (platform_config/document.py)."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import pytest

from hyperpod_inference_iac.foundation.validation import ConfigError
from platform_config import load_config
from platform_config.document import MAX_DEPTH, MAX_FILE_BYTES, MAX_ITEMS
from tests.support.synth import REPO, cli_env

DEFAULT_TEXT = (REPO / "config" / "default.yaml").read_text(encoding="utf-8")
MEMORY_LIMIT = 1 << 30  # RLIMIT_DATA of the subprocesses: the Python heap (Node's reservations are not data)

# Billion laughs: 9 levels of 9 aliases, 9^9 (387 million) strings once expanded, used as a tag value.
_BOMB = "".join(f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(8))
BOMB = DEFAULT_TEXT.replace("tags:\n", "bomb:\n  a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
                            + "".join(f"  {line}\n" for line in _BOMB.splitlines()) + "tags:\n  Bomb: *i\n")
DEEP = DEFAULT_TEXT.replace("tags:\n", "deep: " + "[" * 5000 + "]" * 5000 + "\ntags:\n")
DEEP_BLOCK = DEFAULT_TEXT.replace("tags:\n", "deep:\n" + "".join(f"{'  ' * (i + 1)}k{i}:\n" for i in range(100))
                                  + "tags:\n")


def _write(tmp_path: Path, content: str | bytes) -> Path:
    path = tmp_path / "config.yaml"
    if isinstance(content, str):
        path.write_text(content, encoding="utf-8")
    else:
        path.write_bytes(content)
    return path


def _refusal(path: Path) -> tuple[str, str, str]:
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert len(caught.value.problems) == 1, str(caught.value)
    (problem,) = caught.value.problems
    return problem.code, problem.path, problem.message


@pytest.mark.parametrize(("content", "path", "says"), [
    (DEFAULT_TEXT.encode("utf-16"), "line 1, byte 0", "not UTF-16 (little-endian)"),
    (DEFAULT_TEXT.encode("utf-16-be"), "line 1, byte 0", "NUL byte"),  # no BOM: 'p' is b'\x00p'
    (DEFAULT_TEXT.encode("utf-32"), "line 1, byte 0", "not UTF-32 (little-endian)"),
    (DEFAULT_TEXT.replace("platform-team", "plätform").encode("latin-1"), "line 9, byte 434", "not UTF-8"),
    (b"project: x\x00\n", "line 1, byte 10", "NUL byte"),
], ids=["utf-16", "utf-16-no-bom", "utf-32", "latin-1", "nul"])
def test_a_file_that_is_not_utf8_is_one_problem_at_its_byte(tmp_path: Path, content: bytes, path: str,
                                                            says: str) -> None:
    code, where, message = _refusal(_write(tmp_path, content))
    assert (code, where) == ("Config.NotUtf8", path)
    assert says in message and "save it as UTF-8" in message


def test_a_utf8_byte_order_mark_is_tolerated(tmp_path: Path) -> None:
    assert load_config(_write(tmp_path, b"\xef\xbb\xbf" + DEFAULT_TEXT.encode())).project == "llm-platform"


def test_a_file_over_the_size_bound_is_refused_before_parsing(tmp_path: Path) -> None:
    # 400,000 tags: 5 MB, refused on its size before anything reads it.
    tags = "".join(f"  k{i}: v\n" for i in range(400_000))
    code, where, message = _refusal(_write(tmp_path, DEFAULT_TEXT.replace("tags:\n", "tags:\n" + tags)))
    assert (code, where) == ("Config.FileTooLarge", "(file)")
    assert f"{MAX_FILE_BYTES // 1024} KiB" in message


@pytest.mark.parametrize(("content", "line"), [(DEEP, 8), (DEEP_BLOCK, 8 + MAX_DEPTH)], ids=["flow", "block"])
def test_nesting_is_bounded(tmp_path: Path, content: str, line: int) -> None:
    # (The block file's 65th level is the mapping under k63, on line 72.)
    code, where, message = _refusal(_write(tmp_path, content))
    assert code == "Config.TooDeep" and where.startswith(f"line {line}, column")
    assert f"at most {MAX_DEPTH} levels" in message


@pytest.mark.parametrize(("content", "line"), [
    (BOMB, 9),
    (DEFAULT_TEXT.replace("tags:\n", "loop: &l [*l]\ntags:\n"), 8),  # an alias of itself
    (DEFAULT_TEXT.replace("  Owner: platform-team\n", "  Owner: &owner platform-team\n  Team: *owner\n"), 9),
], ids=["billion-laughs", "recursive", "one-anchor"])
def test_anchors_and_aliases_are_refused(tmp_path: Path, content: str, line: int) -> None:
    code, where, message = _refusal(_write(tmp_path, content))
    assert (code, where.split(",")[0]) == ("Config.AliasNotAllowed", f"line {line}")
    assert "write the value out" in message


def test_a_list_over_the_entry_bound_is_refused(tmp_path: Path) -> None:
    emails = ", ".join(f"a{i}@example.com" for i in range(MAX_ITEMS + 1))
    content = DEFAULT_TEXT.replace("emails: [ml-platform-oncall@example.com]", f"emails: [{emails}]")
    code, _, message = _refusal(_write(tmp_path, content))
    assert code == "Config.TooManyItems" and "alarms.subscribers.emails" in message


def test_a_duplicated_key_is_reported_at_its_key_path_with_both_lines(tmp_path: Path) -> None:
    content = DEFAULT_TEXT.replace("  retentionDays: 30 ", "  retentionDays: 30\n  retentionDays: 3650 ")
    code, where, message = _refusal(_write(tmp_path, content))
    assert (code, where) == ("Config.DuplicateKey", "capture.retentionDays")
    assert "lines 16 and 17" in message


def test_a_duplicated_key_is_reported_with_the_other_problems(tmp_path: Path) -> None:
    content = DEFAULT_TEXT.replace("project: llm-platform\n", "project: llm-platform\nproject: LLM\n")
    with pytest.raises(ConfigError) as caught:
        load_config(_write(tmp_path, content))
    assert [(p.code, p.path) for p in caught.value.problems] == [("Config.DuplicateKey", "project"),
                                                                 ("Config.BadFormat", "project")]


@pytest.mark.parametrize(("replace", "says"), [
    ("retentionDays: 2025-13-45 ", "cannot be read as a timestamp"),
    ("retentionDays: " + "9" * 5000 + " ", "cannot be read as a int"),
], ids=["bad-date", "5000-digits"])
def test_a_scalar_python_cannot_build_is_a_problem_at_its_line(tmp_path: Path, replace: str, says: str) -> None:
    code, where, message = _refusal(_write(tmp_path, DEFAULT_TEXT.replace("retentionDays: 30 ", replace, 1)))
    assert (code, where) == ("Config.InvalidYaml", "line 16, column 18")
    assert says in message


def test_a_control_character_is_a_problem_at_its_line(tmp_path: Path) -> None:
    code, where, _ = _refusal(_write(tmp_path, DEFAULT_TEXT.replace("platform-team", "platform\x01team")))
    assert (code, where) == ("Config.InvalidYaml", "line 9")


# -- bounds: the real command, in a subprocess with a memory limit -------------------------------------------
def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_DATA, (MEMORY_LIMIT, MEMORY_LIMIT))


_TIMED = """
import resource, sys, time
from platform_config import load_config
from hyperpod_inference_iac import ConfigError
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
try:
    load_config(sys.argv[1])
except ConfigError as error:
    codes = ",".join(error.codes)
print(codes, time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
"""


@pytest.mark.slow  # a Python process of its own
@pytest.mark.parametrize(("content", "code"), [(BOMB, "Config.AliasNotAllowed"), (DEEP, "Config.TooDeep")],
                         ids=["billion-laughs", "deep"])
def test_hostile_files_are_refused_within_bounded_memory(tmp_path: Path, content: str,
                                                                    code: str) -> None:
    path = _write(tmp_path, content)
    result = subprocess.run([sys.executable, "-c", _TIMED, str(path)], cwd=REPO, capture_output=True, text=True,
                            check=False, env=cli_env(), preexec_fn=_limit_memory, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    codes, _seconds, grown_kib = result.stdout.split()  # (its time is a figure, not a test: the timeout bounds it)
    assert codes == code
    assert int(grown_kib) < 64 * 1024  # the check itself: well under 64 MiB more than the interpreter


@pytest.mark.slow  # a Python process of its own
@pytest.mark.parametrize(("content", "code"), [
    (DEFAULT_TEXT.encode("utf-16"), "Config.NotUtf8"),
    (BOMB.encode(), "Config.AliasNotAllowed"),
    (DEEP.encode(), "Config.TooDeep"),
], ids=["utf-16", "billion-laughs", "deep"])
def test_the_command_exits_2_without_a_traceback(tmp_path: Path, content: bytes, code: str) -> None:
    path = _write(tmp_path, content)
    result = subprocess.run([sys.executable, "-m", "platform_config", str(path)], cwd=REPO, capture_output=True,
                            text=True, check=False, env=cli_env(), preexec_fn=_limit_memory, timeout=120)
    assert result.returncode == 2, result.stderr[-2000:]
    assert f"[{code}]" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
