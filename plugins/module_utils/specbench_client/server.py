# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""Plain HTTP calls to the server outside the measurement: blocking and short.

The probe (what the server serves and says about itself), the cache flush and accept length
before and after a level, and the /metrics poller that runs beside a level. What differs
between servers comes from the engine modules in engines/.
"""
from __future__ import annotations

import errno
import http.client
import json
import math
import socket
import threading
import time

from . import engines
from .http1 import json_or_none
from .settings import ServerError, parse_base_url


def _connect_error_text(host: str, port: int, exc: OSError) -> str:
    if isinstance(exc, ConnectionRefusedError) or getattr(exc, "errno", None) == errno.ECONNREFUSED:
        return (f"connection refused: nothing listens at {host}:{port}. Is the server running, and is base_url "
                "right?")
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve host {host!r} ({exc}): check base_url"
    if isinstance(exc, (TimeoutError, socket.timeout)):
        return f"no answer from {host}:{port} in time (a firewall, or a server that hangs?)"
    return f"cannot reach {host}:{port}: {exc}"


def http_call(settings: dict, method: str, path: str, timeout: float = 10.0, body: dict | None = None):
    """(status, body bytes); raises ServerError naming the cause when the server is unreachable."""
    host, port, prefix = parse_base_url(settings["base_url"])
    headers = {"Accept": "*/*"}
    if settings.get("api_key"):
        headers["Authorization"] = f"Bearer {settings['api_key']}"
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request(method, prefix + path, body=data, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read()
    except OSError as exc:
        raise ServerError(f"{settings['base_url']}: {_connect_error_text(host, port, exc)}") from None
    except http.client.HTTPException as exc:
        raise ServerError(f"{settings['base_url']}{path}: not an HTTP answer ({exc!r})") from None
    finally:
        conn.close()


def probe_server(settings: dict) -> dict:
    """What the server says about itself, and the model to use. Raises ServerError."""
    url = settings["base_url"]
    status, data = http_call(settings, "GET", "/v1/models")
    if status in (401, 403):
        raise ServerError(f"{url} answered {status} {'Unauthorized' if status == 401 else 'Forbidden'} to "
                          "GET /v1/models: the API key is "
                          f"{'wrong' if settings.get('api_key') else 'missing'}. Set api_key (bench_api_key) to the "
                          "server's --api-key.")
    models: list[str] = []
    if status == 200:
        obj = json_or_none(data)
        if isinstance(obj, dict) and isinstance(obj.get("data"), list):
            models = [m.get("id") for m in obj["data"] if isinstance(m, dict) and isinstance(m.get("id"), str)]
    elif status != 404:
        raise ServerError(f"{url} answered {status} to GET /v1/models ({data[:200].decode(errors='replace')!r}); "
                          "is it an OpenAI-compatible server, and is base_url its root (http://HOST:PORT)?")
    model = settings.get("model") or ""
    if model and models and model not in models:
        raise ServerError(f"{url} does not serve model {model!r}; it serves {', '.join(repr(m) for m in models)}. "
                          "Set model (bench_model) to one of these, or leave it empty to use the first.")
    if not model:
        if not models:
            raise ServerError(f"{url} lists no model at GET /v1/models (HTTP {status}): set model (bench_model) "
                              "to the served model name.")
        model = models[0]
    info = None
    found = None
    described = dict.fromkeys(engines.DESCRIBED)
    info_path = None
    for engine in engines.ENGINES:
        for path in (engine.INFO_PATH, engine.INFO_FALLBACK):
            if not path:
                continue
            status, data = http_call(settings, "GET", path)
            obj = json_or_none(data) if status == 200 else None
            if isinstance(obj, dict) and engine.recognise(obj):
                info, found, info_path = obj, engine, path
                described = engine.describe(info)
                break
        if found is not None:
            break
    status_m, data_m = http_call(settings, "GET", "/metrics")
    metrics = status_m == 200 and any(engine.METRIC_PREFIX in data_m for engine in engines.ENGINES)
    server = {"base_url": url, "model": model, "models": models}
    server.update((key, described.get(key)) for key in engines.DESCRIBED)
    server.update(server_info=info, metrics_available=metrics, info_path=info_path)
    if found is not None:
        config = None
        if found.SPEC_CONFIG_PATH:
            status_c, data_c = http_call(settings, "GET", found.SPEC_CONFIG_PATH)
            config = json_or_none(data_c) if status_c == 200 else None
        # What the server runs, for the mode check (specbench_client/modecheck.py)
        server["speculation"] = found.speculation(info, data_m if status_m == 200 else None, config)
    if found is not None and found is not engines.DEFAULT:
        # Another engine than SGLang (the default): named so the level uses its adapter.
        server["engine"] = found.NAME
        if status_m == 200 and not server.get("speculative_algorithm"):
            server["speculative_algorithm"] = found.speculative_from_metrics(data_m)
    return server


def tokens_of(settings: dict, engine, model: str, bodies: list) -> list | None:
    """The server's own token count of each prompt body (the engine's tokenize endpoint, one
    kept-alive connection); None when the engine has none or the server does not answer it."""
    if not engine.TOKENIZE_PATH:
        return None
    host, port, prefix = parse_base_url(settings["base_url"])
    headers = {"Accept": "application/json", "Content-Type": "application/json"}
    if settings.get("api_key"):
        headers["Authorization"] = f"Bearer {settings['api_key']}"
    conn = http.client.HTTPConnection(host, port, timeout=10.0)
    counts = []
    try:
        for body in bodies:
            conn.request("POST", prefix + engine.TOKENIZE_PATH, body=json.dumps(dict(body, model=model)),
                         headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            obj = json_or_none(data) if resp.status == 200 else None
            count = obj.get("count") if isinstance(obj, dict) else None
            if not isinstance(count, int):
                return None
            counts.append(count)
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()
    return counts


def flush_cache(settings: dict, wait_s: float = 10.0, engine=engines.DEFAULT) -> bool:
    """POST the engine's cache flush, retried while the server still finishes requests. True
    if flushed."""
    if not engine.FLUSH_PATH:
        return False
    deadline = time.monotonic() + wait_s
    while True:
        try:
            status, unused = http_call(settings, "POST", engine.FLUSH_PATH, timeout=5.0)
        except ServerError:
            return False
        if status == 200:
            return True
        if status != 400 or time.monotonic() > deadline:
            return False
        time.sleep(0.1)


def server_accept_length(settings: dict, engine=engines.DEFAULT, path: str | None = None) -> dict | None:
    """The server's own accept length ({"value", "ranks", "of"}: the engine says where and how),
    from ``path`` (the description path the probe found) or the engine's INFO_PATH; None without one."""
    path = path or engine.INFO_PATH
    if not path:
        return None
    try:
        status, data = http_call(settings, "GET", path, timeout=5.0)
    except ServerError:
        return None
    found = engine.accept_length(json_or_none(data) if status == 200 else None)
    return dict(found, path=path) if found else None


