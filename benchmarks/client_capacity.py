"""Client capacity: how many streamed chunks the benchmark client consumes per CPU core, and
how late it stamps them, side by side with a reference loop written the way SGLang's
bench_serving does it (aiohttp, one asyncio process, 10 MB read buffer, json.loads and
time.perf_counter per chunk). Prints figures; asserts nothing.

    .venv/bin/python benchmarks/client_capacity.py [--concurrency 256] [--window-s 5]

Two sources, each in its own process pinned to its own core (os.sched_setaffinity), each
client measured in its own process pinned to another core, one after the other:
  A. zero delay, never the limit: an epoll server in this file that answers each request with
     a pre-rendered response (SGLang-shaped chat chunks, one per HTTP chunk, one token each,
     then the finish, usage and [DONE] events), the whole body in one write. The client's
     chunks per second and its CPU time over the same window; the source's own CPU share is
     printed beside them (well below 100 %: the client, not the source, sets the pace).
  B. a stream server in this file that sends SGLang-shaped chat chunks, one per write, paced
     on an absolute timeline (--paced-rate chunks/s over all streams, below both clients'
     capacity, so nothing queues), each stamped with its send time on the monotonic clock
     (``created``); the client's stamp minus that is its timestamp error (the loopback hop
     itself is a few microseconds).
chunks per CPU-second = chunks consumed in the window / the client's CPU seconds in it; the
figure to hold: specbench at >= 2x aiohttp on source A (median of the rounds).
Loopback only. Needs aiohttp (requirements-dev.txt) for the reference.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))

import specbench_client as sc  # noqa: E402


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def quantiles(values: list[float]) -> dict:
    if not values:
        return {"p50": None, "p99": None}
    ordered = sorted(values)
    return {"p50": sc.percentile(ordered, 50), "p99": sc.percentile(ordered, 99)}


def pin(cpu: int | None) -> None:
    """Run this process on core ``cpu`` only (None: leave it)."""
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})


def process_cpu_seconds(pid: int) -> float:
    """utime + stime of process ``pid`` (all its threads), from /proc."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------------------------------
# A: a zero-delay source, pre-rendered responses, one write each
# ---------------------------------------------------------------------------------------------
RESPONSE_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
MAX_TOKENS = re.compile(rb'"max_tokens":\s*(\d+)')


def render_response(tokens: int) -> bytes:
    """The whole response to a chat request for ``tokens`` tokens: each event its own HTTP chunk."""
    events = [b"data: " + (CHUNK % 0.0).encode() + b"\n\n"] * tokens
    events.append(b'data: {"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},'
                  b'"finish_reason":"length"}]}\n\n')
    events.append(b'data: {"id":"x","choices":[],"usage":{"prompt_tokens":4,"completion_tokens":%d}}\n\n' % tokens)
    events.append(b"data: [DONE]\n\n")
    return RESPONSE_HEAD + b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n"


