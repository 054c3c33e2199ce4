"""tidings/jetstream/errors.py: the reference's JetStream API errors, one constant each,
filled and shaped as nats-server fills and sends them.

The table is checked against the reference's errors.json when a nats-server source tree is at
hand (`NATS_SERVER_SRC=/path/to/nats-server`, or the Go module cache), and always against the
strings of the reference binary the tests run (every description is in it) and the error
objects that binary sends.
"""

from __future__ import annotations

import json
import os
import pickle
import re
from pathlib import Path

import nats
import pytest

from tests.harness.servers import nats_server_binary
from tidings.jetstream import errors
from tidings.jetstream.errors import ApiError, ErrorKind

NAMED = {name: v for name, v in vars(errors).items() if isinstance(v, ErrorKind)}


def reference_errors_json() -> Path | None:
    """errors.json of a nats-server source tree: $NATS_SERVER_SRC's, or the newest one in the
    Go module cache; None when there is none."""
    source = os.environ.get("NATS_SERVER_SRC")
    if source:
        return Path(source, "server", "errors.json")
    cache = Path(os.environ.get("GOMODCACHE") or Path.home() / "go" / "pkg" / "mod")
    found = sorted(cache.glob("github.com/nats-io/nats-server/v2@*/server/errors.json"))
    return found[-1] if found else None


def go_constructor(constant: str) -> str:
    """The reference generator's `funcNameForConstant` (server/errors_gen.go)."""
    for suffix, keep in (("ErrF", "Error"), ("Err", "Error"), ("ErrorF", ""), ("F", "Error")):
        if constant.endswith(suffix):
            name = f"New{constant[:-len(suffix)]}{keep}"
            break
    else:
        name = f"New{constant}"
    return name if name.endswith("Error") else f"{name}Error"


def python_name(constant: str) -> str:
    """The module's scheme: the constructor without `NewJS` and `Error`, upper snake case."""
    core = go_constructor(constant).removeprefix("NewJS").removesuffix("Error")
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", core).upper()


def test_the_table_is_the_reference_errors_json() -> None:
    path = reference_errors_json()
    if path is None or not path.exists():
        pytest.skip("no nats-server source tree (set NATS_SERVER_SRC)")
    theirs = {e["constant"]: (e["code"], e["error_code"], e["description"])
              for e in json.loads(path.read_text(encoding="utf-8"))}
    ours = {k.constant: (k.code, k.err_code, k.description) for k in errors.KINDS}
    problems = [f"missing: {c} {theirs[c]}" for c in sorted(theirs.keys() - ours.keys())]
    problems += [f"not the reference's: {c}" for c in sorted(ours.keys() - theirs.keys())]
    problems += [f"{c}: ours {ours[c]}, the reference's {theirs[c]}"
                 for c in sorted(ours.keys() & theirs.keys()) if ours[c] != theirs[c]]
    assert not problems, f"{path}:\n" + "\n".join(problems)


def test_every_description_is_in_the_reference_binary() -> None:
    binary = Path(nats_server_binary()).read_bytes()
    absent = [k.constant for k in errors.KINDS if k.description.encode() not in binary]
    assert not absent


def test_one_constant_per_error_named_after_the_reference_constructor() -> None:
    assert len(errors.KINDS) == len(NAMED) == 226
    assert {name: python_name(k.constant) for name, k in NAMED.items()} == {
        name: name for name in NAMED}
    assert len({k.constant for k in errors.KINDS}) == len({k.err_code for k in errors.KINDS}) == 226
    assert [k.constant for k in errors.KINDS] == sorted(k.constant for k in errors.KINDS)
    assert go_constructor("JSStreamGeneralErrorF") == "NewJSStreamGeneralError"
    assert go_constructor("JSConsumerAlreadyExists") == "NewJSConsumerAlreadyExistsError"
    assert python_name("JSStreamWrongLastMsgIDErrF") == "STREAM_WRONG_LAST_MSG_ID"
    assert python_name("JSConsumerHBRequiresPushErr") == "CONSUMER_HB_REQUIRES_PUSH"