# Every engine's metric names: the counters of whichever engine serves are summed.
_RUNNING = tuple(engine.RUNNING for engine in engines.ENGINES)
_QUEUED = tuple(engine.QUEUED for engine in engines.ENGINES)
_GENERATED = tuple(engine.GENERATED for engine in engines.ENGINES)
_DRAFTS = tuple(engine.SPEC_DRAFTS for engine in engines.ENGINES if engine.SPEC_DRAFTS)
_ACCEPTED = tuple(engine.SPEC_ACCEPTED for engine in engines.ENGINES if engine.SPEC_ACCEPTED)
_VERIFY = tuple(engine.SPEC_VERIFY for engine in engines.ENGINES if engine.SPEC_VERIFY)
# The emulator's own counter of the schedule it gave up (files/sglang_emulator/metrics.py,
# LOST_NAME; no real engine serves it): read at the window's edges like the others, for
# keepup.schedule_reasons.
EMULATOR_LOST = b"specbench_emulator:schedule_lost_seconds_total"
_SLOT = dict([(n, 0) for n in _RUNNING] + [(n, 1) for n in _QUEUED] + [(n, 2) for n in _GENERATED]
             + [(n, 3) for n in _DRAFTS] + [(n, 4) for n in _ACCEPTED] + [(n, 5) for n in _VERIFY]
             + [(EMULATOR_LOST, 6)])


def parse_all_metrics(text: bytes) -> list:
    """[running, queued, generated, drafts, accepted, verify calls, the emulator's lost schedule
    seconds] summed over label sets (None: absent)."""
    out: list = [None] * 7
    for line in text.splitlines():
        if not line or line[:1] == b"#":
            continue
        slot = _SLOT.get(line.split(b"{", 1)[0].split(b" ", 1)[0])
        if slot is None:
            continue
        try:
            value = float(line.rsplit(b" ", 1)[1])
        except (IndexError, ValueError):
            continue
        out[slot] = (out[slot] or 0.0) + value
    return out


def parse_metrics(text: bytes, generated: bool = False):
    """(running, queued) summed over label sets from Prometheus text; with ``generated`` also
    the server's generated-tokens counter."""
    running, queued, total = parse_all_metrics(text)[:3]
    if generated:
        return running, queued, total
    return running, queued


