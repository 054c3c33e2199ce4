"""A JetStream consumer's configuration: the reference's defaults and field order
(`normalize`) and its checks (`check`: checkConsumerCfg's, in its order, with its
errors; `check_on_stream`: what a work-queue stream allows)."""

from __future__ import annotations

import re
from typing import Any

from ..protocol.subjects import is_valid_subject, subject_matches, subjects_collide
from . import errors
from .stream import valid_asset_name

NS = 10**9
DEFAULT_ACK_WAIT = 30 * NS
DEFAULT_MAX_ACK_PENDING = 1000
DEFAULT_MAX_WAITING = 512
DEFAULT_INACTIVE_THRESHOLD = 5 * NS
MAX_DESCRIPTION = 4 * 1024

_FIELDS = (
    "durable_name", "name", "description", "deliver_policy", "opt_start_seq",
    "opt_start_time", "ack_policy", "ack_wait", "max_deliver", "backoff", "filter_subject",
    "filter_subjects", "replay_policy", "rate_limit_bps", "sample_freq", "max_waiting",
    "max_ack_pending", "flow_control", "headers_only", "max_batch", "max_expires",
    "max_bytes", "deliver_subject", "deliver_group", "idle_heartbeat", "inactive_threshold",
    "num_replicas", "mem_storage", "direct", "sourcing", "metadata", "pause_until",
    "priority_groups", "priority_policy", "priority_timeout",
)
_ALWAYS = ("deliver_policy", "ack_policy", "replay_policy", "num_replicas")
_CHOICES = {"deliver_policy": ("all", "last", "new", "by_start_sequence", "by_start_time",
                               "last_per_subject"),
            "ack_policy": ("none", "all", "explicit"),
            "replay_policy": ("instant", "original")}

_ZERO_WHEN_NEGATIVE = ("max_waiting", "max_batch", "max_expires", "max_bytes",
                       "idle_heartbeat", "inactive_threshold", "priority_timeout")
PRIORITY_POLICIES = ("none", "overflow", "pinned_client", "prioritized")
DEFAULT_PINNED_TTL = 120 * NS  # (the reference's JsDefaultPinnedTTL)
_GROUP_NAME = re.compile(r"[a-zA-Z0-9/_=-]{1,16}")


def _pedantic(raw: dict[str, Any], stream: dict[str, Any]) -> None:
    """What pedantic mode refuses instead of filling in (setConsumerConfigDefaults)."""
    def number(field: str) -> int:
        value = raw.get(field)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    refusals = [
        (number("max_deliver") < -1, "max_deliver must be set to -1"),
        (number("max_waiting") < 0, "max_waiting must not be negative"),
        (number("max_ack_pending") < -1, "max_ack_pending must be set to -1"),
        (number("max_batch") < 0, "max_batch must not be negative"),
        (number("max_expires") < 0, "max_expires must not be negative"),
        (number("max_bytes") < 0, "max_bytes must not be negative"),
        (number("idle_heartbeat") < 0, "idle_heartbeat must not be negative"),
        (number("inactive_threshold") < 0, "inactive_threshold must not be negative"),
        (number("priority_timeout") < 0, "priority_timeout must not be negative"),
        (bool(raw.get("backoff")) and number("ack_wait") != (raw.get("backoff") or [0])[0],
         "first backoff value has to equal batch AckWait"),
    ]
    limits = stream.get("consumer_limits") or {}
    refusals += [
        (not number("max_ack_pending") and limits.get("max_ack_pending", 0) > 0,
         "max_ack_pending must be set if it's configured in stream limits"),
        (not number("inactive_threshold") and limits.get("inactive_threshold", 0) > 0,
         "inactive_threshold must be set if it's configured in stream limits"),
    ]
    for refused, words in refusals:
        if refused:
            raise errors.PEDANTIC(err=words)


