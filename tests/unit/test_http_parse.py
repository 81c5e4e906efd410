"""The HTTP/1.1 response parser: framing, leniency and refusals, from bytes."""

from __future__ import annotations

import httpx
import pytest

from dispatcher.http.parse import MAX_HEAD_BYTES, ResponseParser


def parse(*pieces: bytes, head_request: bool = False, eof: bool = False) -> ResponseParser:
    parser = ResponseParser(head_request)
    for piece in pieces:
        parser.feed(piece)
    if eof:
        parser.feed_eof()
    return parser


def every_split(raw: bytes) -> list[tuple[bytes, ...]]:
    """``raw`` whole, byte by byte, and cut in two at every position."""
    return [(raw,), tuple(raw[i:i + 1] for i in range(len(raw))),
            *((raw[:i], raw[i:]) for i in range(1, len(raw)))]


def body_of(parser: ResponseParser) -> bytes:
    return parser.take()


SIMPLE = b"HTTP/1.1 201 Created\r\nContent-Length: 5\r\nX-Id: a1\r\n\r\nhello"
CHUNKED = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
           b"5;name=value\r\nhello\r\n1A\r\n" + b"x" * 26 + b"\r\n0\r\nX-Trailer: t\r\n\r\n")


def test_content_length_response_in_any_split() -> None:
    """Status, reason, headers as sent and a Content-Length body, however the bytes arrive."""
    for pieces in every_split(SIMPLE):
        parser = parse(*pieces)
        assert (parser.status, parser.reason, parser.version) == (201, b"Created", b"HTTP/1.1")
        assert parser.headers == [(b"Content-Length", b"5"), (b"X-Id", b"a1")]
        assert (parser.done, parser.keep_alive, body_of(parser)) == (True, True, b"hello")


def test_chunked_response_in_any_split() -> None:
    """Chunked bodies are joined (extensions and trailers skipped), however the bytes arrive."""
    for pieces in every_split(CHUNKED):
        parser = ResponseParser()
        body = b""
        for piece in pieces:
            parser.feed(piece)
            body += parser.take()
        assert (parser.done, parser.keep_alive, body) == (True, True, b"hello" + b"x" * 26)


