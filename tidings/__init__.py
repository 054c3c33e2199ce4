"""tidings: a NATS-compatible messaging system in Python."""

__version__ = "0.1.0"