def normalize(raw: Any, durable: str = "", stream: dict[str, Any] | None = None,
              pedantic: bool = False) -> dict[str, Any]:
    """A consumer's configuration as the reference fills it in (setConsumerConfigDefaults;
    `stream`: its stream's configuration, whose consumer_limits give defaults); with
    `pedantic`, what it would fill in is refused."""
    if not isinstance(raw, dict):
        raise errors.CONSUMER_CONFIG_REQUIRED()
    if pedantic:
        _pedantic(raw, stream or {})
    # (zeros and false are the reference's "not given": its fields are omitempty)
    cfg = {k: v for k, v in raw.items()
           if k in _FIELDS and v not in (None, "", [], {}, 0, False)}
    for field in _ZERO_WHEN_NEGATIVE:
        if isinstance(cfg.get(field), int) and cfg[field] < 0:
            del cfg[field]
    if isinstance(cfg.get("max_ack_pending"), int) and cfg["max_ack_pending"] < -1:
        cfg["max_ack_pending"] = -1
    if isinstance(cfg.get("max_deliver"), int) and cfg["max_deliver"] < -1:
        del cfg["max_deliver"]
    if cfg.get("backoff") and isinstance(cfg["backoff"], list):
        cfg["ack_wait"] = cfg["backoff"][0]
    limits = (stream or {}).get("consumer_limits") or {}
    if limits.get("max_ack_pending") and "max_ack_pending" not in cfg:
        cfg["max_ack_pending"] = limits["max_ack_pending"]
    if limits.get("inactive_threshold") and "inactive_threshold" not in cfg:
        cfg["inactive_threshold"] = limits["inactive_threshold"]
    cfg.setdefault("deliver_policy", "all")
    cfg.setdefault("ack_policy", "none")  # (the reference's zero value)
    cfg.setdefault("replay_policy", "instant")
    for field, choices in _CHOICES.items():
        if cfg[field] not in choices:
            raise errors.CONSUMER_INVALID_POLICY(err=f"invalid {field} {cfg[field]!r}")
    if durable:
        cfg["durable_name"] = durable
    if cfg.get("durable_name") and not cfg.get("name"):
        cfg["name"] = cfg["durable_name"]
    if cfg["ack_policy"] != "none":
        cfg.setdefault("ack_wait", DEFAULT_ACK_WAIT)
        cfg.setdefault("max_ack_pending", DEFAULT_MAX_ACK_PENDING)
    cfg.setdefault("max_deliver", -1)
    if cfg.get("priority_policy") == "none":
        del cfg["priority_policy"]  # (the reference's zero value, left out)
    if cfg.get("priority_policy") == "pinned_client":
        cfg.setdefault("priority_timeout", DEFAULT_PINNED_TTL)
    if not cfg.get("deliver_subject"):
        cfg.setdefault("max_waiting", DEFAULT_MAX_WAITING)
    if not cfg.get("durable_name"):
        cfg.setdefault("inactive_threshold", DEFAULT_INACTIVE_THRESHOLD)
    cfg["num_replicas"] = int(raw.get("num_replicas") or 0)
    cfg["metadata"] = {**(raw.get("metadata") or {}), "_nats.level": "1",
                       "_nats.req.level": str(_required_level(raw)), "_nats.ver": "2.11.0"}
    return {k: cfg[k] for k in _FIELDS if k in cfg or k in _ALWAYS}


def _required_level(raw: dict[str, Any]) -> int:
    """The API level a consumer needs (the reference's `_nats.req.level`, from the
    configuration as given): 1 with a pause or priority groups."""
    if raw.get("pause_until"):
        return 1
    if raw.get("priority_policy") not in (None, "none") or raw.get("priority_timeout") \
            or raw.get("priority_groups"):
        return 1
    return 0


def _priority(cfg: dict[str, Any]) -> None:
    """Priority groups: for pull consumers, named, with a policy (and a pin's timeout only
    with one)."""
    if cfg.get("priority_policy"):
        if cfg.get("deliver_subject"):
            raise errors.CONSUMER_PUSH_WITH_PRIORITY_GROUP()
        groups = cfg.get("priority_groups") or []
        if not groups:
            raise errors.CONSUMER_PRIORITY_POLICY_WITHOUT_GROUP()
        for group in groups:
            if not group:
                raise errors.CONSUMER_EMPTY_GROUP_NAME()
            if not valid_group_name(group):
                raise errors.CONSUMER_INVALID_GROUP_NAME()
    else:
        if cfg.get("priority_groups"):
            raise errors.CONSUMER_PRIORITY_GROUP_WITH_POLICY_NONE()
        if cfg.get("priority_timeout"):
            raise errors.CONSUMER_PINNED_TTL_WITHOUT_PRIORITY_POLICY_NONE()


def valid_group_name(group: str) -> bool:
    """A priority group's name: 1 to 16 of A-Z, a-z, 0-9, -, _, /, =."""
    return _GROUP_NAME.fullmatch(group) is not None




