# Copyright: specbench developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""compare_traffic from Prometheus: the history of running requests, binned into concurrency shares.

``{prometheus: URL, start, end, step, query?}`` is read through Prometheus's range query,
``GET URL/api/v1/query_range?query=&start=&end=&step=`` (its documented answer:
``{"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {...},
"values": [[unix_time, "value"], ...]}]}}``), on the controller, standard library only. The
default query sums the engine's running-requests gauge over its series: vLLM's
``vllm:num_requests_running`` (vllm/v1/metrics/loggers.py), SGLang's ``sglang:num_running_reqs``
(sglang/srt/observability/metrics_collector.py); the names come from the client's engine adapters
(``specbench_client/engines/``). Give ``query`` to pick one server out of several, e.g.
``sum(vllm:num_requests_running{instance="node1:8000"})``.

Binning: each sample stands for one ``step`` of time; its value rounded to the nearest whole
request is the concurrency then. Samples at 0 (idle) carry no traffic and are left out of the
shares (their share of the time is reported as ``idle_share``).
"""

from __future__ import annotations

import datetime
import json
import math
import re
import urllib.error
import urllib.parse

from ansible.module_utils.urls import ConnectionError as UrlsConnectionError
from ansible.module_utils.urls import open_url

from ..specbench_client.engines import sglang as sglang_engine
from ..specbench_client.engines import vllm as vllm_engine
from .traffic import TrafficError, parse_traffic

RUNNING_METRIC = {
    "vllm": vllm_engine.RUNNING.decode(),
    "sglang": sglang_engine.RUNNING.decode(),
    "emulator": sglang_engine.RUNNING.decode(),  # the emulator serves SGLang's metric names
}
KEYS = ("prometheus", "start", "end", "step", "query")
TIME_RE = re.compile(r"^(\d+(\.\d+)?|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d))$")
STEP_RE = re.compile(r"^(\d+(\.\d+)?|(\d+(ms|s|m|h|d|w|y))+)$")


def check_spec(spec: dict, engine: str, label: str = "compare_traffic") -> dict:
    """The Prometheus form of compare_traffic checked: url, start, end, step, query (default per engine)."""
    extra = sorted(set(spec) - set(KEYS))
    if extra:
        raise TrafficError(f"{label} has unknown key(s) {', '.join(extra)}: the Prometheus form takes "
                           f"{', '.join(KEYS)}")
    url = spec.get("prometheus")
    parsed = urllib.parse.urlparse(url) if isinstance(url, str) else None
    if not parsed or parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise TrafficError(f"{label}.prometheus must be the Prometheus server's http(s) URL, e.g. "
                           f"http://prometheus:9090 (got {url!r})")
    out = {"prometheus": url.rstrip("/")}
    for key in ("start", "end"):
        value = spec.get(key)
        text = str(value) if isinstance(value, (int, float, str)) and not isinstance(value, bool) else ""
        if not TIME_RE.match(text):
            raise TrafficError(f"{label}.{key} must be a Unix time in seconds or an RFC 3339 time, e.g. "
                               f"2026-11-30T00:00:00Z (got {value!r})")
        out[key] = text
    if _seconds(out["start"]) >= _seconds(out["end"]):
        raise TrafficError(f"{label}: start ({out['start']}) must come before end ({out['end']})")
    step = spec.get("step", 60)
    text = str(step) if isinstance(step, (int, float, str)) and not isinstance(step, bool) else ""
    if not STEP_RE.match(text) or _step_seconds(text) <= 0:
        raise TrafficError(f"{label}.step must be a resolution above 0 in seconds or a Prometheus duration, e.g. "
                           f"60 or 1m (got {step!r})")
    out["step"] = text
    if _seconds(out["end"]) - _seconds(out["start"]) > 11000 * _step_seconds(text):
        raise TrafficError(f"{label}: {out['start']} to {out['end']} at step {text} is more than the 11000 points "
                           "Prometheus answers per series: make step larger")
    query = spec.get("query")
    if query is None:
        if engine not in RUNNING_METRIC:
            raise TrafficError(f"{label}: no running-requests metric known for engine {engine!r}: give "
                               f"{label}.query, e.g. sum(vllm:num_requests_running)")
        query = f"sum({RUNNING_METRIC[engine]})"
    if not isinstance(query, str) or not query.strip():
        raise TrafficError(f"{label}.query must be a PromQL expression (got {query!r})")
    out["query"] = query
    return out


def _seconds(text: str) -> float:
    if re.match(r"^\d+(\.\d+)?$", text):
        return float(text)
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _step_seconds(text: str) -> float:
    if re.match(r"^\d+(\.\d+)?$", text):
        return float(text)
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
    return sum(float(n) * units[u] for n, u in re.findall(r"(\d+)(ms|s|m|h|d|w|y)", text))


def query_range(spec: dict, timeout: float = 30.0) -> list[list]:
    """The matrix Prometheus returns: a list of series, each a list of [time, value string]."""
    params = urllib.parse.urlencode({k: spec[k] for k in ("query", "start", "end", "step")})
    url = f"{spec['prometheus']}/api/v1/query_range?{params}"
    where = f"{spec['prometheus']}/api/v1/query_range"
    try:
        with open_url(url, timeout=timeout) as resp:  # ansible's urllib wrapper (proxies, TLS checks)
            body = resp.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read()[:300].decode(errors="replace")
        raise TrafficError(f"compare_traffic: {where} answered {exc.code} to query {spec['query']!r} ({detail}): "
                           "check the query and the time range") from None
    except (OSError, ValueError, UrlsConnectionError) as exc:
        raise TrafficError(f"compare_traffic: cannot read {where} ({exc}): is compare_traffic.prometheus the "
                           "Prometheus server's URL, reachable from the controller?") from None
    try:
        obj = json.loads(body)
    except ValueError:
        raise TrafficError(f"compare_traffic: {where} did not answer JSON: is it a Prometheus server?") from None
    data = obj.get("data") if isinstance(obj, dict) else None
    if not isinstance(obj, dict) or obj.get("status") != "success" or not isinstance(data, dict):
        raise TrafficError(f"compare_traffic: {where} answered {str(obj)[:300]}: check the query")
    if data.get("resultType") != "matrix" or not isinstance(data.get("result"), list):
        raise TrafficError(f"compare_traffic: query {spec['query']!r} gave a {data.get('resultType')}, not a range "
                           "vector: give an instant-vector expression, e.g. sum(vllm:num_requests_running)")
    return [s.get("values") or [] for s in data["result"] if isinstance(s, dict)]


def bin_running(series: list[list]) -> dict:
    """Concurrency shares from the running-requests samples: values summed across series at each
    time, rounded to whole requests; idle (0) samples left out of the shares."""
    by_time: dict[float, float] = {}
    for values in series:
        for pair in values:
            try:
                t, v = float(pair[0]), float(pair[1])
            except (TypeError, ValueError, IndexError):
                continue
            if math.isfinite(v):
                by_time[t] = by_time.get(t, 0.0) + v
    counts: dict[int, int] = {}
    for v in by_time.values():
        c = int(math.floor(v + 0.5))
        counts[c] = counts.get(c, 0) + 1
    total = sum(counts.values())
    busy = total - counts.get(0, 0)
    return {
        "samples": total,
        "idle_share": round(counts.get(0, 0) / total, 4) if total else None,
        "traffic": [{"concurrency": c, "share": n / busy} for c, n in sorted(counts.items()) if c > 0],
    }


def read_traffic(spec: dict, engine: str, timeout: float = 30.0) -> dict:
    """compare_traffic's Prometheus form -> {traffic, source, samples, idle_share}; TrafficError
    naming the field and the fix when it cannot."""
    checked = check_spec(spec, engine)
    binned = bin_running(query_range(checked, timeout))
    if not binned["traffic"]:
        what = "no samples" if not binned["samples"] else "only idle samples (0 running)"
        raise TrafficError(f"compare_traffic: {checked['query']!r} gave {what} from {checked['start']} to "
                           f"{checked['end']}: check the time range and that Prometheus scrapes the server")
    source = dict(checked, kind="prometheus")
    return dict(binned, source=source)


def check_traffic_input(value, engine: str = "sglang"):
    """compare_traffic checked without reading anything (preflight): None when unset, else the
    checked list or Prometheus form; TrafficError naming the field and the fix."""
    if isinstance(value, str) and value.strip():  # a survey's text: JSON
        try:
            value = json.loads(value)
        except ValueError:
            raise TrafficError("compare_traffic given as text must be JSON, e.g. "
                               '[{"concurrency": 1, "share": 0.7}, {"concurrency": 8, "share": 0.3}]') from None
    if value is None or value in ("", [], {}):
        return None
    if isinstance(value, dict):
        if "prometheus" not in value:
            raise TrafficError("compare_traffic as a mapping is the Prometheus form and needs prometheus: URL, start, "
                               "end, step (query optional); or give a list of {concurrency, share}")
        return check_spec(value, engine)
    return parse_traffic(value)


def resolve_traffic(value, engine: str, timeout: float = 30.0) -> dict | None:
    """compare_traffic as summarize_host takes it: {traffic, source, ...}; None when unset."""
    checked = check_traffic_input(value, engine)
    if checked is None:
        return None
    if isinstance(checked, list):
        return {"traffic": checked, "source": {"kind": "given"}}
    spec = {k: checked[k] for k in KEYS}
    return read_traffic(spec, engine, timeout)
