# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""The response side of the transport: HTTP/1.1 framing (status line, headers, Content-Length,
chunked transfer coding) and server-sent events, for one keep-alive connection per stream.

``ResponseReader`` is a mixin of ``worker.Worker``: it reads what the worker's epoll loop
received and hands each complete event to the API's handler; endings go back to the worker
(``_fail``, ``_finish``, ``_retry_fresh``, ``_close``).
"""
from __future__ import annotations

import json

_RAW_DECODE = json.JSONDecoder().raw_decode

# Stream phases
IDLE, CONNECTING, SENDING, HEAD, BODY = range(5)


def json_or_none(data: bytes):
    try:
        return json.loads(data)
    except ValueError:
        return None


class Stream:
    """One stream: its connection, the request in flight and what is left of the last read."""

    __slots__ = ("body_done", "chunked", "clen", "crem", "dec", "errbody", "fails", "fd", "got", "keepalive", "out",
                 "phase", "raw", "req", "retried", "sid", "sock", "sse", "trace", "turned")

    def __init__(self, sid: int):
        self.sid = sid
        self.sock = None
        self.fd = -1
        self.phase = IDLE
        self.req = None
        self.fails = 0
        self.trace = None
        self.turned = False
        self._reset()

    def _reset(self) -> None:
        self.out = b""
        self.raw = b""
        self.sse = ""
        self.errbody = b""
        self.dec = b""  # an incomplete UTF-8 sequence at the end of the last read
        self.chunked = False
        self.clen = -1
        self.crem = 0
        self.body_done = False
        self.keepalive = True
        self.got = False
        self.retried = False


class ResponseReader:
    """Framing and events of the responses (a mixin of Worker; see the module's docstring)."""

    def _feed(self, st: Stream, data: bytes, t: float) -> None:
        req = st.req
        if st.phase == BODY and st.chunked and req is not None and req.status == 200:  # the common case
            data = self._dechunk(st, data)
            if data:
                self._events(st, data, t)
            if st.body_done and st.req is not None:
                self._body_end(st, t)
            return
        st.got = True
        if st.phase == HEAD:
            buf = st.raw + data if st.raw else data
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > 65536:
                    self._fail(st, "malformed", "response headers larger than 64 KiB")
                else:
                    st.raw = buf
                return
            if not self._head(st, buf[:end]):
                return
            data = buf[end + 4:]
            st.raw = b""
            st.phase = BODY
            if not data:
                return
        if st.req is None:
            return
        if st.chunked:
            data = self._dechunk(st, data)
            if data is None:
                return
        elif st.clen >= 0:
            if len(data) >= st.clen:
                data = data[:st.clen]
                st.clen = 0
                st.body_done = True
            else:
                st.clen -= len(data)
        req = st.req
        if req.status != 200:
            st.errbody += data
            if st.body_done:
                self._http_error(st)
            return
        if data:
            self._events(st, data, t)
        if st.body_done and st.req is not None:
            self._body_end(st, t)

    def _head(self, st: Stream, head: bytes) -> bool:
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        try:
            status = int(parts[1])
            version = parts[0].upper()
        except (IndexError, ValueError):
            self._fail(st, "malformed", f"not an HTTP status line: {lines[0][:80]!r}")
            return False
        headers = {}
        for line in lines[1:]:
            name, unused, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip().lower()
        st.req.status = status
        st.chunked = b"chunked" in headers.get(b"transfer-encoding", b"")
        if not st.chunked and b"content-length" in headers:
            try:
                st.clen = int(headers[b"content-length"])
            except ValueError:
                self._fail(st, "malformed", "bad Content-Length")
                return False
            if st.clen == 0:
                st.body_done = True
        conn = headers.get(b"connection", b"")
        st.keepalive = (version == b"HTTP/1.1" and b"close" not in conn) or b"keep-alive" in conn
        if status == 200:
            ctype = headers.get(b"content-type", b"")
            if b"event-stream" not in ctype:
                self._fail(st, "malformed", f"expected an event stream, got Content-Type {ctype.decode()!r} "
                                            "(does the server ignore stream=true?)")
                return False
        elif st.body_done:
            self._http_error(st)
            return False
        return True

    def _http_error(self, st: Stream) -> None:
        status = st.req.status
        text = st.errbody[:300].decode("utf-8", "replace").strip()
        obj = json_or_none(st.errbody)
        if isinstance(obj, dict):
            detail = obj.get("message") or obj.get("detail") or obj.get("error")
            if isinstance(detail, dict):
                detail = detail.get("message") or detail
            if detail:
                text = str(detail)[:300]
        kind = f"http_{status}" if status in (401, 403, 404) else ("http_5xx" if status >= 500 else "http_4xx")
        keep = st.keepalive and st.body_done
        self._fail(st, kind, f"HTTP {status}: {text}", keep=keep)

    def _dechunk(self, st: Stream, data: bytes):
        """The body bytes in ``data`` (chunked transfer coding); None after a framing error."""
        buf = st.raw + data if st.raw else data
        n = len(buf)
        pos = 0
        out = []
        rem = st.crem  # >0: bytes left of a chunk; 0: a size line next; -2: its CRLF next; -3: trailers
        if rem > 0:
            take = rem if rem < n else n
            out.append(buf[:take])
            pos = take
            rem -= take
            if rem == 0:
                rem = -2
        if rem == -2:
            if n - pos < 2:
                st.raw, st.crem = buf[pos:], rem
                return b"".join(out)
            if buf[pos:pos + 2] != b"\r\n":
                self._fail(st, "malformed", "chunked encoding: no CRLF after a chunk")
                return None
            pos += 2
            rem = 0
        find = buf.find
        while rem == 0:
            e = find(b"\r\n", pos)
            if e < 0:
                if n - pos > 64:
                    self._fail(st, "malformed", "chunked encoding: chunk size line too long")
                    return None
                break
            try:
                size = int(buf[pos:e], 16)
            except ValueError:
                try:  # a chunk extension: "1a;name=value"
                    size = int(buf[pos:e].split(b";", 1)[0], 16)
                except ValueError:
                    self._fail(st, "malformed", f"chunked encoding: bad chunk size {buf[pos:e][:20]!r}")
                    return None
            begin = e + 2
            if size == 0:
                pos = begin
                rem = -3
                break
            stop = begin + size
            if stop + 2 <= n:  # the whole chunk and its CRLF are here: the common case
                if buf[stop:stop + 2] != b"\r\n":
                    self._fail(st, "malformed", "chunked encoding: no CRLF after a chunk")
                    return None
                out.append(buf[begin:stop])
                pos = stop + 2
            elif stop <= n:
                out.append(buf[begin:stop])
                pos = stop
                rem = -2
            else:
                if begin < n:
                    out.append(buf[begin:])
                rem = size - max(0, n - begin)
                pos = n
        while rem == -3:  # trailers, then the empty line that ends the body
            e = find(b"\r\n", pos)
            if e < 0:
                break
            if e == pos:
                st.body_done = True
                pos += 2
                rem = 0
                break
            pos = e + 2
        st.crem = rem
        st.raw = buf[pos:] if pos < n else b""
        if len(out) == 1:
            return out[0]
        return b"".join(out)

    def _events(self, st: Stream, data: bytes, t: float) -> None:
        """Handle every complete server-sent event; keep the rest for the next read."""
        if st.dec:
            data = st.dec + data
            st.dec = b""
        try:
            text = data.decode()
        except UnicodeDecodeError as exc:
            if exc.reason == "unexpected end of data":  # a character split between two reads
                st.dec = data[exc.start:]
                text = data[:exc.start].decode(errors="replace")
            else:
                text = data.decode(errors="replace")
        sse = st.sse + text if st.sse else text
        if "\r" in sse:
            sse = sse.replace("\r\n", "\n")
        start = 0
        find = sse.find
        startswith = sse.startswith
        raw_decode = _RAW_DECODE
        handle = self.handle
        fast = self.fast
        trace = st.trace
        while True:
            e = find("\n\n", start)
            if e < 0:
                break
            obj = None
            if startswith("data: {", start) and find("\n", start, e) < 0:
                if trace is not None and len(trace) < self.trace_n:
                    trace.append((t, sse[start + 6:e]))
                if fast is not None and sse[e - 1] == "}" and fast(st.req, sse, start + 6, e, t):
                    start = e + 2
                    continue
                try:  # the JSON straight out of the buffer, no copy
                    obj, end = raw_decode(sse, start + 6)
                except ValueError:
                    obj = None
                else:
                    if end != e and sse[end:e].strip():
                        obj = None
            if obj is None:
                payload = _sse_data(sse[start:e])
                if payload is None:
                    start = e + 2
                    continue
                if payload is False:
                    self._fail(st, "malformed", f"not a server-sent event: {sse[start:e][:120]!r}")
                    return
                if payload == "[DONE]":
                    start = e + 2
                    req = st.req
                    req.done = True
                    req.end = t
                    continue
                try:
                    obj = json.loads(payload)
                except ValueError as exc:
                    self._fail(st, "malformed", f"event data is not JSON ({exc}): {payload[:120]!r}")
                    return
                if not isinstance(obj, dict):
                    self._fail(st, "malformed", f"event data is not a JSON object: {payload[:120]!r}")
                    return
            start = e + 2
            if handle(st.req, obj, t) is False:
                err = obj.get("error", obj)
                msg = err.get("message") if isinstance(err, dict) else err
                self._fail(st, "server_error", str(msg)[:300])
                return
        st.sse = sse[start:] if start < len(sse) else ""

    def _body_end(self, st: Stream, t: float) -> None:
        req = st.req
        if req.done or req.finish:
            if req.end is None:
                req.end = t
            self._finish(st, True)
        else:
            self._fail(st, "incomplete", f"the response ended after {sum(req.ks)} of {req.expect} tokens "
                                         "without [DONE] or a finish reason", keep=st.keepalive)

    def _eof(self, st: Stream, t: float) -> None:
        req = st.req
        if req is None:
            self._close(st)
            return
        if st.phase == BODY and not st.chunked and st.clen < 0:
            st.body_done = True
            st.keepalive = False
            if req.status == 200:
                self._body_end(st, t)
            else:
                self._http_error(st)
            return
        if not st.got and not st.retried:
            self._retry_fresh(st)
            return
        self._fail(st, "disconnected", f"the server closed the connection after {sum(req.ks)} of "
                                       f"{req.expect} tokens")


def _sse_data(event: str):
    """The data of one event (None: no data, a comment or keep-alive; False: not SSE)."""
    data = []
    for line in event.split("\n"):
        if not line or line[0] == ":":
            continue
        field, unused, value = line.partition(":")
        if field == "data":
            data.append(value[1:] if value[:1] == " " else value)
        elif field in ("event", "id", "retry"):
            continue
        else:
            return False
    if not data:
        return None
    return "\n".join(data)