def test_the_entries_the_api_answers_most() -> None:
    kinds = (errors.STREAM_NOT_FOUND, errors.STREAM_NAME_EXIST, errors.STREAM_CREATE,
             errors.CONSUMER_NOT_FOUND, errors.SEQUENCE_NOT_FOUND, errors.NOT_ENABLED_FOR_ACCOUNT)
    assert [(k.constant, k.code, k.err_code, k.description, k.placeholders) for k in kinds] == [
        ("JSStreamNotFoundErr", 404, 10059, "stream not found", ()),
        ("JSStreamNameExistErr", 400, 10058,
         "stream name already in use with a different configuration", ()),
        ("JSStreamCreateErrF", 500, 10049, "{err}", ("err",)),
        ("JSConsumerNotFoundErr", 404, 10014, "consumer not found", ()),
        ("JSSequenceNotFoundErrF", 400, 10043, "sequence {seq} not found", ("seq",)),
        ("JSNotEnabledForAccountErr", 503, 10039, "JetStream not enabled for account", ()),
    ]


def test_an_error_without_placeholders_is_a_fresh_exception_each_time() -> None:
    first, second = errors.STREAM_NOT_FOUND(), errors.STREAM_NAME_EXIST()
    assert first is not errors.STREAM_NOT_FOUND()
    assert (first.code, first.err_code, str(first)) == (404, 10059, "stream not found")
    assert second.as_json() == {
        "code": 400, "err_code": 10058,
        "description": "stream name already in use with a different configuration"}
    with pytest.raises(ApiError) as raised:
        raise errors.STREAM_NOT_FOUND()
    assert errors.STREAM_NOT_FOUND.matches(raised.value)
    assert not errors.CONSUMER_NOT_FOUND.matches(raised.value)
    assert not errors.STREAM_NOT_FOUND.matches(ValueError("stream not found"))


def test_placeholders_are_filled_as_the_reference_fills_them() -> None:
    # server/jetstream_errors_test.go's TestApiError_NewWithTags
    restore = errors.RESTORE_SUBSCRIBE_FAILED(err=RuntimeError("failed error"),
                                              subject="the.subject")
    assert str(restore) == (
        "JetStream unable to subscribe to restore snapshot the.subject: failed error")
    assert str(errors.SEQUENCE_NOT_FOUND(seq=5)) == "sequence 5 not found"
    assert str(errors.STREAM_WRONG_LAST_MSG_ID(id="abc")) == "wrong last msg ID: abc"
    assert str(errors.CONSUMER_NAME_TOO_LONG(max=255)) == (
        "consumer name is too long, maximum allowed is 255")
    assert str(errors.STREAM_CREATE(err="subjects overlap")) == "subjects overlap"
    # Go's `%v` of a nil error and of a bool
    assert str(errors.STREAM_CREATE(err=None)) == "<nil>"
    assert str(errors.PEDANTIC(err=True)) == "pedantic mode: true"
    # an ApiError as `{err}` is its Go Error() text: description (err_code)
    nested = errors.STREAM_CREATE(err=errors.STREAM_NOT_FOUND())
    assert nested.as_json() == {"code": 500, "err_code": 10049,
                                "description": "stream not found (10059)"}
    # one pass, as strings.Replacer: a value that looks like a placeholder stays as it is
    overlap = errors.STREAM_EXTERNAL_API_OVERLAP(prefix="{subject}", subject="$JS.API.>")
    assert str(overlap) == "stream external api prefix {subject} must not overlap with $JS.API.>"


