"""What the configuration says about who may connect and what they may do: users (password,
bcrypt hash or NKey), their permissions, the defaults. Plain data, filled by config.py and
read by auth.py; nothing here checks anything."""

from __future__ import annotations

from dataclasses import dataclass, field

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
    """One entry of `authorization { users = [...] }`: a name and password (plain or a bcrypt
    hash), or an NKey (a public user key, "U..."); its permissions, if any."""

    name: str = ""
    password: str = ""
    nkey: str = ""
    permissions: Permissions | None = None
    connection_types: tuple[str, ...] = ()  # allowed_connection_types (empty: all)


@dataclass
class AuthOptions:
    """The users of `authorization { users = [...] }` (and top-level `nkeys`), the default
    permissions, and the user taken by clients that send no credentials."""

    users: list[User] = field(default_factory=list)
    default_permissions: Permissions | None = None
    no_auth_user: str = ""

    @property
    def configured(self) -> bool:
        return bool(self.users)