def serve_blast(port: int) -> None:
    """One epoll loop: read a request, answer it with its pre-rendered response in one send
    (the rest, if the socket buffer was full, as soon as it drains)."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(4096)
    listener.setblocking(False)
    ep = select.epoll()
    ep.register(listener.fileno(), select.EPOLLIN)
    conns: dict[int, list] = {}  # fd -> [socket, bytes read so far, unsent rest or None]
    rendered: dict[int, bytes] = {}
    print("READY", flush=True)

    def close(fd: int) -> None:
        ep.unregister(fd)
        conns.pop(fd)[0].close()

    while True:
        for fd, event in ep.poll():
            if fd == listener.fileno():
                while True:
                    try:
                        sock, unused_addr = listener.accept()
                    except BlockingIOError:
                        break
                    sock.setblocking(False)
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    conns[sock.fileno()] = [sock, b"", None]
                    ep.register(sock.fileno(), select.EPOLLIN)
                continue
            conn = conns[fd]
            sock = conn[0]
            if event & select.EPOLLOUT and conn[2] is not None:
                try:
                    sent = sock.send(conn[2])
                except OSError:
                    close(fd)
                    continue
                conn[2] = conn[2][sent:] if sent < len(conn[2]) else None
                if conn[2] is None:
                    ep.modify(fd, select.EPOLLIN)
            if not event & (select.EPOLLIN | select.EPOLLHUP | select.EPOLLERR):
                continue
            try:
                data = sock.recv(65536)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                close(fd)
                continue
            buf = conn[1] + data
            while True:
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    break
                length = int(buf[:end].lower().split(b"content-length:")[1].split(b"\r\n")[0])
                if len(buf) < end + 4 + length:
                    break
                body, buf = buf[end + 4:end + 4 + length], buf[end + 4 + length:]
                match = MAX_TOKENS.search(body)
                tokens = int(match.group(1)) if match else 16
                response = rendered.get(tokens) or rendered.setdefault(tokens, render_response(tokens))
                try:
                    sent = sock.send(response)
                except BlockingIOError:
                    sent = 0
                if sent < len(response):
                    conn[2] = memoryview(response)[sent:]
                    ep.modify(fd, select.EPOLLIN | select.EPOLLOUT)
            conn[1] = buf


# ---------------------------------------------------------------------------------------------
# B: a paced stream server with send stamps
# ---------------------------------------------------------------------------------------------
PACED_RATE = {"per_stream": 40.0}
CHUNK = ('{"id":"x","object":"chat.completion.chunk","created":%.7f,"model":"m","choices":[{"index":0,'
         '"delta":{"content":" word"},"logprobs":null,"finish_reason":null}],"usage":null}')


async def stream_handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            body = json.loads(await reader.readexactly(length))
            tokens = int(body.get("max_tokens", 16))
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
            interval = 1.0 / PACED_RATE["per_stream"]
            next_t = time.monotonic()
            for _dummy in range(tokens):
                if writer.is_closing():
                    return
                next_t += interval
                delay = next_t - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                now = time.monotonic()
                event = b"data: " + (CHUNK % now).encode() + b"\n\n"
                writer.write(b"%x\r\n%s\r\n" % (len(event), event))
            await writer.drain()
            tail = (b'data: {"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},'
                    b'"finish_reason":"length"}]}\n\n')
            usage = b'data: {"id":"x","choices":[],"usage":{"prompt_tokens":4,"completion_tokens":%d}}\n\n' % tokens
            for event in (tail, usage, b"data: [DONE]\n\n"):
                writer.write(b"%x\r\n%s\r\n" % (len(event), event))
            writer.write(b"0\r\n\r\n")
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, IndexError, ValueError):
        pass
    finally:
        writer.close()


def serve_stream(port: int, per_stream: float) -> None:
    PACED_RATE["per_stream"] = per_stream

    async def main():
        server = await asyncio.start_server(stream_handler, "127.0.0.1", port, backlog=1024)
        print("READY", flush=True)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


# ---------------------------------------------------------------------------------------------
# The reference: bench_serving's request loop (async_request_openai_chat_completions)
# ---------------------------------------------------------------------------------------------
def run_reference(base_url: str, concurrency: int, output_len: int, warmup: float, window: float,
                  stamped: bool) -> dict:
    import aiohttp

    url = base_url + "/v1/chat/completions"
    state = {"chunks": 0, "errors": [], "ws": 0.0, "we": 0.0}

    async def one_stream(session: aiohttp.ClientSession, index: int, stop_at: float) -> None:
        while time.perf_counter() < stop_at:
            payload = {"model": "m", "messages": [{"role": "user", "content": f"prompt {index}"}],
                       "max_tokens": output_len, "temperature": 0.0, "ignore_eos": True, "stream": True,
                       "stream_options": {"include_usage": True}}
            generated_text = ""
            ttft = 0.0
            st = time.perf_counter()
            most_recent_timestamp = st
            itl = []
            async with session.post(url=url, json=payload) as response:
                if response.status != 200:
                    state["errors"].append(response.status)
                    return
                async for chunk_bytes in response.content:
                    chunk_bytes = chunk_bytes.strip()  # noqa: PLW2901 - as bench_serving writes it
                    if not chunk_bytes:
                        continue
                    chunk = chunk_bytes.decode("utf-8").removeprefix("data: ")
                    if chunk == "[DONE]":
                        continue
                    data = json.loads(chunk)
                    if data["choices"] and data["choices"][0]["delta"].get("content"):
                        timestamp = time.perf_counter()
                        if ttft == 0.0:
                            ttft = timestamp - st
                        else:
                            itl.append(timestamp - most_recent_timestamp)
                        most_recent_timestamp = timestamp
                        generated_text += data["choices"][0]["delta"]["content"]
                        if state["ws"] <= timestamp < state["we"]:
                            state["chunks"] += 1
                            if stamped and len(state.setdefault("lags", [])) < 200000:
                                state["lags"].append(timestamp - data["created"])

    async def main() -> dict:
        timeout = aiohttp.ClientTimeout(total=6 * 60 * 60)
        connector = aiohttp.TCPConnector(limit=concurrency + 8)
        async with aiohttp.ClientSession(timeout=timeout, read_bufsize=10 * 1024**2, connector=connector) as session:
            t0 = time.perf_counter()
            state["ws"], state["we"] = t0 + warmup, t0 + warmup + window
            loop = asyncio.get_running_loop()
            marks = {}
            loop.call_at(loop.time() + warmup, lambda: marks.setdefault("c0", cpu_seconds()))
            loop.call_at(loop.time() + warmup + window, lambda: marks.setdefault("c1", cpu_seconds()))
            tasks = [asyncio.create_task(one_stream(session, i, state["we"])) for i in range(concurrency)]
            await asyncio.sleep(warmup + window + 0.05)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            cpu = marks["c1"] - marks["c0"]
            return {"chunks": state["chunks"], "cpu_s": cpu, "lags": state.get("lags", []),
                    "errors": state["errors"][:3]}

    return asyncio.run(main())


# ---------------------------------------------------------------------------------------------
# Ours: the client core, one worker process, as the module runs it
# ---------------------------------------------------------------------------------------------
def run_ours(base_url: str, concurrency: int, output_len: int, warmup: float, window: float,
             stamped: bool, model: str) -> dict:
    settings = sc.normalize_settings({"base_url": base_url, "concurrency": [concurrency], "input_len": 4,
                                      "output_len": output_len, "warmup_s": warmup, "window_s": window,
                                      "drain": False, "workers": 1, "request_timeout_s": 120})
    server = {"model": model, "speculative_algorithm": None, "metrics_available": False}
    level = sc.run_level(settings, concurrency, server, trace=200000 if stamped else 0)
    if level["output_tok_per_s"] is None:
        raise RuntimeError(f"no steady window: {level['error'] or level['warnings']}")
    chunks = level["output_tok_per_s"] * level["window_s"]  # one token per chunk on both sources
    cpu = level["client"]["cpu_percent"] / 100 * level["window_s"]
    lags = []
    if stamped:
        for trace in level.get("_traces", []):
            for stamp, payload in trace:
                created = json.loads(payload).get("created")
                if isinstance(created, float):
                    lags.append(stamp - created)
    return {"chunks": chunks, "cpu_s": cpu, "lags": lags, "errors": [level["error"]] if level["error"] else []}


def child(args) -> None:
    pin(args.cpu)
    fn = run_reference if args.child == "reference" else run_ours
    kwargs = {"model": args.model} if args.child == "ours" else {}
    result = fn(args.base_url, args.concurrency, args.output_len, args.warmup_s, args.window_s, args.stamped,
                **kwargs)
    result["lags"] = quantiles(result["lags"]) if args.stamped else None
    print(json.dumps(result))


def measure(which: str, base_url: str, args, stamped: bool, model: str, output_len: int) -> dict:
    cmd = [sys.executable, __file__, "--child", which, "--base-url", base_url, "--concurrency",
           str(args.concurrency), "--output-len", str(output_len), "--warmup-s", str(args.warmup_s),
           "--window-s", str(args.window_s), "--model", model] + (["--stamped"] if stamped else [])
    if args.client_cpu is not None:
        cmd += ["--cpu", str(args.client_cpu)]
    source_cpu0, wall0 = process_cpu_seconds(args.source_pid), time.monotonic()
    out = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=600)
    source_share = (process_cpu_seconds(args.source_pid) - source_cpu0) / (time.monotonic() - wall0)
    if out.returncode:
        raise RuntimeError(f"{which} failed: {out.stderr[-3000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["source_cpu"] = source_share  # of one core, over the whole run (warmup included)
    result["rate"] = result["chunks"] / args.window_s
    result["per_cpu"] = result["chunks"] / result["cpu_s"] if result["cpu_s"] else float("nan")
    return result


def start(cmd: list[str], ready, log: Path, ready_line: bool = False) -> subprocess.Popen:
    """Start a server in its own session; its output goes to ``log`` (an unread pipe would fill
    and stall it), but for the stream server's READY line on stdout."""
    with open(log, "wb") as handle:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE if ready_line else handle, stderr=handle,
                                start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if ready(proc):
            return proc
        if proc.poll() is not None:
            raise RuntimeError(f"{cmd[1]} exited: {log.read_text(errors='replace')[-2000:]}")
        time.sleep(0.1)
    raise RuntimeError(f"{cmd[1]} did not start")


