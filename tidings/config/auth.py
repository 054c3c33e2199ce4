"""Who may connect and what they may do, as the configuration says it: users (password,
bcrypt hash or NKey), their permissions, the defaults (plain data, read by server/auth.py's
Authenticator, which does the checking), and the `authorization { }` block that fills them,
with the reference's keys and error messages: a single user or token, the `users` array,
permissions in both styles (a list is shorthand for allow), allow_responses, and default
permissions."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..protocol.subjects import is_valid_subject
from .parser import ConfigError, Section
from .units import file_duration

if TYPE_CHECKING:
    from .accounts import AccountConfig

# As the reference's DEFAULT_ALLOW_RESPONSE_MAX_MSGS and DEFAULT_ALLOW_RESPONSE_EXPIRATION.
RESPONSE_MAX_MSGS = 1
RESPONSE_EXPIRES = 120.0


@dataclass(frozen=True)
class SubjectPermission:
    """Allow and deny lists of one direction (publish or subscribe). `allow` None: all."""

    allow: tuple[str, ...] | None = None
    deny: tuple[str, ...] = ()


@dataclass(frozen=True)
class ResponsePermission:
    """allow_responses: a client may publish to the reply subjects of requests it received,
    `max_msgs` times each within `expires` seconds."""

    max_msgs: int = RESPONSE_MAX_MSGS
    expires: float = RESPONSE_EXPIRES


@dataclass(frozen=True)
class Permissions:
    publish: SubjectPermission | None = None
    subscribe: SubjectPermission | None = None
    responses: ResponsePermission | None = None


@dataclass(frozen=True)
class User:
    """One entry of `authorization { users = [...] }` or of an account's `users`: a name and
    password (plain or a bcrypt hash), or an NKey (a public user key, "U..."); its
    permissions, if any (an account's default_permissions are already applied); the account
    it belongs to ("": the global account, $G)."""

    name: str = ""
    password: str = ""
    nkey: str = ""
    permissions: Permissions | None = None
    connection_types: tuple[str, ...] = ()  # allowed_connection_types (empty: all)
    account: str = ""  # the account it belongs to ("": the global account)


@dataclass
class AuthOptions:
    """The users of `authorization { users = [...] }` and of the accounts (one list, each
    user naming its account), the authorization block's default permissions, the user taken
    by clients that send no credentials, the accounts of `accounts { }` (config/accounts.py)
    in file order, and `system_account` ("": not configured)."""

    users: list[User] = field(default_factory=list)
    default_permissions: Permissions | None = None
    no_auth_user: str = ""
    accounts: dict[str, AccountConfig] = field(default_factory=dict)
    system_account: str = ""

    @property
    def configured(self) -> bool:
        return bool(self.users)


CONNECTION_TYPES = ("STANDARD", "WEBSOCKET", "LEAFNODE", "LEAFNODE_WS", "MQTT", "MQTT_WS",
                    "IN_PROCESS")


def _error(section: Any, key: str, message: str) -> ConfigError:
    where = section.where(key) if isinstance(section, Section) else "?"
    return ConfigError(f"{where}: {message}")


def _string(section: Any, key: str, value: Any) -> str:
    if not isinstance(value, str):
        raise _error(section, key, f'"{key}": expected a string, got {value!r}')
    return value


def parse_authorization(block: Any, changes: dict[str, Any], auth: AuthOptions,
                        where: str = "") -> None:
    """Fill `changes` (user, password, token, auth_timeout) and `auth` (users, default
    permissions) from an authorization block; `where`: the block's key, where the reference
    places a duplicate user (one of the block's, or of an account read before it)."""
    if not isinstance(block, dict):
        raise ValueError("expected a map")
    users: list[User] | None = None
    default: Permissions | None = None
    single: dict[str, str] = {}
    for key, value in block.items():
        name = key.lower()
        if name in ("user", "username"):
            single["user"] = _string(block, key, value)
        elif name in ("pass", "password"):
            single["password"] = _string(block, key, value)
        elif name == "token":
            single["token"] = _string(block, key, value)
        elif name == "timeout":
            changes["auth_timeout"] = file_duration(value)
        elif name == "users":
            users = parse_users(block, key, value, identities(auth.users), where)
        elif name in ("default_permission", "default_permissions", "permissions"):
            default = parse_permissions(block, key, value)
        elif name in ("auth_callout", "auth_hook", "proxy_required"):
            raise _error(block, key, f'"{key}": not supported by tidings')
        elif key not in getattr(block, "variables", ()):
            raise _error(block, key, f'unknown field "{key}"')
    if (single.get("user") or single.get("password")) and single.get("token"):
        raise ConfigError(f"{_where(block)}: Cannot have a user/pass and token")
    if users is not None or auth.users:  # the users of accounts read before count too
        if single.get("user"):
            raise ConfigError(f"{_where(block)}: Can not have a single user/pass and a users array")
        if single.get("token"):
            raise ConfigError(f"{_where(block)}: Can not have a token and a users array")
        auth.users = [*auth.users, *(users or ())]
    changes.update(single)
    auth.default_permissions = default


def _where(block: Any) -> str:
    if isinstance(block, Section) and block.positions:
        return block.where(next(iter(block.positions)))
    return "?"


def identities(users: list[User]) -> set[str]:
    """The names and NKeys of `users`: one namespace, in which each must be unique."""
    return {user.nkey or user.name for user in users}


def parse_users(block: Any, key: str, value: Any, taken: set[str],
                duplicate_at: str = "") -> list[User]:
    """A `users` array (of the authorization block or of an account); a user or NKey that
    is in `taken` or twice in the array is refused as the reference refuses it (at
    `duplicate_at`, else at the array's key)."""
    if not isinstance(value, list):
        raise _error(block, key, f"Expected users field to be an array, got {value!r}")
    users: list[User] = []
    seen = set(taken)
    for entry in value:
        if not isinstance(entry, dict):
            raise _error(block, key, f"Expected user entry to be a map/struct, got {entry!r}")
        fields: dict[str, Any] = {}
        for k, v in entry.items():
            name = k.lower()
            if name == "nkey":
                fields["nkey"] = _string(entry, k, v)
            elif name in ("user", "username"):
                fields["name"] = _string(entry, k, v)
            elif name in ("pass", "password"):
                fields["password"] = _string(entry, k, v)
            elif name in ("permission", "permissions", "authorization"):
                fields["permissions"] = parse_permissions(entry, k, v)
            elif name in ("allowed_connection_types", "connection_types", "clients"):
                fields["connection_types"] = _connection_types(entry, k, v)
            elif name == "proxy_required":
                raise _error(entry, k, f'"{k}": not supported by tidings')
            elif k not in getattr(entry, "variables", ()):
                raise _error(entry, k, f'unknown field "{k}"')
        nkey, user = fields.get("nkey", ""), fields.get("name", "")
        if not nkey and not user:
            raise _error(block, key, "User entry requires a user")
        if nkey:
            if not _is_user_nkey(nkey):
                raise _error(block, key, "Not a valid public nkey for a user")
            if user or fields.get("password"):
                raise _error(block, key, "Nkey users do not take usernames or passwords")
        ident = nkey or user
        if ident in seen:
            what = "nkey" if nkey else "user"
            message = f'Duplicate {what} "{ident}" detected'
            if duplicate_at:
                raise ConfigError(f"{duplicate_at}: {message}")
            raise _error(block, key, message)
        seen.add(ident)
        users.append(User(**fields))
    return users


def _is_user_nkey(key: str) -> bool:
    return public_nkey_bytes(key, "U") is not None


def _connection_types(entry: Any, key: str, value: Any) -> tuple[str, ...]:
    items = value if isinstance(value, list) else [value]
    types = []
    for item in items:
        text = _string(entry, key, item)
        if text.upper() not in CONNECTION_TYPES:
            raise _error(entry, key, f'unknown connection type "{text}"')
        types.append(text.upper())
    return tuple(types)


def parse_permissions(block: Any, key: str, value: Any) -> Permissions:
    """A `permissions { publish, subscribe, allow_responses }` map."""
    if not isinstance(value, dict):
        raise _error(block, key, f"Expected permissions to be a map/struct, got {value!r}")
    publish = subscribe = None
    responses: ResponsePermission | None = None
    for k, v in value.items():
        name = k.lower()
        if name in ("pub", "publish", "import"):
            publish = _subject_permission(value, k, v, queues=False)
        elif name in ("sub", "subscribe", "export"):
            subscribe = _subject_permission(value, k, v, queues=True)
        elif name in ("publish_allow_responses", "allow_responses"):
            responses = _responses(value, k, v)
        elif k not in getattr(value, "variables", ()):
            raise _error(value, k, f'Unknown field "{k}" parsing permissions')
    return Permissions(publish, subscribe, responses)


def _subject_permission(block: Any, key: str, value: Any, queues: bool) -> SubjectPermission | None:
    if isinstance(value, dict):
        if not value:
            return None
        allow: tuple[str, ...] | None = None
        deny: tuple[str, ...] = ()
        for k, v in value.items():
            if k.lower() == "allow":
                allow = _subjects(value, k, v, queues)
            elif k.lower() == "deny":
                deny = _subjects(value, k, v, queues)
            elif k not in getattr(value, "variables", ()):
                raise _error(value, k, f'Unknown field name "{k}" parsing subject permissions, '
                             "only 'allow' or 'deny' are permitted")
        return SubjectPermission(allow, deny)
    return SubjectPermission(_subjects(block, key, value, queues))


def _subjects(block: Any, key: str, value: Any, queues: bool) -> tuple[str, ...]:
    if isinstance(value, str):
        items = [value]
    elif isinstance(value, list):
        items = value
    else:
        raise _error(block, key, "Expected subject permissions to be a subject, or array of "
                     f"subjects, got {type(value).__name__}")
    subjects = []
    for item in items:
        if not isinstance(item, str):
            raise _error(block, key, "Subject in permissions array cannot be cast to string")
        if not is_valid_subject(item):
            fields = item.split()
            if not queues or len(fields) != 2:
                raise _error(block, key, f'subject "{item}" is not a valid subject')
            if not is_valid_subject(fields[0]):
                raise _error(block, key, f'subject "{fields[0]}" is not a valid subject')
            if not is_valid_subject(fields[1]):
                raise _error(block, key, f'queue "{fields[1]}" is not a valid queue')
        subjects.append(item)
    return tuple(subjects)


def _responses(block: Any, key: str, value: Any) -> ResponsePermission | None:
    if isinstance(value, bool):
        return ResponsePermission() if value else None
    if not isinstance(value, dict):
        raise _error(block, key, "error parsing response permissions, expected a boolean or a map")
    max_msgs, expires = RESPONSE_MAX_MSGS, RESPONSE_EXPIRES
    for k, v in value.items():
        name = k.lower()
        if name in ("max", "max_msgs", "max_messages", "max_responses"):
            if isinstance(v, bool) or not isinstance(v, int):
                raise _error(value, k, f'"{k}": expected an integer')
            max_msgs = v or RESPONSE_MAX_MSGS  # 0 means the default; negative, no limit
        elif name in ("expires", "expiration", "ttl"):
            if not isinstance(v, str):
                raise _error(value, k, "error parsing expires, not a duration string")
            try:
                seconds = file_duration(v)
            except ValueError as exc:
                raise _error(value, k, f"error parsing expires: {exc}") from None
            expires = seconds or RESPONSE_EXPIRES
        elif k not in getattr(value, "variables", ()):
            raise _error(value, k, f'Unknown field "{k}" parsing permissions')
    return ResponsePermission(max_msgs, expires)


def check_no_auth_user(auth: AuthOptions) -> None:
    """The reference's validation of no_auth_user (ValueError with its words)."""
    name = auth.no_auth_user
    if not name:
        return
    if not auth.users:
        raise ValueError(f'no_auth_user: "{name}" present, but users/nkeys are not defined')
    if not any(u.name == name or u.nkey == name for u in auth.users):
        raise ValueError(f'no_auth_user: "{name}" not present as user or nkey in '
                         "authorization block or account configuration")


def user_nkey_bytes(key: str) -> bytes | None:
    """The ed25519 public key of a user NKey ("U" + base32 of prefix, key and CRC16), or
    None when `key` is not one."""
    return public_nkey_bytes(key, "U")


def public_nkey_bytes(key: str, kind: str) -> bytes | None:
    """The ed25519 public key of a public NKey of `kind` ("U": a user, "A": an account), or
    None when `key` is not one."""
    if not key.startswith(kind) or len(key) != 56:
        return None
    try:
        raw = base64.b32decode(key)
    except ValueError:
        return None
    import nkeys

    prefix = nkeys.PREFIX_BYTE_USER if kind == "U" else nkeys.PREFIX_BYTE_ACCOUNT
    body, crc = raw[:-2], int.from_bytes(raw[-2:], "little")
    if raw[0] != prefix or nkeys.crc16(bytearray(body)) != crc:
        return None
    return bytes(body[1:])
