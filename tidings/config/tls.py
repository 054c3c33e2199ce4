"""The `tls { }` block of a configuration file and the --tls* flags, as nats-server has
them, onto TLSOptions, checked as the reference checks them: the certificate, key and CA
are loaded when the options are read (a missing or bad file is an error then, not at the
first connection). The SSL contexts the listeners use are built from TLSOptions by
server/tls.py.

Keys of the reference's block that tidings accepts: cert_file, key_file, ca_file, verify,
verify_and_map, timeout, handshake_first (and its aliases first, immediate; a duration or
"auto" is the fall-back delay), insecure, min_version, allow_insecure_cipher_suites (there
is no cipher list to allow anything in). Those refused by name (REFUSED): the ones that
would restrict or change what is accepted (cipher_suites, curve_preferences, pinned_certs,
...) are not silently ignored.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any

from .parser import ConfigError, Section
from .units import file_duration

# The reference's default TLS handshake timeout (seconds).
TLS_TIMEOUT = 2.0


@dataclass
class TLSOptions:
    """A `tls { }` block (or --tls* flags), as nats-server's keys."""

    cert_file: str = ""
    key_file: str = ""
    ca_file: str = ""
    verify: bool = False  # clients must present a certificate signed by ca_file
    verify_and_map: bool = False  # ... and its subject names the user
    timeout: float = TLS_TIMEOUT
    handshake_first: bool = False  # TLS before INFO
    handshake_first_fallback: float = 0.0  # with handshake_first: plain INFO after this long
    insecure: bool = False  # routes: do not verify the peer's certificate
    min_version: str = ""  # "1.2" or "1.3" (default 1.2)


# The reference's fall-back delay of `handshake_first: auto`.
AUTO_FALLBACK = 0.05

# Keys of the reference's tls block that tidings does not have, and why.
REFUSED = {
    "cipher_suites": "choosing cipher suites is not supported (OpenSSL's defaults are used)",
    "curve_preferences": "choosing curves is not supported (OpenSSL's defaults are used)",
    "pinned_certs": "pinned certificates are not supported",
    "connection_rate_limit": "TLS connection rate limits are not supported",
    "verify_cert_and_check_known_urls": "checking certificates against known URLs is not "
                                        "supported",
    "cert_store": "certificate stores are not supported",
    "cert_match_by": "certificate stores are not supported",
    "cert_match": "certificate stores are not supported",
    "cert_match_skip_invalid": "certificate stores are not supported",
    "ca_certs_match": "certificate stores are not supported",
    "ocsp_peer": "OCSP peer verification is not supported",
    "certs": "several certificates are not supported (use cert_file and key_file)",
    "certificates": "several certificates are not supported (use cert_file and key_file)",
}

_BOOLS = {"verify": "verify", "verify_and_map": "verify_and_map", "insecure": "insecure"}
_FILES = ("cert_file", "key_file", "ca_file")
TLS_VERSIONS = {"1.2": ssl.TLSVersion.TLSv1_2, "1.3": ssl.TLSVersion.TLSv1_3}


def parse_tls_block(block: Any) -> TLSOptions:
    """TLSOptions from a `tls { }` block, checked as the reference checks it: the files are
    loaded (a missing or bad one is an error now, not at the first connection). A bad key is
    a ConfigError saying where; a problem of the whole block (a file) a ValueError, for the
    caller to say where the block is. The reference's wording where it has one."""
    if not isinstance(block, dict):
        raise ValueError("expected a map")
    where = "?"
    tls = TLSOptions()
    timeout = 0.0
    for key, value in block.items():
        name = key.lower()
        at = block.where(key) if isinstance(block, Section) else where
        if name in _FILES:
            if not isinstance(value, str):
                raise ConfigError(f"{at}: error parsing tls config, expected '{name}' to be "
                                  "filename")
            setattr(tls, name, value)
        elif name in _BOOLS:
            if not isinstance(value, bool):
                raise ConfigError(f"{at}: error parsing tls config, expected '{name}' to be a "
                                  "boolean")
            setattr(tls, _BOOLS[name], value)
            if name == "verify_and_map" and value:
                tls.verify = True
        elif name == "allow_insecure_cipher_suites":
            if not isinstance(value, bool):
                raise ConfigError(f"{at}: error parsing tls config, expected '{name}' to be a "
                                  "boolean")
        elif name == "timeout":
            if isinstance(value, bool) or not isinstance(value, int | float | str):
                raise ConfigError(f"{at}: error parsing tls config, 'timeout' wrong type")
            try:
                timeout = file_duration(value)
            except ValueError as exc:
                raise ConfigError(f"{at}: error parsing tls config, 'timeout' {exc}") from None
        elif name in ("handshake_first", "first", "immediate"):
            tls.handshake_first, tls.handshake_first_fallback = _handshake_first(key, value, at)
        elif name == "min_version":
            if value not in TLS_VERSIONS:
                raise ConfigError(f"{at}: error parsing tls config: unsupported TLS version: "
                                  f"{value}")
            tls.min_version = value
        elif name in REFUSED:
            raise ConfigError(f'{at}: "{key}": {REFUSED[name]}')
        else:
            raise ConfigError(f'{at}: unknown field "{key}"')
    if timeout > 0:
        tls.timeout = timeout
    check_files(tls)
    return tls


