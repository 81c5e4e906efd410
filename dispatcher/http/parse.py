"""HTTP/1.1 response parsing for the transport: bytes in, status, headers and body out.

Pure and incremental (no I/O, no clock): the connection feeds whatever the
socket delivered, split anywhere, and reads back the head once ``head_done``
and the body bytes as they are framed. That keeps every framing rule
testable with plain bytes.

Lenient where servers are sloppy, strict where leniency could misframe a
response (RFC 9112): CRLF or bare LF line ends; obsolete folded header lines
joined with a space; 1xx interim heads skipped (101 refused: we never ask
for an upgrade); the body framed in the RFC's order: none after HEAD, 1xx,
204 and 304; chunked when it is the last transfer coding; any other transfer
coding, or no length at all, read until the server closes; else
Content-Length (equal repeats allowed, differing ones refused). Anything
else raises ``httpx.RemoteProtocolError`` ("malformed response: ..."); the
connection ending before the response does is ``httpx.ReadError``.
"""

from __future__ import annotations

import re

import httpx

MAX_HEAD_BYTES = 64 * 1024  # a status line and headers, and again for trailers
MAX_LINE_BYTES = 8 * 1024   # one chunk-size or trailer line

_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_HEX = re.compile(rb"[0-9A-Fa-f]{1,15}")
_NO_BODY_STATUS = frozenset((204, 304))

# Parser states: where the next byte belongs.
_HEAD, _LENGTH, _CHUNK_SIZE, _CHUNK_DATA, _CHUNK_END, _TRAILER, _UNTIL_CLOSE, _DONE = range(8)


def _malformed(what: str) -> httpx.RemoteProtocolError:
    return httpx.RemoteProtocolError(f"malformed response: {what}")


