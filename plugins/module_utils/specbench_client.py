#!/usr/bin/env python3
# Copyright: specbench developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""specbench client core: a closed-loop concurrency sweep against an SGLang (or any
OpenAI-compatible) server, measured next to the server.

Standard library only and self-contained: the collection's module bench_sweep imports it,
the role bench_scripts ships it to the node as ``bin/specbench_client.py``, and it runs by
hand::

    python3 specbench_client.py --base-url http://127.0.0.1:30000 --concurrency 1,2,5,10 \\
        --api chat --input-len 256 --output-len 256 --warmup-s 20 --window-s 60 --output out.json

How a level is measured
-----------------------
* C streams, each a keep-alive HTTP/1.1 connection that sends its next request the moment
  the previous one ends (closed loop). Stream starts are spread evenly over the first half
  of the warmup, and each stream's first request stops after a random share of the output
  length: streams then run at phases spread evenly over a request, so they never move in
  lockstep and freed slots do not refill in bursts.
* Warmup: at least ``warmup_s``, and until every stream has finished one request (all
  worker processes agree on the moment), so the window opens in steady state at every
  level, whether a request lasts 50 ms at C=1 or 90 s at C=250.
* Fixed lengths: ``ignore_eos``, temperature 0, ``max_tokens`` = output length; prompts are
  synthesized from a seed (one word per token on the emulator) or read from a JSONL file.
* Steady state: throughput = output tokens that *arrived* inside the measurement window
  (after the warmup) / window length. No ramp-up, no ramp-down tail. A 95 % confidence
  interval comes from the repeats (two or more) or from batch means over the window.
* Whole run, the way SGLang's bench_serving computes it: output tokens of every completed
  request / (last completion - first send), ramp and tail included; for comparison.
