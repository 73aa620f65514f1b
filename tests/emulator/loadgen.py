"""A small closed-loop load generator for the emulator's own tests and benchmark.

C threads each send non-streaming /generate requests back to back. Throughput is read
from the emulator's per-step token counter (GET /emulator/counters) over a wall-clock window
after a warmup, so the figure is the server's steady state, free of client ramp effects.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request


def counter(base_url: str, name: str = "generated_tokens") -> float:
    """The emulator's per-step token counter (GET /emulator/counters): SGLang's
    sglang:generation_tokens_total moves only when a request finishes, so a short window would
    read it in steps of whole requests."""
    with urllib.request.urlopen(base_url + "/emulator/counters", timeout=10) as resp:
        return float(json.loads(resp.read())[name])


def analytic(base_url: str, concurrency: int, input_len: int, output_len: int) -> dict:
    url = f"{base_url}/emulator/analytic?concurrency={concurrency}&input_len={input_len}&output_len={output_len}"
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())


def closed_loop_throughput(
    base_url: str, concurrency: int, input_len: int = 256, output_len: int = 256, warmup_s: float = 1.0, window_s: float = 3.0
) -> float:
    """Output tokens per wall-clock second at ``concurrency`` streams, steady state."""
    stop = threading.Event()
    errors: list[BaseException] = []
    body = json.dumps(
        {
            "text": " ".join(["hello"] * input_len),
            "sampling_params": {"max_new_tokens": output_len, "temperature": 0, "ignore_eos": True},
        }
    ).encode()

    def loop():
        try:
            while not stop.is_set():
                req = urllib.request.Request(base_url + "/generate", data=body, headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(req, timeout=120) as resp:
                    resp.read()
        except BaseException as exc:  # noqa: BLE001 - reported below
            if not stop.is_set():
                errors.append(exc)

    threads = [threading.Thread(target=loop, daemon=True) for _unused1 in range(concurrency)]
    for t in threads:
        t.start()
    time.sleep(warmup_s)
    t0, c0 = time.monotonic(), counter(base_url)
    time.sleep(window_s)
    t1, c1 = time.monotonic(), counter(base_url)
    stop.set()
    if errors:
        raise AssertionError(f"load generator failed: {errors[0]!r}")
    return (c1 - c0) / (t1 - t0)