class ResponseParser:
    """One response to one request; make a new parser for the next request."""

    __slots__ = ("_chunks", "_head_request", "_remaining", "_rest", "_state", "_trailer_bytes",
                 "done", "head_done", "headers", "keep_alive", "pending", "reason", "received",
                 "status", "version")

    def __init__(self, head_request: bool = False) -> None:
        """``head_request``: the request was HEAD, so the response has no body."""
        self.status = 0
        self.reason = b""
        self.version = b"HTTP/1.1"
        self.headers: list[tuple[bytes, bytes]] = []  # as sent: names keep their case
        self.head_done = False   # the final (non-1xx) head is parsed
        self.done = False        # the whole response is parsed
        self.keep_alive = True   # the connection may carry another request once done
        self.received = 0        # bytes fed so far
        self.pending = 0         # body bytes framed and not yet taken
        self._chunks: list[bytes] = []
        self._head_request = head_request
        self._state = _HEAD
        self._remaining = 0      # of the Content-Length body, or of the current chunk
        self._rest = b""         # an incomplete head or framing line, kept for the next feed
        self._trailer_bytes = 0

    def take(self) -> bytes:
        """The body bytes framed since the last call (b"" if none)."""
        chunks = self._chunks
        if not chunks:
            return b""
        self._chunks = []
        self.pending = 0
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def feed(self, data: bytes) -> None:
        """Parse the next bytes from the connection."""
        self.received += len(data)
        if self._rest:
            data, self._rest = self._rest + data, b""
        pos, end = 0, len(data)
        while pos < end:
            state = self._state
            if state in (_LENGTH, _CHUNK_DATA):
                n = min(end - pos, self._remaining)
                self._body(data if n == end else data[pos:pos + n])
                pos += n
                self._remaining -= n
                if not self._remaining:
                    if state == _LENGTH:
                        self._finish()
                    else:
                        self._state = _CHUNK_END
            elif state == _HEAD:
                pos = self._head(data, pos)
            elif state == _UNTIL_CLOSE:
                self._body(data[pos:] if pos else data)
                return
            elif state == _DONE:
                # Bytes after a complete response (we never pipeline): the
                # connection is out of step with the server, never reuse it.
                self.keep_alive = False
                return
            else:
                pos = self._chunk_framing(data, pos)
            if pos < 0:  # an incomplete line, kept in _rest
                return

    def feed_eof(self) -> None:
        """The server closed its side: the end of a read-until-close body, else an error."""
        self.keep_alive = False
        if self._state == _UNTIL_CLOSE:
            self._finish()
        elif not self.done:
            if not self.received:
                raise httpx.ReadError("server closed the connection without a response")
            raise httpx.ReadError("server closed the connection before the response ended")

    def _body(self, piece: bytes) -> None:
        self._chunks.append(piece)
        self.pending += len(piece)

    def _finish(self) -> None:
        self._state = _DONE
        self.done = True

    def _head(self, data: bytes, pos: int) -> int:
        """Parse one head at ``pos``; where the body starts, or -1 if the head is incomplete."""
        end = data.find(b"\r\n\r\n", pos)
        bare = data.find(b"\n\n", pos, end if end >= 0 else len(data))
        if bare >= 0:  # bare LF line ends (or mixed): the earlier terminator wins
            end, after = bare, bare + 2
        elif end >= 0:
            after = end + 4
        else:
            if len(data) - pos > MAX_HEAD_BYTES:
                raise _malformed("head longer than 64 KiB")
            self._rest = data[pos:]
            return -1
        if end - pos > MAX_HEAD_BYTES:
            raise _malformed("head longer than 64 KiB")
        head = data[pos:end]
        lines = head.split(b"\r\n")
        if head.count(b"\n") >= len(lines) or head.count(b"\r") >= len(lines):
            lines = [line.removesuffix(b"\r") for line in head.split(b"\n")]
            if any(b"\r" in line for line in lines):
                raise _malformed("stray CR in the head")
        if b"\0" in head:
            raise _malformed("NUL in the head")
        self._status_line(lines[0])
        if 100 <= self.status < 200:
            if self.status == 101:
                raise _malformed("101 Switching Protocols, but no upgrade was asked for")
            return after  # an interim response (100 Continue): the real one follows
        self._headers(lines)
        return after

    def _status_line(self, line: bytes) -> None:
        version, _, rest = line.partition(b" ")
        if version != b"HTTP/1.1":
            if not (len(version) == 8 and version.startswith(b"HTTP/1.")
                    and version[7:].isdigit()):
                raise _malformed(f"status line {line[:40]!r}")
            self.version = b"HTTP/1.0" if version == b"HTTP/1.0" else b"HTTP/1.1"
        code = rest[:3]
        if len(code) != 3 or not code.isdigit() or rest[3:4] not in (b"", b" "):
            raise _malformed(f"status line {line[:40]!r}")
        self.status = int(code)
        self.reason = rest[4:]

    def _headers(self, lines: list[bytes]) -> None:
        """Header fields, then the framing they imply."""
        headers: list[tuple[bytes, bytes]] = []
        lengths: list[bytes] = []
        codings: list[bytes] = []
        options: list[bytes] = []
        for line in lines[1:]:
            name, colon, value = line.partition(b":")
            if not colon or not _TOKEN.fullmatch(name):
                if line[:1] in (b" ", b"\t") and headers:  # obs-fold: a continued value
                    previous, earlier = headers[-1]
                    headers[-1] = (previous, earlier + b" " + line.strip(b" \t"))
                    continue
                raise _malformed(f"header line {line[:40]!r}")
            value = value.strip(b" \t")
            headers.append((name, value))
            lower = name.lower()
            if lower == b"content-length":
                lengths.append(value)
            elif lower == b"transfer-encoding":
                codings += (c.strip(b" \t").lower() for c in value.split(b","))
            elif lower == b"connection":
                options += (o.strip(b" \t").lower() for o in value.split(b","))
        self.headers = headers
        self.head_done = True
        self._framing(lengths, codings, options)

    def _framing(self, lengths: list[bytes], codings: list[bytes], options: list[bytes]) -> None:
        """Keep-alive, and how the body is delimited (RFC 9112, section 6.3)."""
        if self.version == b"HTTP/1.0":
            self.keep_alive = b"keep-alive" in options
        else:
            self.keep_alive = b"close" not in options
        if self._head_request or self.status in _NO_BODY_STATUS:
            self._finish()
        elif codings:
            if lengths:  # both: a smuggling attempt or a broken proxy; never reuse
                self.keep_alive = False
            if codings[-1] == b"chunked":
                self._state = _CHUNK_SIZE
            else:
                self._state = _UNTIL_CLOSE
                self.keep_alive = False
        elif lengths:
            self._remaining = _content_length(lengths)
            self._state = _LENGTH
            if not self._remaining:
                self._finish()
        else:
            self._state = _UNTIL_CLOSE
            self.keep_alive = False

    def _chunk_framing(self, data: bytes, pos: int) -> int:
        """A chunk-size line, the CRLF after a chunk, or a trailer line; -1 if incomplete."""
        eol = data.find(b"\n", pos)
        if eol < 0:
            if len(data) - pos > MAX_LINE_BYTES:
                raise _malformed("chunk framing line longer than 8 KiB")
            self._rest = data[pos:]
            return -1
        line = data[pos:eol].removesuffix(b"\r")
        if self._state == _CHUNK_END:
            if line:
                raise _malformed("chunk data not followed by CRLF")
            self._state = _CHUNK_SIZE
        elif self._state == _CHUNK_SIZE:
            size = line.partition(b";")[0].strip(b" \t")
            if not _HEX.fullmatch(size):
                raise _malformed(f"chunk size {line[:40]!r}")
            self._remaining = int(size, 16)
            self._state = _CHUNK_DATA if self._remaining else _TRAILER
        elif not line:  # the empty line after the trailers ends the response
            self._finish()
        else:
            self._trailer_bytes += len(line)
            if self._trailer_bytes > MAX_HEAD_BYTES:
                raise _malformed("trailers longer than 64 KiB")
        return eol + 1


def _content_length(values: list[bytes]) -> int:
    """The one length that every Content-Length value (or list element) agrees on."""
    if len(values) == 1 and values[0].isdigit():
        text = values[0]
    else:
        given = {v.strip(b" \t") for value in values for v in value.split(b",")}
        if len(given) != 1:
            raise _malformed(f"conflicting Content-Length values {sorted(given)[:4]!r}")
        text = given.pop()
    if not text.isdigit() or len(text) > 18:
        raise _malformed(f"Content-Length {text[:20]!r}")
    return int(text)