def _start_policy(cfg: dict[str, Any]) -> None:
    """The deliver policy and its optional start, as the reference pairs them."""
    policy, seq, start = cfg["deliver_policy"], cfg.get("opt_start_seq"), cfg.get("opt_start_time")
    words = {"all": "all", "last": "last", "last_per_subject": "last per subject",
             "new": "new", "by_start_sequence": "by start sequence",
             "by_start_time": "by start time"}[policy]

    def bad(start_of: str) -> errors.ApiError:
        return errors.CONSUMER_INVALID_POLICY(
            err=f"consumer delivery policy is deliver {words}, but optional start "
                f"{start_of} is also set")

    def unset(what: str) -> errors.ApiError:
        return errors.CONSUMER_INVALID_POLICY(
            err=f"consumer delivery policy is deliver {words}, but optional {what} is not set")

    if policy in ("all", "last", "last_per_subject", "new"):
        if seq:
            raise bad("sequence")
        if start:
            raise bad("time")
        if policy == "last_per_subject" and not (cfg.get("filter_subject")
                                                 or cfg.get("filter_subjects")):
            raise unset("filter subject")
    elif policy == "by_start_sequence":
        if not seq:
            raise unset("start sequence")
        if start:
            raise bad("time")
    elif policy == "by_start_time":
        if not start:
            raise unset("start time")
        if seq:
            raise bad("start sequence")


def check(cfg: dict[str, Any], stream: dict[str, Any]) -> None:
    """A normalized consumer configuration against its stream's, as the reference's
    checkConsumerCfg checks it (its order, its errors)."""
    invalid = errors.STREAM_INVALID_CONFIG
    if cfg.get("name") and not valid_asset_name(cfg["name"]):
        raise invalid(err="consumer name can not contain '.', '*', '>', '\\', '/'")
    if cfg.get("durable_name") and not valid_asset_name(cfg["durable_name"]):
        raise invalid(err="consumer durable name can not contain '.', '*', '>', '\\', '/'")
    replicas = cfg.get("num_replicas") or 0
    if replicas > 0 and replicas > stream["num_replicas"]:
        raise errors.CONSUMER_REPLICAS_EXCEEDS_STREAM()
    if replicas < 0:
        raise errors.REPLICAS_COUNT_CANNOT_BE_NEGATIVE()
    backoff = cfg.get("backoff") or []
    if any(b < 0 for b in backoff):
        raise errors.CONSUMER_BACK_OFF_NEGATIVE()
    if (cfg.get("ack_wait") or 0) < 0:
        raise errors.CONSUMER_ACK_WAIT_NEGATIVE()
    max_deliver = cfg.get("max_deliver", -1)
    if backoff and max_deliver != -1 and len(backoff) > max_deliver:
        raise errors.CONSUMER_MAX_DELIVER_BACKOFF()
    if len(cfg.get("description") or "") > MAX_DESCRIPTION:
        raise errors.CONSUMER_DESCRIPTION_TOO_LONG(max=MAX_DESCRIPTION)
    target = cfg.get("deliver_subject")
    if target:
        if any(token in ("*", ">") for token in target.split(".")):
            raise errors.CONSUMER_DELIVER_TO_WILDCARDS()
        if not is_valid_subject(target):
            raise errors.CONSUMER_INVALID_DELIVER_SUBJECT()
        if any(subject_matches(s, target) for s in stream.get("subjects") or []):
            raise errors.CONSUMER_DELIVER_CYCLE()
        if cfg.get("max_waiting"):
            raise errors.CONSUMER_PUSH_MAX_WAITING()
        if cfg.get("max_ack_pending", 0) > 0 and cfg["ack_policy"] == "none":
            raise errors.CONSUMER_MAX_PENDING_ACK_POLICY_REQUIRED()
        if 0 < (cfg.get("idle_heartbeat") or 0) < NS // 10:
            raise errors.CONSUMER_SMALL_HEARTBEAT()
    else:
        if cfg["ack_policy"] == "none" and stream["retention"] == "workqueue":
            raise errors.CONSUMER_PULL_REQUIRES_ACK()
        if (cfg.get("rate_limit_bps") or 0) > 0:
            raise errors.CONSUMER_PULL_WITH_RATE_LIMIT()
        if cfg.get("max_waiting", 0) < 0:
            raise errors.CONSUMER_MAX_WAITING_NEGATIVE()
        if cfg.get("idle_heartbeat"):
            raise errors.CONSUMER_HB_REQUIRES_PUSH()
        if cfg.get("flow_control"):
            raise errors.CONSUMER_FC_REQUIRES_PUSH()
        if (cfg.get("max_batch") or 0) < 0:
            raise errors.CONSUMER_MAX_REQUEST_BATCH_NEGATIVE()
        if 0 < (cfg.get("max_expires") or 0) < NS // 1000 or (cfg.get("max_expires") or 0) < 0:
            raise errors.CONSUMER_MAX_REQUEST_EXPIRES_TOO_SMALL()
    limits = stream.get("consumer_limits") or {}
    if limits.get("max_ack_pending", 0) > 0 and cfg.get("max_ack_pending", 0) > \
            limits["max_ack_pending"]:
        raise errors.CONSUMER_MAX_PENDING_ACK_EXCESS(limit=limits["max_ack_pending"])
    if limits.get("inactive_threshold", 0) > 0 and cfg.get("inactive_threshold", 0) > \
            limits["inactive_threshold"]:
        raise errors.CONSUMER_INACTIVE_THRESHOLD_EXCESS(limit=limits["inactive_threshold"])
    if cfg.get("direct"):
        if not target:
            raise errors.CONSUMER_DIRECT_REQUIRES_PUSH()
        if cfg.get("durable_name"):
            raise errors.CONSUMER_DIRECT_REQUIRES_EPHEMERAL()
    _filters(cfg)
    _start_policy(cfg)
    sample = cfg.get("sample_freq")
    if sample:
        digits = str(sample).removesuffix("%")
        if not digits.isdigit():
            raise errors.CONSUMER_INVALID_SAMPLING(
                err=f'strconv.Atoi: parsing "{digits}": invalid syntax')
    if cfg.get("flow_control") and not cfg.get("idle_heartbeat"):
        raise errors.CONSUMER_WITH_FLOW_CONTROL_NEEDS_HEARTBEATS()
    if cfg.get("durable_name") and cfg.get("name") and cfg["name"] != cfg["durable_name"]:
        raise errors.CONSUMER_CREATE_DURABLE_AND_NAME_MISMATCH()
    _priority(cfg)


