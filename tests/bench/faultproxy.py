"""A fault-injecting TCP proxy for the sweep tests: a real process with real sockets between
the benchmark client and the emulator (the emulator has no such faults).

    python faultproxy.py --port P --target-port T --mode {malformed,stall,fail} --after N

The first N generation requests (POST to /v1/chat/completions, /v1/completions, /generate)
pass untouched; every later one is
  malformed: forwarded, but the first ``data: {`` of its response becomes ``data: #`` (same
             length, so the chunked framing stays valid and only the JSON is broken);
  stall:     forwarded, and its response is passed on up to the first event, then held
             (the connection stays open, nothing more arrives);
  fail:      not forwarded; answered 500 with an SGLang-style JSON error.
Everything else (probe, /metrics, /flush_cache) passes untouched. Loopback only.
"""
from __future__ import annotations

import argparse
import asyncio
import json

GENERATION = (b"POST /v1/chat/completions", b"POST /v1/completions", b"POST /generate")


class Proxy:
    def __init__(self, target_port: int, mode: str, after: int):
        self.target_port = target_port
        self.mode = mode
        self.after = after
        self.seen = 0

    async def handle(self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        try:
            u_reader, u_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            c_writer.close()
            return
        state = {"fault": False, "patched": False, "held": False}
        up = asyncio.ensure_future(self.upstream(u_reader, c_writer, state))
        try:
            while True:
                data = await c_reader.read(1 << 16)
                if not data:
                    break
                if data.startswith(GENERATION):
                    self.seen += 1
                    fault = self.seen > self.after
                    state.update(fault=fault, patched=False, held=False)
                    if fault and self.mode == "fail":
                        body = json.dumps({"object": "error", "message": "emulated internal failure",
                                           "type": "InternalServerError", "param": None, "code": 500}).encode()
                        c_writer.write(b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\n"
                                       b"content-length: %d\r\n\r\n%s" % (len(body), body))
                        await c_writer.drain()
                        continue
                u_writer.write(data)
                await u_writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            up.cancel()
            u_writer.close()
            c_writer.close()

    async def upstream(self, u_reader, c_writer, state) -> None:
        try:
            while True:
                data = await u_reader.read(1 << 16)
                if not data:
                    break
                if state["fault"] and self.mode == "malformed" and not state["patched"] and b"data: {" in data:
                    data = data.replace(b"data: {", b"data: #", 1)
                    state["patched"] = True
                if state["fault"] and self.mode == "stall":
                    if state["held"]:
                        continue
                    cut = data.find(b"\n\n")
                    if cut >= 0 and b"data: " in data[:cut]:
                        data = data[:cut + 2]
                        state["held"] = True
                c_writer.write(data)
                await c_writer.drain()
        except (ConnectionError, OSError, asyncio.CancelledError):
            pass


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--target-port", type=int, required=True)
    p.add_argument("--mode", choices=("malformed", "stall", "fail"), required=True)
    p.add_argument("--after", type=int, default=0)
    args = p.parse_args()
    proxy = Proxy(args.target_port, args.mode, args.after)
    server = await asyncio.start_server(proxy.handle, "127.0.0.1", args.port)
    print("READY", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
