"""Stack outputs (``cdk deploy --outputs-file``) that fill the platform values a config file cannot know,
such as the ARN of a certificate the app creates. Checked like the config: every problem at once."""

from __future__ import annotations

import json
from pathlib import Path

from hyperpod_inference_iac import PlatformValue
from hyperpod_inference_iac.foundation.validation import ConfigError, Problems
from platform_config.model import PlatformConfig


def read_stack_outputs(config: PlatformConfig, path: Path) -> dict[PlatformValue, str]:
    """The platform values in ``path`` for this config's cluster stack. A value the config already names
    must agree with it (a different one means the file belongs to another deploy)."""
    problems = Problems()
    source = str(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        problems.add("Outputs.BadFile", source, f"must be the JSON that `cdk deploy --outputs-file` writes ({error})")
        raise ConfigError(problems) from None
    stack = f"{config.project}-cluster"
    if not isinstance(data, dict):
        problems.add("Outputs.BadFile", source, "must be a JSON object of stack names to their outputs",
                     type(data).__name__)
        raise ConfigError(problems)
    outputs = data.get(stack)
    if not isinstance(outputs, dict):
        problems.add("Outputs.StackMissing", source,
                     f"has no outputs of stack {stack} (it has: {', '.join(sorted(data)) or 'none'}); pass the "
                     f"file written by deploying this config", sorted(data))
        raise ConfigError(problems)
    values: dict[PlatformValue, str] = {}
    known = config.known_values
    for value in PlatformValue:
        given = outputs.get(value.output_name)
        if given is None:
            continue
        if not isinstance(given, str) or not given:
            problems.add("Outputs.BadValue", f"{stack}.{value.output_name}", "must be a non-empty string", given)
        elif value in known and known[value] != given:
            problems.add("Outputs.Conflict", f"{stack}.{value.output_name}",
                         f"differs from the config's value {known[value]!r}: the outputs file is from another "
                         "deploy; deploy this config and write a fresh one", given)
        else:
            values[value] = given
    problems.raise_if_any(source)
    return values