def _filters(cfg: dict[str, Any]) -> None:
    single, several = cfg.get("filter_subject"), cfg.get("filter_subjects") or []
    if single and several:
        raise errors.CONSUMER_DUPLICATE_FILTER_SUBJECTS()
    if single and not is_valid_subject(single):
        raise errors.STREAM_INVALID_CONFIG(err="invalid subject")
    if any(not f for f in several):
        raise errors.CONSUMER_EMPTY_FILTER()
    filters = [single] if single else several
    for i, one in enumerate(filters):
        if not is_valid_subject(one):
            raise errors.STREAM_INVALID_CONFIG(err="invalid subject")
        for j, other in enumerate(filters):
            if i != j and (subject_matches(one, other) or subject_matches(other, one)):
                raise errors.CONSUMER_OVERLAPPING_SUBJECT_FILTERS()  # (one within the other)


def check_on_stream(cfg: dict[str, Any], stream: dict[str, Any],
                    others: list[dict[str, Any]]) -> None:
    """What a work-queue stream allows of a new consumer beside `others` (their
    configurations): explicit acks, deliver all, one consumer per subject."""
    if stream["retention"] != "workqueue":
        return
    if cfg["ack_policy"] != "explicit":
        raise errors.CONSUMER_WQ_REQUIRES_EXPLICIT_ACK()
    if cfg["deliver_policy"] != "all":
        raise errors.CONSUMER_WQ_CONSUMER_NOT_DELIVER_ALL()
    if not others:
        return
    mine = ([cfg["filter_subject"]] if cfg.get("filter_subject")
            else list(cfg.get("filter_subjects") or []))
    if not mine:
        raise errors.CONSUMER_WQ_MULTIPLE_UNFILTERED()
    for other in others:
        theirs = ([other["filter_subject"]] if other.get("filter_subject")
                  else list(other.get("filter_subjects") or []))
        if not theirs or any(subjects_collide(a, b) for a in mine for b in theirs):
            raise errors.CONSUMER_WQ_CONSUMER_NOT_UNIQUE()


_FIXED = [("deliver_policy", "deliver policy"), ("mem_storage", "storage type"),
          ("direct", "direct"), ("sourcing", "sourcing"),
          ("opt_start_seq", "start sequence"), ("opt_start_time", "start time"),
          ("ack_policy", "ack policy"), ("replay_policy", "replay policy"),
          ("idle_heartbeat", "heart beats"), ("flow_control", "flow control")]


def check_change(old: dict[str, Any], new: dict[str, Any], bound: bool) -> None:
    """What an update of a consumer may not change (the reference's words, wrapped as
    JSConsumerCreateErrF); `bound`: whether someone listens to its deliver subject."""
    def refuse(what: str) -> errors.ApiError:
        return errors.CONSUMER_CREATE(err=what)

    for field, words in _FIXED:
        if old.get(field) != new.get(field):
            raise refuse(f"{words} can not be updated")
    if old.get("deliver_subject") != new.get("deliver_subject"):
        if not old.get("deliver_subject"):
            raise refuse("can not update pull consumer to push based")
        if not new.get("deliver_subject"):
            raise refuse("can not update push consumer to pull based")
        if bound:
            raise errors.CONSUMER_NAME_EXIST()
    if old.get("max_waiting") != new.get("max_waiting"):
        raise refuse("max waiting can not be updated")
