"""Endpoint signing secrets: their forms, checked, and the HMAC key each one gives.

A secret is ``whsec_<base64>`` (Standard Webhooks' form, a key of 24 to 64
bytes) or ``env:NAME``, read from the dispatcher's environment. The
``outbox endpoints`` commands check what operators write with these rules,
and the dispatcher decodes what it reads from the database with them: one
reading on both sides, in the package the sidecar may share.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from outbox._shared.wire import SECRET_PREFIX, BadSecret, secret_key
from outbox.errors import InvalidEndpoint

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ENV_SECRET_PREFIX = "OUTBOX_SECRET_"  # noqa: S105 - a variable name's prefix, not a password
"""The recommended prefix of ``env:`` secrets; allowed inside the dispatcher's own namespace."""
# Variables an endpoint's env: secret may never name: the dispatcher's own
# configuration (OUTBOX_*, the DSN among it), and the database's (DATABASE_URL,
# libpq's PG* variables, PGPASSWORD among them). The dispatcher's environment holds
# OUTBOX_DSN (with its password) and whatever else its pod carries; whoever may define
# endpoints must not be able to have the dispatcher sign with any of those: a receiver
# they control would get an HMAC under the database password, to test guesses against
# offline.
_ENV_DENIED_PREFIXES = ("OUTBOX_", "PG")
_ENV_DENIED = frozenset({"DATABASE_URL"})


def env_name_allowed(name: str) -> bool:
    """Whether an ``env:`` secret may name this variable (see _ENV_DENIED_PREFIXES)."""
    if name.startswith(ENV_SECRET_PREFIX):
        return name != ENV_SECRET_PREFIX
    return not name.startswith(_ENV_DENIED_PREFIXES) and name not in _ENV_DENIED
_KEY_BYTES = (24, 64)  # Standard Webhooks: secret keys of 24 to 64 bytes


def check_secret(secret: object) -> str | None:
    """``whsec_<base64>`` (its key checked) or ``env:NAME`` (see ``check_env_name``); None
    means unsigned."""
    if secret is None:
        return None
    if not isinstance(secret, str):
        raise InvalidEndpoint(f"must be a string, not {type(secret).__name__}", "secret")
    if secret.startswith("env:"):
        check_env_name(secret[4:])
    elif secret.startswith(SECRET_PREFIX):
        key_bytes(secret, "the whsec_ secret")
    else:
        raise InvalidEndpoint(
            "must be 'whsec_' followed by the base64 of 24 to 64 random bytes, or "
            "'env:NAME' to read it from the dispatcher's environment",
            "secret")
    return secret


def check_env_name(name: str) -> str:
    """The variable name of an ``env:`` secret: valid, and none of the configuration's."""
    example = f"env:{ENV_SECRET_PREFIX}WORKFLOW"
    if not ENV_NAME.fullmatch(name):
        raise InvalidEndpoint(
            "env: must be followed by an environment variable name of letters, digits "
            f"and '_', such as {example}", "secret")
    if not env_name_allowed(name):
        raise InvalidEndpoint(
            f"env:{name} is not allowed: OUTBOX_* (but {ENV_SECRET_PREFIX}*), DATABASE_URL "
            f"and PG* hold the dispatcher's and the database's configuration, never a "
            f"signing secret; use a name of its own, such as {example}", "secret")
    return name


def key_bytes(secret: str, what: str, *, show_length: bool = True) -> bytes:
    """The HMAC key of a ``whsec_`` secret, read as every side reads it
    (``outbox._shared.wire.secret_key``), and of 24 to 64 bytes: the length
    is the rule of endpoint definitions on top.

    ``show_length=False`` keeps the key's length out of the message: for a
    variable of the dispatcher's environment, which its reader did not write.
    """
    try:
        key = secret_key(secret)
    except BadSecret as exc:
        if exc.rule != "empty":
            raise InvalidEndpoint(f"is not valid: {what} is not base64", "secret") from None
        key = b""  # told below, as a key of the wrong size
    low, high = _KEY_BYTES
    if not low <= len(key) <= high:
        holds = f"holds a {len(key)}-byte key" if show_length else "holds a key of another size"
        raise InvalidEndpoint(
            f"is not valid: {what} {holds}; Standard Webhooks keys "
            f"are {low} to {high} bytes", "secret")
    return key


def decode_secret(text: str, environ: Mapping[str, str]) -> bytes:
    """The HMAC key of a secret: ``whsec_<base64>``, or ``env:NAME`` looked up in ``environ``.

    NAME must not be the configuration's, checked before ``environ`` is
    read, so that an endpoint written by hand cannot sign with ``OUTBOX_DSN``,
    ``DATABASE_URL`` or ``PGPASSWORD``. The variable must hold a ``whsec_``
    secret, prefix included: a value without it (a cloud key, a password) is
    never a signing key, whatever its name. Surrounding whitespace such as a
    trailing newline from a mounted file is ignored. Raises InvalidEndpoint
    (field ``secret``) when the name is not allowed or the variable does not
    hold a valid ``whsec_`` secret; the message names the variable, never its
    value nor its length, and says the same whether the variable is missing
    or holds something else (no way to learn what the environment holds).
    """
    if text.startswith("env:"):
        var = check_env_name(text[4:])
        value = environ.get(var, "").strip()
        if not value.startswith("whsec_"):
            raise InvalidEndpoint(
                f"env:{var}: the dispatcher's environment has no variable {var} holding a "
                "whsec_ secret (set it to whsec_ followed by the base64 of 24 to 64 "
                "random bytes)", "secret")
        return key_bytes(value, f"the whsec_ secret in {var}", show_length=False)
    if text.startswith("whsec_"):
        return key_bytes(text, "the whsec_ secret")
    check_secret(text)  # raises, saying what a secret looks like
    raise AssertionError("unreachable")  # pragma: no cover
