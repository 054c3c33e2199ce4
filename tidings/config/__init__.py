"""The nats-server configuration file format, shared by the core server and streaming."""

from .parser import ConfigError, Section, load, parse, parse_duration, parse_size

__all__ = ["ConfigError", "Section", "load", "parse", "parse_duration", "parse_size"]
