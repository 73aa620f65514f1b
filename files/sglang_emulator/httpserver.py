"""A small HTTP/1.1 server on asyncio streams: keep-alive, Content-Length bodies, chunked
streaming responses (what uvicorn sends for SSE). Enough for every client SGLang serves."""

from __future__ import annotations

import asyncio
import json
from http import HTTPStatus
from urllib.parse import parse_qs, urlsplit

MAX_HEADER = 1 << 20
MAX_BODY = 64 << 20


class HttpRequest:
    __slots__ = ("body", "headers", "method", "path", "query")

    def __init__(self, method, path, query, headers, body):
        self.method, self.path, self.query, self.headers, self.body = method, path, query, headers, body

    def json(self):
        return json.loads(self.body or b"null")


class Response:
    """Writer for one response on a connection."""

    def __init__(self, writer: asyncio.StreamWriter):
        self.writer = writer
        self.transport = writer.transport
        self.streaming = False

    def send(
        self, status: int, body: bytes | str | dict | list, content_type: str = "application/json", headers: dict | None = None
    ) -> None:
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        elif isinstance(body, str):
            body = body.encode()
        head = [
            f"HTTP/1.1 {status} {HTTPStatus(status).phrase}",
            f"content-type: {content_type}",
            f"content-length: {len(body)}",
            "server: uvicorn",
        ]
        head += [f"{k}: {v}" for k, v in (headers or {}).items()]
        self.writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)

    def start_stream(self, content_type: str = "text/event-stream") -> None:
        self.streaming = True
        self.writer.write(
            (
                f"HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ntransfer-encoding: chunked\r\n"
                "cache-control: no-cache\r\nserver: uvicorn\r\n\r\n"
            ).encode()
        )

    def chunk(self, data: bytes) -> None:
        if self.transport.is_closing():
            raise ConnectionError("client went away")
        self.transport.write(b"%x\r\n%s\r\n" % (len(data), data))

    def end_stream(self) -> None:
        if not self.transport.is_closing():
            self.transport.write(b"0\r\n\r\n")


async def serve_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, dispatch) -> None:
    try:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                return
            lines = head.decode("latin-1").split("\r\n")
            try:
                method, target, version = lines[0].split(" ", 2)
            except ValueError:
                Response(writer).send(400, {"detail": "malformed request line"})
                return
            headers = {}
            for line in lines[1:]:
                if ":" in line:
                    key, _sep, value = line.partition(":")
                    headers[key.strip().lower()] = value.strip()
            length = int(headers.get("content-length") or 0)
            if length > MAX_BODY:
                Response(writer).send(413, {"detail": "request body too large"})
                return
            try:
                body = await reader.readexactly(length) if length else b""
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            url = urlsplit(target)
            request = HttpRequest(method.upper(), url.path, parse_qs(url.query), headers, body)
            response = Response(writer)
            await dispatch(request, response)
            try:
                await writer.drain()
            except ConnectionError:
                return
            if version.upper() != "HTTP/1.1" or headers.get("connection", "").lower() == "close":
                return
    finally:
        writer.close()


async def start(host: str, port: int, dispatch) -> asyncio.AbstractServer:
    async def handler(reader, writer):
        await serve_connection(reader, writer, dispatch)

    return await asyncio.start_server(handler, host, port, limit=MAX_HEADER, reuse_address=True, backlog=1024)
