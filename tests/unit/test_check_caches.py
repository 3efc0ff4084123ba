"""What the config check works out once and keeps (issue 30, item 2: a config check at half its CPU): a Props class's
key names, a type hint's shape, a ``Duration``'s seconds. Each kept answer is the answer it stands for, and a caller
that changes what it got changes nothing kept."""

from __future__ import annotations

import copy
import re
import typing
from typing import Any

import pytest
import yaml
from aws_cdk import Duration

from hyperpod_inference_iac import AlarmSettings, CaptureStorageProps
from hyperpod_inference_iac.foundation import props as props_module
from hyperpod_inference_iac.foundation import validation
from hyperpod_inference_iac.foundation.validation import ConfigError
from platform_config import parse_config
from tests.support.synth import REPO


def test_a_duration_s_seconds_are_asked_of_the_kernel_once(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[Any] = []
    real = Duration.to_seconds

    def counting(self: Duration, *args: Any, **kwargs: Any) -> float:
        asked.append(self)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Duration, "to_seconds", counting)
    five, also_five, ninety = Duration.minutes(5), Duration.minutes(5), Duration.seconds(90)
    assert [validation.seconds_of(d) for d in (five, five, also_five, ninety, ninety)] == [300, 300, 300, 90, 90]
    assert asked == [five, also_five, ninety]  # one question per object, whatever its value
    assert AlarmSettings(threshold=1, period=five).window == "1 of 1 x 5 min"
    assert len(asked) == 3


def test_key_names_are_the_same_each_time_and_a_caller_s_copy_is_its_own() -> None:
    first = CaptureStorageProps.key_names()
    assert first == CaptureStorageProps._own_key_names() and first
    first["retention_days"] = "changed"
    first["injected"] = "x"
    again = CaptureStorageProps.key_names()
    assert again == CaptureStorageProps._own_key_names() and "injected" not in again
    assert again["retention_days"] != "changed"


OLD_UNION = typing.Union[list[int], None]  # noqa: UP007 (the old spelling too)


@pytest.mark.parametrize("hint", [int, list[str], dict[str, int], int | None, OLD_UNION, Any, typing.Sequence[str]])
def test_a_hint_s_shape_is_typing_s_own(hint: Any) -> None:
    assert props_module._shape(hint) == (typing.get_origin(hint), typing.get_args(hint))
    assert props_module._shape(hint) == (typing.get_origin(hint), typing.get_args(hint))  # (kept)


def test_the_config_check_gives_the_same_answer_on_every_run() -> None:
    """The kept answers change nothing a config check finds: the default config and a wrong one, twice each."""
    default = yaml.safe_load((REPO / "config" / "default.yaml").read_text())
    first, second = (re.sub(r" at 0x[0-9a-f]+", "", repr(parse_config(copy.deepcopy(default)))) for _ in range(2))
    assert first == second and "capture" in first
    broken = copy.deepcopy(default)
    broken["capture"]["retentionDays"] = "fourteen"
    messages = []
    for _ in range(2):
        with pytest.raises(ConfigError) as caught:
            parse_config(copy.deepcopy(broken))
        messages.append(str(caught.value))
    assert messages[0] == messages[1] and "retentionDays" in messages[0]