def test_unless_an_api_error_is_that_error() -> None:
    # server/jetstream_errors_test.go's TestApiError_NewWithUnless
    disabled = errors.NOT_ENABLED_FOR_ACCOUNT()
    assert errors.STREAM_RESTORE(err=ValueError("failed error"), unless=disabled) is disabled
    assert errors.PEER_REMAP(unless=disabled) is disabled
    other = errors.STREAM_RESTORE(err=ValueError("failed error"), unless=ValueError("other"))
    assert other.as_json() == {"code": 500, "err_code": 10062,
                               "description": "restore failed: failed error"}
    assert errors.PEER_REMAP(unless=None).err_code == errors.PEER_REMAP.err_code


def test_placeholders_are_all_required_and_no_others() -> None:
    with pytest.raises(TypeError, match="JSStreamCreateErrF takes err, not none"):
        errors.STREAM_CREATE()
    with pytest.raises(TypeError, match="JSStreamNotFoundErr takes no placeholders, not seq"):
        errors.STREAM_NOT_FOUND(seq=1)
    with pytest.raises(TypeError, match="takes prefix, subject, not prefix"):
        errors.STREAM_EXTERNAL_DEL_PREFIX_OVERLAPS(prefix="p")
    assert errors.RESTORE_SUBSCRIBE_FAILED.placeholders == ("err", "subject")


def test_the_json_shape_is_the_reference_api_error() -> None:
    error = errors.CONSUMER_DESCRIPTION_TOO_LONG(max=4096)
    assert json.dumps(error.as_json(), separators=(",", ":")) == (
        '{"code":400,"err_code":10107,'
        '"description":"consumer description is too long, maximum allowed is 4096"}')
    # omitempty: err_code 0 and an empty description are left out (events.go's bare errors)
    assert ApiError(400).as_json() == {"code": 400}
    assert errors.STREAM_CREATE(err="").as_json() == {"code": 500, "err_code": 10049}
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.code, copy.err_code, copy.description) == (400, 10107, str(error))
    assert error.error_text() == (
        "consumer description is too long, maximum allowed is 4096 (10107)")


async def test_the_reference_sends_the_same_error_objects(reference_factory,
                                                          tmp_path: Path) -> None:
    server = reference_factory(extra_args=["-js", "-sd", str(tmp_path)])
    nc = await nats.connect(f"nats://127.0.0.1:{server.port}")

    async def error_of(subject: str, body: bytes, headers: dict[str, str] | None = None) -> dict:
        reply = await nc.request(subject, body, timeout=5, headers=headers)
        return json.loads(reply.data)["error"]

    def config(**fields: object) -> bytes:
        return json.dumps(fields).encode()

    try:
        create = "$JS.API.STREAM.CREATE."
        await nc.request(create + "S", config(name="S", subjects=["s.>"]), timeout=5)
        sent = [
            await error_of("$JS.API.STREAM.INFO.nope", b""),
            await error_of(create + "S", config(name="S", subjects=["t.>"])),
            await error_of(create + "T", config(name="T", subjects=["t.>"], num_replicas=3)),
            await error_of(create + "U", b"{"),
            await error_of("$JS.API.STREAM.MSG.GET.S", config(seq=7)),
            await error_of("$JS.API.CONSUMER.CREATE.S.C", config(
                stream_name="S", config={"name": "C", "description": "x" * 5000})),
            await error_of("s.1", b"x", {"Nats-Expected-Last-Sequence": "5"}),
        ]
    finally:
        await nc.close()
    ours = [errors.STREAM_NOT_FOUND(), errors.STREAM_NAME_EXIST(),
            errors.STREAM_REPLICAS_NOT_SUPPORTED(),
            errors.INVALID_JSON(err="unexpected EOF"), errors.NO_MESSAGE_FOUND(),
            errors.CONSUMER_DESCRIPTION_TOO_LONG(max=4096),
            errors.STREAM_WRONG_LAST_SEQUENCE(seq=0)]
    assert [list(e.items()) for e in sent] == [list(e.as_json().items()) for e in ours]
