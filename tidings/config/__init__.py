"""The nats-server configuration file format, shared by the core server and streaming; the
units of the options (`units`)."""

from .parser import Array, ConfigError, Section, load, parse

__all__ = ["Array", "ConfigError", "Section", "load", "parse"]
