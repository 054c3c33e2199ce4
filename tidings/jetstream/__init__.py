"""JetStream: persistent streams and consumers (issue 24)."""
