"""The vLLM tests' own reader of a server's /metrics, a process of its own (vllmkit.Scraper starts
one per CPU it reads from): ``python scrape_metrics.py URL OUT INTERVAL CPU``. Pinned to CPU, every
INTERVAL s it sends a scrape, each on its own thread (up to IN_FLIGHT at once, so one slow answer
leaves no gap), and appends one JSON line per scrape to OUT: ``{"sent": t, "received": t,
"values": {...} or null}`` in wall-clock seconds (null: no answer, from no server or the
timeout), or ``{"skipped": t}`` for a tick with IN_FLIGHT scrapes still unanswered. It stops on
SIGTERM, after its scrapes in flight.

Why a process per CPU: the test's reader, a thread of the pytest process, twice went 3 s without
an answer and without a timeout inside a 5-s window, while the client's own reads of the same
server (another process) were answered throughout. With a reader pinned to each CPU, the one on
CPU 0 went up to 5.0 s between two sends, a whole window, while the one on CPU 1 sent at the
interval (its longest gap 0.94 s over three runs beside the rest of the suite). vLLM's CPU build
pins its Worker's threads to the first CPUs and keeps the last for its engine process
(vllm/utils/ompmultiprocessing.py, reserve_cpu_num), on this 2-CPU machine CPU 0, where a process
that cannot leave it waited seconds; a thread that can leave it was still seen stuck for 3 s. The
two readers' answers together left no gap over 0.25 s in those windows."""
from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
import urllib.request

# vLLM's counters (vllm/v1/metrics/loggers.py, PrometheusStatLogger's counter_generation_tokens;
# vllm/v1/spec_decode/metrics.py, SpecDecodingProm's num_drafts and num_accepted_tokens;
# prometheus_client adds _total), summed over their label sets (one per engine).
COUNTERS = {
    b"vllm:generation_tokens_total": "generated",
    b"vllm:spec_decode_num_drafts_total": "drafts",
    b"vllm:spec_decode_num_accepted_tokens_total": "accepted",
}
IN_FLIGHT = 4
TIMEOUT_S = 2.0


def parse(body: bytes) -> dict:
    """The COUNTERS in a /metrics body, each summed over its label sets."""
    values: dict = {}
    for line in body.splitlines():
        name = line.split(b"{", 1)[0].split(b" ", 1)[0]
        if name in COUNTERS:
            key = COUNTERS[name]
            values[key] = values.get(key, 0.0) + float(line.rsplit(b" ", 1)[1])
    return values


def main(url: str, out_path: str, interval: float, cpu: int) -> int:
    os.sched_setaffinity(0, {cpu})
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *unused: stop.set())
    lock = threading.Lock()
    slots = threading.BoundedSemaphore(IN_FLIGHT)
    threads: list[threading.Thread] = []
    with open(out_path, "a", encoding="utf-8") as out:

        def write(record: dict) -> None:
            with lock:
                out.write(json.dumps(record) + "\n")
                out.flush()

        def scrape(sent: float) -> None:
            try:
                try:
                    with urllib.request.urlopen(url, timeout=TIMEOUT_S) as resp:
                        values = parse(resp.read())
                except OSError:
                    values = None
                write({"sent": sent, "received": time.time(), "values": values})
            finally:
                slots.release()

        tick = time.monotonic()
        while not stop.is_set():
            if slots.acquire(blocking=False):
                thread = threading.Thread(target=scrape, args=(time.time(),), daemon=True)
                thread.start()
                threads = [t for t in threads if t.is_alive()] + [thread]
            else:
                write({"skipped": time.time()})
            tick += interval
            stop.wait(max(0.0, tick - time.monotonic()))
            tick = max(tick, time.monotonic() - interval)  # after a stall, resume the schedule from now
        for thread in threads:
            thread.join(TIMEOUT_S + 1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])))
