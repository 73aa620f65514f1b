"""The test's own /metrics reader (vllmkit.Scraper, scrape_metrics.py) against a loopback server
whose counter is a known function of the wall clock: its bounds hold that truth, a slow answer
holds up no other scrape, a reader stopped on one CPU leaves the other reading, and a server
restarted on the port is refused as evidence."""
from __future__ import annotations

import json
import os
import signal
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import vllmkit

RATE = 1000.0  # tokens a second: the counter's value at wall-clock t is floor(RATE * (t - t0))
HOLD_MAX_S = 1.8  # the held answer's longest wait (under the scraper's 2-s timeout)


class Counter(BaseHTTPRequestHandler):
    """/metrics with vLLM's generation counter at the wall clock's reading. ``hold``: the first
    request is held, before it reads the counter, until another request has been answered (or
    HOLD_MAX_S): a scraper that waits for each answer before its next send releases it only by
    the time limit."""

    t0 = 0.0
    hold = False
    held: threading.Event | None = None
    answered_while_held = 0

    def do_GET(self):
        cls = type(self)
        if cls.hold:
            cls.hold, cls.held = False, threading.Event()
            cls.held.wait(HOLD_MAX_S)
            cls.held = None
        elif cls.held is not None:
            cls.answered_while_held += 1
        value = int(RATE * (time.time() - cls.t0))
        body = f'# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total{{engine="0"}} {value}.0\n'.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        if cls.held is not None and cls.answered_while_held:
            cls.held.set()

    def log_message(self, *args):
        del args


def serve(port: int, t0: float, hold: bool = False) -> ThreadingHTTPServer:
    handler = type("CounterFrom", (Counter,), {"t0": t0, "hold": hold})
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    return server


def stop(server: ThreadingHTTPServer) -> None:
    server.shutdown()
    server.server_close()


def truth(t: float, t0: float) -> int:
    return int(RATE * (t - t0))


def answers(log, since: float = 0.0, below: float = float("inf")) -> list[tuple[float, float, float]]:
    """(sent, received, generated) of the scrapes answered so far, sent at ``since`` or later and
    reading under ``below``."""
    out = []
    for line in log.read_text(encoding="utf-8").splitlines() if log.is_file() else []:
        record = json.loads(line)
        values = record.get("values")
        if values and record["sent"] >= since and values["generated"] < below:
            out.append((record["sent"], record["received"], values["generated"]))
    return out


def wait_for(log, count: int, **which) -> list[tuple[float, float, float]]:
    """The answers (as ``answers``) once there are ``count`` of them, one sent after another's
    answer came back."""
    deadline = time.monotonic() + 60
    while True:
        found = answers(log, **which)
        if len(found) >= count and found[-1][0] > found[0][1] + 0.01:
            return found
        assert time.monotonic() < deadline, f"the scraper had {len(found)} answers of {count} in 60 s: {found}"
        time.sleep(0.05)


CPUS = sorted(os.sched_getaffinity(0))


def test_bounds_hold_the_counter_and_a_slow_answer_holds_up_no_other(tmp_path):
    port, t0 = vllmkit.free_port(), time.time()
    server = serve(port, t0, hold=True)
    try:
        with vllmkit.Scraper(port, tmp_path / "scrapes", cpus=CPUS[:1]) as scraper:  # one reader
            wait_for(scraper.path(CPUS[0]), 12)
    finally:
        stop(server)
    held = min(scraper.samples)  # the first scrape sent
    assert held[2] is not None, scraper.samples[:5]
    # The server let the first go only once another was answered (or at HOLD_MAX_S): scrapes were
    # sent while it waited (one that waited for each answer would have sent none).
    meanwhile = [s for s in scraper.samples if held[0] < s[0] < held[1] and s[2] is not None]
    assert meanwhile, f"no scrape was sent while the first waited for its answer: {scraper.samples[:5]}"
    answered = [s for s in scraper.samples if s[2] is not None]
    checked = 0
    for earlier, later in zip(answered, answered[1:], strict=False):  # between every two answers sent
        t = (earlier[0] + later[0]) / 2
        if answered[0][1] < t - 0.01 < t + 0.01 < answered[-1][0]:
            low, high = scraper.bounds("generated", t)
            assert low <= truth(t, t0) <= high, (t - t0, low, high)
            checked += 1
    assert checked >= 5, answered


@pytest.mark.skipif(len(CPUS) < 2, reason="one CPU: nothing to read from beside it")
def test_a_reader_stopped_on_one_cpu_leaves_the_other_reading(tmp_path):
    """A CPU the host stops (or a reader left unscheduled) stalls that reader only: SIGSTOP one for
    STOPPED_S, and the answers of both together still come at the interval, and bound the counter."""
    stopped_s = 3.0  # as long as the stall that failed a window of the compare run
    port, t0 = vllmkit.free_port(), time.time()
    server = serve(port, t0)
    try:
        with vllmkit.Scraper(port, tmp_path / "scrapes") as scraper:
            first, second = (scraper.path(cpu) for cpu in scraper.cpus)
            wait_for(first, 3)
            os.kill(scraper.procs[scraper.cpus[0]].pid, signal.SIGSTOP)
            stopped = time.time()
            time.sleep(stopped_s)
            os.kill(scraper.procs[scraper.cpus[0]].pid, signal.SIGCONT)
            resumed = time.time()
            wait_for(first, 3, since=resumed)
            wait_for(second, 3, since=resumed)
    finally:
        stop(server)
    assert scraper.cpus == [CPUS[0], CPUS[-1]] and set(scraper.returncodes.values()) == {0}, scraper.returncodes
    cover = scraper.coverage(stopped, resumed)
    assert cover["longest_send_gap_s"][CPUS[0]] >= stopped_s - 0.01, cover
    assert cover["longest_gap_s"] < stopped_s, cover  # the other reader's answers filled the stop
    t = (stopped + resumed) / 2
    low, high = scraper.bounds("generated", t)
    assert low <= truth(t, t0) <= high and high - low < RATE * stopped_s, (low, high)


def test_a_server_restarted_on_the_port_bounds_nothing(tmp_path):
    port, t0 = vllmkit.free_port(), time.time()
    server = serve(port, t0 - 100.0)  # 100,000 tokens counted before the test began
    try:
        with vllmkit.Scraper(port, tmp_path / "scrapes", cpus=CPUS[:1]) as scraper:
            log = scraper.path(CPUS[0])
            wait_for(log, 3)
            stop(server)
            switched = time.time()
            server = serve(port, switched)  # a fresh server on the same port: its count starts at 0
            fresh = wait_for(log, 4, since=switched + 0.3, below=50_000)
    finally:
        stop(server)
    with pytest.raises(AssertionError, match="another server answered"):
        scraper.bounds("generated", switched)
    # After the last answer from the old server (one it was still writing may arrive late) and a
    # fresh answer, before a later send.
    old_last = max(r for s, r, v in scraper.samples if v is not None and v["generated"] >= 50_000)
    after = [a for a in fresh if a[1] > old_last]
    t = (after[0][1] + fresh[-1][0]) / 2
    assert after[0][1] < t < fresh[-1][0], (old_last, fresh)
    low, high = scraper.bounds("generated", t)
    assert low <= truth(t, switched) <= high, (low, high)
