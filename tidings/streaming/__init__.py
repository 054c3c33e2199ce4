"""NATS Streaming for tidings: protobuf wire messages (pb), durable stores (stores)."""
