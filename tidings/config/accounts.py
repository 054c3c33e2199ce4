"""Accounts as the configuration gives them (the data model; the `accounts { }` block's
parser lands beside it)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .auth import Permissions


@dataclass(frozen=True)
class Latency:
    sampling: int
    subject: str


@dataclass(frozen=True)
class StreamExport:
    subject: str
    accounts: tuple[str, ...] = ()


@dataclass(frozen=True)
class ServiceExport:
    subject: str
    accounts: tuple[str, ...] = ()
    response_type: str = "Singleton"
    response_threshold: float = 120.0
    latency: Latency | None = None
    allow_trace: bool = False


@dataclass(frozen=True)
class StreamImport:
    account: str
    subject: str
    to: str = ""
    prefix: str = ""
    allow_trace: bool = False


@dataclass(frozen=True)
class ServiceImport:
    account: str
    subject: str
    to: str = ""
    share: bool = False
    allow_trace: bool = False


@dataclass(frozen=True)
class AccountLimits:
    max_connections: int = -1
    max_subscriptions: int = -1
    max_payload: int = -1
    max_leafnodes: int = -1


@dataclass
class AccountConfig:
    name: str
    nkey: str = ""
    exports: list[StreamExport | ServiceExport] = field(default_factory=list)
    imports: list[StreamImport | ServiceImport] = field(default_factory=list)
    limits: AccountLimits = AccountLimits()
    default_permissions: Permissions | None = None
