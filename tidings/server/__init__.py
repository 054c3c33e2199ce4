"""The core NATS server on asyncio."""
