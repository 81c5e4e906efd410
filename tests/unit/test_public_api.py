"""The public surface of `import outbox`: exactly what we mean to export, nothing by accident."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from datetime import timedelta

import outbox
import outbox.endpoints
import outbox.errors
import outbox.receive
import outbox.testing

INTENDED = {
    "MAX_PAYLOAD_BYTES",
    "BacklogFull",
    "Event",
    "InvalidEvent",
    "OutboxError",
    "PayloadTooLarge",
    "SchemaMissing",
    "__version__",
    "apublish",
    "apublish_many",
    "publish",
    "publish_many",
    "receive",
    "set_quota_check",
}


def _isort_key(name: str) -> tuple[int, str]:
    """Constants, then classes, then the rest (the order ruff's RUF022 keeps)."""
    if name.isupper():
        return 0, name
    if name[:1].isupper():
        return 1, name
    return 2, name


OPERATIONS = {"add", "update", "remove", "enable", "disable", "rotate_secret", "retry_now",
              "get", "list", "deliveries", "attempts", "replay", "retry_dead", "send_test"}
ENDPOINTS = {"EndpointBusy", "EndpointExists", "EndpointNotFound", "InvalidEndpoint",
             "check_url", *OPERATIONS, *("a" + name for name in OPERATIONS)}


def test_endpoints_all_is_the_operations_their_async_twins_and_errors() -> None:
    """outbox.endpoints.__all__ is the operations, each with its async twin (a coroutine
    function), check_url, and the errors they raise, sorted; InvalidEndpoint is a
    ValueError."""
    assert set(outbox.endpoints.__all__) == ENDPOINTS
    assert outbox.endpoints.__all__ == sorted(outbox.endpoints.__all__, key=_isort_key)
    for name in OPERATIONS:
        assert inspect.iscoroutinefunction(getattr(outbox.endpoints, "a" + name)), name
        assert not inspect.iscoroutinefunction(getattr(outbox.endpoints, name)), name
    assert issubclass(outbox.endpoints.InvalidEndpoint, ValueError)
    assert all(issubclass(getattr(outbox.endpoints, n), outbox.OutboxError)
               for n in ENDPOINTS if n[0].isupper())
    assert list(inspect.signature(outbox.endpoints.add).parameters) == [
        "conn", "name", "url", "events", "secret", "tenant", "as_tenant", "allow_env_secret",
        "check_url", "options"]


def test_each_twin_takes_what_its_function_takes() -> None:
    """Every a... twin has its function's parameters, defaults and annotations; every
    operation takes conn first and the tenant guard as_tenant, keyword-only."""
    for name in OPERATIONS:
        sync = inspect.signature(getattr(outbox.endpoints, name))
        twin = inspect.signature(getattr(outbox.endpoints, "a" + name))
        assert twin.parameters == sync.parameters, name
        assert next(iter(sync.parameters)) == "conn", name
        guard = sync.parameters["as_tenant"]
        assert (guard.kind, guard.default) == (inspect.Parameter.KEYWORD_ONLY, None), name


def test_all_is_the_intended_set_and_sorted() -> None:
    """outbox.__all__ is exactly the intended names, without duplicates, in sorted order."""
    assert set(outbox.__all__) == INTENDED
    assert len(outbox.__all__) == len(INTENDED)
    assert outbox.__all__ == sorted(outbox.__all__, key=_isort_key)


def test_every_public_name_is_importable() -> None:
    """Every name in __all__ (of outbox, its endpoints and testing) exists and star-imports."""
    for module in (outbox, outbox.endpoints, outbox.receive, outbox.testing):
        namespace: dict[str, object] = {}
        exec(f"from {module.__name__} import *", namespace)
        for name in module.__all__:
            assert getattr(module, name) is namespace[name]


def test_public_names_live_in_public_or_private_modules_of_outbox() -> None:
    """Public callables and classes come from outbox itself, not re-exported third parties."""
    for name in INTENDED:
        value = getattr(outbox, name)
        if inspect.ismodule(value):
            assert value.__name__.startswith("outbox."), name
        elif inspect.isclass(value) or inspect.isfunction(value):
            assert value.__module__.startswith("outbox."), name


def test_signatures_of_the_producer_api() -> None:
    """publish takes (conn, type, payload) and keyword-only key, headers, idempotency_key,
    delay and tenant."""
    for function in (outbox.publish, outbox.apublish):
        parameters = inspect.signature(function).parameters
        assert list(parameters) == ["conn", "type", "payload", "key", "headers",
                                    "idempotency_key", "delay", "tenant"]
        assert all(parameters[p].kind is inspect.Parameter.KEYWORD_ONLY
                   for p in ("key", "headers", "idempotency_key", "delay", "tenant"))
    assert inspect.iscoroutinefunction(outbox.apublish)
    assert inspect.iscoroutinefunction(outbox.apublish_many)
    assert list(inspect.signature(outbox.Event).parameters) == [
        "type", "payload", "key", "headers", "idempotency_key", "delay", "tenant"]


def test_errors_form_the_documented_tree() -> None:
    """InvalidEvent is a ValueError; every producer error is an OutboxError."""
    assert issubclass(outbox.InvalidEvent, ValueError)
    for error in (outbox.InvalidEvent, outbox.PayloadTooLarge, outbox.SchemaMissing,
                  outbox.BacklogFull):
        assert issubclass(error, outbox.OutboxError)
    assert issubclass(outbox.BacklogFull, outbox.InvalidEvent)
    assert importlib.import_module("outbox.errors").OutboxError is outbox.OutboxError


def test_every_error_is_in_the_drawn_tree() -> None:
    """The tree in outbox.errors' docstring names every exception class the module defines."""
    drawn = outbox.errors.__doc__ or ""
    defined = [name for name, value in vars(outbox.errors).items()
               if inspect.isclass(value) and issubclass(value, Exception)
               and value.__module__ == "outbox.errors"]
    assert defined
    for name in defined:
        assert f" {name}" in drawn, f"{name} is missing from the tree in outbox.errors"


def test_version_is_a_string() -> None:
    """outbox.__version__ is the package version text."""
    assert isinstance(outbox.__version__, str)
    assert outbox.__version__[0].isdigit()


RECEIVE = {"DEFAULT_CONSUMER", "DEFAULT_TOLERANCE", "Headers", "InvalidDelivery",
           "InvalidSignature", "Received", "Verifier", "afirst_time", "first_time"}


def test_receive_exports_the_contracts_names() -> None:
    """`from outbox import receive` offers exactly the receiving side's names, sorted."""
    from outbox import receive

    assert receive is outbox.receive
    assert set(receive.__all__) == RECEIVE
    assert receive.__all__ == sorted(receive.__all__, key=_isort_key)
    for error in (receive.InvalidSignature, receive.InvalidDelivery):
        assert issubclass(error, outbox.OutboxError)
    assert list(inspect.signature(receive.first_time).parameters) == [
        "conn", "event_id", "consumer"]
    assert inspect.signature(receive.first_time).parameters["consumer"].default == "default"
    assert inspect.iscoroutinefunction(receive.afirst_time)
    assert [f.name for f in dataclasses.fields(receive.Received)] == [
        "id", "type", "key", "data", "time", "tenant"]
    parameters = inspect.signature(receive.Verifier).parameters
    assert parameters["tolerance"].default == timedelta(minutes=5)
    assert parameters["format"].default == "standard-webhooks"
    assert parameters["max_body"].default == 5 * 1024 * 1024
