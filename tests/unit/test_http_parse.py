"""The response parser (llhttp, and our limits): framing, reuse and refusals, from bytes."""

from __future__ import annotations

from typing import Any

import httptools
import httpx
import pytest

from dispatcher.http.parse import MAX_FRAMING_BYTES, MAX_HEAD_BYTES, MAX_INTERIM, ResponseParser


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


SIMPLE = b"HTTP/1.1 201 Created\r\nContent-Length: 5\r\nX-Id: a1\r\n\r\nhello"
CHUNKED = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
           b"5;name=value\r\nhello\r\n1A\r\n" + b"x" * 26 + b"\r\n0\r\nX-Trailer: t\r\n\r\n")
CHUNKED_HEAD = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"


def test_content_length_response_in_any_split() -> None:
    """Status, reason, headers as sent and a Content-Length body, however the bytes arrive."""
    for pieces in every_split(SIMPLE):
        parser = parse(*pieces)
        assert (parser.status, parser.reason, parser.version) == (201, b"Created", b"HTTP/1.1")
        assert parser.headers == [(b"Content-Length", b"5"), (b"X-Id", b"a1")]
        assert (parser.done, parser.keep_alive, parser.take()) == (True, True, b"hello")


def test_chunked_response_in_any_split() -> None:
    """Chunked bodies are joined (extensions and trailers skipped), however the bytes arrive."""
    for pieces in every_split(CHUNKED):
        parser = ResponseParser()
        body = b""
        for piece in pieces:
            parser.feed(piece)
            body += parser.take()
        assert (parser.done, parser.keep_alive, body) == (True, True, b"hello" + b"x" * 26)
        assert parser.headers == [(b"Transfer-Encoding", b"chunked")]


def test_body_is_handed_out_as_it_arrives() -> None:
    """take() returns what was framed since the last call; done only at the end."""
    parser = parse(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nabc")
    assert (parser.head_done, parser.done, parser.pending) == (True, False, 3)
    assert parser.take() == b"abc"
    assert (parser.pending, parser.take()) == (0, b"")
    parser.feed(b"def")
    assert (parser.done, parser.take()) == (True, b"def")


def test_large_reads_are_framed_exactly() -> None:
    """A read far larger than the parser's slices yields the body exactly, and nothing more."""
    body = bytes(range(256)) * 1024
    parser = parse(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    assert (parser.done, parser.keep_alive, parser.take()) == (True, True, body)
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(part), part)
                       for part in (body[:100_000], body[100_000:]))
    parser = parse(CHUNKED_HEAD + chunked + b"0\r\n\r\n")
    assert (parser.done, parser.keep_alive, parser.take()) == (True, True, body)


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


