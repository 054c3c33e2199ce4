"""Permission templates of scoped signing keys: a scope's subjects may name the user
(`{{name()}}`, `{{subject()}}`), its account (`{{account-name()}}`,
`{{account-subject()}}`) and their tags (`{{tag(key)}}`, `{{account-tag(key)}}`, one subject
per value), expanded at login as the reference's processUserPermissionsTemplate does:
an allow entry that expands to no valid subject is dropped (and an allow list left empty
becomes a deny of everything), a deny entry that cannot expand refuses the login."""

from __future__ import annotations

import itertools
import re
from dataclasses import replace

from ..config import jwt
from ..protocol.subjects import is_valid_subject

_MUSTACHE = re.compile(r"\{\{([^}]+)\}\}")
MAX_EXPANSIONS = 4096  # subjects one template may give, as the reference bounds them


class TemplateError(ValueError):
    """A template that the reference refuses (the login is refused)."""


def expand(limits: jwt.UserPermissionLimits, user: jwt.UserClaims, account_name: str,
           account_tags: tuple[str, ...]) -> jwt.UserPermissionLimits:
    """`limits` with every template of its permission subjects filled in for `user`."""
    def fill(subjects: tuple[str, ...], strict: bool) -> tuple[str, ...]:
        return _fill(subjects, strict, user, account_name, account_tags)

    pub, sub = limits.pub, limits.sub
    pub_allow, sub_allow = fill(pub.allow, False), fill(sub.allow, False)
    pub_deny, sub_deny = fill(pub.deny, True), fill(sub.deny, True)
    if sub.allow and not sub_allow and ">" not in sub_deny:
        sub_deny += (">",)
    if pub.allow and not pub_allow and ">" not in pub_deny:
        pub_deny += (">",)
    return replace(limits, pub=jwt.Permission(pub_allow, pub_deny),
                   sub=jwt.Permission(sub_allow, sub_deny))


def _fill(subjects: tuple[str, ...], strict: bool, user: jwt.UserClaims, account_name: str,
          account_tags: tuple[str, ...]) -> tuple[str, ...]:
    if not any(_MUSTACHE.search(s) for s in subjects):
        return subjects
    out: list[str] = []
    for subject in subjects:
        found = _MUSTACHE.findall(subject)
        values = [_values(op.strip(), subject, strict, user, account_name, account_tags)
                  for op in found]
        count = 1
        for options in values:
            count *= len(options)
        if count > MAX_EXPANSIONS or len(out) + count > MAX_EXPANSIONS:
            raise TemplateError(f"too many subjects from permission templates: "
                                f"{MAX_EXPANSIONS}")
        for choice in itertools.product(*values):
            filled = subject
            for op, value in zip(found, choice, strict=True):
                filled = filled.replace("{{" + op + "}}", value)
            if is_valid_subject(filled):
                out.append(filled)
            elif strict:
                raise TemplateError("generated invalid subject")
    return tuple(out)


def _values(op: str, subject: str, strict: bool, user: jwt.UserClaims, account_name: str,
            account_tags: tuple[str, ...]) -> list[str]:
    lower = op.lower()
    if lower == "name()":
        return [user.name]
    if lower == "subject()":
        return [user.subject]
    if lower == "account-name()":
        return [account_name]
    if lower == "account-subject()":
        return [user.issuer_account]
    for prefix, tags in (("tag(", user.tags), ("account-tag(", account_tags)):
        if lower.startswith(prefix) and lower.endswith(")"):
            key = op[len(prefix):-1].lower() + ":"
            found = [tag[len(key):] for tag in tags if tag.startswith(key)]
            if found:
                return found
            if strict:
                raise TemplateError(f'generated invalid subject "{subject}": '
                                    f'"{op[len(prefix):-1]}" is not defined')
            return [" "]
    raise TemplateError(f'template operation in "{subject}": "{op}" is not defined')
