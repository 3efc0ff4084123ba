"""This app's deployment configuration: one YAML file, parsed once, checked whole and planned before
anything is built. Not part of the library wheel (it is the repository's own app)."""

from platform_config.loader import load_config, parse_config
from platform_config.model import PlatformConfig
from platform_config.outputs import read_stack_outputs

__all__ = ["PlatformConfig", "load_config", "parse_config", "read_stack_outputs"]
