"""Integration tests of tidings.client against tidings and the reference nats-server."""
