"""The JetStream API's errors as nats-server gives them, and `ApiError`, which handlers raise.

Every error of the reference's table (its server/errors.json: an HTTP-like `code`, the
`err_code`, the `description`) is an `ErrorKind` constant here; calling one makes a fresh
`ApiError`, as the reference's `NewJS...Error` constructors do:

    raise STREAM_NOT_FOUND()                    # 404 10059 "stream not found"
    raise SEQUENCE_NOT_FOUND(seq=5)             # 400 10043 "sequence 5 not found"
    raise STREAM_CREATE(err=exc)                # 500 10049 "{err}": str(exc)
    raise STREAM_CREATE(err=exc, unless=exc)    # exc itself when it is an ApiError (`Unless`)

Naming: a constant is named after the reference's constructor (`NewJS<Name>Error`, which its
generator derives from the errors.json constant by dropping `ErrF`, `Err` or `F`) as
`<NAME>` in upper snake case: JSStreamNotFoundErr -> NewJSStreamNotFoundError ->
STREAM_NOT_FOUND, JSStreamCreateErrF -> STREAM_CREATE, JSStreamGeneralErrorF ->
STREAM_GENERAL, JSStreamWrongLastMsgIDErrF -> STREAM_WRONG_LAST_MSG_ID. Its keyword
arguments are the description's `{placeholders}`, all of them and no others (`err`, `seq`,
`subject`, `prefix`, `id`, `max`, `limit`, ...), plus `unless`.

Placeholders are filled as the reference's `toReplacerArgs` and `strings.Replacer` do, in one
pass over the description: a string as it is, an `ApiError` as Go's `Error()` text
(`description (err_code)`), any other exception as `str()`, None as `<nil>`, a bool as
`true`/`false`, anything else as `str()`.

The table below is the reference's errors.json (nats-server 2.15) written out, sorted by the
reference's constant; tests/unit/jetstream/test_errors.py compares it with errors.json when a
nats-server source tree is at hand, and with the strings of the reference binary.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# A placeholder in a description, as the reference's generator finds them.
_TAG = re.compile(r"\{(.+?)\}")


class ApiError(Exception):
    """A refused JetStream API request: the response's `error` object, raised by a handler."""

    def __init__(self, code: int, err_code: int = 0, description: str = "") -> None:
        super().__init__(code, err_code, description)
        self.code = code
        self.err_code = err_code
        self.description = description

    def __str__(self) -> str:
        return self.description

    def error_text(self) -> str:
        """Go's `Error()`: the description and the err_code, as an `{err}` carries it."""
        return f"{self.description} ({self.err_code})"

    def as_json(self) -> dict[str, int | str]:
        """`{"code", "err_code", "description"}` in the reference's order; err_code and
        description left out when zero or empty (Go's `omitempty`)."""
        body: dict[str, int | str] = {"code": self.code}
        if self.err_code:
            body["err_code"] = self.err_code
        if self.description:
            body["description"] = self.description
        return body


def _text(value: object) -> str:
    """A placeholder's value as the reference's `toReplacerArgs` writes it."""
    if isinstance(value, str):
        return value
    if isinstance(value, ApiError):
        return value.error_text()
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@dataclass(frozen=True)
class ErrorKind:
    """One error of the reference's table; calling it makes an `ApiError` of this kind."""

    constant: str
    code: int
    err_code: int
    description: str

    @property
    def placeholders(self) -> tuple[str, ...]:
        """The description's `{placeholders}`, sorted (the constructor's keywords)."""
        return tuple(sorted(set(_TAG.findall(self.description))))

    def __call__(self, *, unless: BaseException | None = None, **values: object) -> ApiError:
        """An `ApiError` with the placeholders filled from `values`, or `unless` itself when
        that is an `ApiError` (the reference's `Unless(err)` option)."""
        if isinstance(unless, ApiError):
            return unless
        wanted = self.placeholders
        if tuple(sorted(values)) != wanted:
            raise TypeError(f"{self.constant} takes {', '.join(wanted) or 'no placeholders'}, "
                            f"not {', '.join(sorted(values)) or 'none'}")
        description = _TAG.sub(lambda tag: _text(values[tag.group(1)]), self.description)
        return ApiError(self.code, self.err_code, description)

    def matches(self, err: BaseException | None) -> bool:
        """Whether `err` is an `ApiError` of this kind (the reference's `IsNatsErr`)."""
        return isinstance(err, ApiError) and err.err_code == self.err_code


