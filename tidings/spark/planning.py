"""Partition planning: sequence ranges per channel, streaming offsets, admission control.

Pure functions, no I/O and no Spark: the data source calls them on the driver.

A streaming offset is `{channel: sequence}` meaning "every message of the channel up to and
including this sequence has been handed to Spark" (0 = nothing yet). Offsets are plain JSON so
Spark's checkpoint stores them as they are and a restarted query replays exactly the range a
failed micro-batch had planned.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fnmatch import fnmatchcase

from ..protocol.subjects import subject_matches


@dataclass(frozen=True)
class SeqRange:
    """Messages `start`..`end` (both inclusive) of one channel."""

    channel: str
    start: int
    end: int

    @property
    def count(self) -> int:
        return self.end - self.start + 1


def split_range(channel: str, start: int, end: int, messages_per_partition: int,
                min_partitions: int = 1) -> list[SeqRange]:
    """Cut `start`..`end` into near-equal consecutive ranges.

    As many ranges as it takes to keep each at most `messages_per_partition` long, and at least
    `min_partitions` (so a small channel still keeps several executors busy), but never a range
    without messages.
    """
    if end < start:
        return []
    total = end - start + 1
    parts = max(math.ceil(total / messages_per_partition), min(min_partitions, total))
    size, extra = divmod(total, parts)
    out = []
    lo = start
    for i in range(parts):
        hi = lo + size - 1 + (1 if i < extra else 0)
        out.append(SeqRange(channel, lo, hi))
        lo = hi + 1
    return out


def ranges_between(start: dict[str, int], end: dict[str, int], messages_per_partition: int,
                   min_partitions: int = 1) -> list[SeqRange]:
    """The ranges a micro-batch reads: for each channel, after `start` up to `end`.

    A channel missing from `start` has just entered the offsets (at its starting point) and is
    read from the next micro-batch on.
    """
    out: list[SeqRange] = []
    for channel in sorted(end):
        if channel not in start:
            continue
        out.extend(split_range(channel, start[channel] + 1, end[channel],
                               messages_per_partition, min_partitions))
    return out


def limit_offsets(start: dict[str, int], latest: dict[str, int], max_messages: int
                  ) -> dict[str, int]:
    """The end offset of a micro-batch admitting at most `max_messages` messages.

    The budget is shared fairly (water-filling): channels with a small backlog take all of it,
    the rest split what remains equally; leftovers go to channels in name order, so the result
    is deterministic.
    """
    backlog = {ch: max(0, latest[ch] - start.get(ch, 0)) for ch in latest}
    grant = dict.fromkeys(backlog, 0)
    budget = max_messages
    waiting = sorted((n, ch) for ch, n in backlog.items() if n > 0)
    while waiting and budget > 0:
        share = budget // len(waiting)
        if share == 0:
            for _, ch in sorted(waiting, key=lambda item: item[1])[:budget]:
                grant[ch] += 1
            budget = 0
            break
        still = []
        for n, ch in waiting:
            take = min(n - grant[ch], share)
            grant[ch] += take
            budget -= take
            if grant[ch] < n:
                still.append((n, ch))
        waiting = still
    return {ch: start.get(ch, 0) + grant[ch] for ch in latest}


def merge_offsets(start: dict[str, int], latest: dict[str, int]) -> dict[str, int]:
    """Offsets never move backwards (a channel may look shorter after its messages expire)."""
    out = dict(start)
    for ch, seq in latest.items():
        out[ch] = max(seq, start.get(ch, 0))
    return out


def name_matches(pattern: str, name: str) -> bool:
    """Whether a channel's or stream's `name` matches a channelPattern or streamPattern: a
    NATS-style pattern (a `*` token or a last `>` token: `orders.*`, `orders.>`; `*` or `>`
    alone match every name), matched as the server matches subjects, or failing that a shell
    glob (`orders-*`, `ORDERS_*`)."""
    tokens = pattern.split(".")
    if "*" in tokens or tokens[-1] == ">":
        return subject_matches(pattern, name)
    return fnmatchcase(name, pattern)
