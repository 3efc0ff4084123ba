"""Deployment configuration: one YAML file, validated whole before anything is built."""

from platform_config.loader import load_config, parse_config
from platform_config.model import PlatformConfig

__all__ = ["PlatformConfig", "load_config", "parse_config"]