def stop(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--concurrency", type=int, default=256)
    p.add_argument("--output-len", type=int, default=128, help="tokens per request from source A")
    p.add_argument("--source-cpu", type=int, help="core for the sources (default: the first this process may use)")
    p.add_argument("--client-cpu", type=int, help="core for the clients (default: the second)")
    p.add_argument("--warmup-s", type=float, default=2.0)
    p.add_argument("--window-s", type=float, default=5.0)
    p.add_argument("--paced-rate", type=float, default=10000.0, help="chunks/s over all streams from source B")
    p.add_argument("--rounds", type=int, default=3,
                   help="runs of each client per source, alternating which goes first; medians are reported")
    p.add_argument("--child", choices=("reference", "ours", "stream", "blast"), help=argparse.SUPPRESS)
    p.add_argument("--cpu", type=int, help=argparse.SUPPRESS)
    p.add_argument("--base-url", help=argparse.SUPPRESS)
    p.add_argument("--model", default="m", help=argparse.SUPPRESS)
    p.add_argument("--stamped", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child in ("stream", "blast"):
        pin(args.cpu)
        if args.child == "blast":
            serve_blast(args.port)
        else:
            serve_stream(args.port, args.paced_rate / args.concurrency)
        return 0
    cpus = sorted(os.sched_getaffinity(0))
    if args.source_cpu is None:
        args.source_cpu = cpus[0]
    if args.client_cpu is None:
        args.client_cpu = cpus[1] if len(cpus) > 1 else None
    if args.client_cpu is None or args.client_cpu == args.source_cpu:
        print("warning: one core only: source and client share it, and the source may be the limit", file=sys.stderr)
    if args.child:
        child(args)
        return 0

    runs: dict[tuple[str, str], list[dict]] = {}

    def alternate(source: str, base_url: str, stamped: bool, model: str, output_len: int) -> None:
        for rnd in range(args.rounds):
            order = ("reference", "ours") if rnd % 2 == 0 else ("ours", "reference")
            for which in order:
                runs.setdefault((source, which), []).append(measure(which, base_url, args, stamped, model, output_len))

    port = free_port()
    work = Path(tempfile.mkdtemp(prefix="specbench-capacity-"))

    def ready(proc):
        return b"READY" in proc.stdout.readline()

    try:
        blast = start([sys.executable, __file__, "--child", "blast", "--port", str(port), "--cpu", str(args.source_cpu)],
                      ready, work / "blast.log", ready_line=True)
        args.source_pid = blast.pid
        try:
            alternate("A zero-delay", f"http://127.0.0.1:{port}", False, "m", args.output_len)
        finally:
            stop(blast)
        sport = free_port()
        stream = start([sys.executable, __file__, "--child", "stream", "--port", str(sport), "--concurrency",
                        str(args.concurrency), "--paced-rate", str(args.paced_rate), "--cpu", str(args.source_cpu)],
                       ready, work / "stream.log", ready_line=True)
        args.source_pid = stream.pid
        try:
            # requests of 1.5 s at the paced rate, so every stream turns over within the warmup
            paced_len = max(8, int(1.5 * args.paced_rate / args.concurrency))
            alternate("B paced", f"http://127.0.0.1:{sport}", True, "m", paced_len)
        finally:
            stop(stream)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def median(values):
        ordered = sorted(v for v in values if v is not None)
        return sc.percentile(ordered, 50) if ordered else None

    print(f"client capacity at C={args.concurrency}, {args.window_s:g} s window after {args.warmup_s:g} s warmup, "
          f"{args.rounds} alternating rounds per client and source (medians), {os.cpu_count()} CPUs, Python "
          f"{sys.version.split()[0]}, load average {os.getloadavg()[0]:.1f}; "
          f"source on CPU {args.source_cpu}, client on CPU {args.client_cpu}")
    print(f"A: zero-delay, pre-rendered responses in one write ({args.output_len} tokens); "
          f"B: {args.paced_rate:g} chunks/s paced, stamped at send")
    print(f"{'source':<12} {'client':<10} {'chunks/s':>10} {'client CPU':>11} {'chunks/CPU-s':>13} "
          f"{'source CPU':>11} {'stamp lag p50':>14} {'p99':>9}")
    for (source, which), results in runs.items():
        rate = median([r["rate"] for r in results])
        cpu = median([r["cpu_s"] / args.window_s for r in results])
        per_cpu = median([r["per_cpu"] for r in results])
        source_cpu = median([r["source_cpu"] for r in results])
        p50 = median([(r.get("lags") or {}).get("p50") for r in results])
        p99 = median([(r.get("lags") or {}).get("p99") for r in results])
        name = "specbench" if which == "ours" else "aiohttp"
        errors = [e for r in results for e in r["errors"]]
        print(f"{source:<12} {name:<10} {rate:>10.0f} {100 * cpu:>10.0f}% {per_cpu:>13.0f} {100 * source_cpu:>10.0f}% "
              f"{(f'{p50 * 1e3:.2f} ms' if p50 is not None else '-'):>14} "
              f"{(f'{p99 * 1e3:.2f} ms' if p99 is not None else '-'):>9}" + (f"  errors {errors[:2]}" if errors else ""))
    for source in ("A zero-delay", "B paced"):
        ratios = [o["per_cpu"] / r["per_cpu"] for o, r in zip(runs[(source, "ours")], runs[(source, "reference")],
                                                              strict=True)]
        print(f"{source}: specbench / aiohttp chunks per CPU-second = {median(ratios):.2f}x median "
              f"(rounds: {', '.join(f'{x:.2f}' for x in ratios)})"
              + ("; target >= 2x" if source.startswith("A") else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