def _handshake_first(key: str, value: Any, at: str) -> tuple[bool, float]:
    """handshake_first: a boolean, or true/on/false/off, auto (the default fall-back delay),
    or a duration: TLS first, but plain INFO if the client sends nothing for that long."""
    if isinstance(value, bool):
        return value, 0.0
    if not isinstance(value, str):
        kind = type(value).__name__
        raise ConfigError(f'{at}: field "{key}" should be a boolean or a string, got {kind}')
    word = value.lower()
    if word in ("true", "on"):
        return True, 0.0
    if word in ("false", "off"):
        return False, 0.0
    if word in ("auto", "auto_fallback"):
        return True, AUTO_FALLBACK
    try:
        return True, file_duration(value)
    except ValueError:
        raise ConfigError(f'{at}: field "{key}"\'s value "{value}" is invalid') from None


def flag_options(cert: str | None, key: str | None, ca: str | None, verify: bool | None,
                 base: TLSOptions | None) -> TLSOptions:
    """TLSOptions from --tlscert, --tlskey, --tlscacert and --tlsverify (the timeout and
    handshake_first of the file's block, if any, stay). ValueError as the reference says."""
    if not cert:
        raise ValueError("TLS Server certificate must be present and valid")
    if not key:
        raise ValueError("TLS Server private key must be present and valid")
    tls = TLSOptions(cert_file=cert, key_file=key, ca_file=ca or "", verify=bool(verify))
    if base is not None:
        tls.timeout = base.timeout
        tls.handshake_first = base.handshake_first
        tls.handshake_first_fallback = base.handshake_first_fallback
    check_files(tls)
    return tls


def check_files(tls: TLSOptions) -> None:
    """Load the certificate, key and CA as the server will: ValueError (one line, in the
    reference's words) if one is missing, unreadable or not what it should be."""
    if tls.cert_file and not tls.key_file:
        raise ValueError("missing 'key_file' in TLS configuration")
    if tls.key_file and not tls.cert_file:
        raise ValueError("missing 'cert_file' in TLS configuration")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    if tls.cert_file:
        try:
            context.load_cert_chain(tls.cert_file, tls.key_file)
        except OSError as exc:
            raise ValueError(f"error parsing X509 certificate/key pair: {_why(exc, tls)}") from None
    if tls.ca_file:
        try:
            context.load_verify_locations(tls.ca_file)
        except ssl.SSLError:
            raise ValueError("failed to parse root ca certificate") from None
        except OSError as exc:
            raise ValueError(f"open {tls.ca_file}: {_strerror(exc)}") from None


def _why(exc: OSError, tls: TLSOptions) -> str:
    if isinstance(exc, ssl.SSLError):
        return ssl_reason(exc)
    path = exc.filename or (tls.cert_file if not _readable(tls.cert_file) else tls.key_file)
    return f"open {path}: {_strerror(exc)}"


def ssl_reason(exc: BaseException) -> str:
    """An OpenSSL error in a few words, without the source position: "key values mismatch",
    "certificate verify failed: unable to get local issuer certificate"."""
    text = str(exc.args[1] if len(exc.args) > 1 else exc)
    text = text.split("] ", 1)[-1].split(" (_ssl.c:", 1)[0]
    if text == "PEM lib":
        return "no PEM data of a certificate and key found (are the files switched?)"
    verify = getattr(exc, "verify_message", None)
    if verify and verify not in text:
        text = f"{text}: {verify}"
    return text


def _readable(path: str) -> bool:
    try:
        with open(path, "rb"):
            return True
    except OSError:
        return False


def _strerror(exc: OSError) -> str:
    text = exc.strerror or str(exc)
    return text[:1].lower() + text[1:]