def counter_at(samples: list, t: float):
    """A monotone counter at time ``t`` from ``(sent, received, value)`` samples in time order:
    ``(low, estimate, high)``, or None unless samples bracket ``t``.

    The server read its counter somewhere between a scrape's sending and its reply, so the last
    sample answered by ``t`` is a lower bound of the counter at ``t`` and the first sample sent
    from ``t`` on an upper bound: the truth lies in [low, high], whatever the rate did in between.
    The estimate is the straight line between those two samples at their midpoints, kept inside
    the bound. (No fit over a wider span: at low concurrency the counter moves in steps, and a
    line through a second of steps misses the value at ``t`` by a fraction of a request.)"""
    below = [s for s in samples if s[1] <= t]
    above = [s for s in samples if s[0] >= t]
    if not below or not above:
        return None
    (s1, r1, low), (s2, r2, high) = below[-1], above[0]
    if high < low:  # a counter reset (a restarted server) between the two: no bound holds
        return None
    m1, m2 = (s1 + r1) / 2, (s2 + r2) / 2
    estimate = low if m2 <= m1 else low + (high - low) * min(1.0, max(0.0, (t - m1) / (m2 - m1)))
    return low, estimate, high


def window_counts(samples: list, slots: tuple, ws: float, we: float) -> dict:
    """Per slot (index of a counter in the poller's samples) the increase over [ws, we] as
    ``(low, estimate, high)`` from :func:`counter_at` at both edges, or None."""
    out = {}
    for slot in slots:
        points = [(s[0], s[1], s[slot]) for s in samples if s[slot] is not None]
        start, end = counter_at(points, ws), counter_at(points, we)
        out[slot] = None if start is None or end is None else (end[0] - start[2], end[1] - start[1], end[2] - start[0])
    return out


