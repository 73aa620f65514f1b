"""A small closed-loop load generator for the emulator's own tests and benchmark.

C threads each send non-streaming /generate requests back to back. Throughput is read
from the emulator's per-step token counter (GET /emulator/counters) over a wall-clock window
after a warmup, so the figure is the server's steady state, free of client ramp effects.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
import urllib.request


def analytic(base_url: str, concurrency: int, input_len: int, output_len: int) -> dict:
    url = f"{base_url}/emulator/analytic?concurrency={concurrency}&input_len={input_len}&output_len={output_len}"
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())


def counters(base_url: str) -> dict:
    """All of GET /emulator/counters, read at one instant of the engine's state: the per-step token
    counter among them (SGLang's sglang:generation_tokens_total moves only when a request
    finishes, so a short window would read it in steps of whole requests)."""
    with urllib.request.urlopen(base_url + "/emulator/counters", timeout=10) as resp:
        return json.loads(resp.read())


@dataclasses.dataclass
class Window:
    """A closed-loop window: its wall seconds (between the server's two reads) and the rise of each
    emulator counter over it."""

    wall_s: float
    rise: dict

    @property
    def tokens_per_s(self) -> float:
        """Output tokens per wall-clock second: what a client sees."""
        return self.rise["generated_tokens"] / self.wall_s

    @property
    def scheduled_s(self) -> float:
        """The wall seconds the engine ran its modelled schedule: the rise of its scheduled seconds
        (the modelled seconds of every step emitted), which leaves out the time it sat idle (at C=1
        the gap between a response and the client's next request), gave up behind schedule, or fell
        further behind, a stall it had not yet woken from at a read included."""
        return self.rise["scheduled_s"]

    @property
    def scheduled_tokens_per_s(self) -> float:
        return self.rise["generated_tokens"] / self.scheduled_s


def closed_loop_throughput(
    base_url: str, concurrency: int, input_len: int = 256, output_len: int = 256, warmup_s: float = 1.0, window_s: float = 3.0
) -> float:
    """Output tokens per wall-clock second at ``concurrency`` streams, steady state."""
    return closed_loop_window(base_url, concurrency, input_len, output_len, warmup_s, window_s).tokens_per_s


def closed_loop_window(
    base_url: str, concurrency: int, input_len: int = 256, output_len: int = 256, warmup_s: float = 1.0, window_s: float = 3.0
) -> Window:
    """A steady-state window at ``concurrency`` streams (after ``warmup_s``), with the counters' rise."""
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
    c0 = counters(base_url)
    time.sleep(window_s)
    c1 = counters(base_url)
    stop.set()
    if errors:
        raise AssertionError(f"load generator failed: {errors[0]!r}")
    # The window between the server's two reads, not this client's: a loaded machine delays a
    # read's arrival by tens of milliseconds, a share of a 4 s window larger than the test's edges.
    rise = {name: c1[name] - c0[name] for name in c0}
    return Window(rise.pop("monotonic_s"), rise)
