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
    described = dict.fromkeys(engines.DESCRIBED)
    for engine in engines.ENGINES:
        if not engine.INFO_PATH:
            continue
        status, data = http_call(settings, "GET", engine.INFO_PATH)
        obj = json_or_none(data) if status == 200 else None
        if isinstance(obj, dict):
            info = obj
            described = engine.describe(info)
            break
    status_m, data_m = http_call(settings, "GET", "/metrics")
    metrics = status_m == 200 and any(engine.METRIC_PREFIX in data_m for engine in engines.ENGINES)
    server = {"base_url": url, "model": model, "models": models}
    server.update((key, described.get(key)) for key in engines.DESCRIBED)
    server.update(server_info=info, metrics_available=metrics)
    return server


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


def server_accept_length(settings: dict, engine=engines.DEFAULT) -> float | None:
    """The server's own accept length (the engine says where and how), None without one."""
    if not engine.INFO_PATH:
        return None
    try:
        status, data = http_call(settings, "GET", engine.INFO_PATH, timeout=5.0)
    except ServerError:
        return None
    return engine.accept_length(json_or_none(data) if status == 200 else None)


# Every engine's metric names: the counters of whichever engine serves are summed.
_RUNNING = tuple(engine.RUNNING for engine in engines.ENGINES)
_QUEUED = tuple(engine.QUEUED for engine in engines.ENGINES)
_GENERATED = tuple(engine.GENERATED for engine in engines.ENGINES)


def parse_metrics(text: bytes, generated: bool = False):
    """(running, queued) summed over label sets from Prometheus text; with ``generated`` also
    the server's generated-tokens counter."""
    running = queued = total = None
    for line in text.splitlines():
        if not line or line[:1] == b"#":
            continue
        name = line.split(b"{", 1)[0].split(b" ", 1)[0]
        if name in _RUNNING or name in _QUEUED or name in _GENERATED:
            try:
                value = float(line.rsplit(b" ", 1)[1])
            except (IndexError, ValueError):
                continue
            if name in _RUNNING:
                running = (running or 0.0) + value
            elif name in _QUEUED:
                queued = (queued or 0.0) + value
            else:
                total = (total or 0.0) + value
    if generated:
        return running, queued, total
    return running, queued


class MetricsPoller(threading.Thread):
    """Reads /metrics every ``interval`` seconds from ``start_at`` until halted."""

    def __init__(self, settings: dict, start_at: float):
        super().__init__(daemon=True)
        self.settings = settings
        self.start_at = start_at
        self.samples: list[tuple] = []
        self.error: str | None = None
        self.halt = threading.Event()

    def run(self) -> None:
        interval = self.settings["metrics_interval_s"]
        wait = self.start_at - time.monotonic()
        if wait > 0 and self.halt.wait(wait):
            return
        while not self.halt.is_set():
            t = time.monotonic()
            try:
                status, data = http_call(self.settings, "GET", "/metrics", timeout=max(1.0, interval))
            except ServerError as exc:
                self.error = str(exc)
                status, data = 0, b""
            if status == 200:
                running, queued, total = parse_metrics(data, generated=True)
                if running is not None:
                    self.samples.append((t, running, queued or 0.0, total))
            self.halt.wait(interval)

    def result(self, ws: float | None, we: float | None) -> dict | None:
        """mean and max of the samples taken inside the window [ws, we]."""
        if ws is None:
            return None
        inside = [s for s in self.samples if ws <= s[0] <= (we if we is not None else math.inf)]
        if not inside:
            return None
        runs = [s[1] for s in inside]
        queues = [s[2] for s in inside]
        rate = None
        counted = [(s[0], s[3]) for s in inside if s[3] is not None]
        if len(counted) >= 2 and counted[-1][0] > counted[0][0]:
            rate = (counted[-1][1] - counted[0][1]) / (counted[-1][0] - counted[0][0])
        return {"running": {"mean": round(sum(runs) / len(runs), 2), "max": max(runs)},
                "queued": {"mean": round(sum(queues) / len(queues), 2), "max": max(queues)},
                "generated_tok_per_s": round(rate, 3) if rate is not None else None,
                "samples": len(runs)}