def test_body_is_handed_out_as_it_arrives() -> None:
    """take() returns what was framed since the last call; done only at the end."""
    parser = parse(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nabc")
    assert (parser.head_done, parser.done, parser.pending) == (True, False, 3)
    assert parser.take() == b"abc"
    assert (parser.pending, parser.take()) == (0, b"")
    parser.feed(b"def")
    assert (parser.done, parser.take()) == (True, b"def")


def test_zero_length_body_is_done_with_the_head() -> None:
    """Content-Length: 0 completes the response at the end of the head."""
    parser = parse(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
    assert (parser.done, parser.keep_alive, parser.take()) == (True, True, b"")


def test_body_without_length_reads_until_close() -> None:
    """No length and no chunking: everything until EOF, and the connection is not reused."""
    parser = parse(b"HTTP/1.1 200 OK\r\n\r\nsome ", b"more")
    assert (parser.done, parser.keep_alive) == (False, False)
    parser.feed_eof()
    assert (parser.done, parser.take()) == (True, b"some more")


@pytest.mark.parametrize("raw", [
    b"HTTP/1.1 204 No Content\r\nContent-Length: 10\r\n\r\n",
    b"HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n",
])
def test_204_and_304_have_no_body(raw: bytes) -> None:
    """204 and 304 end with their head, whatever framing headers they carry."""
    parser = parse(raw)
    assert (parser.done, parser.keep_alive, parser.take()) == (True, True, b"")


def test_head_response_has_no_body() -> None:
    """After a HEAD request the Content-Length describes a body that is not sent."""
    parser = parse(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n", head_request=True)
    assert (parser.done, parser.keep_alive, parser.take()) == (True, True, b"")


def test_interim_responses_are_skipped() -> None:
    """100 Continue and 103 Early Hints come and go; the final response is what counts."""
    parser = parse(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
                   b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    assert (parser.status, parser.headers, parser.take()) == (200, [(b"Content-Length", b"2")],
                                                              b"ok")


def test_bare_lf_line_ends_and_folded_headers_are_accepted() -> None:
    """Sloppy servers: LF without CR, and an obsolete folded header value joined by a space."""
    parser = parse(b"HTTP/1.1 200 OK\nX-Long: first\n  second\nContent-Length: 2\n\nok")
    assert parser.headers == [(b"X-Long", b"first second"), (b"Content-Length", b"2")]
    assert (parser.done, parser.take()) == (True, b"ok")


def test_status_line_without_reason_and_repeated_headers() -> None:
    """A status line may lack a reason; repeated header names are all kept, in order."""
    parser = parse(b"HTTP/1.1 503\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\n"
                   b"Content-Length: 0\r\n\r\n")
    assert (parser.status, parser.reason) == (503, b"")
    assert parser.headers[:2] == [(b"Set-Cookie", b"a=1"), (b"Set-Cookie", b"b=2")]


@pytest.mark.parametrize(("head", "keep_alive"), [
    (b"HTTP/1.1 200 OK\r\nConnection: close\r\n", False),
    (b"HTTP/1.1 200 OK\r\nConnection: Upgrade, Close\r\n", False),
    (b"HTTP/1.0 200 OK\r\n", False),
    (b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n", True),
])
def test_keep_alive_follows_version_and_connection_header(head: bytes, keep_alive: bool) -> None:
    """HTTP/1.1 stays open unless told to close; HTTP/1.0 closes unless told to stay."""
    parser = parse(head + b"Content-Length: 2\r\n\r\nok")
    assert (parser.done, parser.keep_alive) == (True, keep_alive)


def test_repeated_equal_content_lengths_are_one_length() -> None:
    """Content-Length: 2, 2 (or the header twice with one value) frames a 2-byte body."""
    parser = parse(b"HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\nContent-Length: 2\r\n\r\nok")
    assert (parser.done, parser.take()) == (True, b"ok")


def test_transfer_encoding_overrides_content_length_and_closes() -> None:
    """Both framing headers: chunked wins and the connection is not reused."""
    parser = parse(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nTransfer-Encoding: chunked\r\n\r\n"
                   b"2\r\nok\r\n0\r\n\r\n")
    assert (parser.done, parser.keep_alive, parser.take()) == (True, False, b"ok")


def test_transfer_coding_other_than_chunked_reads_until_close() -> None:
    """A last transfer coding that is not chunked leaves only the connection's end as framing."""
    parser = parse(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n\x1f\x8b", eof=True)
    assert (parser.done, parser.keep_alive, parser.take()) == (True, False, b"\x1f\x8b")


def test_bytes_after_the_response_spoil_the_connection() -> None:
    """Anything past the end of a response (we never pipeline) means: do not reuse."""
    parser = parse(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA")
    assert (parser.done, parser.keep_alive, parser.take()) == (True, False, b"ok")


@pytest.mark.parametrize("raw", [
    b"HELLO THERE\r\n\r\n",
    b"HTTP/1.1 2000 OK\r\n\r\n",
    b"HTTP/1.1 20 OK\r\n\r\n",
    b"HTTP/2 200\r\n\r\n",
    b"ICY 200 OK\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nName : x\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nX: a\rb\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nX: a\0b\r\n\r\n",
    b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 0x10\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nokX\r\n",
])
def test_malformed_responses_are_remote_protocol_errors(raw: bytes) -> None:
    """Garbage status lines, headers, lengths and chunk framing: "malformed response: ..."."""
    with pytest.raises(httpx.RemoteProtocolError, match=r"^malformed response: "):
        parse(raw)


def test_endless_head_is_refused() -> None:
    """A head that never ends is refused once it passes 64 KiB, not buffered forever."""
    parser = ResponseParser()
    parser.feed(b"HTTP/1.1 200 OK\r\n")
    for _ in range(MAX_HEAD_BYTES // 1000):
        parser.feed(b"X-Filler: " + b"f" * 988 + b"\r\n")
    with pytest.raises(httpx.RemoteProtocolError, match="head longer than 64 KiB"):
        parser.feed(b"X-Filler: " + b"f" * 988 + b"\r\n")


def test_endless_chunk_size_line_is_refused() -> None:
    """A chunk-size line without end is refused, not buffered forever."""
    parser = parse(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    with pytest.raises(httpx.RemoteProtocolError, match="chunk framing line"):
        parser.feed(b"1" + b";" * 10000)


@pytest.mark.parametrize(("received", "message"), [
    (b"", "without a response"),
    (b"HTTP/1.1 200 OK\r\nContent-Le", "before the response ended"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n01234", "before the response ended"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
     "before the response ended"),
])
def test_eof_before_the_end_is_a_read_error(received: bytes, message: str) -> None:
    """The server closing before the response is complete is httpx.ReadError."""
    parser = parse(received)
    with pytest.raises(httpx.ReadError, match=message):
        parser.feed_eof()
    assert not parser.keep_alive
