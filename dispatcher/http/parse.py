"""HTTP/1.1 responses, read by llhttp through httptools: bytes in, status, headers, body out.

llhttp is Node.js's HTTP parser, generated from a state machine and fuzzed
continuously; every byte of an answer goes through it, once, in the order it
arrived. It is strict by default and none of its leniencies is switched on:
bare LF line ends, obsolete folded header lines (a continued
``Transfer-Encoding`` or ``Content-Length`` included), both framing headers
at once, repeated or malformed ``Content-Length``, bad chunk framing and
bytes after ``Connection: close`` are refused, where a lenient parser would
guess at the framing.

This adapter keeps only what llhttp cannot know, because it depends on what
we asked and what we can afford:

- limits: at most ``MAX_HEAD_BYTES`` before the final head has ended
  (interim heads included), at most ``MAX_INTERIM`` interim (1xx)
  responses, and at most ``MAX_FRAMING_BYTES`` of chunk framing (a chunk-size
  line with its extensions, or the trailers) counted after the slice in
  which the last chunk began. Input is handed to llhttp in slices of at
  most ``_SLICE`` bytes and checked after each, so the limits hold however
  large or small the reads are: no framing line longer than three slices
  (24 KiB) passes;
- what the request implies: the answer to HEAD ends with its head, 101 is
  refused (we never ask for an upgrade), and only HTTP/1.0 and HTTP/1.1;
- reuse: llhttp's keep-alive verdict, except that an HTTP/1.0 answer with
  ``Transfer-Encoding`` (chunked is not HTTP/1.0: faulty framing, RFC 9112
  section 6.1), an answer to HEAD, and one followed by stray bytes are
  never reused; the final head's ``Keep-Alive`` header is kept as it came
  (``keep_alive_hint``) for the pool, which reads its ``timeout`` and ``max``;
- the connection's end: httptools cannot tell llhttp about EOF, so a body
  framed by the connection's end (no length, no chunking) ends here.

Errors: ``httpx.RemoteProtocolError`` ("malformed response: ...") for
anything llhttp or a limit refuses; ``httpx.ReadError`` when the server
closes before the response has ended.
"""

from __future__ import annotations

import httptools
import httpx

MAX_HEAD_BYTES = 64 * 1024    # everything before the final head ends, 1xx heads included
MAX_INTERIM = 10              # interim (1xx) responses before the final one
MAX_FRAMING_BYTES = 8 * 1024  # chunk framing (a size line and its extensions, or trailers)
_SLICE = 8 * 1024             # bytes handed to llhttp between two checks of the limits


class _Stop(Exception):
    """Raised in a callback to stop llhttp: the response we wanted has ended."""


def _malformed(what: str) -> httpx.RemoteProtocolError:
    return httpx.RemoteProtocolError(f"malformed response: {what}")


