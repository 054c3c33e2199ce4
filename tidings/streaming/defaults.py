"""The reference's default store limits, in one place for the stores and the flags."""

MAX_CHANNELS = 100
MAX_MSGS = 1_000_000
MAX_BYTES = 1_024_000_000
MAX_SUBS = 1000
