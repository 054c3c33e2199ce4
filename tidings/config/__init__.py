"""The nats-server configuration file format, shared by the core server and streaming; the
units of the options (`units`)."""

from .parser import ConfigError, Section, load, parse

__all__ = ["ConfigError", "Section", "load", "parse"]
