"""Can the emulator serve 250 streams on this machine without becoming the bottleneck?

Starts the emulator (default profile) in baseline and EAGLE-3 modes, drives C streaming
chat requests from one asyncio client, and prints per mode: the model's steady-state
output throughput, what the client received in a measurement window after a warmup, the
deviation (target: within 1%), and the CPU share (of one core) of the emulator's server
process and of the client. Usage:

    .venv/bin/python benchmarks/emulator_capacity.py [--concurrency 250] [--time-scale 0.1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EMULATOR = os.path.join(ROOT, "files", "sglang_emulator")
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kill_holders(device_dir: str) -> None:
    """SIGKILL whatever still holds this run's own emulated device folder (orphaned workers)."""
    real = os.path.realpath(device_dir)
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            targets = [os.readlink(f"/proc/{entry}/fd/{fd}") for fd in os.listdir(f"/proc/{entry}/fd")]
        except OSError:
            continue
        if any(os.path.dirname(t) == real for t in targets):
            try:
                os.kill(int(entry), signal.SIGKILL)
            except ProcessLookupError:
                pass


class Counter:
    def __init__(self):
        self.tokens = 0


async def stream_forever(host, port, body: bytes, counter: Counter, stop: asyncio.Event) -> None:
    reader, writer = await asyncio.open_connection(host, port, limit=1 << 22)
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    while not stop.is_set():
        writer.write(head + body)
        await reader.readuntil(b"\r\n\r\n")
        while True:
            size = int((await reader.readline()).strip(), 16)
            if size == 0:
                await reader.readline()
                break
            data = await reader.readexactly(size + 2)
            if data.startswith(b"data: {"):
                event = json.loads(data[6:])
                if event["choices"]:
                    counter.tokens += len(event["choices"][0]["delta"].get("content", "").split())
    writer.close()


async def measure(
    port: int, concurrency: int, input_len: int, output_len: int, warmup: float, window: float, server_pid: int
) -> dict:
    body = json.dumps(
        {
            "messages": [{"role": "user", "content": " ".join(["hi"] * input_len)}],
            "max_tokens": output_len,
            "ignore_eos": True,
            "temperature": 0,
            "stream": True,
        }
    ).encode()
    counter, stop = Counter(), asyncio.Event()
    tasks = [asyncio.create_task(stream_forever("127.0.0.1", port, body, counter, stop)) for _dummy in range(concurrency)]
    await asyncio.sleep(warmup)
    t0, n0, s0 = time.monotonic(), counter.tokens, cpu_seconds(server_pid)
    c0 = resource.getrusage(resource.RUSAGE_SELF)
    await asyncio.sleep(window)
    t1, n1, s1 = time.monotonic(), counter.tokens, cpu_seconds(server_pid)
    c1 = resource.getrusage(resource.RUSAGE_SELF)
    stop.set()
    for task in tasks:
        task.cancel()
    elapsed = t1 - t0
    return {
        "delivered": (n1 - n0) / elapsed,
        "server_cpu": (s1 - s0) / elapsed,
        "client_cpu": (c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime) / elapsed,
    }


def run_mode(name: str, flags: list[str], args) -> None:
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        log = open(os.path.join(tmp, "emulator.log"), "wb")  # noqa: SIM115
        proc = subprocess.Popen(
            [
                sys.executable,
                EMULATOR,
                "--model-path",
                "bench/model",
                "--port",
                str(port),
                "--tp-size",
                "8",
                "--emulator-time-scale",
                str(args.time_scale),
                "--emulator-device-dir",
                os.path.join(tmp, "dev"),
                "--max-running-requests",
                str(args.max_running),
                *flags,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            base = f"http://127.0.0.1:{port}"
            for _dummy in range(600):
                try:
                    with urllib.request.urlopen(base + "/health_generate", timeout=2) as resp:
                        if resp.status == 200:
                            break
                except OSError:
                    time.sleep(0.05)
            q = f"/emulator/analytic?concurrency={args.concurrency}&input_len={args.input_len + 4}&output_len={args.output_len}"
            with urllib.request.urlopen(base + q) as resp:
                truth = json.loads(resp.read())
            request_s = args.output_len / truth["per_stream_tok_per_s"]
            warmup = max(2.0, 1.5 * request_s)
            got = asyncio.run(measure(port, args.concurrency, args.input_len, args.output_len, warmup, args.window, proc.pid))
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            kill_holders(os.path.join(tmp, "dev"))
    dev = (got["delivered"] / truth["output_tok_per_s"] - 1) * 100
    print(
        f"{name:<22} C={args.concurrency:<4} model {truth['output_tok_per_s']:9.1f} tok/s  delivered "
        f"{got['delivered']:9.1f} tok/s  deviation {dev:+6.2f}%  emulator CPU {got['server_cpu'] * 100:5.1f}% "
        f"client CPU {got['client_cpu'] * 100:5.1f}% (of one core)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, default=250)
    parser.add_argument("--time-scale", type=float, default=0.1)
    parser.add_argument("--input-len", type=int, default=256)
    parser.add_argument("--output-len", type=int, default=256)
    parser.add_argument("--window", type=float, default=10.0)
    parser.add_argument("--max-running", type=int, default=256)
    args = parser.parse_args()
    print(
        f"emulator capacity: default profile, time scale {args.time_scale}, {os.cpu_count()} CPUs, "
        f"{args.input_len} in / {args.output_len} out, window {args.window}s"
    )
    run_mode("baseline", [], args)
    run_mode("eagle3", ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "bench/draft"], args)


if __name__ == "__main__":
    main()
