"""Sans-IO NATS protocol core: parsers, encoders, headers and subjects. No sockets, no asyncio."""