# The reference's errors.json, one entry a constant, in its generated code's order.
ACCOUNT_RESOURCES_EXCEEDED = ErrorKind(
    "JSAccountResourcesExceededErr", 400, 10002, "resource limits exceeded for account"
)
ATOMIC_PUBLISH_CONTAINS_DUPLICATE_MESSAGE = ErrorKind(
    "JSAtomicPublishContainsDuplicateMessageErr", 400, 10201,
    "atomic publish batch contains duplicate message id",
)
ATOMIC_PUBLISH_DISABLED = ErrorKind(
    "JSAtomicPublishDisabledErr", 400, 10174, "atomic publish is disabled"
)
ATOMIC_PUBLISH_INCOMPLETE_BATCH = ErrorKind(
    "JSAtomicPublishIncompleteBatchErr", 400, 10176, "atomic publish batch is incomplete"
)
ATOMIC_PUBLISH_INVALID_BATCH_COMMIT = ErrorKind(
    "JSAtomicPublishInvalidBatchCommitErr", 400, 10200, "atomic publish batch commit is invalid"
)
ATOMIC_PUBLISH_INVALID_BATCH_ID = ErrorKind(
    "JSAtomicPublishInvalidBatchIDErr", 400, 10179, "atomic publish batch ID is invalid"
)
ATOMIC_PUBLISH_MISSING_SEQ = ErrorKind(
    "JSAtomicPublishMissingSeqErr", 400, 10175, "atomic publish sequence is missing"
)
ATOMIC_PUBLISH_TOO_LARGE_BATCH = ErrorKind(
    "JSAtomicPublishTooLargeBatchErrF", 400, 10199, "atomic publish batch is too large: {size}"
)
ATOMIC_PUBLISH_TOO_MANY_INFLIGHT = ErrorKind(
    "JSAtomicPublishTooManyInflight", 429, 10210, "atomic publish too many inflight"
)
ATOMIC_PUBLISH_UNSUPPORTED_HEADER_BATCH = ErrorKind(
    "JSAtomicPublishUnsupportedHeaderBatchErr", 400, 10177,
    "atomic publish unsupported header used: {header}",
)
BAD_REQUEST = ErrorKind("JSBadRequestErr", 400, 10003, "bad request")
BATCH_PUBLISH_DISABLED = ErrorKind(
    "JSBatchPublishDisabledErr", 400, 10205, "batch publish is disabled"
)
BATCH_PUBLISH_INVALID_BATCH_ID = ErrorKind(
    "JSBatchPublishInvalidBatchIDErr", 400, 10207, "batch publish ID is invalid"
)
BATCH_PUBLISH_INVALID_PATTERN = ErrorKind(
    "JSBatchPublishInvalidPatternErr", 400, 10206, "batch publish pattern is invalid"
)
BATCH_PUBLISH_TOO_MANY_INFLIGHT = ErrorKind(
    "JSBatchPublishTooManyInflight", 429, 10211, "batch publish too many inflight"
)
BATCH_PUBLISH_UNKNOWN_BATCH_ID = ErrorKind(
    "JSBatchPublishUnknownBatchIDErr", 400, 10208, "batch publish ID unknown"
)
CLUSTER_INCOMPLETE = ErrorKind("JSClusterIncompleteErr", 503, 10004, "incomplete results")
CLUSTER_NO_PEERS = ErrorKind("JSClusterNoPeersErrF", 400, 10005, "{err}")
CLUSTER_NOT_ACTIVE = ErrorKind(
    "JSClusterNotActiveErr", 500, 10006, "JetStream not in clustered mode"
)
CLUSTER_NOT_ASSIGNED = ErrorKind(
    "JSClusterNotAssignedErr", 500, 10007, "JetStream cluster not assigned to this server"
)
CLUSTER_NOT_AVAIL = ErrorKind(
    "JSClusterNotAvailErr", 503, 10008, "JetStream system temporarily unavailable"
)
CLUSTER_NOT_LEADER = ErrorKind(
    "JSClusterNotLeaderErr", 500, 10009, "JetStream cluster can not handle request"
)
CLUSTER_PEER_NOT_MEMBER = ErrorKind("JSClusterPeerNotMemberErr", 400, 10040, "peer not a member")
CLUSTER_REQUIRED = ErrorKind(
    "JSClusterRequiredErr", 503, 10010, "JetStream clustering support required"
)
CLUSTER_RESCUE = ErrorKind(
    "JSClusterRescueErr", 400, 10224, "JetStream system rescue not applied: {err}"
)
CLUSTER_SERVER_MEMBER_CHANGE_INFLIGHT = ErrorKind(
    "JSClusterServerMemberChangeInflightErr", 400, 10202, "cluster member change is in progress"
)
CLUSTER_SERVER_NOT_MEMBER = ErrorKind(
    "JSClusterServerNotMemberErr", 400, 10044, "server is not a member of the cluster"
)
CLUSTER_TAGS = ErrorKind(
    "JSClusterTagsErr", 400, 10011, "tags placement not supported for operation"
)
CLUSTER_UN_SUPPORT_FEATURE = ErrorKind(
    "JSClusterUnSupportFeatureErr", 503, 10036, "not currently supported in clustered mode"
)
CONSUMER_ACK_FC_REQUIRES_FC = ErrorKind(
    "JSConsumerAckFCRequiresFCErr", 400, 10219, "flow control ack policy requires flow control"
)
CONSUMER_ACK_FC_REQUIRES_MAX_ACK_PENDING = ErrorKind(
    "JSConsumerAckFCRequiresMaxAckPendingErr", 400, 10220,
    "flow control ack policy requires max ack pending",
)
CONSUMER_ACK_FC_REQUIRES_NO_ACK_WAIT = ErrorKind(
    "JSConsumerAckFCRequiresNoAckWaitErr", 400, 10221,
    "flow control ack policy requires unset ack wait",
)
CONSUMER_ACK_FC_REQUIRES_NO_MAX_DELIVER = ErrorKind(
    "JSConsumerAckFCRequiresNoMaxDeliverErr", 400, 10222,
    "flow control ack policy requires unset max deliver",
)
CONSUMER_ACK_FC_REQUIRES_PUSH = ErrorKind(
    "JSConsumerAckFCRequiresPushErr", 400, 10218,
    "flow control ack policy requires a push based consumer",
)
CONSUMER_ACK_POLICY_INVALID = ErrorKind(
    "JSConsumerAckPolicyInvalidErr", 400, 10181, "consumer ack policy invalid"
)
CONSUMER_ACK_WAIT_NEGATIVE = ErrorKind(
    "JSConsumerAckWaitNegativeErr", 400, 10183, "consumer ack wait needs to be positive"
)
CONSUMER_ALREADY_EXISTS = ErrorKind(
    "JSConsumerAlreadyExists", 400, 10148, "consumer already exists"
)
CONSUMER_BACK_OFF_NEGATIVE = ErrorKind(
    "JSConsumerBackOffNegativeErr", 400, 10184, "consumer backoff needs to be positive"
)
CONSUMER_BAD_DURABLE_NAME = ErrorKind(
    "JSConsumerBadDurableNameErr", 400, 10103, "durable name can not contain '.', '*', '>'"
)
CONSUMER_CONFIG_REQUIRED = ErrorKind(
    "JSConsumerConfigRequiredErr", 400, 10078, "consumer config required"
)
CONSUMER_CREATE_DURABLE_AND_NAME_MISMATCH = ErrorKind(
    "JSConsumerCreateDurableAndNameMismatch", 400, 10132,
    "Consumer Durable and Name have to be equal if both are provided",
)
CONSUMER_CREATE = ErrorKind("JSConsumerCreateErrF", 500, 10012, "{err}")
CONSUMER_CREATE_FILTER_SUBJECT_MISMATCH = ErrorKind(
    "JSConsumerCreateFilterSubjectMismatchErr", 400, 10131,
    "Consumer create request did not match filtered subject from create subject",
)
CONSUMER_DELIVER_CYCLE = ErrorKind(
    "JSConsumerDeliverCycleErr", 400, 10081, "consumer deliver subject forms a cycle"
)
CONSUMER_DELIVER_TO_WILDCARDS = ErrorKind(
    "JSConsumerDeliverToWildcardsErr", 400, 10079, "consumer deliver subject has wildcards"
)
CONSUMER_DESCRIPTION_TOO_LONG = ErrorKind(
    "JSConsumerDescriptionTooLongErrF", 400, 10107,
    "consumer description is too long, maximum allowed is {max}",
)
CONSUMER_DIRECT_REQUIRES_EPHEMERAL = ErrorKind(
    "JSConsumerDirectRequiresEphemeralErr", 400, 10091,
    "consumer direct requires an ephemeral consumer",
)
CONSUMER_DIRECT_REQUIRES_PUSH = ErrorKind(
    "JSConsumerDirectRequiresPushErr", 400, 10090, "consumer direct requires a push based consumer"
)
CONSUMER_DOES_NOT_EXIST = ErrorKind("JSConsumerDoesNotExist", 400, 10149, "consumer does not exist")
CONSUMER_DUPLICATE_FILTER_SUBJECTS = ErrorKind(
    "JSConsumerDuplicateFilterSubjects", 400, 10136,
    "consumer cannot have both FilterSubject and FilterSubjects specified",
)
CONSUMER_DURABLE_NAME_NOT_IN_SUBJECT = ErrorKind(
    "JSConsumerDurableNameNotInSubjectErr", 400, 10016,
    "consumer expected to be durable but no durable name set in subject",
)
CONSUMER_DURABLE_NAME_NOT_MATCH_SUBJECT = ErrorKind(
    "JSConsumerDurableNameNotMatchSubjectErr", 400, 10017,
    "consumer name in subject does not match durable name in request",
)
CONSUMER_DURABLE_NAME_NOT_SET = ErrorKind(
    "JSConsumerDurableNameNotSetErr", 400, 10018,
    "consumer expected to be durable but a durable name was not set",
)
CONSUMER_EMPTY_FILTER = ErrorKind(
    "JSConsumerEmptyFilter", 400, 10139, "consumer filter in FilterSubjects cannot be empty"
)
CONSUMER_EMPTY_GROUP_NAME = ErrorKind(
    "JSConsumerEmptyGroupName", 400, 10161, "Group name cannot be an empty string"
)
CONSUMER_EPHEMERAL_WITH_DURABLE_IN_SUBJECT = ErrorKind(
    "JSConsumerEphemeralWithDurableInSubjectErr", 400, 10019,
    "consumer expected to be ephemeral but detected a durable name set in subject",
)
CONSUMER_EPHEMERAL_WITH_DURABLE_NAME = ErrorKind(
    "JSConsumerEphemeralWithDurableNameErr", 400, 10020,
    "consumer expected to be ephemeral but a durable name was set in request",
)
CONSUMER_EXISTING_ACTIVE = ErrorKind(
    "JSConsumerExistingActiveErr", 400, 10105, "consumer already exists and is still active"
)
CONSUMER_FC_REQUIRES_PUSH = ErrorKind(
    "JSConsumerFCRequiresPushErr", 400, 10089,
    "consumer flow control requires a push based consumer",
)
CONSUMER_FILTER_NOT_SUBSET = ErrorKind(
    "JSConsumerFilterNotSubsetErr", 400, 10093,
    "consumer filter subject is not a valid subset of the interest subjects",
)
CONSUMER_HB_REQUIRES_PUSH = ErrorKind(
    "JSConsumerHBRequiresPushErr", 400, 10088,
    "consumer idle heartbeat requires a push based consumer",
)
CONSUMER_INACTIVE_THRESHOLD_EXCESS = ErrorKind(
    "JSConsumerInactiveThresholdExcess", 400, 10153,
    "consumer inactive threshold exceeds system limit of {limit}",
)
CONSUMER_INVALID_DELIVER_SUBJECT = ErrorKind(
    "JSConsumerInvalidDeliverSubject", 400, 10112, "invalid push consumer deliver subject"
)
CONSUMER_INVALID_GROUP_NAME = ErrorKind(
    "JSConsumerInvalidGroupNameErr", 400, 10162,
    "Valid priority group name must match A-Z, a-z, 0-9, -_/=)+ and may not exceed 16 characters",
)
CONSUMER_INVALID_POLICY = ErrorKind("JSConsumerInvalidPolicyErrF", 400, 10094, "{err}")
CONSUMER_INVALID_PRIORITY_GROUP = ErrorKind(
    "JSConsumerInvalidPriorityGroupErr", 400, 10160,
    "Provided priority group does not exist for this consumer",
)
CONSUMER_INVALID_RESET = ErrorKind("JSConsumerInvalidResetErr", 400, 10204, "invalid reset: {err}")
CONSUMER_INVALID_SAMPLING = ErrorKind(
    "JSConsumerInvalidSamplingErrF", 400, 10095,
    "failed to parse consumer sampling configuration: {err}",
)
CONSUMER_MAX_DELIVER_BACKOFF = ErrorKind(
    "JSConsumerMaxDeliverBackoffErr", 400, 10116,
    "max deliver is required to be > length of backoff values",
)
CONSUMER_MAX_PENDING_ACK_EXCESS = ErrorKind(
    "JSConsumerMaxPendingAckExcessErrF", 400, 10121,
    "consumer max ack pending exceeds system limit of {limit}",
)
CONSUMER_MAX_PENDING_ACK_POLICY_REQUIRED = ErrorKind(
    "JSConsumerMaxPendingAckPolicyRequiredErr", 400, 10082,
    "consumer requires ack policy for max ack pending",
)
CONSUMER_MAX_REQUEST_BATCH_EXCEEDED = ErrorKind(
    "JSConsumerMaxRequestBatchExceededF", 400, 10125,
    "consumer max request batch exceeds server limit of {limit}",
)
CONSUMER_MAX_REQUEST_BATCH_NEGATIVE = ErrorKind(
    "JSConsumerMaxRequestBatchNegativeErr", 400, 10114, "consumer max request batch needs to be > 0"
)
CONSUMER_MAX_REQUEST_EXPIRES_TOO_SMALL = ErrorKind(
    "JSConsumerMaxRequestExpiresTooSmall", 400, 10115,
    "consumer max request expires needs to be >= 1ms",
)
CONSUMER_MAX_WAITING_NEGATIVE = ErrorKind(
    "JSConsumerMaxWaitingNegativeErr", 400, 10087, "consumer max waiting needs to be positive"
)
CONSUMER_METADATA_LENGTH = ErrorKind(
    "JSConsumerMetadataLengthErrF", 400, 10135, "consumer metadata exceeds maximum size of {limit}"
)
CONSUMER_MULTIPLE_FILTERS_NOT_ALLOWED = ErrorKind(
    "JSConsumerMultipleFiltersNotAllowed", 400, 10137,
    "consumer with multiple subject filters cannot use subject based API",
)
CONSUMER_NAME_CONTAINS_PATH_SEPARATORS = ErrorKind(
    "JSConsumerNameContainsPathSeparatorsErr", 400, 10127,
    "Consumer name can not contain path separators",
)
CONSUMER_NAME_EXIST = ErrorKind(
    "JSConsumerNameExistErr", 400, 10013, "consumer name already in use"
)
CONSUMER_NAME_TOO_LONG = ErrorKind(
    "JSConsumerNameTooLongErrF", 400, 10102, "consumer name is too long, maximum allowed is {max}"
)
CONSUMER_NOT_FOUND = ErrorKind("JSConsumerNotFoundErr", 404, 10014, "consumer not found")
CONSUMER_OFFLINE = ErrorKind("JSConsumerOfflineErr", 500, 10119, "consumer is offline")
CONSUMER_OFFLINE_REASON = ErrorKind(
    "JSConsumerOfflineReasonErrF", 500, 10195, "consumer is offline: {err}"
)
CONSUMER_ON_MAPPED = ErrorKind(
    "JSConsumerOnMappedErr", 400, 10092, "consumer direct on a mapped consumer"
)
CONSUMER_OVERLAPPING_SUBJECT_FILTERS = ErrorKind(
    "JSConsumerOverlappingSubjectFilters", 400, 10138, "consumer subject filters cannot overlap"
)
CONSUMER_PINNED_TTL_WITHOUT_PRIORITY_POLICY_NONE = ErrorKind(
    "JSConsumerPinnedTTLWithoutPriorityPolicyNone", 400, 10197,
    "PinnedTTL cannot be set when PriorityPolicy is none",
)
CONSUMER_PRIORITY_GROUP_WITH_POLICY_NONE = ErrorKind(
    "JSConsumerPriorityGroupWithPolicyNone", 400, 10196,
    "consumer can not have priority groups when policy is none",
)
CONSUMER_PRIORITY_POLICY_WITHOUT_GROUP = ErrorKind(
    "JSConsumerPriorityPolicyWithoutGroup", 400, 10159,
    "Setting PriorityPolicy requires at least one PriorityGroup to be set",
)
CONSUMER_PULL_NOT_DURABLE = ErrorKind(
    "JSConsumerPullNotDurableErr", 400, 10085, "consumer in pull mode requires a durable name"
)
CONSUMER_PULL_REQUIRES_ACK = ErrorKind(
    "JSConsumerPullRequiresAckErr", 400, 10084,
    "consumer in pull mode requires explicit ack policy on workqueue stream",
)
CONSUMER_PULL_WITH_RATE_LIMIT = ErrorKind(
    "JSConsumerPullWithRateLimitErr", 400, 10086,
    "consumer in pull mode can not have rate limit set",
)
CONSUMER_PUSH_MAX_WAITING = ErrorKind(
    "JSConsumerPushMaxWaitingErr", 400, 10080, "consumer in push mode can not set max waiting"
)
CONSUMER_PUSH_WITH_PRIORITY_GROUP = ErrorKind(
    "JSConsumerPushWithPriorityGroupErr", 400, 10178,
    "priority groups can not be used with push consumers",
)
CONSUMER_REPLACEMENT_WITH_DIFFERENT_NAME = ErrorKind(
    "JSConsumerReplacementWithDifferentNameErr", 400, 10106,
    "consumer replacement durable config not the same",
)
CONSUMER_REPLAY_POLICY_INVALID = ErrorKind(
    "JSConsumerReplayPolicyInvalidErr", 400, 10182, "consumer replay policy invalid"
)
CONSUMER_REPLICAS_EXCEEDS_STREAM = ErrorKind(
    "JSConsumerReplicasExceedsStream", 400, 10126,
    "consumer config replica count exceeds parent stream",
)
CONSUMER_REPLICAS_SHOULD_MATCH_STREAM = ErrorKind(
    "JSConsumerReplicasShouldMatchStream", 400, 10134,
    "consumer config replicas must match interest retention stream's replicas",
)
CONSUMER_SMALL_HEARTBEAT = ErrorKind(
    "JSConsumerSmallHeartbeatErr", 400, 10083, "consumer idle heartbeat needs to be >= 100ms"
)
CONSUMER_STORE_FAILED = ErrorKind(
    "JSConsumerStoreFailedErrF", 500, 10104, "error creating store for consumer: {err}"
)
CONSUMER_STREAM_IDENTITY_MISMATCH = ErrorKind(
    "JSConsumerStreamIdentityMismatchF", 400, 10225,
    "consumer's stream identity does not match: {msg}",
)
CONSUMER_WQ_CONSUMER_NOT_DELIVER_ALL = ErrorKind(
    "JSConsumerWQConsumerNotDeliverAllErr", 400, 10101,
    "consumer must be deliver all on workqueue stream",
)
CONSUMER_WQ_CONSUMER_NOT_UNIQUE = ErrorKind(
    "JSConsumerWQConsumerNotUniqueErr", 400, 10100,
    "filtered consumer not unique on workqueue stream",
)
CONSUMER_WQ_MULTIPLE_UNFILTERED = ErrorKind(
    "JSConsumerWQMultipleUnfilteredErr", 400, 10099,
    "multiple non-filtered consumers not allowed on workqueue stream",
)
CONSUMER_WQ_REQUIRES_EXPLICIT_ACK = ErrorKind(
    "JSConsumerWQRequiresExplicitAckErr", 400, 10098, "workqueue stream requires explicit ack"
)
CONSUMER_WITH_FLOW_CONTROL_NEEDS_HEARTBEATS = ErrorKind(
    "JSConsumerWithFlowControlNeedsHeartbeats", 400, 10108,
    "consumer with flow control also needs heartbeats",
)
INSUFFICIENT_RESOURCES = ErrorKind(
    "JSInsufficientResourcesErr", 503, 10023, "insufficient resources"
)
INVALID_JSON = ErrorKind("JSInvalidJSONErr", 400, 10025, "invalid JSON: {err}")
MAXIMUM_CONSUMERS_LIMIT = ErrorKind(
    "JSMaximumConsumersLimitErr", 400, 10026, "maximum consumers limit reached"
)
MAXIMUM_STREAMS_LIMIT = ErrorKind(
    "JSMaximumStreamsLimitErr", 400, 10027, "maximum number of streams reached"
)
MEMORY_RESOURCES_EXCEEDED = ErrorKind(
    "JSMemoryResourcesExceededErr", 500, 10028, "insufficient memory resources available"
)
MESSAGE_COUNTER_BROKEN = ErrorKind(
    "JSMessageCounterBrokenErr", 400, 10172, "message counter is broken"
)
MESSAGE_INCR_DISABLED = ErrorKind(
    "JSMessageIncrDisabledErr", 400, 10168, "message counters is disabled"
)
MESSAGE_INCR_INVALID = ErrorKind(
    "JSMessageIncrInvalidErr", 400, 10171, "message counter increment is invalid"
)
MESSAGE_INCR_MISSING = ErrorKind(
    "JSMessageIncrMissingErr", 400, 10169, "message counter increment is missing"
)
MESSAGE_INCR_PAYLOAD = ErrorKind(
    "JSMessageIncrPayloadErr", 400, 10170, "message counter has payload"
)
MESSAGE_SCHEDULES_DISABLED = ErrorKind(
    "JSMessageSchedulesDisabledErr", 400, 10188, "message schedules is disabled"
)
MESSAGE_SCHEDULES_PATTERN_INVALID = ErrorKind(
    "JSMessageSchedulesPatternInvalidErr", 400, 10189, "message schedules pattern is invalid"
)
MESSAGE_SCHEDULES_ROLLUP_INVALID = ErrorKind(
    "JSMessageSchedulesRollupInvalidErr", 400, 10192, "message schedules invalid rollup"
)
MESSAGE_SCHEDULES_SCHEDULER_INVALID = ErrorKind(
    "JSMessageSchedulesSchedulerInvalidErr", 400, 10212, "message schedules invalid scheduler"
)
MESSAGE_SCHEDULES_SOURCE_INVALID = ErrorKind(
    "JSMessageSchedulesSourceInvalidErr", 400, 10203, "message schedules source is invalid"
)
MESSAGE_SCHEDULES_TTL_INVALID = ErrorKind(
    "JSMessageSchedulesTTLInvalidErr", 400, 10191, "message schedules invalid per-message TTL"
)
MESSAGE_SCHEDULES_TARGET_INVALID = ErrorKind(
    "JSMessageSchedulesTargetInvalidErr", 400, 10190, "message schedules target is invalid"
)
MESSAGE_SCHEDULES_TIME_ZONE_INVALID = ErrorKind(
    "JSMessageSchedulesTimeZoneInvalidErr", 400, 10223, "message schedules time zone is invalid"
)
MESSAGE_SOURCE_HDR_NOT_ALLOWED = ErrorKind(
    "JSMessageSourceHdrNotAllowedErr", 400, 10227, "message stream source header is not allowed"
)
MESSAGE_TTL_DISABLED = ErrorKind(
    "JSMessageTTLDisabledErr", 400, 10166, "per-message TTL is disabled"
)
MESSAGE_TTL_INVALID = ErrorKind("JSMessageTTLInvalidErr", 400, 10165, "invalid per-message TTL")
MIRROR_CONSUMER_REQUIRES_ACK_FC = ErrorKind(
    "JSMirrorConsumerRequiresAckFCErr", 400, 10214,
    "stream mirror consumer requires flow control ack policy",
)
MIRROR_CONSUMER_SETUP_FAILED = ErrorKind("JSMirrorConsumerSetupFailedErrF", 500, 10029, "{err}")
MIRROR_DURABLE_CONSUMER_CFG_INVALID = ErrorKind(
    "JSMirrorDurableConsumerCfgInvalid", 400, 10213, "stream mirror consumer config is invalid"
)
MIRROR_INVALID_STREAM_NAME = ErrorKind(
    "JSMirrorInvalidStreamName", 400, 10142, "mirrored stream name is invalid"
)
MIRROR_INVALID_SUBJECT_FILTER = ErrorKind(
    "JSMirrorInvalidSubjectFilter", 400, 10151, "mirror transform source: {err}"
)
MIRROR_INVALID_TRANSFORM_DESTINATION = ErrorKind(
    "JSMirrorInvalidTransformDestination", 400, 10154, "mirror transform: {err}"
)
MIRROR_MAX_MESSAGE_SIZE_TOO_BIG = ErrorKind(
    "JSMirrorMaxMessageSizeTooBigErr", 400, 10030,
    "stream mirror must have max message size >= source",
)
MIRROR_MULTIPLE_FILTERS_NOT_ALLOWED = ErrorKind(
    "JSMirrorMultipleFiltersNotAllowed", 400, 10150,
    "mirror with multiple subject transforms cannot also have a single subject filter",
)
MIRROR_OVERLAPPING_SUBJECT_FILTERS = ErrorKind(
    "JSMirrorOverlappingSubjectFilters", 400, 10152, "mirror subject filters can not overlap"
)
MIRROR_WITH_ATOMIC_PUBLISH = ErrorKind(
    "JSMirrorWithAtomicPublishErr", 400, 10198, "stream mirrors can not also use atomic publishing"
)
MIRROR_WITH_BATCH_PUBLISH = ErrorKind(
    "JSMirrorWithBatchPublishErr", 400, 10209, "stream mirrors can not also use batch publishing"
)
MIRROR_WITH_COUNTERS = ErrorKind(
    "JSMirrorWithCountersErr", 400, 10173, "stream mirrors can not also calculate counters"
)
MIRROR_WITH_FIRST_SEQ = ErrorKind(
    "JSMirrorWithFirstSeqErr", 400, 10143, "stream mirrors can not have first sequence configured"
)
MIRROR_WITH_MSG_SCHEDULES = ErrorKind(
    "JSMirrorWithMsgSchedulesErr", 400, 10186, "stream mirrors can not also schedule messages"
)
MIRROR_WITH_SOURCES = ErrorKind(
    "JSMirrorWithSourcesErr", 400, 10031, "stream mirrors can not also contain other sources"
)
MIRROR_WITH_START_SEQ_AND_TIME = ErrorKind(
    "JSMirrorWithStartSeqAndTimeErr", 400, 10032,
    "stream mirrors can not have both start seq and start time configured",
)
MIRROR_WITH_SUBJECT_FILTERS = ErrorKind(
    "JSMirrorWithSubjectFiltersErr", 400, 10033, "stream mirrors can not contain filtered subjects"
)
MIRROR_WITH_SUBJECTS = ErrorKind(
    "JSMirrorWithSubjectsErr", 400, 10034, "stream mirrors can not contain subjects"
)
NO_ACCOUNT = ErrorKind("JSNoAccountErr", 503, 10035, "account not found")
NO_LIMITS = ErrorKind(
    "JSNoLimitsErr", 400, 10120, "no JetStream default or applicable tiered limit present"
)
NO_MESSAGE_FOUND = ErrorKind("JSNoMessageFoundErr", 404, 10037, "no message found")
NOT_EMPTY_REQUEST = ErrorKind(
    "JSNotEmptyRequestErr", 400, 10038, "expected an empty request payload"
)
NOT_ENABLED = ErrorKind("JSNotEnabledErr", 503, 10076, "JetStream not enabled")
NOT_ENABLED_FOR_ACCOUNT = ErrorKind(
    "JSNotEnabledForAccountErr", 503, 10039, "JetStream not enabled for account"
)
PEDANTIC = ErrorKind("JSPedanticErrF", 400, 10157, "pedantic mode: {err}")
PEER_REMAP = ErrorKind("JSPeerRemapErr", 503, 10075, "peer remap failed")
RAFT_GENERAL = ErrorKind("JSRaftGeneralErrF", 500, 10041, "{err}")
REPLICAS_COUNT_CANNOT_BE_NEGATIVE = ErrorKind(
    "JSReplicasCountCannotBeNegative", 400, 10133, "replicas count cannot be negative"
)
REQUIRED_API_LEVEL = ErrorKind(
    "JSRequiredApiLevelErr", 412, 10185, "JetStream minimum api level required"
)
RESTORE_SUBSCRIBE_FAILED = ErrorKind(
    "JSRestoreSubscribeFailedErrF", 500, 10042,
    "JetStream unable to subscribe to restore snapshot {subject}: {err}",
)
SEQUENCE_NOT_FOUND = ErrorKind("JSSequenceNotFoundErrF", 400, 10043, "sequence {seq} not found")
SNAPSHOT_DELIVER_SUBJECT_INVALID = ErrorKind(
    "JSSnapshotDeliverSubjectInvalidErr", 400, 10015, "deliver subject not valid"
)
SOURCE_CONSUMER_REQUIRES_ACK_FC = ErrorKind(
    "JSSourceConsumerRequiresAckFCErr", 400, 10217,
    "stream source consumer requires flow control ack policy",
)
SOURCE_CONSUMER_SETUP_FAILED = ErrorKind("JSSourceConsumerSetupFailedErrF", 500, 10045, "{err}")
SOURCE_DUPLICATE_DETECTED = ErrorKind(
    "JSSourceDuplicateDetected", 400, 10140, "duplicate source configuration detected"
)
SOURCE_DURABLE_CONSUMER_CFG_INVALID = ErrorKind(
    "JSSourceDurableConsumerCfgInvalid", 400, 10215, "stream source consumer config is invalid"
)
SOURCE_DURABLE_CONSUMER_DUPLICATE_DETECTED = ErrorKind(
    "JSSourceDurableConsumerDuplicateDetected", 400, 10216,
    "duplicate stream source consumer detected",
)
SOURCE_INVALID_STREAM_NAME = ErrorKind(
    "JSSourceInvalidStreamName", 400, 10141, "sourced stream name is invalid"
)
SOURCE_INVALID_SUBJECT_FILTER = ErrorKind(
    "JSSourceInvalidSubjectFilter", 400, 10145, "source transform source: {err}"
)
SOURCE_INVALID_TRANSFORM_DESTINATION = ErrorKind(
    "JSSourceInvalidTransformDestination", 400, 10146, "source transform: {err}"
)
SOURCE_MAX_MESSAGE_SIZE_TOO_BIG = ErrorKind(
    "JSSourceMaxMessageSizeTooBigErr", 400, 10046,
    "stream source must have max message size >= target",
)
SOURCE_MULTIPLE_FILTERS_NOT_ALLOWED = ErrorKind(
    "JSSourceMultipleFiltersNotAllowed", 400, 10144,
    "source with multiple subject transforms cannot also have a single subject filter",
)
SOURCE_OVERLAPPING_SUBJECT_FILTERS = ErrorKind(
    "JSSourceOverlappingSubjectFilters", 400, 10147, "source filters can not overlap"
)
SOURCE_WITH_MSG_SCHEDULES = ErrorKind(
    "JSSourceWithMsgSchedulesErr", 400, 10187, "stream source can not also schedule messages"
)
STORAGE_RESOURCES_EXCEEDED = ErrorKind(
    "JSStorageResourcesExceededErr", 500, 10047, "insufficient storage resources available"
)
STREAM_ASSIGNMENT = ErrorKind("JSStreamAssignmentErrF", 500, 10048, "{err}")
STREAM_CREATE = ErrorKind("JSStreamCreateErrF", 500, 10049, "{err}")
STREAM_DELETE = ErrorKind("JSStreamDeleteErrF", 500, 10050, "{err}")
STREAM_DUPLICATE_MESSAGE_CONFLICT = ErrorKind(
    "JSStreamDuplicateMessageConflict", 409, 10158, "duplicate message id is in process"
)
STREAM_EXPECTED_LAST_SEQ_PER_SUBJECT_INVALID = ErrorKind(
    "JSStreamExpectedLastSeqPerSubjectInvalid", 400, 10193,
    "missing sequence for expected last sequence per subject",
)
STREAM_EXPECTED_LAST_SEQ_PER_SUBJECT_NOT_READY = ErrorKind(
    "JSStreamExpectedLastSeqPerSubjectNotReady", 503, 10163,
    "expected last sequence per subject temporarily unavailable",
)
STREAM_EXTERNAL_API_OVERLAP = ErrorKind(
    "JSStreamExternalApiOverlapErrF", 400, 10021,
    "stream external api prefix {prefix} must not overlap with {subject}",
)
STREAM_EXTERNAL_DEL_PREFIX_OVERLAPS = ErrorKind(
    "JSStreamExternalDelPrefixOverlapsErrF", 400, 10022,
    "stream external delivery prefix {prefix} overlaps with stream subject {subject}",
)
STREAM_GENERAL = ErrorKind("JSStreamGeneralErrorF", 500, 10051, "{err}")
STREAM_HEADER_EXCEEDS_MAXIMUM = ErrorKind(
    "JSStreamHeaderExceedsMaximumErr", 400, 10097, "header size exceeds maximum allowed of 64k"
)
STREAM_INFO_MAX_SUBJECTS = ErrorKind(
    "JSStreamInfoMaxSubjectsErr", 500, 10117, "subject details would exceed maximum allowed"
)
STREAM_INVALID_CONFIG = ErrorKind("JSStreamInvalidConfigF", 500, 10052, "{err}")
STREAM_INVALID = ErrorKind("JSStreamInvalidErr", 500, 10096, "stream not valid")
STREAM_INVALID_EXTERNAL_DELIVERY_SUBJ = ErrorKind(
    "JSStreamInvalidExternalDeliverySubjErrF", 400, 10024,
    "stream external delivery prefix {prefix} must not contain wildcards",
)
STREAM_LIMITS = ErrorKind("JSStreamLimitsErrF", 500, 10053, "{err}")
STREAM_MAX_BYTES_REQUIRED = ErrorKind(
    "JSStreamMaxBytesRequired", 400, 10113, "account requires a stream config to have max bytes set"
)
STREAM_MAX_STREAM_BYTES_EXCEEDED = ErrorKind(
    "JSStreamMaxStreamBytesExceeded", 400, 10122,
    "stream max bytes exceeds account limit max stream bytes",
)
STREAM_MESSAGE_EXCEEDS_MAXIMUM = ErrorKind(
    "JSStreamMessageExceedsMaximumErr", 400, 10054, "message size exceeds maximum allowed"
)
STREAM_MIN_LAST_SEQ = ErrorKind("JSStreamMinLastSeqErr", 412, 10180, "min last sequence")
STREAM_MIRROR_NOT_UPDATABLE = ErrorKind(
    "JSStreamMirrorNotUpdatableErr", 400, 10055, "stream mirror configuration can not be updated"
)
STREAM_MISMATCH = ErrorKind(
    "JSStreamMismatchErr", 400, 10056, "stream name in subject does not match request"
)
STREAM_MOVE_AND_SCALE = ErrorKind(
    "JSStreamMoveAndScaleErr", 400, 10123, "can not move and scale a stream in a single update"
)
STREAM_MOVE_IN_PROGRESS = ErrorKind(
    "JSStreamMoveInProgressErr", 400, 10124, "stream move already in progress"
)
STREAM_MSG_DELETE_FAILED = ErrorKind("JSStreamMsgDeleteFailedF", 500, 10057, "{err}")
STREAM_NAME_CONTAINS_PATH_SEPARATORS = ErrorKind(
    "JSStreamNameContainsPathSeparatorsErr", 400, 10128,
    "Stream name can not contain path separators",
)
STREAM_NAME_EXIST = ErrorKind(
    "JSStreamNameExistErr", 400, 10058, "stream name already in use with a different configuration"
)
STREAM_NAME_EXIST_RESTORE_FAILED = ErrorKind(
    "JSStreamNameExistRestoreFailedErr", 400, 10130, "stream name already in use, cannot restore"
)
STREAM_NOT_FOUND = ErrorKind("JSStreamNotFoundErr", 404, 10059, "stream not found")
STREAM_NOT_MATCH = ErrorKind("JSStreamNotMatchErr", 400, 10060, "expected stream does not match")
STREAM_OFFLINE = ErrorKind("JSStreamOfflineErr", 500, 10118, "stream is offline")
STREAM_OFFLINE_REASON = ErrorKind(
    "JSStreamOfflineReasonErrF", 500, 10194, "stream is offline: {err}"
)
STREAM_PURGE_FAILED = ErrorKind("JSStreamPurgeFailedF", 500, 10110, "{err}")
STREAM_RECONFIGURE_IN_PROGRESS = ErrorKind(
    "JSStreamReconfigureInProgressErr", 400, 10226, "stream reconfiguration already in progress"
)
STREAM_RECONFIGURE_NOT_IN_PROGRESS = ErrorKind(
    "JSStreamReconfigureNotInProgressErr", 400, 10129, "stream reconfiguration not in progress"
)
STREAM_REPLICAS_NOT_SUPPORTED = ErrorKind(
    "JSStreamReplicasNotSupportedErr", 500, 10074,
    "replicas > 1 not supported in non-clustered mode",
)
STREAM_REPLICAS_NOT_UPDATABLE = ErrorKind(
    "JSStreamReplicasNotUpdatableErr", 400, 10061, "Replicas configuration can not be updated"
)
STREAM_RESTORE = ErrorKind("JSStreamRestoreErrF", 500, 10062, "restore failed: {err}")
STREAM_ROLLUP_FAILED = ErrorKind("JSStreamRollupFailedF", 500, 10111, "{err}")
STREAM_SEALED = ErrorKind("JSStreamSealedErr", 400, 10109, "invalid operation on sealed stream")
STREAM_SEQUENCE_NOT_MATCH = ErrorKind(
    "JSStreamSequenceNotMatchErr", 503, 10063, "expected stream sequence does not match"
)
STREAM_SNAPSHOT = ErrorKind("JSStreamSnapshotErrF", 500, 10064, "snapshot failed: {err}")
STREAM_STORE_FAILED = ErrorKind("JSStreamStoreFailedF", 503, 10077, "{err}")
STREAM_SUBJECT_OVERLAP = ErrorKind(
    "JSStreamSubjectOverlapErr", 400, 10065, "subjects overlap with an existing stream"
)
STREAM_TEMPLATE_CREATE = ErrorKind("JSStreamTemplateCreateErrF", 500, 10066, "{err}")
STREAM_TEMPLATE_DELETE = ErrorKind("JSStreamTemplateDeleteErrF", 500, 10067, "{err}")
STREAM_TEMPLATE_NOT_FOUND = ErrorKind(
    "JSStreamTemplateNotFoundErr", 404, 10068, "template not found"
)
STREAM_TOO_MANY_REQUESTS = ErrorKind("JSStreamTooManyRequests", 429, 10167, "too many requests")
STREAM_TRANSFORM_INVALID_DESTINATION = ErrorKind(
    "JSStreamTransformInvalidDestination", 400, 10156, "stream transform: {err}"
)
STREAM_TRANSFORM_INVALID_SOURCE = ErrorKind(
    "JSStreamTransformInvalidSource", 400, 10155, "stream transform source: {err}"
)
STREAM_UPDATE = ErrorKind("JSStreamUpdateErrF", 500, 10069, "{err}")
STREAM_WRONG_LAST_MSG_ID = ErrorKind(
    "JSStreamWrongLastMsgIDErrF", 400, 10070, "wrong last msg ID: {id}"
)
STREAM_WRONG_LAST_SEQUENCE_CONSTANT = ErrorKind(
    "JSStreamWrongLastSequenceConstantErr", 400, 10164, "wrong last sequence"
)
STREAM_WRONG_LAST_SEQUENCE = ErrorKind(
    "JSStreamWrongLastSequenceErrF", 400, 10071, "wrong last sequence: {seq}"
)
TEMP_STORAGE_FAILED = ErrorKind(
    "JSTempStorageFailedErr", 500, 10072, "JetStream unable to open temp storage for restore"
)
TEMPLATE_NAME_NOT_MATCH_SUBJECT = ErrorKind(
    "JSTemplateNameNotMatchSubjectErr", 400, 10073,
    "template name in subject does not match request",
)

# Every kind above, in the table's order.
KINDS: tuple[ErrorKind, ...] = tuple(
    value for value in list(globals().values()) if isinstance(value, ErrorKind)
)
