"""Endpoint URLs as shown: query values, user information and path tokens masked."""

from __future__ import annotations

import pytest

from outbox._shared.urls import shown_url, token_segments


@pytest.mark.parametrize(("url", "shown"), [
    ("https://hooks.example.com/services/T0001/B0001/XXXXXXXXXXXXXXXXXXXXXXXX",
     "https://hooks.example.com/services/T0001/B0001/XXXX***"),
    ("https://discord.example/api/webhooks/123456789012345678/Ab-3_" + "x" * 60,
     "https://discord.example/api/webhooks/1234***/Ab-3***"),
    ("https://h.example/teams/3f1c9a4e-5b6d-4e7f-8a9b-0c1d2e3f4a5b@x/hook?sig=abc",
     "https://h.example/teams/3f1c***/hook?sig=***"),
    ("https://h.example/api/order-created-events/incoming_webhooks/v1",
     "https://h.example/api/order-created-events/incoming_webhooks/v1"),
    ("https://h.example/IncomingWebhook/short-Token-1",
     "https://h.example/IncomingWebhook/short-Token-1"),
])
def test_path_segments_that_look_like_tokens_are_masked(url: str, shown: str) -> None:
    """16+ characters other than lower-case words: first 4 characters and ***; others kept."""
    assert shown_url(url) == shown


def test_token_segments_are_given_as_written_and_decoded() -> None:
    """The dispatcher masks a path token in an echo whether the receiver decoded it or not."""
    url = "https://h.example/hooks/Tok%2Fen0123456789abcdef/x?t=1"
    assert token_segments(url) == ("Tok%2Fen0123456789abcdef", "Tok/en0123456789abcdef")
    assert token_segments("https://h.example/order-created-events") == ()