class ResponseParser:
    """One response to one request; make a new parser for the next request.

    The ``on_*`` methods are llhttp's callbacks, called from inside ``feed``.
    """

    __slots__ = ("_body_bytes", "_chunked", "_chunks", "_framing", "_has_length",
                 "_has_transfer_coding", "_head_request", "_interim", "_llhttp", "_new_chunk",
                 "_reason", "done", "head_done", "headers", "keep_alive", "keep_alive_hint",
                 "pending", "reason", "received", "status", "version")

    def __init__(self, head_request: bool = False) -> None:
        """``head_request``: the request was HEAD, so the response has no body."""
        self.status = 0
        self.reason = b""
        self.version = b"HTTP/1.1"
        self.headers: list[tuple[bytes, bytes]] = []  # as sent: names keep their case
        self.head_done = False   # the final (non-1xx) head is parsed
        self.done = False        # the whole response is parsed
        self.keep_alive = True   # the connection may carry another request once done
        self.keep_alive_hint: bytes | None = None  # the final head's Keep-Alive value, if any
        self.received = 0        # bytes fed so far
        self.pending = 0         # body bytes framed and not yet taken
        self._chunks: list[bytes] = []
        self._head_request = head_request
        self._reason: list[bytes] = []
        self._interim = 0                 # 1xx heads so far
        self._body_bytes = 0
        self._has_length = False          # Content-Length in the final head
        self._has_transfer_coding = False  # Transfer-Encoding in the final head
        self._chunked = False             # llhttp has read a chunk-size line
        self._new_chunk = False           # ... in the slice being fed
        self._framing = 0                 # chunk framing bytes since the last chunk began
        # Dropped once the response ends: it holds our callbacks, and we it.
        self._llhttp: httptools.HttpResponseParser | None = httptools.HttpResponseParser(self)

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
        if self._llhttp is None:
            # Bytes after a complete response (we never pipeline), or after an
            # error: the connection is out of step with the server.
            self.received += len(data)
            self.keep_alive = False
            return
        if len(data) <= _SLICE:
            self._feed(data)
            return
        view = memoryview(data)
        for start in range(0, len(data), _SLICE):
            self._feed(view[start:start + _SLICE])
            if self._llhttp is None:
                return

    def feed_eof(self) -> None:
        """The server closed its side: the end of a body framed by it, else an error."""
        self.keep_alive = False
        if self.done:
            return
        self._llhttp = None
        if self.head_done and self._ends_with_connection():
            self.done = True
            return
        if not self.received:
            raise httpx.ReadError("server closed the connection without a response")
        raise httpx.ReadError("server closed the connection before the response ended")

    # -- llhttp's callbacks ----------------------------------------------------

    def on_message_begin(self) -> None:
        if self.done:  # a second response, unasked for
            self.keep_alive = False
            raise _Stop
        self._reason = []
        self.headers = []
        self._has_length = self._has_transfer_coding = False
        self.keep_alive_hint = None

    def on_status(self, piece: bytes) -> None:
        self._reason.append(piece)

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.head_done:
            return  # a trailer: counted as framing, not kept
        self.headers.append((name, value))
        lower = name.lower()
        if lower == b"content-length":
            self._has_length = True
        elif lower == b"transfer-encoding":
            self._has_transfer_coding = True
        elif lower == b"keep-alive":
            self.keep_alive_hint = value

    def on_headers_complete(self) -> None:
        llhttp = self._llhttp
        assert llhttp is not None
        status = llhttp.get_status_code()
        version = llhttp.get_http_version()
        if version not in ("1.1", "1.0"):
            raise _malformed(f"HTTP/{version} is not HTTP/1.x")
        if status < 100:
            raise _malformed(f"status {status:03d}")
        if status < 200:
            if status == 101:
                raise _malformed("101 Switching Protocols, but no upgrade was asked for")
            self._interim += 1
            if self._interim > MAX_INTERIM:
                raise _malformed(f"more than {MAX_INTERIM} interim (1xx) responses")
            return
        self.status = status
        self.reason = b"".join(self._reason)
        self.head_done = True
        if version == "1.0":
            self.version = b"HTTP/1.0"
            self.keep_alive = llhttp.should_keep_alive() and not self._has_transfer_coding
        else:
            self.keep_alive = llhttp.should_keep_alive()
        if self._head_request:
            # llhttp would read the body the headers describe; after HEAD
            # there is none. Where the head ended in this read is not known,
            # so whatever follows cannot be told from garbage: no reuse.
            self.keep_alive = False
            self._end()
            raise _Stop

    def on_body(self, piece: bytes) -> None:
        if not self.head_done:
            raise _malformed("an interim (1xx) response with a body")
        self._chunks.append(piece)
        self.pending += len(piece)
        self._body_bytes += len(piece)

    def on_chunk_header(self) -> None:
        self._chunked = self._new_chunk = True

    def on_message_complete(self) -> None:
        if not self.head_done:
            return  # an interim response ended; the final one follows
        llhttp = self._llhttp
        assert llhttp is not None
        self.keep_alive = self.keep_alive and llhttp.should_keep_alive()
        self._end()

    # -- the limits, and the end -------------------------------------------------

    def _feed(self, piece: bytes | memoryview) -> None:
        """Hand one slice to llhttp, but no byte past the head limit before the head ends.

        A head of exactly ``MAX_HEAD_BYTES`` passes; one byte more does not.
        """
        room = MAX_HEAD_BYTES - self.received
        if self.head_done or len(piece) <= room:
            self._parse(piece)
            return
        if room > 0:
            self._parse(piece[:room])
        if not self.head_done:
            self._llhttp = None
            raise _malformed(f"more than {MAX_HEAD_BYTES // 1024} KiB before the head ended")
        if self._llhttp is not None:
            self._parse(piece[room:])

    def _parse(self, piece: bytes | memoryview) -> None:
        """llhttp reads ``piece``; its errors become ours; then the framing limit."""
        llhttp = self._llhttp
        assert llhttp is not None
        head_was_done = self.head_done
        body_before = self._body_bytes
        self.received += len(piece)
        try:
            llhttp.feed_data(piece)
        except httptools.HttpParserCallbackError as exc:
            cause = exc.__context__
            if not isinstance(cause, _Stop):
                self._llhttp = None
                raise (cause or _malformed(str(exc))) from None
            return
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            self._llhttp = None
            if self.done:  # llhttp refusing bytes after the end, e.g. after Connection: close
                self.keep_alive = False
                return
            text = str(exc) or type(exc).__name__
            raise _malformed(text[:1].lower() + text[1:]) from None
        if self.head_done and not self.done:
            framing = len(piece) - (self._body_bytes - body_before) if head_was_done else 0
            self._count_framing(framing)

    def _count_framing(self, framing: int) -> None:
        """What was not body in a slice was chunk framing (or trailers): keep it in bounds.

        A slice in which a chunk began starts the count again (what followed
        that chunk's start in it is not known), so no framing line passes
        ``MAX_FRAMING_BYTES`` by more than two slices, whatever the reads.
        """
        if self._new_chunk:
            self._new_chunk = False
            self._framing = 0
            return
        self._framing += framing
        if self._framing > MAX_FRAMING_BYTES:
            self._llhttp = None
            raise _malformed(f"chunk-size line or trailers longer than"
                             f" {MAX_FRAMING_BYTES // 1024} KiB")

    def _ends_with_connection(self) -> bool:
        """Whether llhttp framed this body by the connection's end (RFC 9112 section 6.3).

        No Content-Length and no Transfer-Encoding; or a Transfer-Encoding
        whose last coding is not chunked, which shows as body bytes without
        a chunk-size line before them.
        """
        if self._has_length or self._chunked:
            return False
        return not self._has_transfer_coding or self._body_bytes > 0

    def _end(self) -> None:
        self.done = True
        self._llhttp = None  # nothing more to parse; breaks the cycle through our callbacks
