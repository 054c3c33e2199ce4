"""Secrets out of what the server shows: every log line, trace and monitoring answer that
carries a URL or a CONNECT goes through here, so that no password, token, signature or
key reaches them.

- `url_host`: the `host:port` of a URL, as the reference's /varz `cluster.urls` lists route
  URLs (Go's `url.URL.Host`);
- `redact_url`: a URL with its password replaced, as Go's `url.URL.Redacted()` writes it
  (`nats://ruser:xxxxx@host:port`; a user alone, a token in a NATS URL, is masked too), for
  logs and error messages;
- `redact_connect`: a CONNECT's JSON with the value of every credential field replaced by
  `[REDACTED]`, as the reference's -V trace shows it (its fields: `pass*`, `auth_token*`,
  `sig`, `proxy_sig`, `nkey`; `jwt` too here).
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

REDACTED = "[REDACTED]"
PASSWORD_MASK = "xxxxx"  # what Go's url.URL.Redacted() puts in place of a password

# A credential field of a CONNECT and its value: a JSON string (also one the line cuts short)
# or anything else up to the next separator.
_CONNECT_SECRET = re.compile(
    r'("(?:pass[^"]*|auth_token[^"]*|sig|proxy_sig|nkey|jwt)"\s*:\s*)'
    r'("(?:[^"\\]|\\.)*(?:"|\\?$)|[^,}\s]+)',
    re.IGNORECASE,
)


def _netloc(text: str) -> str:
    return urlsplit(text if "://" in text else "nats://" + text).netloc


def url_host(text: str) -> str:
    """`host:port` of a URL (without scheme, user or password), as written in it."""
    try:
        return _netloc(text).rpartition("@")[2]
    except ValueError:
        return redact_url(text)


def redact_url(text: str) -> str:
    """`text` with the password of its user info replaced (the user name stays)."""
    if "@" not in text:
        return text
    try:
        netloc = _netloc(text)
    except ValueError:
        netloc = ""
    userinfo, at, host = netloc.rpartition("@")
    if not at:
        # Not a URL we can read: keep what cannot be a secret, the part after the last @.
        return REDACTED + "@" + text.rpartition("@")[2]
    user, colon, _ = userinfo.partition(":")
    # A user alone is a token in a NATS URL (nats://token@host): masked as a password is.
    shown = f"{user}:{PASSWORD_MASK}" if colon else PASSWORD_MASK
    start = text.index(netloc)
    return text[:start] + shown + "@" + host + text[start + len(netloc):]


def redact_connect(arg: str) -> str:
    """A CONNECT's argument with its credentials' values replaced by [REDACTED]."""
    return _CONNECT_SECRET.sub(_redacted_value, arg)


def _redacted_value(match: re.Match[str]) -> str:
    quoted = match.group(2).startswith('"')
    return match.group(1) + (f'"{REDACTED}"' if quoted else REDACTED)