class MetricsPoller(threading.Thread):
    """Reads /metrics every ``interval`` seconds from ``start_at`` until halted, with one read
    before ``start_at`` and one sent after the halt, so the window the level measured lies between
    two reads whatever the scrapes' latency (server.counter_at needs a read answered before the
    window's start and one sent after its end)."""

    # The read that bounds the window's end is sent once the level's requests are done, to a server
    # that may still be finishing them on a busy machine: a longer timeout, and a few tries.
    FINAL_TIMEOUT_S = 10.0
    FINAL_TRIES = 3

    def __init__(self, settings: dict, start_at: float):
        super().__init__(daemon=True)
        self.settings = settings
        self.start_at = start_at
        self.samples: list[tuple] = []
        self.error: str | None = None
        self.halt = threading.Event()

    def scrape(self, timeout: float) -> bool:
        """One read of /metrics, kept as (sent, received, running, queued, generated, drafts,
        accepted, verify calls, the emulator's lost schedule seconds); False when the server did
        not answer with its gauges."""
        sent = time.monotonic()
        try:
            status, data = http_call(self.settings, "GET", "/metrics", timeout=timeout)
        except ServerError as exc:
            self.error = str(exc)
            return False
        received = time.monotonic()  # the server read its counters somewhere in between
        if status != 200:
            return False
        running, queued, total, drafts, accepted, verify, lost = parse_all_metrics(data)
        if running is None:
            return False
        self.samples.append((sent, received, running, queued or 0.0, total, drafts, accepted, verify, lost))
        return True

    def run(self) -> None:
        interval = self.settings["metrics_interval_s"]
        timeout = max(1.0, interval)
        # Before the level's first request: a lower bound of every counter at the window's start
        # even when the reads during the warmup answer late (on a loaded 2-core machine, vLLM's
        # server answered the read sent with the first requests after the window had opened, and the
        # level had no server count: tests/vllm/test_vllm_bench.py).
        self.scrape(timeout)
        wait = self.start_at - time.monotonic()
        if wait > 0:
            self.halt.wait(wait)
        tries = 0
        while True:
            # Read before sending: only a read sent after the halt, which comes after the window's
            # end, bounds the counters there (one in flight when the halt came may have been sent
            # before the end).
            halted = self.halt.is_set()
            answered = self.scrape(self.FINAL_TIMEOUT_S if halted else timeout)
            if halted:
                tries += 1
                if answered or tries >= self.FINAL_TRIES:
                    break
            else:
                self.halt.wait(interval)

    def over_window(self, ws: float, we: float) -> dict:
        """The server's counters over the window the client measured: generated tokens (per
        second, with the bounds the scrapes allow) and, where the engine counts them, the
        spec-decode accept length with its bounds (vLLM: 1 + delta(accepted) / delta(drafts);
        SGLang: delta(generated) / delta(verify calls), both counted at each request's finish).
        Each counter's extremes are taken independently, so the bounds hold whatever the counters
        did between two scrapes. On the emulator, also the schedule seconds it gave up in the window
        (``schedule_lost_s_bounds``). Empty when no samples bracket the window."""
        out: dict = {}
        span = we - ws
        counts = window_counts(self.samples, (4, 5, 6, 7, 8), ws, we)
        generated, drafts, accepted, verify, lost = counts[4], counts[5], counts[6], counts[7], counts[8]
        if lost is not None:
            out["schedule_lost_s_bounds"] = [round(max(0.0, lost[0]), 4), round(lost[2], 4)]
        if generated is not None and span > 0:
            out["generated_tok_per_s"] = round(generated[1] / span, 3)
            out["generated_tokens"] = round(generated[1], 1)
            out["generated_tokens_bounds"] = [round(generated[0], 1), round(generated[2], 1)]
        # The draft counters themselves, zero included, where the engine has them: serve.yml's proof
        # holds them to the plan (drafts where it speculates, a schedule ignored where none are counted).
        if drafts is not None:
            out["spec_drafts"] = round(max(0.0, drafts[1]), 1)
        if verify is not None:
            out["spec_verify_calls"] = round(max(0.0, verify[1]), 1)
        if drafts and accepted is not None and drafts[1] > 0:
            out["accept_length"] = round(1.0 + accepted[1] / drafts[1], 4)
            out["spec_drafts"] = round(drafts[1], 1)
            out["spec_accepted"] = round(accepted[1], 1)
            if drafts[0] > 0:
                out["accept_length_bounds"] = [round(1.0 + max(0.0, accepted[0]) / drafts[2], 4),
                                               round(1.0 + accepted[2] / drafts[0], 4)]
        elif verify and verify[1] > 0 and generated is not None:
            out["accept_length"] = round(generated[1] / verify[1], 4)
            out["spec_verify_calls"] = round(verify[1], 1)
            if verify[0] > 0:
                out["accept_length_bounds"] = [round(max(0.0, generated[0]) / verify[2], 4),
                                               round(generated[2] / verify[0], 4)]
        return out

    def result(self, ws: float | None, we: float | None) -> dict | None:
        """The server's side of the window [ws, we]. The gauges' mean and max over the scrapes
        taken inside it (``running``, ``queued``, with ``samples`` their count; absent when none
        was: a window shorter than the scrape interval, or one a stall kept the reads out of), and
        the counters over it from the reads either side of its edges (:meth:`over_window`), which
        the poller takes whatever the window's length. The counters once came only with a scrape
        inside: beside the suite, an MoE baseline's 1.04-s adaptive window at C=4 (the scrape
        interval is 1 s) had none, its requests stalled as the window closed (+-58%, 326 tok/s
        against its launches' 369), and with no counter no keep-up check could tell whether its
        emulator kept its schedule: the level passed as evidence and the pooled comparison read C=4
        unclear where it loses clearly. ``schedule_lost_served``: the server serves the emulator's
        lost-schedule counter (summary.schedule_lost tells a window it could not bracket from an
        engine without one). None when the server answered no read."""
        if ws is None or not self.samples:
            return None
        inside = [s for s in self.samples if ws <= s[0] and s[1] <= (we if we is not None else math.inf)]
        out: dict = {"generated_tok_per_s": None, "samples": len(inside),
                     "schedule_lost_served": any(s[8] is not None for s in self.samples)}
        if inside:
            self._gauges(inside, out)
        if we is not None:
            edges = self.over_window(ws, we)
            if "generated_tok_per_s" in edges:
                out["generated_tok_per_s"] = edges.pop("generated_tok_per_s")
            out.update(edges)
        return out

    @staticmethod
    def _gauges(inside: list, out: dict) -> None:
        """The gauges over the scrapes inside the window, into ``out``."""
        runs = [s[2] for s in inside]
        queues = [s[3] for s in inside]
        read = [((s[0] + s[1]) / 2, s[4]) for s in inside if s[4] is not None]
        if len(read) >= 2 and read[-1][0] > read[0][0]:
            out["generated_tok_per_s"] = round((read[-1][1] - read[0][1]) / (read[-1][0] - read[0][0]), 3)
        out["running"] = {"mean": round(sum(runs) / len(runs), 2), "max": max(runs)}
        out["queued"] = {"mean": round(sum(queues) / len(queues), 2), "max": max(queues)}
        # (midpoint, counter, half the round trip) of the scrapes answered inside the window
        counted = [((s[0] + s[1]) / 2, s[4], (s[1] - s[0]) / 2) for s in inside if s[4] is not None]
        if len(counted) >= 2:
            # The generated-token counter as read, between the first and last samples inside the
            # window (no interpolation): for engines that count a request at its finish.
            (t0, v0, w0), (t1, v1, w1) = counted[0], counted[-1]
            out["generated_between"] = {"from": t0, "to": t1, "tokens": v1 - v0, "half_widths": [w0, w1]}