* Latency (requests sent inside the window, completed): TTFT, ITL (a chunk carrying k
  tokens has its gap split over k, as SGLang does), TPOT ((E2E - TTFT) / (tokens - 1)),
  E2E, per-stream decode tok/s; each mean, p50, p90, p99 (linear interpolation, numpy's).
* Tokens per chunk: native /generate from ``meta_info.completion_tokens`` (exact); chat and
  completions count the words of each delta and scale them so a request's total equals
  the server's ``usage.completion_tokens`` (exact totals; exact per chunk on the emulator).
* Accept length: sum(completion_tokens) / sum(spec_verify_ct) of /generate, else
  ``/get_server_info`` after a ``/flush_cache`` before the level. Server-side running and
  queued requests, and the server's own generated-token rate over the window, from
  ``/metrics`` when it exists (a client figure far from the server's draws a warning).
* The client measures itself: CPU use per worker process, and how long after their arrival
  (the kernel's stamp) it read the data; above 85 % of a core, or reads 10 ms behind on
  average, the level carries a warning that the client, not the server, may be the limit.

The event loop is one epoll loop per worker process over non-blocking sockets, 256 KiB
reads into one preallocated buffer (no small-read-buffer throttling). Each read is stamped
with the kernel's receive time (SO_TIMESTAMPNS, moved onto the monotonic clock), so a busy
or descheduled client does not stamp late; elsewhere ``time.monotonic()`` at the read.
Several worker processes (``--workers``) share the system's monotonic clock, so their
stamps and windows line up.
"""
from __future__ import annotations

import argparse
import errno
import heapq
import http.client
import json
import math
import os
import pickle
import random
import re
import resource
import select
import socket
import struct
import sys
import threading
import time
import urllib.parse
from array import array

__version__ = "1.0.0"

APIS = ("chat", "completions", "native")
DEFAULT_LEVELS = (1, 2, 5, 10, 30, 70, 100, 250)
MAX_CONCURRENCY = 20000
READ_SIZE = 256 * 1024
RAMP_FRACTION = 0.5  # stream starts are spread over this part of the warmup
BOTTLENECK_FRACTION = 0.85  # a worker busier than this (of one core) may be the limit
READ_LAG_LIMIT_S = 0.010  # reads this far behind the data's arrival, on average: the client lags
FINE_BINS_PER_BATCH = 50

# Every setting: default, and what it means (the CLI's --help and the module's docs say the same).
DEFAULTS = {
    "base_url": "http://127.0.0.1:30000",
    "api": "chat",
    "model": "",
    "api_key": "",
    "concurrency": list(DEFAULT_LEVELS),
    "input_len": 256,
    "output_len": 256,
    "warmup_s": 30.0,
    "window_s": 60.0,
    "requests": 0,
    "repeats": 1,
    "batches": 10,
    "seed": 42,
    "prompts": None,
    "request_timeout_s": 600.0,
    "workers": 0,
    "drain": True,
    "stop_on_error": True,
    "flush_cache": True,
    "metrics_interval_s": 1.0,
}

VOCAB = (
    "time person year way day thing man world life hand part child eye woman place work week case point "
    "government company number group problem fact water room mother area money story month lot right study "
    "book word business issue side kind head house service friend father power hour game line end member "
    "law car city community name president team minute idea body information back parent face others level "
    "office door health art war history party result change morning reason research girl guy moment air "
    "teacher force education foot boy age policy process music market sense nation plan college interest"
).split()

T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
        2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
        2.045, 2.042)

KIND_HELP = {
    "connect_refused": "connection refused: nothing listens at {addr} (the server is down or has crashed)",
    "connect_failed": "could not connect to {addr}",
    "disconnected": "the server closed the connection mid-response (crashed, restarted or killed?)",
    "timeout": "no complete response within the per-request timeout of {timeout:g} s (a stalled stream? "
               "raise bench_request_timeout_s / --request-timeout-s if the server is only slow)",
    "http_401": "401 Unauthorized: the API key is wrong or missing (set bench_api_key / --api-key to the server's "
                "--api-key)",
    "http_403": "403 Forbidden: the API key is not allowed to generate",
    "http_404": "404 Not Found: this server has no such endpoint (wrong api for this server, or a path in base_url?)",
    "http_4xx": "the server refused the request",
    "http_5xx": "the server failed the request",
    "malformed": "malformed response: not the server-sent events an OpenAI or SGLang server sends",
    "server_error": "the server reported an error inside the stream",
    "incomplete": "the stream ended without [DONE] or a finish reason",
    "client_error": "the client itself failed",
}


_RAW_DECODE = json.JSONDecoder().raw_decode
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux; Python does not name it
_TIMESPEC = struct.Struct("@ll")  # struct timespec


class SettingsError(ValueError):
    """A setting is unusable; the message names it and says what to give instead."""


class ServerError(RuntimeError):
    """The server cannot be benchmarked (unreachable, refuses the key, lacks the model...)."""


# ---------------------------------------------------------------------------------------------
# Settings
# ---------------------------------------------------------------------------------------------
def _cli_label(key: str) -> str:
    return "--" + key.replace("_", "-")


def _as_int(value, label: str, minimum: int, example: str) -> int:
    if isinstance(value, bool):
        raise SettingsError(f"{label} is {value!r}, not a whole number: give {example}")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise SettingsError(f"{label} is {value!r}, not a whole number: give {example}") from None
    if not isinstance(value, int):
        raise SettingsError(f"{label} is {value!r}, not a whole number: give {example}")
    if value < minimum:
        raise SettingsError(f"{label} is {value}, but it must be at least {minimum}: give {example}")
    return value


def _as_float(value, label: str, minimum: float, strict: bool, example: str) -> float:
    if isinstance(value, bool) or value is None or value == "":
        raise SettingsError(f"{label} is {value!r}, not a number of seconds: give {example}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise SettingsError(f"{label} is {value!r}, not a number of seconds: give {example}") from None
    if not math.isfinite(number) or number < minimum or (strict and number == minimum):
        bound = "above" if strict else "at least"
        raise SettingsError(f"{label} is {value!r}, but it must be {bound} {minimum:g}: give {example}")
    return number


def _as_bool(value, label: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise SettingsError(f"{label} is {value!r}, not true or false")


def parse_levels(value, label: str = "concurrency") -> list[int]:
    """Concurrency levels from a list or a string ("1,2,5", "1 2 5", "[1, 2, 5]")."""
    example = "a list of positive whole numbers such as [1, 2, 5, 10, 30, 70, 100, 250]"
    if value is None:
        raise SettingsError(f"{label} is not set: give {example}")
    items = value
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                items = json.loads(text)
            except ValueError:
                raise SettingsError(f"{label} is {value!r}, which does not parse as a list: give {example}") from None
        else:
            items = [part for part in re.split(r"[\s,]+", text) if part]
    elif isinstance(value, int) and not isinstance(value, bool):
        items = [value]
    if not isinstance(items, (list, tuple)):
        raise SettingsError(f"{label} is {value!r}, not a list: give {example}")
    if not items:
        raise SettingsError(f"{label} is empty: give at least one level, {example}")
    levels: list[int] = []
    for item in items:
        if isinstance(item, bool) or not isinstance(item, (int, str, float)):
            raise SettingsError(f"{label} holds {item!r}, which is not a whole number: give {example}")
        try:
            number = int(item.strip()) if isinstance(item, str) else int(item)
        except ValueError:
            raise SettingsError(f"{label} holds {item!r}, which is not a whole number: give {example}") from None
        if isinstance(item, float) and not item.is_integer():
            raise SettingsError(f"{label} holds {item!r}, which is not a whole number: give {example}")
        if number < 1:
            raise SettingsError(f"{label} holds {number}: every level is a number of concurrent streams and "
                                f"must be at least 1; give {example}")
        if number > MAX_CONCURRENCY:
            raise SettingsError(f"{label} holds {number}, above the client's limit of {MAX_CONCURRENCY} streams")
        if number in levels:
            raise SettingsError(f"{label} holds {number} twice: give each level once (use repeats to measure "
                                "a level several times)")
        levels.append(number)
    return levels


def parse_base_url(url) -> tuple[str, int, str]:
    """(host, port, path prefix) of an http:// base URL; a trailing /v1 is dropped."""
    example = "http://127.0.0.1:30000"
    if not isinstance(url, str) or not url.strip():
        raise SettingsError(f"base_url is not set: give the server's address, e.g. {example}")
    parts = urllib.parse.urlsplit(url.strip())
    if parts.scheme == "https":
        raise SettingsError(f"base_url {url!r} is https: the client speaks plain http; benchmark next to the "
                            f"server on its own port, e.g. {example}")
    if parts.scheme != "http" or not parts.hostname:
        raise SettingsError(f"base_url {url!r} is not an http://HOST:PORT address: give e.g. {example}")
    try:
        port = parts.port or 80
    except ValueError:
        raise SettingsError(f"base_url {url!r} has an invalid port: give e.g. {example}") from None
    prefix = parts.path.rstrip("/")
    if prefix.endswith("/v1"):
        prefix = prefix[:-3]
    return parts.hostname, port, prefix


def normalize_settings(raw: dict, label=_cli_label, check_prompts_file: bool = True) -> dict:
    """Checked, typed settings from ``raw`` (defaults filled in). ``label`` names a key in
    messages (``bench_window_s`` in the role, ``--window-s`` by hand)."""
    s = dict(DEFAULTS)
    s.update({k: v for k, v in raw.items() if v is not None and (k in DEFAULTS or k == "prompts_file")})
    out: dict = {}
    host_port = parse_base_url(s["base_url"]) if s.get("base_url") else None
    out["base_url"] = s["base_url"].strip().rstrip("/") if host_port else ""
    api = str(s["api"]).strip().lower()
    if api not in APIS:
        raise SettingsError(f"{label('api')} is {s['api']!r}: give one of {', '.join(APIS)} "
                            "(OpenAI chat completions, OpenAI completions, SGLang's native /generate)")
    out["api"] = api
    out["model"] = "" if s["model"] is None else str(s["model"]).strip()
    out["api_key"] = "" if s["api_key"] is None else str(s["api_key"])
    out["concurrency"] = parse_levels(s["concurrency"], label("concurrency"))
    out["input_len"] = _as_int(s["input_len"], label("input_len"), 1, "the prompt length in tokens, e.g. 256")
    out["output_len"] = _as_int(s["output_len"], label("output_len"), 1,
                                "the output length in tokens, e.g. 256 (0 would measure nothing)")
    out["warmup_s"] = _as_float(s["warmup_s"], label("warmup_s"), 0.0, False, "seconds, e.g. 30 (0: none)")
    out["window_s"] = _as_float(s["window_s"], label("window_s"), 0.0, True, "seconds, e.g. 60")
    out["requests"] = _as_int(s["requests"], label("requests"), 0,
                              "a number of requests per level, or 0 to measure for window_s")
    out["repeats"] = _as_int(s["repeats"], label("repeats"), 1, "how often to run each level, e.g. 1 or 3")
    out["batches"] = _as_int(s["batches"], label("batches"), 2, "batch means per window, e.g. 10")
    out["seed"] = _as_int(s["seed"], label("seed"), 0, "a whole number, e.g. 42")
    out["request_timeout_s"] = _as_float(s["request_timeout_s"], label("request_timeout_s"), 0.0, True,
                                         "seconds, e.g. 600")
    out["workers"] = _as_int(s["workers"], label("workers"), 0, "worker processes, or 0 for one per 256 streams")
    out["drain"] = _as_bool(s["drain"], label("drain"))
    out["stop_on_error"] = _as_bool(s["stop_on_error"], label("stop_on_error"))
    out["flush_cache"] = _as_bool(s["flush_cache"], label("flush_cache"))
    out["metrics_interval_s"] = _as_float(s["metrics_interval_s"], label("metrics_interval_s"), 0.0, True,
                                          "seconds between /metrics reads, e.g. 1")
    prompts = s.get("prompts")
    path = s.get("prompts_file") or ""
    if prompts:
        if not isinstance(prompts, list) or not all(isinstance(p, str) for p in prompts):
            raise SettingsError("prompts must be a list of strings")
        out["prompts"] = prompts
    elif path and check_prompts_file:
        out["prompts"] = load_prompts(path, label("prompts_file"))
    else:
        out["prompts"] = None
    out["prompts_file"] = str(path)
    if out["requests"] and out["requests"] < max(out["concurrency"]):
        raise SettingsError(f"{label('requests')} is {out['requests']}, fewer than the largest level "
                            f"({max(out['concurrency'])} streams): give at least that many requests per level, "
                            "or 0 to measure for window_s")
    return out


def load_prompts(path: str, label: str = "prompts_file") -> list[str]:
    """Prompts from a JSONL file: one object a line with a ``prompt`` (or ``text``) string."""
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except OSError as exc:
        raise SettingsError(f"{label} {path!r} cannot be read ({exc.strerror or exc}): give a JSONL file with "
                            'one {"prompt": "..."} object a line') from None
    prompts = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as exc:
            raise SettingsError(f"{label} {path!r} line {number} is not JSON ({exc}): each line must be an "
                                'object such as {"prompt": "..."}') from None
        text = obj.get("prompt", obj.get("text")) if isinstance(obj, dict) else None
        if not isinstance(text, str) or not text.strip():
            raise SettingsError(f"{label} {path!r} line {number} has no non-empty \"prompt\" string: each line "
                                'must be an object such as {"prompt": "..."}')
        prompts.append(text)
    if not prompts:
        raise SettingsError(f"{label} {path!r} holds no prompts: give one {{\"prompt\": \"...\"}} object a line")
    return prompts


def public_settings(settings: dict) -> dict:
    """Settings as written to results: no api key, no prompt texts."""
    out = {k: v for k, v in settings.items() if k not in ("api_key", "prompts")}
    out["api_key_set"] = bool(settings.get("api_key"))
    out["prompts_source"] = "file" if settings.get("prompts") else "synthesized"
    out["prompts_count"] = len(settings["prompts"]) if settings.get("prompts") else None
    return out


# ---------------------------------------------------------------------------------------------
# Statistics
# ---------------------------------------------------------------------------------------------
def percentile(sorted_values, p: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    n = len(sorted_values)
    if n == 1:
        return float(sorted_values[0])
    pos = (n - 1) * p / 100.0
    lo = int(pos)
    hi = min(lo + 1, n - 1)
    return float(sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo))


def summary(values, scale: float = 1.0, digits: int = 3, ci: bool = False) -> dict | None:
    """mean, p50, p90, p99 (times ``scale``), or None without values; with ``ci`` also the
    95 % t-interval of the mean (for one value per request)."""
    if not values:
        return None
    ordered = sorted(values)
    mean = math.fsum(ordered) / len(ordered)
    out = {
        "mean": round(mean * scale, digits),
        "p50": round(percentile(ordered, 50) * scale, digits),
        "p90": round(percentile(ordered, 90) * scale, digits),
        "p99": round(percentile(ordered, 99) * scale, digits),
    }
    if ci:
        interval = mean_ci95(ordered)[1]
        out["mean_ci95"] = [round(interval[0] * scale, digits), round(interval[1] * scale, digits)] if interval else None
    return out


def t975(df: int) -> float:
    if df < 1:
        return float("nan")
    return T975[df - 1] if df <= len(T975) else 1.96 + 2.4 / df


def mean_ci95(samples: list[float]) -> tuple[float, list[float] | None]:
    """Mean and its 95 % t-interval; no interval from fewer than two samples."""
    n = len(samples)
    mean = math.fsum(samples) / n if n else 0.0
    if n < 2:
        return mean, None
    var = math.fsum((x - mean) ** 2 for x in samples) / (n - 1)
    half = t975(n - 1) * math.sqrt(var / n)
    return mean, [mean - half, mean + half]


# ---------------------------------------------------------------------------------------------
# Plain HTTP calls (probe, flush, info, metrics): blocking, short
# ---------------------------------------------------------------------------------------------
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


def _json_or_none(data: bytes):
    try:
        return json.loads(data)
    except ValueError:
        return None


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
        obj = _json_or_none(data)
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
    status, data = http_call(settings, "GET", "/get_server_info")
    if status == 200:
        info = _json_or_none(data)
        if not isinstance(info, dict):
            info = None
    status_m, data_m = http_call(settings, "GET", "/metrics")
    metrics = status_m == 200 and (b"sglang:" in data_m or b"vllm:" in data_m)
    spec = info.get("speculative_algorithm") if info else None
    return {
        "base_url": url,
        "model": model,
        "models": models,
        "version": info.get("version") if info else None,
        "launch_command": info.get("launch_command") if info else None,
        "speculative_algorithm": spec,
        "max_running_requests": info.get("max_running_requests") if info else None,
        "server_info": info,
        "metrics_available": metrics,
    }


def flush_cache(settings: dict, wait_s: float = 10.0) -> bool:
    """POST /flush_cache, retried while the server still finishes requests. True if flushed."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            status, _ = http_call(settings, "POST", "/flush_cache", timeout=5.0)
        except ServerError:
            return False
        if status == 200:
            return True
        if status != 400 or time.monotonic() > deadline:
            return False
        time.sleep(0.1)


def server_accept_length(settings: dict) -> float | None:
    try:
        status, data = http_call(settings, "GET", "/get_server_info", timeout=5.0)
    except ServerError:
        return None
    info = _json_or_none(data) if status == 200 else None
    states = info.get("internal_states") if isinstance(info, dict) else None
    if isinstance(states, list) and states and isinstance(states[0], dict):
        value = states[0].get("avg_spec_accept_length")
        if isinstance(value, (int, float)) and value > 0:
            return float(value)
    return None


_RUNNING = (b"sglang:num_running_reqs", b"vllm:num_requests_running")
_QUEUED = (b"sglang:num_queue_reqs", b"vllm:num_requests_waiting")
_GENERATED = (b"sglang:generation_tokens_total", b"vllm:generation_tokens_total")


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


# ---------------------------------------------------------------------------------------------
# Requests
# ---------------------------------------------------------------------------------------------
def synth_prompt(seed: int, key: str, words: int) -> str:
    rng = random.Random(f"{seed}:{key}")
    return " ".join(rng.choices(VOCAB, k=words))


class RequestFactory:
    """HTTP request bytes for one API; each request gets its own prompt."""

    def __init__(self, settings: dict, model: str, host: str, port: int, prefix: str):
        self.api = settings["api"]
        self.model = model
        self.input_len = settings["input_len"]
        self.output_len = settings["output_len"]
        self.seed = settings["seed"]
        self.prompts = settings.get("prompts")
        path = {"chat": "/v1/chat/completions", "completions": "/v1/completions", "native": "/generate"}[self.api]
        host_header = f"[{host}]" if ":" in host else host
        head = [f"POST {prefix}{path} HTTP/1.1", f"Host: {host_header}:{port}", "User-Agent: specbench-client/"
                + __version__, "Accept: text/event-stream", "Content-Type: application/json"]
        if settings.get("api_key"):
            head.append(f"Authorization: Bearer {settings['api_key']}")
        self.head = ("\r\n".join(head) + "\r\nContent-Length: ").encode()

    def prompt(self, key: str, index: int) -> str:
        if self.prompts:
            return self.prompts[index % len(self.prompts)]
        return synth_prompt(self.seed, key, self.input_len)

    def body(self, prompt: str, output_len: int) -> dict:
        if self.api == "native":
            return {"text": prompt, "stream": True,
                    "sampling_params": {"max_new_tokens": output_len, "temperature": 0.0, "ignore_eos": True}}
        body = {"model": self.model, "max_tokens": output_len, "temperature": 0.0, "ignore_eos": True,
                "stream": True, "stream_options": {"include_usage": True}}
        if self.api == "chat":
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        return body

    def build(self, key: str, index: int, output_len: int) -> bytes:
        data = json.dumps(self.body(self.prompt(key, index), output_len), separators=(",", ":")).encode()
        return self.head + str(len(data)).encode() + b"\r\n\r\n" + data


# Stream phases
IDLE, CONNECTING, SENDING, HEAD, BODY = range(5)


class Req:
    __slots__ = ("ct", "done", "end", "expect", "finish", "first", "index", "ks", "measured", "prompt_tokens",
                 "status", "t_send", "ts", "usage_ct", "verify")

    def __init__(self, index: int, t_send: float, measured: bool, expect: int):
        self.index = index
        self.expect = expect
        self.t_send = t_send
        self.measured = measured
        self.ts: list[float] = []
        self.ks: list[int] = []
        self.first = None
        self.end = None
        self.done = False
        self.finish = None
        self.ct = 0
        self.usage_ct = None
        self.prompt_tokens = None
        self.verify = None
        self.status = 0


class Stream:
    __slots__ = ("body_done", "chunked", "clen", "crem", "dec", "errbody", "fails", "fd", "got", "keepalive", "out",
                 "phase", "raw", "req", "retried", "sid", "sock", "sse", "trace", "turned")

    def __init__(self, sid: int):
        self.sid = sid
        self.sock = None
        self.fd = -1
        self.phase = IDLE
        self.req = None
        self.fails = 0
        self.trace = None
        self.turned = False
        self._reset()

    def _reset(self) -> None:
        self.out = b""
        self.raw = b""
        self.sse = ""
        self.errbody = b""
        self.dec = b""  # an incomplete UTF-8 sequence at the end of the last read
        self.chunked = False
        self.clen = -1
        self.crem = 0
        self.body_done = False
        self.keepalive = True
        self.got = False
        self.retried = False


class Worker:
    """One process's share of a level's streams, on one epoll loop."""

    def __init__(self, plan: dict, stream_ids: list[int], ctrl_fd: int = -1, status_fd: int = -1):
        self.plan = plan
        self.ctrl_fd = ctrl_fd  # parent -> worker: the window's start, once every worker is ready
        self.status_fd = status_fd  # worker -> parent: ready (and, at the end, the result)
        settings = plan["settings"]
        self.settings = settings
        self.api = settings["api"]
        host, port, prefix = parse_base_url(settings["base_url"])
        self.addr_text = f"{host}:{port}"
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        self.family, _, _, _, self.sockaddr = infos[0]
        self.factory = RequestFactory(settings, plan["model"], host, port, prefix)
        self.timeout = settings["request_timeout_s"]
        self.output_len = settings["output_len"]
        self.t0 = plan["t0"]
        self.min_ws = plan["t0"] + settings["warmup_s"]
        self.window_s = settings["window_s"]
        self.ws = None  # the window opens when every stream has finished a request, after the warmup
        self.we = math.inf
        self.reported = False
        self.turned = 0
        self.count_mode = plan["budget"] is not None
        self.budget = plan["budget"]
        self.drain = settings["drain"]
        self.bin_w = plan["bin_w"]
        self.inv_bw = 1.0 / plan["bin_w"]
        self.bins: list[float] = []
        self.streams = {sid: Stream(sid) for sid in stream_ids}
        self.trace_n = plan.get("trace", 0)
        if self.trace_n:
            for st in self.streams.values():
                st.trace = []
        self.fdmap: dict[int, Stream] = {}
        self.cut_pending = False
        self.next_timeout_scan = 0.0
        self.kernel_stamps = True  # SO_TIMESTAMPNS receive stamps, while the kernel gives them
        self.ep = select.epoll()
        if ctrl_fd >= 0:
            self.ep.register(ctrl_fd, select.EPOLLIN)
        self.heap = [(plan["starts"][sid], sid) for sid in stream_ids]
        heapq.heapify(self.heap)
        self.active = 0
        self.stopping = False
        self.stop_reason = None
        self.counter = 0
        self.full_end = None  # count mode: first time a stream found no work after ws
        # aggregates
        self.ok = 0
        self.failed = 0
        self.cut = 0
        self.consecutive_failures = 0
        self.kinds: dict[str, int] = {}
        self.examples: dict[str, str] = {}
        self.whole_tokens = 0
        self.first_send = None
        self.last_end = None
        self.ends = array("d")
        self.ttft: list[float] = []
        self.e2e: list[float] = []
        self.tpot: list[float] = []
        self.decode: list[float] = []
        self.itl = array("d")
        self.out_tokens: list[int] = []
        self.in_tokens: list[int] = []
        self.short = 0
        self.spec_ct = 0
        self.spec_verify = 0
        self.traces: list = []
        self.cpu0 = None
        self.cpu1 = None
        self.busy_from = None
        self.busy_to = None
        self.lag_sum = 0.0  # read time minus the kernel's arrival stamp, summed over reads
        self.lag_n = 0
        self.handle = {"chat": self._ev_chat, "completions": self._ev_completions, "native": self._ev_native}[self.api]
        self.fast = self._fast_native if self.api == "native" else None

    # -- the loop ---------------------------------------------------------------------------
    def run(self) -> dict:
        ep = self.ep
        fdmap = self.fdmap
        heap = self.heap
        monotonic = time.monotonic
        # One preallocated read buffer: a fresh 256 KiB object per recv would cost an mmap each.
        rbuf = memoryview(bytearray(READ_SIZE))
        bufs = [rbuf]
        kernel = self.kernel_stamps
        # Kernel receive stamps are CLOCK_REALTIME; this offset puts them on the monotonic clock.
        rt_offset = time.time() - monotonic()
        unpack_ts = _TIMESPEC.unpack_from
        next_check = 0.0
        while True:
            now = monotonic()
            while heap and heap[0][0] <= now:
                _, sid = heapq.heappop(heap)
                self._start(self.streams[sid], now)
            if now >= next_check:
                self._housekeeping(now)
                next_check = now + 0.02
                if self.stopping and self.active == 0:
                    break
            wake = heap[0][0] if heap else next_check
            timeout = min(wake, next_check) - now
            events = ep.poll(timeout if timeout > 0 else 0, 1024)
            for fd, _ev in events:
                st = fdmap.get(fd)
                if st is None:
                    if fd == self.ctrl_fd:
                        self._control()
                    continue
                phase = st.phase
                if phase >= HEAD:
                    try:
                        if kernel:
                            n, anc, _, _ = st.sock.recvmsg_into(bufs, 64)
                        else:
                            n = st.sock.recv_into(rbuf)
                            anc = None
                        data = rbuf[:n].tobytes()
                    except BlockingIOError:
                        continue
                    except OSError as exc:
                        if not st.got and not st.retried:
                            self._retry_fresh(st)
                        else:
                            self._fail(st, "disconnected", f"read failed: {exc}")
                        continue
                    t = monotonic()
                    if anc:
                        # When the data reached the socket (the kernel's stamp), not when this loop
                        # got to it: a busy or descheduled client does not stamp late.
                        sec, nsec = unpack_ts(anc[0][2])
                        tk = sec + nsec * 1e-9 - rt_offset
                        if t - 30.0 < tk < t:
                            self.lag_sum += t - tk
                            self.lag_n += 1
                            t = tk
                    if data:
                        self._feed(st, data, t)
                    else:
                        self._eof(st, t)
                elif phase == CONNECTING:
                    err = st.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                    if err:
                        self._connect_failed(st, OSError(err, os.strerror(err)))
                    else:
                        st.phase = SENDING
                        self._send(st)
                elif phase == SENDING:
                    self._send(st)
            if self.cut_pending:  # the window closed: what had arrived is read, cut the rest
                self.cut_pending = False
                for st in list(self.streams.values()):
                    if st.req is not None:
                        self._finish(st, False, cut=True)
        self._housekeeping(monotonic(), final=True)
        self.ep.close()
        return self._result()

    def _control(self) -> None:
        data = os.read(self.ctrl_fd, 8)
        self.ep.unregister(self.ctrl_fd)
        if len(data) == 8:
            self._open_window(struct.unpack("d", data)[0])
        elif not self.stopping:
            self._stop_early("the parent process went away")

    def _open_window(self, ws: float) -> None:
        if self.ws is not None:
            return
        self.ws = ws
        if not self.count_mode:
            self.we = ws + self.window_s
        self.cpu0 = _cpu_seconds()
        self.busy_from = time.monotonic()

    def _report_ready(self, now: float) -> None:
        """Every stream here has finished a request, after the warmup: say so (or open the window)."""
        self.reported = True
        if self.status_fd >= 0:
            os.write(self.status_fd, b"R" + struct.pack("d", now))
        else:
            self._open_window(snap(now, self.t0, self.bin_w))

    def _housekeeping(self, now: float, final: bool = False) -> None:
        if not self.reported and (final or (self.turned >= len(self.streams) and now >= self.min_ws)):
            self._report_ready(now)
        if self.ws is None:
            window_over = False
        elif self.count_mode:
            window_over = self.full_end is not None
        else:
            window_over = now >= self.we
        if self.cpu1 is None and self.cpu0 is not None and (window_over or final):
            self.cpu1 = _cpu_seconds()
            self.busy_to = now
        if not self.count_mode and window_over and not self.stopping:
            self.stopping = True
            self.stop_reason = self.stop_reason or "window"
            if not self.drain:
                self.cut_pending = True
        if self.stopping:
            self.heap.clear()
        # per-request timeout (a scan of every stream: four times a second is plenty)
        if now < self.next_timeout_scan and not final:
            return
        self.next_timeout_scan = now + 0.25
        limit = now - self.timeout
        for st in self.streams.values():
            req = st.req
            if req is not None and req.t_send < limit:
                got = sum(req.ks)
                self._fail(st, "timeout", f"no complete response after {self.timeout:g} s ({got} of "
                                          f"{req.expect} tokens arrived)")

    def _stop_early(self, reason: str) -> None:
        if self.stopping:
            return
        self.stopping = True
        self.stop_reason = reason
        self.heap.clear()
        for st in list(self.streams.values()):
            if st.req is not None:
                self._finish(st, False, cut=True)

    # -- issuing ------------------------------------------------------------------------------
    def _start(self, st: Stream, now: float) -> None:
        if self.stopping:
            return
        measured = self.ws is not None and now >= self.ws
        if self.count_mode and measured:
            if self.budget <= 0:
                if self.full_end is None:
                    self.full_end = now
                if self.active == 0:
                    self.stopping = True
                    self.stop_reason = "requests"
                return
            self.budget -= 1
        elif not self.count_mode and now >= self.we:
            return
        index = self.counter
        self.counter += 1
        length = self.output_len
        if not st.turned and not st.fails and length > 1:
            # A stream's first request stops after a random share of the output, so streams reach
            # steady state at phases spread evenly over a request (no lockstep, no bursts).
            length = random.Random(f"{self.plan['key']}:first:{st.sid}").randint(1, length)
        st.req = Req(index, now, measured, length)
        self.active += 1
        if self.first_send is None:
            self.first_send = now
        payload = self.factory.build(f"{self.plan['key']}:{st.sid}:{index}", st.sid + index * 7919, length)
        if st.sock is not None and st.keepalive and st.body_done:
            st._reset()
            st.out = payload
            st.retried = False
            st.phase = SENDING
            self._send(st, reused=True)
        else:
            self._close(st)
            st._reset()
            st.out = payload
            self._connect(st)

    def _connect(self, st: Stream) -> None:
        try:
            sock = socket.socket(self.family, socket.SOCK_STREAM)
        except OSError as exc:
            self._fail(st, "client_error", f"cannot open a socket: {exc} (raise the open-file limit?)")
            return
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.kernel_stamps:
            try:
                sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            except OSError:
                self.kernel_stamps = False
        st.sock = sock
        st.fd = sock.fileno()
        self.fdmap[st.fd] = st
        err = sock.connect_ex(self.sockaddr)
        if err in (0, errno.EINPROGRESS):
            st.phase = CONNECTING
            self.ep.register(st.fd, select.EPOLLOUT)
        else:
            self._connect_failed(st, OSError(err, os.strerror(err)))

    def _connect_failed(self, st: Stream, exc: OSError) -> None:
        kind = "connect_refused" if exc.errno == errno.ECONNREFUSED else "connect_failed"
        self._fail(st, kind, f"connect to {self.addr_text}: {exc.strerror or exc}")

    def _send(self, st: Stream, reused: bool = False) -> None:
        try:
            n = st.sock.send(st.out)
        except BlockingIOError:
            n = 0
        except OSError as exc:
            if reused and not st.retried:
                self._retry_fresh(st)
            else:
                self._fail(st, "disconnected", f"send failed: {exc}")
            return
        st.out = st.out[n:]
        if st.out:
            if st.phase != SENDING or reused:
                st.phase = SENDING
                self._modify(st, select.EPOLLOUT)
            return
        st.phase = HEAD
        st.retried = st.retried or not reused
        self._modify(st, select.EPOLLIN)

    def _modify(self, st: Stream, mask: int) -> None:
        try:
            self.ep.modify(st.fd, mask)
        except FileNotFoundError:
            self.ep.register(st.fd, mask)

    def _retry_fresh(self, st: Stream) -> None:
        """A kept-alive connection the server had closed: send once more on a new one."""
        req, out = st.req, st.out
        self._close(st)
        st._reset()
        st.req = req
        st.retried = True
        st.out = self.factory.build(f"{self.plan['key']}:{st.sid}:{req.index}", st.sid + req.index * 7919, req.expect)
        del out
        self._connect(st)

    def _close(self, st: Stream) -> None:
        if st.sock is not None:
            self.fdmap.pop(st.fd, None)
            try:
                self.ep.unregister(st.fd)
            except (FileNotFoundError, ValueError, OSError):
                pass
            st.sock.close()
            st.sock = None
            st.fd = -1
        st.phase = IDLE

    # -- reading ------------------------------------------------------------------------------
    def _feed(self, st: Stream, data: bytes, t: float) -> None:
        req = st.req
        if st.phase == BODY and st.chunked and req is not None and req.status == 200:  # the common case
            data = self._dechunk(st, data)
            if data:
                self._events(st, data, t)
            if st.body_done and st.req is not None:
                self._body_end(st, t)
            return
        st.got = True
        if st.phase == HEAD:
            buf = st.raw + data if st.raw else data
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > 65536:
                    self._fail(st, "malformed", "response headers larger than 64 KiB")
                else:
                    st.raw = buf
                return
            if not self._head(st, buf[:end]):
                return
            data = buf[end + 4:]
            st.raw = b""
            st.phase = BODY
            if not data:
                return
        if st.req is None:
            return
        if st.chunked:
            data = self._dechunk(st, data)
            if data is None:
                return
        elif st.clen >= 0:
            if len(data) >= st.clen:
                data = data[:st.clen]
                st.clen = 0
                st.body_done = True
            else:
                st.clen -= len(data)
        req = st.req
        if req.status != 200:
            st.errbody += data
            if st.body_done:
                self._http_error(st)
            return
        if data:
            self._events(st, data, t)
        if st.body_done and st.req is not None:
            self._body_end(st, t)

    def _head(self, st: Stream, head: bytes) -> bool:
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        try:
            status = int(parts[1])
            version = parts[0].upper()
        except (IndexError, ValueError):
            self._fail(st, "malformed", f"not an HTTP status line: {lines[0][:80]!r}")
            return False
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip().lower()
        st.req.status = status
        st.chunked = b"chunked" in headers.get(b"transfer-encoding", b"")
        if not st.chunked and b"content-length" in headers:
            try:
                st.clen = int(headers[b"content-length"])
            except ValueError:
                self._fail(st, "malformed", "bad Content-Length")
                return False
            if st.clen == 0:
                st.body_done = True
        conn = headers.get(b"connection", b"")
        st.keepalive = (version == b"HTTP/1.1" and b"close" not in conn) or b"keep-alive" in conn
        if status == 200:
            ctype = headers.get(b"content-type", b"")
            if b"event-stream" not in ctype:
                self._fail(st, "malformed", f"expected an event stream, got Content-Type {ctype.decode()!r} "
                                            "(does the server ignore stream=true?)")
                return False
        elif st.body_done:
            self._http_error(st)
            return False
        return True

    def _http_error(self, st: Stream) -> None:
        status = st.req.status
        text = st.errbody[:300].decode("utf-8", "replace").strip()
        obj = _json_or_none(st.errbody)
        if isinstance(obj, dict):
            detail = obj.get("message") or obj.get("detail") or obj.get("error")
            if isinstance(detail, dict):
                detail = detail.get("message") or detail
            if detail:
                text = str(detail)[:300]
        kind = f"http_{status}" if status in (401, 403, 404) else ("http_5xx" if status >= 500 else "http_4xx")
        keep = st.keepalive and st.body_done
        self._fail(st, kind, f"HTTP {status}: {text}", keep=keep)

    def _dechunk(self, st: Stream, data: bytes):
        """The body bytes in ``data`` (chunked transfer coding); None after a framing error."""
        buf = st.raw + data if st.raw else data
        n = len(buf)
        pos = 0
        out = []
        rem = st.crem  # >0: bytes left of a chunk; 0: a size line next; -2: its CRLF next; -3: trailers
        if rem > 0:
            take = rem if rem < n else n
            out.append(buf[:take])
            pos = take
            rem -= take
            if rem == 0:
                rem = -2
        if rem == -2:
            if n - pos < 2:
                st.raw, st.crem = buf[pos:], rem
                return b"".join(out)
            if buf[pos:pos + 2] != b"\r\n":
                self._fail(st, "malformed", "chunked encoding: no CRLF after a chunk")
                return None
            pos += 2
            rem = 0
        find = buf.find
        while rem == 0:
            e = find(b"\r\n", pos)
            if e < 0:
                if n - pos > 64:
                    self._fail(st, "malformed", "chunked encoding: chunk size line too long")
                    return None
                break
            try:
                size = int(buf[pos:e], 16)
            except ValueError:
                try:  # a chunk extension: "1a;name=value"
                    size = int(buf[pos:e].split(b";", 1)[0], 16)
                except ValueError:
                    self._fail(st, "malformed", f"chunked encoding: bad chunk size {buf[pos:e][:20]!r}")
                    return None
            begin = e + 2
            if size == 0:
                pos = begin
                rem = -3
                break
            stop = begin + size
            if stop + 2 <= n:  # the whole chunk and its CRLF are here: the common case
                if buf[stop:stop + 2] != b"\r\n":
                    self._fail(st, "malformed", "chunked encoding: no CRLF after a chunk")
                    return None
                out.append(buf[begin:stop])
                pos = stop + 2
            elif stop <= n:
                out.append(buf[begin:stop])
                pos = stop
                rem = -2
            else:
                if begin < n:
                    out.append(buf[begin:])
                rem = size - max(0, n - begin)
                pos = n
        while rem == -3:  # trailers, then the empty line that ends the body
            e = find(b"\r\n", pos)
            if e < 0:
                break
            if e == pos:
                st.body_done = True
                pos += 2
                rem = 0
                break
            pos = e + 2
        st.crem = rem
        st.raw = buf[pos:] if pos < n else b""
        if len(out) == 1:
            return out[0]
        return b"".join(out)

    def _events(self, st: Stream, data: bytes, t: float) -> None:
        """Handle every complete server-sent event; keep the rest for the next read."""
        if st.dec:
            data = st.dec + data
            st.dec = b""
        try:
            text = data.decode()
        except UnicodeDecodeError as exc:
            if exc.reason == "unexpected end of data":  # a character split between two reads
                st.dec = data[exc.start:]
                text = data[:exc.start].decode(errors="replace")
            else:
                text = data.decode(errors="replace")
        sse = st.sse + text if st.sse else text
        if "\r" in sse:
            sse = sse.replace("\r\n", "\n")
        start = 0
        find = sse.find
        startswith = sse.startswith
        raw_decode = _RAW_DECODE
        handle = self.handle
        fast = self.fast
        trace = st.trace
        while True:
            e = find("\n\n", start)
            if e < 0:
                break
            obj = None
            if startswith("data: {", start) and find("\n", start, e) < 0:
                if trace is not None and len(trace) < self.trace_n:
                    trace.append((t, sse[start + 6:e]))
                if fast is not None and sse[e - 1] == "}" and fast(st.req, sse, start + 6, e, t):
                    start = e + 2
                    continue
                try:  # the JSON straight out of the buffer, no copy
                    obj, end = raw_decode(sse, start + 6)
                except ValueError:
                    obj = None
                else:
                    if end != e and sse[end:e].strip():
                        obj = None
            if obj is None:
                payload = _sse_data(sse[start:e])
                if payload is None:
                    start = e + 2
                    continue
                if payload is False:
                    self._fail(st, "malformed", f"not a server-sent event: {sse[start:e][:120]!r}")
                    return
                if payload == "[DONE]":
                    start = e + 2
                    req = st.req
                    req.done = True
                    req.end = t
                    continue
                try:
                    obj = json.loads(payload)
                except ValueError as exc:
                    self._fail(st, "malformed", f"event data is not JSON ({exc}): {payload[:120]!r}")
                    return
                if not isinstance(obj, dict):
                    self._fail(st, "malformed", f"event data is not a JSON object: {payload[:120]!r}")
                    return
            start = e + 2
            if handle(st.req, obj, t) is False:
                err = obj.get("error", obj)
                msg = err.get("message") if isinstance(err, dict) else err
                self._fail(st, "server_error", str(msg)[:300])
                return
        st.sse = sse[start:] if start < len(sse) else ""

    # The fast path of /generate: its chunks repeat the whole text and output_ids so far, so a
    # full parse grows with the output; a plain chunk is read from its counters instead. Anything
    # else (the first and last chunks, errors, odd layouts) answers False: the full parse.
    def _fast_native(self, req: Req, s: str, a: int, b: int, t: float) -> bool:
        if req.prompt_tokens is None:  # the first chunk: parse it all once
            return False
        find = s.find
        k = find('"finish_reason":', a, b)
        if k < 0 or not _null_at(s, k + 16, b) or find('"error"', a, b) >= 0:
            return False
        ct = _int_at(s, find('"completion_tokens":', a, b), 20, b)
        if ct is None:
            return False
        k = find('"spec_verify_ct":', a, b)
        if k >= 0:
            verify = _int_at(s, k, 17, b)
            if verify is None:
                return False
            req.verify = verify
        if ct > req.ct:
            req.ts.append(t)
            req.ks.append(ct - req.ct)
            req.ct = ct
            if req.first is None:
                req.first = t
        return True

    # per-API event handlers: False means an error object
    @staticmethod
    def _chat_text(choice: dict):
        delta = choice.get("delta") or {}
        text = delta.get("content")
        if delta.get("reasoning_content"):
            text = (text or "") + delta["reasoning_content"]
        return text

    @staticmethod
    def _completion_text(choice: dict):
        return choice.get("text")

    def _ev_openai(self, req: Req, obj: dict, t: float, text_of) -> bool:
        """One OpenAI SSE event (chat or completions, told apart by ``text_of``)."""
        choices = obj.get("choices")
        if choices:
            c0 = choices[0]
            text = text_of(c0)
            if text:
                req.ts.append(t)
                req.ks.append(len(text.split()) or 1)
                if req.first is None:
                    req.first = t
            if c0.get("finish_reason"):
                req.finish = c0["finish_reason"]
                req.end = t
        elif "error" in obj or obj.get("object") == "error":
            return False
        usage = obj.get("usage")
        if usage:
            req.usage_ct = usage.get("completion_tokens")
            req.prompt_tokens = usage.get("prompt_tokens")
        return True

    def _ev_chat(self, req: Req, obj: dict, t: float):
        return self._ev_openai(req, obj, t, self._chat_text)

    def _ev_completions(self, req: Req, obj: dict, t: float):
        return self._ev_openai(req, obj, t, self._completion_text)

    def _ev_native(self, req: Req, obj: dict, t: float):
        meta = obj.get("meta_info")
        if not isinstance(meta, dict):
            if "error" in obj or obj.get("object") == "error":
                return False
            return True
        ct = meta.get("completion_tokens")
        if isinstance(ct, int) and ct > req.ct:
            req.ts.append(t)
            req.ks.append(ct - req.ct)
            req.ct = ct
            if req.first is None:
                req.first = t
        verify = meta.get("spec_verify_ct")
        if verify is not None:
            req.verify = verify
        if req.prompt_tokens is None:
            req.prompt_tokens = meta.get("prompt_tokens")
        if meta.get("finish_reason"):
            req.finish = meta["finish_reason"]
            req.end = t
            req.usage_ct = ct
        return True

    def _body_end(self, st: Stream, t: float) -> None:
        req = st.req
        if req.done or req.finish:
            if req.end is None:
                req.end = t
            self._finish(st, True)
        else:
            self._fail(st, "incomplete", f"the response ended after {sum(req.ks)} of {req.expect} tokens "
                                         "without [DONE] or a finish reason", keep=st.keepalive)

    def _eof(self, st: Stream, t: float) -> None:
        req = st.req
        if req is None:
            self._close(st)
            return
        if st.phase == BODY and not st.chunked and st.clen < 0:
            st.body_done = True
            st.keepalive = False
            if req.status == 200:
                self._body_end(st, t)
            else:
                self._http_error(st)
            return
        if not st.got and not st.retried:
            self._retry_fresh(st)
            return
        self._fail(st, "disconnected", f"the server closed the connection after {sum(req.ks)} of "
                                       f"{req.expect} tokens")

    # -- endings ------------------------------------------------------------------------------
    def _fail(self, st: Stream, kind: str, message: str, keep: bool = False) -> None:
        if st.req is None:
            self._close(st)
            return
        self._finish(st, False, kind=kind, message=message, keep=keep)

    def _finish(self, st: Stream, ok: bool, kind: str = "", message: str = "", cut: bool = False,
                keep: bool = True) -> None:
        req = st.req
        st.req = None
        self.active -= 1
        now = time.monotonic()
        if not st.turned:
            st.turned = True
            self.turned += 1
            if not self.reported and self.turned >= len(self.streams) and now >= self.min_ws:
                self._report_ready(now)
        if not (ok and keep and st.keepalive and st.body_done):
            self._close(st)
        self._account(req, ok)
        if cut:
            self.cut += 1
            return
        if ok:
            self.ok += 1
            self.consecutive_failures = 0
            st.fails = 0
            if not self.stopping:
                self._start(st, now)
            elif self.count_mode and self.active == 0:
                pass
            return
        self.failed += 1
        self.consecutive_failures += 1
        self.kinds[kind] = self.kinds.get(kind, 0) + 1
        self.examples.setdefault(kind, message)
        st.fails += 1
        limit = max(10, len(self.streams))
        if self.consecutive_failures >= limit:
            self._stop_early(f"the last {self.consecutive_failures} requests all failed")
            return
        if not self.stopping:
            delay = min(1.0, 0.05 * (2 ** min(st.fails - 1, 5)))
            heapq.heappush(self.heap, (now + delay, st.sid))

    def _account(self, req: Req, ok: bool) -> None:
        ts, ks = req.ts, req.ks
        n = sum(ks)
        if ok and req.usage_ct and n and req.usage_ct != n and self.api != "native":
            # Scale the per-chunk word counts so the total is the server's token count.
            scale = req.usage_ct / n
            cum = 0.0
            prev = 0
            scaled = []
            for k in ks:
                cum += k * scale
                now = int(round(cum))
                scaled.append(now - prev)
                prev = now
            ks = scaled
            n = req.usage_ct
        if ts:
            t0 = self.t0
            inv = self.inv_bw
            bins = self.bins
            last = int((ts[-1] - t0) * inv)
            if last >= len(bins):
                bins.extend([0.0] * (last + 1 - len(bins)))
            for t, k in zip(ts, ks):  # noqa: B905 - the node may run Python < 3.10
                bins[int((t - t0) * inv)] += k
        if not ok:
            return
        end = req.end
        self.whole_tokens += n
        if self.last_end is None or end > self.last_end:
            self.last_end = end
        self.ends.append(end)
        if n != req.expect:
            self.short += 1
        if not (req.measured or (not self.count_mode and self.ws is not None and self.ws <= req.t_send < self.we)):
            return
        self.out_tokens.append(n)
        if req.prompt_tokens is not None:
            self.in_tokens.append(req.prompt_tokens)
        if req.verify:
            self.spec_ct += n
            self.spec_verify += req.verify
        e2e = end - req.t_send
        self.e2e.append(e2e)
        if req.first is None:
            return
        ttft = req.first - req.t_send
        self.ttft.append(ttft)
        if n > 1:
            self.tpot.append((e2e - ttft) / (n - 1))
        span = ts[-1] - ts[0]
        if len(ts) > 1 and span > 0:
            self.decode.append((n - ks[0]) / span)
        itl = self.itl
        prev = ts[0]
        for t, k in zip(ts[1:], ks[1:]):  # noqa: B905
            if k > 0:
                gap = (t - prev) / k
                if k == 1:
                    itl.append(gap)
                else:
                    itl.extend([gap] * k)
            prev = t

    def _result(self) -> dict:
        for st in self.streams.values():
            self._close(st)
            if st.trace:
                self.traces.append(st.trace)
        cpu = None
        lag = self.lag_sum / self.lag_n if self.lag_n else None
        if self.cpu0 is not None and self.cpu1 is not None and self.busy_to and self.busy_to > self.busy_from:
            span = self.busy_to - self.busy_from
            cpu = (self.cpu1 - self.cpu0) / span
        return {
            "ws": self.ws, "we": self.we, "ok": self.ok, "failed": self.failed, "cut": self.cut, "kinds": self.kinds,
            "examples": self.examples,
            "bins": self.bins, "whole_tokens": self.whole_tokens, "first_send": self.first_send,
            "last_end": self.last_end, "ends": self.ends, "ttft": self.ttft, "e2e": self.e2e,
            "tpot": self.tpot, "decode": self.decode, "itl": self.itl, "out_tokens": self.out_tokens,
            "in_tokens": self.in_tokens, "short": self.short, "spec_ct": self.spec_ct,
            "spec_verify": self.spec_verify, "stop_reason": self.stop_reason, "full_end": self.full_end,
            "cpu": cpu, "lag": lag, "streams": len(self.streams), "traces": self.traces,
        }


def _null_at(s: str, i: int, end: int) -> bool:
    """Whether the JSON value starting at ``s[i]`` (after spaces) is null."""
    while i < end and s[i] == " ":
        i += 1
    return s.startswith("null", i, end)


def _int_at(s: str, k: int, skip: int, end: int):
    """The non-negative integer after the key found at ``k`` (``skip`` = len of '"key":')."""
    if k < 0:
        return None
    i = k + skip
    while i < end and s[i] == " ":
        i += 1
    j = i
    while j < end and "0" <= s[j] <= "9":
        j += 1
    return int(s[i:j]) if j > i else None


def _sse_data(event: str):
    """The data of one event (None: no data, a comment or keep-alive; False: not SSE)."""
    data = []
    for line in event.split("\n"):
        if not line or line[0] == ":":
            continue
        field, _, value = line.partition(":")
        if field == "data":
            data.append(value[1:] if value[:1] == " " else value)
        elif field in ("event", "id", "retry"):
            continue
        else:
            return False
    if not data:
        return None
    return "\n".join(data)


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# ---------------------------------------------------------------------------------------------
# One level
# ---------------------------------------------------------------------------------------------
def resolve_workers(settings: dict, concurrency: int) -> int:
    if settings["workers"]:
        return max(1, min(settings["workers"], concurrency))
    return max(1, min(os.cpu_count() or 1, math.ceil(concurrency / 256)))


def ensure_fd_limit(needed: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= needed:
        return
    if hard != resource.RLIM_INFINITY and hard < needed:
        raise SettingsError(f"{needed} streams in one process need {needed} open files, but the hard limit is "
                            f"{hard}: raise `ulimit -n` on the node or use more workers")
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


def snap(t: float, t0: float, bin_w: float) -> float:
    """``t`` rounded down to the fine-bin grid that starts at ``t0`` (so the request a stream
    sends right after the window opens is measured)."""
    return t0 + math.floor((t - t0) / bin_w + 1e-9) * bin_w


def _run_in_child(plan: dict, ids: list[int]) -> tuple[int, int, int]:
    """Fork one worker process; returns (pid, fd to read its messages, fd to send it the window start)."""
    res_r, res_w = os.pipe()
    ctl_r, ctl_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        code = 0
        try:
            os.close(res_r)
            os.close(ctl_w)
            try:
                result = Worker(plan, ids, ctrl_fd=ctl_r, status_fd=res_w).run()
            except Exception as exc:  # noqa: BLE001 - reported to the parent
                result = {"crash": f"{type(exc).__name__}: {exc}"}
            data = pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)
            view = memoryview(b"D" + struct.pack("Q", len(data)) + data)
            while view:
                n = os.write(res_w, view)
                view = view[n:]
        except BaseException:  # noqa: BLE001 - the child must never return into the caller
            code = 1
        finally:
            os._exit(code)
    os.close(res_w)
    os.close(ctl_r)
    return pid, res_r, ctl_w


def _coordinate(children: list, t0: float, bin_w: float) -> list[dict]:
    """Read every child's messages; once all are ready, send them the common window start."""
    bufs = {res_r: b"" for _, res_r, _ in children}
    ready: dict[int, float] = {}
    results: dict[int, dict] = {}
    open_fds = set(bufs)
    sent = False
    while open_fds:
        readable, _, _ = select.select(list(open_fds), [], [], 1.0)
        for fd in readable:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                open_fds.discard(fd)
                ready.setdefault(fd, time.monotonic())
                continue
            buf = bufs[fd] + chunk
            while buf:
                if buf[:1] == b"R" and len(buf) >= 9:
                    ready[fd] = struct.unpack("d", buf[1:9])[0]
                    buf = buf[9:]
                elif buf[:1] == b"D" and len(buf) >= 9:
                    size = struct.unpack("Q", buf[1:9])[0]
                    if len(buf) < 9 + size:
                        break
                    results[fd] = pickle.loads(buf[9:9 + size])
                    buf = buf[9 + size:]
                else:
                    break
            bufs[fd] = buf
        if not sent and len(ready) == len(children):
            sent = True
            ws = struct.pack("d", snap(max(ready.values()), t0, bin_w))
            for _, _, ctl_w in children:
                try:
                    os.write(ctl_w, ws)
                except OSError:
                    pass
    out = []
    for pid, res_r, ctl_w in children:
        os.close(res_r)
        os.close(ctl_w)
        os.waitpid(pid, 0)
        out.append(results.get(res_r) or {"crash": f"worker process {pid} died without a result"})
    return out


def run_once(settings: dict, concurrency: int, model: str, key: str, trace: int = 0) -> dict:
    """Run one level once; returns the workers' raw results merged."""
    workers = resolve_workers(settings, concurrency)
    per_worker = math.ceil(concurrency / workers)
    ensure_fd_limit(per_worker + 64)
    warmup, window = settings["warmup_s"], settings["window_s"]
    count_mode = settings["requests"] > 0
    batches = settings["batches"]
    t0 = time.monotonic() + 0.02 + 0.03 * workers
    ramp = warmup * RAMP_FRACTION
    starts = [t0 + ramp * i / concurrency for i in range(concurrency)]
    bin_w = 0.002 if count_mode else window / (batches * FINE_BINS_PER_BATCH)
    groups = [list(range(w, concurrency, workers)) for w in range(workers)]
    shares: list = [None] * workers
    if count_mode:  # an exact split of the request budget over the workers
        total = settings["requests"]
        shares = [total * len(ids) // concurrency for ids in groups]
        for i in range(total - sum(shares)):
            shares[i % workers] += 1
    plans = [{"settings": settings, "model": model, "t0": t0, "bin_w": bin_w, "starts": starts, "budget": share,
              "key": key, "trace": trace} for share in shares]
    poller = MetricsPoller(settings, t0) if settings.get("_metrics") else None
    try:
        if workers == 1:
            if poller:
                poller.start()
            results = [Worker(plans[0], groups[0]).run()]
        else:
            children = [_run_in_child(plan, ids) for plan, ids in zip(plans, groups)]  # noqa: B905
            if poller:
                poller.start()
            results = _coordinate(children, t0, bin_w)
    finally:
        if poller:
            poller.halt.set()
    if poller:
        poller.join(timeout=5)
    crashes = [r["crash"] for r in results if "crash" in r]
    if crashes:
        raise RuntimeError("a client worker process failed: " + "; ".join(crashes))
    merged = _merge(results)
    merged.update(t0=t0, bin_w=bin_w, workers=workers, concurrency=concurrency)
    _window_rates(merged, settings)
    if poller:
        merged["metrics"] = poller.result(merged["ws"], merged["window_end"])
        merged["metrics_error"] = poller.error
    else:
        merged["metrics"] = merged["metrics_error"] = None
    return merged


def _merge(results: list[dict]) -> dict:
    out: dict = {"kinds": {}, "examples": {}}
    for key in ("ok", "failed", "cut", "whole_tokens", "short", "spec_ct", "spec_verify"):
        out[key] = sum(r[key] for r in results)
    for key in ("ttft", "e2e", "tpot", "decode", "out_tokens", "in_tokens", "traces", "ends"):
        out[key] = [v for r in results for v in r[key]]
    itl = array("d")
    for r in results:
        itl.extend(r["itl"])
    out["itl"] = itl
    bins = [0.0] * max(len(r["bins"]) for r in results)
    for r in results:
        for i, v in enumerate(r["bins"]):
            bins[i] += v
    out["bins"] = bins
    for r in results:
        for kind, n in r["kinds"].items():
            out["kinds"][kind] = out["kinds"].get(kind, 0) + n
        for kind, msg in r["examples"].items():
            out["examples"].setdefault(kind, msg)
    firsts = [r["first_send"] for r in results if r["first_send"] is not None]
    lasts = [r["last_end"] for r in results if r["last_end"] is not None]
    out["first_send"] = min(firsts) if firsts else None
    out["last_end"] = max(lasts) if lasts else None
    wss = [r["ws"] for r in results if r["ws"] is not None]
    out["ws"] = max(wss) if wss else None
    fulls = [r["full_end"] for r in results if r["full_end"] is not None]
    out["full_end"] = min(fulls) if fulls else None
    reasons = [r["stop_reason"] for r in results if r["stop_reason"] not in (None, "window", "requests")]
    out["stop_reason"] = reasons[0] if reasons else None
    out["cpu"] = [r["cpu"] for r in results]
    out["lag"] = [r["lag"] for r in results]
    out["window_end"] = None
    return out


def _window_rates(raw: dict, settings: dict) -> tuple[float | None, list[float], float]:
    """(tokens/s over the steady window, batch rates, window seconds); sets raw["window_end"]."""
    ws = raw["ws"]
    if ws is None:
        return None, [], 0.0
    bins, bin_w, batches = raw["bins"], raw["bin_w"], settings["batches"]
    first = int(round((ws - raw["t0"]) / bin_w))
    if settings["requests"] > 0:
        end = raw["full_end"] if raw["full_end"] is not None else raw["last_end"]
        if end is None or end <= ws:
            return None, [], 0.0
        usable = int((end - ws) / bin_w)
        batches = max(2, min(batches, usable // 5))  # a short run: fewer, still meaningful batches
        usable -= usable % batches
        if usable < batches:
            return None, [], 0.0
    else:
        usable = batches * FINE_BINS_PER_BATCH
        if raw["stop_reason"] and raw["last_end"] is not None:
            usable = min(usable, max(0, int((raw["last_end"] - ws) / bin_w)))
            usable -= usable % batches
            if usable < batches:
                return None, [], 0.0
    window_bins = bins[first:first + usable]
    window_bins += [0.0] * (usable - len(window_bins))
    window = usable * bin_w
    raw["window_end"] = ws + window
    per = usable // batches
    rates = [sum(window_bins[i * per:(i + 1) * per]) / (per * bin_w) for i in range(batches)]
    return sum(window_bins) / window, rates, window


def describe_failures(kinds: dict, examples: dict, settings: dict) -> str:
    host, port, _ = parse_base_url(settings["base_url"])
    parts = []
    for kind, n in sorted(kinds.items(), key=lambda kv: -kv[1]):
        base = kind if kind in KIND_HELP else ("http_5xx" if kind.startswith("http_5") else "http_4xx")
        text = KIND_HELP.get(base, kind).format(addr=f"{host}:{port}", timeout=settings["request_timeout_s"])
        parts.append(f"{n} x {kind} ({text}; e.g. {examples.get(kind, '')})")
    return "; ".join(parts)


def run_level(settings: dict, concurrency: int, server: dict, trace: int = 0) -> dict:
    """Measure one level (all its repeats); the returned dict is the level's result."""
    started = time.time()
    t_start = time.monotonic()
    settings = dict(settings, _metrics=bool(server.get("metrics_available")))
    spec = bool(server.get("speculative_algorithm"))
    level: dict = {"concurrency": concurrency, "api": settings["api"], "error": None, "warnings": []}
    raws = []
    accept_server = []
    flushed_all = True
    try:
        for rep in range(settings["repeats"]):
            if settings["flush_cache"] and spec:
                flushed_all = flush_cache(settings) and flushed_all
            raw = run_once(settings, concurrency, server["model"], f"c{concurrency}r{rep}", trace=trace)
            raws.append(raw)
            if spec and settings["api"] != "native":
                value = server_accept_length(settings)
                if value is not None:
                    accept_server.append(value)
            if raw["ok"] == 0 or raw["stop_reason"]:
                break
    except (OSError, RuntimeError, SettingsError) as exc:
        level["error"] = f"C={concurrency}: the client failed: {exc}"
        level.update(_empty_level())
        return level
    level.update(summarize(raws, settings, concurrency))
    if spec:
        if settings["api"] == "native" and level.pop("_spec_verify"):
            level["accept_length"] = round(level.pop("_spec_ct") / level.pop("_spec_verify_sum"), 4)
            level["accept_length_source"] = "sum(completion_tokens) / sum(spec_verify_ct) of /generate"
        elif accept_server:
            level["accept_length"] = round(sum(accept_server) / len(accept_server), 4)
            level["accept_length_source"] = ("/get_server_info avg_spec_accept_length after "
                                             + ("/flush_cache" if settings["flush_cache"] and flushed_all
                                                else "no flush (lifetime average)"))
    for key in ("_spec_verify", "_spec_ct", "_spec_verify_sum"):
        level.pop(key, None)
    level.setdefault("accept_length", None)
    level.setdefault("accept_length_source", None)
    if spec and level["accept_length"] is None and level["requests_ok"]:
        level["warnings"].append("speculative server, but no accept length: neither spec_verify_ct in /generate "
                                 "nor avg_spec_accept_length in /get_server_info")
    if server.get("metrics_available") is False:
        level["server_note"] = "no /metrics (start SGLang with --enable-metrics for running/queued counts)"
    level["started_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started))
    level["duration_s"] = round(time.monotonic() - t_start, 3)
    if trace:
        level["_traces"] = [t for raw in raws for t in raw["traces"]]
    return level


def _empty_level() -> dict:
    return {"output_tok_per_s": None, "output_tok_per_s_ci95": None, "requests_ok": 0, "requests_failed": 0,
            "ttft_ms": None, "itl_ms": None, "tpot_ms": None, "e2e_ms": None, "accept_length": None}


def summarize(raws: list[dict], settings: dict, concurrency: int) -> dict:
    rates, batch_rates, windows = [], [], []
    for raw in raws:
        rate, batch, window = _window_rates(raw, settings)
        if rate is not None:
            rates.append(rate)
            batch_rates = batch if not batch_rates else batch_rates
            windows.append(window)
    ok = sum(r["ok"] for r in raws)
    failed = sum(r["failed"] for r in raws)
    kinds: dict = {}
    examples: dict = {}
    for raw in raws:
        for kind, n in raw["kinds"].items():
            kinds[kind] = kinds.get(kind, 0) + n
        for kind, msg in raw["examples"].items():
            examples.setdefault(kind, msg)
    level: dict = {}
    if len(rates) >= 2:
        mean, ci = mean_ci95(rates)
        method = f"t-interval over {len(rates)} repeats"
    elif rates:
        mean, ci = rates[0], mean_ci95(batch_rates)[1]
        method = f"batch means, {len(batch_rates)} batches of {windows[0] / len(batch_rates):.3g} s"
    else:
        mean, ci, method = None, None, None
    level["output_tok_per_s"] = round(mean, 3) if mean is not None else None
    level["output_tok_per_s_ci95"] = [round(max(0.0, ci[0]), 3), round(ci[1], 3)] if ci else None
    level["ci_method"] = method
    whole = []
    for raw in raws:
        if raw["first_send"] is not None and raw["last_end"] is not None and raw["last_end"] > raw["first_send"]:
            whole.append(raw["whole_tokens"] / (raw["last_end"] - raw["first_send"]))
    level["output_tok_per_s_whole_run"] = round(sum(whole) / len(whole), 3) if whole else None
    total_window = sum(windows)
    done = 0
    for raw in raws:
        rate, _, window = _window_rates(raw, settings)
        if rate is not None:
            done += sum(1 for end in raw["ends"] if raw["ws"] <= end < raw["ws"] + window)
    level["request_per_s"] = round(done / total_window, 4) if total_window else None
    level["requests_ok"] = ok
    level["requests_failed"] = failed
    level["requests_cut"] = sum(r["cut"] for r in raws)
    level["failures_by_kind"] = kinds
    level["failure_examples"] = examples
    ttft = [v for r in raws for v in r["ttft"]]
    itl = array("d")
    for r in raws:
        itl.extend(r["itl"])
    level["ttft_ms"] = summary(ttft, 1000.0)
    level["itl_ms"] = summary(itl, 1000.0)
    level["tpot_ms"] = summary([v for r in raws for v in r["tpot"]], 1000.0, ci=True)
    level["e2e_ms"] = summary([v for r in raws for v in r["e2e"]], 1000.0)
    level["decode_tok_per_s_per_stream"] = summary([v for r in raws for v in r["decode"]], 1.0, ci=True)
    outs = [v for r in raws for v in r["out_tokens"]]
    ins = [v for r in raws for v in r["in_tokens"]]
    level["requests_measured"] = len(outs)
    level["output_tokens_mean"] = round(sum(outs) / len(outs), 2) if outs else None
    level["input_tokens_mean"] = round(sum(ins) / len(ins), 2) if ins else None
    level["requests_short"] = sum(r["short"] for r in raws)
    level["_spec_verify"] = sum(r["spec_verify"] for r in raws) > 0
    level["_spec_ct"] = sum(r["spec_ct"] for r in raws)
    level["_spec_verify_sum"] = sum(r["spec_verify"] for r in raws)
    level["window_s"] = round(total_window / len(windows), 3) if windows else 0.0
    level["warmup_s"] = settings["warmup_s"]
    level["repeats"] = len(raws)
    metrics = [r["metrics"] for r in raws if r.get("metrics")]
    if metrics:
        level["server_running"] = metrics[-1]["running"]
        level["server_queued"] = metrics[-1]["queued"]
        rates = [m["generated_tok_per_s"] for m in metrics if m.get("generated_tok_per_s") is not None]
        level["server_output_tok_per_s"] = round(sum(rates) / len(rates), 3) if rates else None
    else:
        level["server_running"] = level["server_queued"] = level["server_output_tok_per_s"] = None
    cpus = [c for r in raws for c in r["cpu"] if c is not None]
    lags = [g for r in raws for g in r["lag"] if g is not None]
    peak = max(cpus) if cpus else None
    lag = max(lags) if lags else None
    level["client"] = {
        "workers": raws[0]["workers"],
        "cpu_percent": round(100 * sum(c or 0.0 for c in raws[-1]["cpu"]), 1) if cpus else None,
        "cpu_percent_max_worker": round(100 * peak, 1) if cpus else None,
        "read_lag_ms_mean": round(1000 * lag, 3) if lag is not None else None,
        "kernel_timestamps": bool(lags),
        "bottleneck": bool((peak is not None and peak >= BOTTLENECK_FRACTION)
                           or (lag is not None and lag >= READ_LAG_LIMIT_S)),
    }
    warnings = []
    if level["client"]["bottleneck"]:
        warnings.append(f"client bottleneck: a client worker used {100 * (peak or 0):.0f}% of a core and read data "
                        f"{1000 * (lag or 0):.1f} ms after it arrived on average, so the client (or a busy client "
                        "machine) rather than the server may set this figure; use more workers or a quieter machine")
    server_rate = level["server_output_tok_per_s"]
    if server_rate and mean and abs(mean / server_rate - 1) > 0.1:
        warnings.append(f"the server counted {server_rate:.1f} generated tok/s in the window, the client "
                        f"{mean:.1f}: other clients on the server, or a client bottleneck")
    if level["requests_short"]:
        warnings.append(f"{level['requests_short']} requests returned a different number of tokens than they "
                        "asked for (does the server honour max_tokens and ignore_eos?)")
    if settings["requests"] == 0 and mean is not None and done == 0 and ok:
        warnings.append(f"no request finished inside the window at concurrency {concurrency}: the window saw no "
                        "request turnover (prefills), so it may read above the steady state; raise window_s")
    if settings["requests"] and not rates and ok:
        warnings.append("request-count mode: the warmup left no interval with every stream busy; the steady-state "
                        "figure is missing, use the whole-run figure or more requests")
    errors = []
    stop = next((r["stop_reason"] for r in raws if r["stop_reason"]), None)
    if failed:
        head = f"{failed} of {ok + failed} requests failed"
        if ok == 0:
            head = f"every request failed ({failed})"
        if stop:
            head += f", and the level stopped early ({stop})"
        errors.append(f"C={concurrency}: {head}: {describe_failures(kinds, examples, settings)}")
    elif stop:
        errors.append(f"C={concurrency}: the level stopped early: {stop}")
    if not failed and ok == 0:
        if mean:
            warnings.append("no request completed during the level (all were cut at the window's end): "
                            "latency figures are missing; raise window_s or turn drain on")
        else:
            errors.append(f"C={concurrency}: no output token arrived during the level")
    level["error"] = errors[0] if errors else None
    if ok == 0:
        level["output_tok_per_s"] = None if failed else level["output_tok_per_s"]
    level["warnings"] = warnings
    return level


# ---------------------------------------------------------------------------------------------
# Sweeps, redaction, files, progress lines
# ---------------------------------------------------------------------------------------------
def format_level_line(level: dict, prefix: str = "") -> str:
    """One progress line: concurrency, tok/s with its interval, TTFT p50, errors."""
    conc = level.get("concurrency")
    tok = level.get("output_tok_per_s")
    ci = level.get("output_tok_per_s_ci95")
    ttft = (level.get("ttft_ms") or {}).get("p50")
    parts = [f"{prefix}C={conc:>4}"]
    if tok is None:
        parts.append("output      -  tok/s")
    else:
        interval = f" [{ci[0]:.1f}, {ci[1]:.1f}]" if ci else ""
        parts.append(f"output {tok:9.1f} tok/s{interval}")
    parts.append(f"TTFT p50 {ttft:.0f} ms" if ttft is not None else "TTFT p50 -")
    accept = level.get("accept_length")
    if accept:
        parts.append(f"accept {accept:.2f}")
    parts.append(f"ok {level.get('requests_ok', 0)} failed {level.get('requests_failed', 0)}")
    client = level.get("client") or {}
    if client.get("bottleneck"):
        parts.append("CLIENT-BOUND")
    if level.get("error"):
        parts.append(f"ERROR: {level['error']}")
    return " | ".join(parts)


_KEY_FLAG = re.compile(r"(--(?:admin-)?api-key(?:=|\s+))(\S+)")
_SECRET_KEYS = ("api_key", "admin_api_key", "authorization")


def redact(obj, secrets=()):
    """A copy of ``obj`` without API keys: secret-named keys, --api-key arguments and the
    literal secrets wherever they appear."""
    secrets = [s for s in secrets if s]

    def clean(value):
        if isinstance(value, dict):
            return {k: ("<redacted>" if str(k).lower() in _SECRET_KEYS and v else clean(v)) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            items = [clean(v) for v in value]
            for i, item in enumerate(items[:-1]):
                if isinstance(item, str) and item in ("--api-key", "--admin-api-key"):
                    items[i + 1] = "<redacted>"
            return items
        if isinstance(value, str):
            value = _KEY_FLAG.sub(r"\1<redacted>", value)
            for secret in secrets:
                value = value.replace(secret, "<redacted>")
            return value
        return value

    return clean(obj)


def write_json_atomic(path: str, obj) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(obj, handle, indent=2, sort_keys=False, default=str)
        handle.write("\n")
    os.replace(tmp, path)


def sweep(settings: dict, server: dict, on_level=None) -> list[dict]:
    """Every level in order; ``on_level(level)`` after each. Stops after a failed level when
    stop_on_error is set."""
    levels = []
    for concurrency in settings["concurrency"]:
        level = run_level(settings, concurrency, server)
        levels.append(level)
        if on_level:
            on_level(level)
        if level["error"] and settings["stop_on_error"]:
            break
    return levels


def describe_plan(settings: dict) -> str:
    mode = (f"{settings['requests']} requests per level" if settings["requests"]
            else f"{settings['warmup_s']:g} s warmup + {settings['window_s']:g} s window per level")
    target = settings["base_url"] or "the server the launch role starts"
    return (f"would sweep C={settings['concurrency']} against {target} ({settings['api']} API, "
            f"{settings['input_len']} in / {settings['output_len']} out tokens, {mode}, "
            f"{settings['repeats']} repeat(s))")


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="specbench_client.py",
        description="Closed-loop concurrency sweep against an SGLang or OpenAI-compatible server: steady-state "
                    "output tok/s with a 95%% interval, TTFT/ITL/TPOT/E2E percentiles, accept length, "
                    "server-side queueing and the client's own CPU use. Standard library only.",
        epilog="Example: python3 specbench_client.py --base-url http://127.0.0.1:30000 --concurrency 1,2,5,10 "
               "--warmup-s 10 --window-s 30 --output results.json")
    d = DEFAULTS
    p.add_argument("--base-url", default=d["base_url"], help="server root, http://HOST:PORT (default %(default)s)")
    p.add_argument("--api", choices=APIS, default=d["api"], help="chat, completions or native /generate "
                   "(default %(default)s)")
    p.add_argument("--model", default="", help="model name (default: the first of GET /v1/models)")
    p.add_argument("--api-key", default=os.environ.get("SPECBENCH_API_KEY", ""),
                   help="Bearer key (default: $SPECBENCH_API_KEY); never printed or written")
    p.add_argument("--concurrency", default=",".join(map(str, d["concurrency"])),
                   help="levels, comma-separated (default %(default)s)")
    p.add_argument("--input-len", type=int, default=d["input_len"], help="prompt tokens (default %(default)s)")
    p.add_argument("--output-len", type=int, default=d["output_len"], help="output tokens (default %(default)s)")
    p.add_argument("--warmup-s", type=float, default=d["warmup_s"], help="warmup per level, s (default %(default)s)")
    p.add_argument("--window-s", type=float, default=d["window_s"],
                   help="measurement window per level, s (default %(default)s)")
    p.add_argument("--requests", type=int, default=d["requests"],
                   help="request-count mode: requests per level after the warmup (default 0: window mode)")
    p.add_argument("--repeats", type=int, default=d["repeats"], help="runs per level (default %(default)s)")
    p.add_argument("--batches", type=int, default=d["batches"],
                   help="batch means for the interval with one repeat (default %(default)s)")
    p.add_argument("--seed", type=int, default=d["seed"], help="prompt seed (default %(default)s)")
    p.add_argument("--prompts-file", default="", help="JSONL prompts, one {\"prompt\": ...} a line")
    p.add_argument("--request-timeout-s", type=float, default=d["request_timeout_s"],
                   help="per-request timeout, s (default %(default)s)")
    p.add_argument("--workers", type=int, default=d["workers"],
                   help="client processes (default 0: one per 256 streams)")
    p.add_argument("--no-drain", dest="drain", action="store_false",
                   help="cut in-flight requests at the window's end (no whole-run figure from them)")
    p.add_argument("--keep-going", dest="stop_on_error", action="store_false",
                   help="go on to the next level after a failed one")
    p.add_argument("--no-flush-cache", dest="flush_cache", action="store_false",
                   help="do not POST /flush_cache before each level")
    p.add_argument("--metrics-interval-s", type=float, default=d["metrics_interval_s"],
                   help="seconds between /metrics reads (default %(default)s)")
    p.add_argument("--probe", action="store_true", help="only print what the server says about itself")
    p.add_argument("--output", default="", help="write the results JSON here (default: stdout)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    raw = {k: v for k, v in vars(args).items() if k not in ("probe", "output")}
    try:
        settings = normalize_settings(raw)
        server = probe_server(settings)
    except (SettingsError, ServerError) as exc:
        print(f"specbench_client: error: {exc}", file=sys.stderr)
        return 2
    secrets = [settings["api_key"]]
    if args.probe:
        print(json.dumps(redact(server, secrets), indent=2))
        return 0
    results = {"client_version": __version__, "settings": public_settings(settings),
               "server": redact(server, secrets), "levels": [], "error": None}

    def on_level(level):
        results["levels"].append(level)
        print(format_level_line(level), file=sys.stderr, flush=True)
        if args.output:
            write_json_atomic(args.output, redact(results, secrets))

    levels = sweep(settings, server, on_level)
    failed = [lv["error"] for lv in levels if lv["error"]]
    results["error"] = failed[0] if failed else None
    if args.output:
        write_json_atomic(args.output, redact(results, secrets))
    else:
        print(json.dumps(redact(results, secrets), indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
