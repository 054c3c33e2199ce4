"""Core-server integration tests: nats-py, raw protocol, differential, fuzz."""