def test_head_response_has_no_body_and_its_connection_is_not_reused() -> None:
    """After HEAD the Content-Length describes a body that is not sent; the parser stops there."""
    parser = parse(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n", head_request=True)
    assert (parser.status, parser.done, parser.take()) == (200, True, b"")
    assert not parser.keep_alive  # where its head ended in the read is not known


def test_interim_responses_are_skipped() -> None:
    """100 Continue and 103 Early Hints come and go; the final response is what counts."""
    parser = parse(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
                   b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    assert (parser.status, parser.reason) == (200, b"OK")
    assert (parser.headers, parser.take()) == ([(b"Content-Length", b"2")], b"ok")


def test_at_most_ten_interim_responses() -> None:
    """Ten interim responses are skipped; the eleventh is refused, not parsed forever."""
    interim = b"HTTP/1.1 100 Continue\r\n\r\n"
    final = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    assert parse(interim * MAX_INTERIM + final).take() == b"ok"
    for pieces in ((interim * (MAX_INTERIM + 1) + final,), (interim,) * (MAX_INTERIM + 1)):
        with pytest.raises(httpx.RemoteProtocolError, match=r"more than 10 interim \(1xx\)"):
            parse(*pieces)


def test_interim_heads_count_towards_the_head_limit() -> None:
    """Large 1xx heads use up the 64 KiB allowed before the final head ends."""
    interim = b"HTTP/1.1 103 Early Hints\r\nLink: " + b"l" * 20_000 + b"\r\n\r\n"
    with pytest.raises(httpx.RemoteProtocolError, match="more than 64 KiB before the head ended"):
        parse(*(interim,) * 4)


def test_interim_response_with_a_body_is_refused() -> None:
    """A 1xx response has no body (RFC 9110 15.2); one that frames a body is malformed."""
    with pytest.raises(httpx.RemoteProtocolError, match=r"interim \(1xx\) response with a body"):
        parse(b"HTTP/1.1 199 Odd\r\nContent-Length: 5\r\n\r\nHTTP/1.1 200 OK\r\n\r\n")


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


def test_http_1_0_chunked_answer_is_read_but_never_reused() -> None:
    """Chunked is not HTTP/1.0: even with keep-alive asked for, the connection is not reused."""
    parser = parse(b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked"
                   b"\r\n\r\n2\r\nok\r\n0\r\n\r\n")
    assert (parser.done, parser.version, parser.take()) == (True, b"HTTP/1.0", b"ok")
    assert not parser.keep_alive


def test_transfer_coding_other_than_chunked_reads_until_close() -> None:
    """A last transfer coding that is not chunked leaves only the connection's end as framing."""
    parser = parse(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n\x1f\x8b", eof=True)
    assert (parser.done, parser.keep_alive, parser.take()) == (True, False, b"\x1f\x8b")


@pytest.mark.parametrize("extra", [b"EXTRA", b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"])
def test_bytes_after_the_response_spoil_the_connection(extra: bytes) -> None:
    """Anything past the end of a response (we never pipeline) means: do not reuse."""
    response = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    for pieces in ((response + extra,), (response, extra)):
        parser = parse(*pieces)
        assert (parser.done, parser.keep_alive, parser.take()) == (True, False, b"ok")


def test_bytes_after_a_closing_response_are_ignored() -> None:
    """After Connection: close llhttp refuses more bytes; the response read stays good."""
    parser = parse(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nokX")
    assert (parser.done, parser.keep_alive, parser.take()) == (True, False, b"ok")


@pytest.mark.parametrize("raw", [
    b"HELLO THERE\r\n\r\n",
    b"HTTP/1.1 2000 OK\r\n\r\n",
    b"HTTP/1.1 20 OK\r\n\r\n",
    b"HTTP/1.1 099 Low\r\n\r\n",
    b"HTTP/2 200\r\n\r\n",
    b"HTTP/2.0 200 OK\r\nContent-Length: 0\r\n\r\n",
    b"HTTP/0.9 200 OK\r\nContent-Length: 0\r\n\r\n",
    b"ICY 200 OK\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nName : x\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nX: a\rb\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nX: a\0b\r\n\r\n",
    b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n",
    b"HTTP/1.1 101 Switching Protocols\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok",
    b"HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\n\r\nok",
    b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 0x10\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nTransfer-Encoding: chunked\r\n\r\n",
    CHUNKED_HEAD + b"zz\r\n",
    CHUNKED_HEAD + b"-1\r\n",
    CHUNKED_HEAD + b"2\r\nokX\r\n",
    CHUNKED_HEAD + b"2\nok\n0\n\n",
    # obs-fold: a framing header continued on a second line, and any other
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip,\r\n chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding:\r\n chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n 0\r\n\r\n0123456789",
    b"HTTP/1.1 200 OK\r\nX-Long: first\r\n  second\r\nContent-Length: 2\r\n\r\nok",
    # bare LF line ends, alone or mixed with CRLF
    b"HTTP/1.1 200 OK\nContent-Length: 2\n\nok",
    b"HTTP/1.1 200 OK\r\nContent-Length: 2\n\r\nok",
])
def test_malformed_responses_are_remote_protocol_errors(raw: bytes) -> None:
    """Garbage status lines, headers, lengths, folds, bare LFs and chunk framing: refused."""
    for pieces in ((raw,), tuple(raw[i:i + 1] for i in range(len(raw)))):
        with pytest.raises(httpx.RemoteProtocolError, match=r"^malformed response: "):
            parse(*pieces)


def test_head_ending_in_lf_crlf_is_refused_at_once() -> None:
    """A head whose last header line ends in a bare LF is refused as it arrives, not waited on."""
    parser = ResponseParser()
    parser.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 2")
    with pytest.raises(httpx.RemoteProtocolError, match="malformed response: missing expected CR"):
        parser.feed(b"\n")


def test_endless_head_is_refused() -> None:
    """A head that never ends is refused once it passes 64 KiB, not buffered forever."""
    parser = ResponseParser()
    parser.feed(b"HTTP/1.1 200 OK\r\n")
    for _ in range(MAX_HEAD_BYTES // 1000):
        parser.feed(b"X-Filler: " + b"f" * 988 + b"\r\n")
    with pytest.raises(httpx.RemoteProtocolError, match="more than 64 KiB before the head ended"):
        parser.feed(b"X-Filler: " + b"f" * 988 + b"\r\n")


def test_long_head_in_one_read_is_refused() -> None:
    """A head over 64 KiB is refused even when it arrives whole in one read."""
    head = b"HTTP/1.1 200 OK\r\n" + b"X-Filler: " + b"f" * 80_000 + b"\r\n\r\n"
    with pytest.raises(httpx.RemoteProtocolError, match="more than 64 KiB before the head ended"):
        parse(head)


def test_head_of_exactly_64_kib_passes_and_one_byte_more_does_not() -> None:
    """The head limit is exact, whether the head comes in one read or with its body."""
    def head(size: int) -> bytes:
        start, end = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Filler: ", b"\r\n\r\n"
        return start + b"f" * (size - len(start) - len(end)) + end
    assert parse(head(MAX_HEAD_BYTES) + b"ok").take() == b"ok"
    assert parse(head(MAX_HEAD_BYTES), b"ok").take() == b"ok"
    with pytest.raises(httpx.RemoteProtocolError, match="more than 64 KiB before the head ended"):
        parse(head(MAX_HEAD_BYTES + 1) + b"ok")


def test_head_dribbled_byte_by_byte_reaches_llhttp_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 60 KiB head fed a byte at a time is parsed with each byte handed to llhttp once."""
    fed: list[int] = []

    class Counting(httptools.HttpResponseParser):
        def feed_data(self, data: Any) -> None:
            fed.append(len(data))
            super().feed_data(data)

    monkeypatch.setattr(httptools, "HttpResponseParser", Counting)
    raw = (b"HTTP/1.1 200 OK\r\n" + b"X-Big: " + b"v" * 30_000 + b"\r\n"
           + b"".join(b"X-%d: %s\r\n" % (i, b"w" * 290) for i in range(100))
           + b"Content-Length: 2\r\n\r\nok")
    parser = parse(*(raw[i:i + 1] for i in range(len(raw))))
    assert (parser.status, parser.take(), len(parser.headers)) == (200, b"ok", 102)
    assert parser.headers[0] == (b"X-Big", b"v" * 30_000)
    assert (len(fed), sum(fed)) == (len(raw), len(raw))


def test_long_chunk_extension_in_one_read_is_refused() -> None:
    """A chunk-size line past the limit is refused whether it comes in one read or many."""
    line = b"1;ext=" + b"e" * (3 * MAX_FRAMING_BYTES) + b"\r\nx\r\n0\r\n\r\n"
    for pieces in ((CHUNKED_HEAD + line,), (CHUNKED_HEAD, line),
                   (CHUNKED_HEAD, *(line[i:i + 100] for i in range(0, len(line), 100)))):
        with pytest.raises(httpx.RemoteProtocolError, match="chunk-size line or trailers longer"):
            parse(*pieces)


def test_chunk_extension_under_the_limit_passes_however_it_arrives() -> None:
    """A chunk-size line of almost 8 KiB passes, in one read, in 100-byte reads or bytewise."""
    line = b"2;ext=" + b"e" * (MAX_FRAMING_BYTES - 100) + b"\r\nok\r\n0\r\n\r\n"
    for pieces in ((CHUNKED_HEAD + line,), (CHUNKED_HEAD, *(line[i:i + 100]
                                                            for i in range(0, len(line), 100))),
                   (CHUNKED_HEAD, *(line[i:i + 1] for i in range(len(line))))):
        parser = parse(*pieces)
        assert (parser.done, parser.take()) == (True, b"ok")


def test_long_chunk_extension_hidden_among_small_chunks_is_refused() -> None:
    """Many small chunks in the same read earn no allowance for one long extension."""
    small = b"1\r\nx\r\n" * 2000
    long = b"1;ext=" + b"e" * (3 * MAX_FRAMING_BYTES) + b"\r\nx\r\n"
    with pytest.raises(httpx.RemoteProtocolError, match="chunk-size line or trailers longer"):
        parse(CHUNKED_HEAD + small + long + small + b"0\r\n\r\n")


def test_ordinary_chunk_extensions_and_trailers_pass() -> None:
    """Extensions and trailers of a few KiB, on many chunks, are within the limit."""
    chunk = b"4;name=" + b"v" * 2000 + b"\r\ndata\r\n"
    trailers = b"".join(b"X-T%d: %s\r\n" % (i, b"t" * 500) for i in range(8))
    parser = parse(CHUNKED_HEAD + chunk * 50 + b"0\r\n" + trailers + b"\r\n")
    assert (parser.done, parser.keep_alive, parser.take()) == (True, True, b"data" * 50)


def test_endless_trailers_are_refused() -> None:
    """Trailers that never end are refused once they pass the framing limit."""
    parser = parse(CHUNKED_HEAD + b"2\r\nok\r\n0\r\n")
    trailer = b"X-Trailer: " + b"t" * 1000 + b"\r\n"
    for _ in range(MAX_FRAMING_BYTES // len(trailer)):
        parser.feed(trailer)
    with pytest.raises(httpx.RemoteProtocolError, match="chunk-size line or trailers longer"):
        parser.feed(trailer)


@pytest.mark.parametrize(("received", "message"), [
    (b"", "without a response"),
    (b"HTTP/1.1 200 OK\r\nContent-Le", "before the response ended"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n01234", "before the response ended"),
    (CHUNKED_HEAD + b"5\r\nhello\r\n", "before the response ended"),
    (CHUNKED_HEAD, "before the response ended"),
    (b"HTTP/1.1 100 Continue\r\n\r\n", "before the response ended"),
])
def test_eof_before_the_end_is_a_read_error(received: bytes, message: str) -> None:
    """The server closing before the response is complete is httpx.ReadError."""
    parser = parse(received)
    with pytest.raises(httpx.ReadError, match=message):
        parser.feed_eof()
    assert not parser.keep_alive
