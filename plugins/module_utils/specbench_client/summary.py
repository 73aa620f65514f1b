# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""A level's figures from its raw results: the steady-state rate over the window's fine bins
with its 95 % interval, the whole-run rate, latency summaries, failures described by kind,
the client's own load, and the warnings that make figures suspect.
"""
from __future__ import annotations

import math
from array import array

from .settings import parse_base_url
from .stats import (
    BATCH_TAUS,
    MIN_CORRELATION_TIMES,
    batch_length,
    mean_ci95,
    overlapping_batch_means_ci95,
    summary,
    t975,
)

FINE_BINS_PER_BATCH = 50
# Request durations a window should hold at least (a shorter window is flagged).
MIN_EFFECTIVE_STRETCHES = 5
# Request durations a window must hold for any interval: fewer, and its rate is one request's or two
# per stream. Unless it saw at least MANY_REQUESTS requests (many streams): the requests' ratio
# interval then holds, the pieces of requests cut by the window's edges only adding independent ones.
MIN_REQUESTS_FOR_INTERVAL = 2
MANY_REQUESTS = 10
# The interval is computed over at most this many bins (the correlation time's estimate costs bins x lags).
MAX_BINS = 250

BOTTLENECK_FRACTION = 0.85  # a worker busier than this (of one core) may be the limit
READ_LAG_LIMIT_S = 0.010  # reads this far behind the data's arrival, on average: the client lags

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


# Failures that say the server itself went away during the level (worker.py: a connection refused,
# or one the server closed mid-response): a level where they happened measured a server that was
# dying or dead, whatever it delivered before.
SERVER_DOWN_KINDS = ("connect_refused", "disconnected")


def server_went_down(level: dict | None) -> str | None:
    """Why the server went down during the level (None when no request says so), from the level's
    ``failures_by_kind``: such a level failed (its figure is a dying server's), never saturated (a
    dead server neither keeps up nor falls behind: its /metrics stop answering, its rate drops)."""
    if not isinstance(level, dict) or not isinstance(level.get("failures_by_kind"), dict):
        return None
    down = {k: n for k, n in level["failures_by_kind"].items() if k in SERVER_DOWN_KINDS and n}
    if not down:
        return None
    what = ", ".join(f"{n} {kind.replace('_', ' ')}" for kind, n in sorted(down.items()))
    return (f"the server went down during the level ({what}; {level.get('requests_ok') or 0} request(s) "
            "completed before): its figures are a dying server's")


# Why a speculative server's level has no accept length although its counters were read.
NO_SPEC_STEP_NOTE = ("none: the server counted no draft and no verify step over the window (speculation off at this "
                     "batch size); its lifetime accept length describes other batch sizes and is not given")
# The words that mark the server's lifetime figure (level.accept_length_of's last source): not the window's.
LIFETIME_SOURCE = "avg_spec_accept_length after the repeat"


def accept_length_is_lifetime(level: dict | None) -> bool:
    """The level's accept length is the server's lifetime figure (SGLang's /server_info), not the window's."""
    return bool(isinstance(level, dict) and level.get("accept_length") is not None
                and LIFETIME_SOURCE in str(level.get("accept_length_source") or ""))


def edge_chunk_tokens(raws: list) -> dict | None:
    """How far the server's count of the window may run ahead of the client's at each edge, in
    tokens: over the requests sent before the edge, the chunks of their first two reads after it
    (worker.Worker._edge_chunks says why two). One fixed window's only (None for repeats, adaptive
    and fixed-count windows); the end's is None where requests were cut at the end (what they
    would have received is not known) or the window closed before its planned end."""
    if len(raws) != 1 or not raws[0].get("edge_tokens"):
        return None
    raw = raws[0]
    start, end = raw["edge_tokens"]
    closed_early = raw.get("window_end") is None or raw.get("we") is None or abs(raw["window_end"] - raw["we"]) > 1e-6
    return {"start": round(start, 1), "end": None if raw["cut"] or closed_early else round(end, 1)}


LOST_SOURCE = ("/metrics specbench_emulator:schedule_lost_seconds_total at the window's edges (emulator only), "
               "wall-clock seconds")


def schedule_lost(raws: list) -> dict | None:
    """The schedule the emulator gave up over the level's windows, from its own counter read at
    each window's edges (server.MetricsPoller.over_window; emulator only): the sum of the windows'
    bounds and their wall-clock seconds. None where a window has no such counter (a real engine
    serves none; an engine that served no /metrics). ``bounds_s`` None, with ``unbracketed``, where
    the server serves the counter but its reads did not bracket a window (none answered before its
    start, or none sent after its end answered within MetricsPoller's tries): whether the emulator
    kept its schedule there is unknown (keepup.schedule_reasons)."""
    low = high = window = 0.0
    unbracketed = 0
    for raw in raws:
        metrics = raw.get("metrics") or {}
        bounds = metrics.get("schedule_lost_s_bounds")
        served = bounds is not None or metrics.get("schedule_lost_served")
        if raw.get("ws") is None or raw.get("window_end") is None or not served:
            return None
        window += raw["window_end"] - raw["ws"]
        if bounds is None:
            unbracketed += 1
        else:
            low, high = low + bounds[0], high + bounds[1]
    if not raws:
        return None
    if unbracketed:
        return {"bounds_s": None, "window_s": round(window, 3), "source": LOST_SOURCE,
                "unbracketed": f"{unbracketed} of {len(raws)} window(s)"}
    return {"bounds_s": [round(low, 4), round(high, 4)], "window_s": round(window, 3), "source": LOST_SOURCE}


def window_rates(raw: dict, settings: dict) -> tuple[float | None, list[float], float]:
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
        we = raw.get("we")
        if we is not None and math.isfinite(we) and we > ws:  # an adaptive window ends where it reached its target
            usable = max(batches, int(round((we - ws) / bin_w)))
            usable -= usable % batches
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
    raw["window_fine"] = [b / bin_w for b in window_bins]
    return sum(window_bins) / window, rates, window


def request_ratio_ci(tokens: list, durations: list, mean: float) -> list[float] | None:
    """The 95 % interval of a closed loop's rate from its requests: the rate is proportional to
    sum(tokens) / sum(durations) over the requests sent in the window (a renewal process: those
    requests are independent draws of a typical request), so its relative error is the ratio
    estimator's, sd(tokens - R * durations) / (sqrt(n) * mean duration) with R the ratio
    (the delta method), times t(n - 1). This is what holds with only a few requests per window,
    where batches of the rate would be shorter than a request. None from fewer than two requests."""
    n = len(durations)
    if n < 2 or len(tokens) != n:
        return None
    mean_d = math.fsum(durations) / n
    ratio = math.fsum(tokens) / math.fsum(durations)
    resid = [k - ratio * d for k, d in zip(tokens, durations)]  # noqa: B905 - the node may run Python < 3.10
    sd = math.sqrt(math.fsum(r * r for r in resid) / (n - 1))
    rel = t975(n - 1) * sd / (math.sqrt(n) * mean_d * ratio) if ratio > 0 else math.inf
    if rel >= 1:
        return [mean / (1 + rel), math.inf]
    return [mean / (1 + rel), mean / (1 - rel)]


def correlation_warning(bins: int, tau: float, bound: float, bin_s: float) -> str | None:
    """Why one window's interval may miss slower swings of its rate, or None: over ``bins`` bins of
    ``bin_s`` s, with Geyer's correlation time ``tau`` and its upper bound ``bound`` (in bins,
    stats.batch_length),

    * the window holds fewer than MIN_CORRELATION_TIMES correlation times by Geyer's estimate;
    * or the correlation time is not pinned down: two batches of BATCH_TAUS times the bound do not
      fit, so the window has no batch-means interval (only the requests' ratio interval, which
      does not see the node's slower swings).

    The bound sets the batches (the interval widens with it) but does not otherwise warn: in the
    coverage simulation (benchmarks/decision_coverage.py, windows) warning below
    MIN_CORRELATION_TIMES of the bound warned the very windows whose intervals it had widened, and
    those left unwarned covered less (300 draws): 85 % against 91 % under a drift correlated over 40 requests in
    windows of 400, 77 % against 87 % over 60 (a slow drift that stays on one side of its mean for a
    whole window looks calm there, so the windows that look calmest hold its largest offsets)."""
    held, tau_s, bound_s = bins / tau, tau * bin_s, bound * bin_s
    if held < MIN_CORRELATION_TIMES:
        return (f"the window holds only {held:.1f} correlation times of its rate (each {tau_s:.3g} s, at most "
                f"{bound_s:.3g} s): slower swings than it can see may move the figure beyond its interval; "
                f"lengthen the window to at least {MIN_CORRELATION_TIMES} correlation times")
    if 2 * math.ceil(BATCH_TAUS * bound) > bins:
        return (f"the window cannot pin down the correlation time of its rate: estimated {tau_s:.3g} s but up to "
                f"{bound_s:.3g} s (95 % bound), which leaves no two batches of {BATCH_TAUS} correlation times "
                "for its interval: slower swings than it can see may move the figure beyond its interval; "
                "lengthen the window")
    return None


def window_interval(fine: list, window: float, requests: tuple | None = None, step: float = 0.0) -> dict:
    """The 95 % interval of one window's mean rate, valid for autocorrelated rates.

    ``fine``: the window's rate in equal bins; ``requests``: (tokens, durations) of the requests
    sent in the window; ``step``: the mean inter-token latency (s). The wider of two intervals:

    * overlapping batch means (stats.overlapping_batch_means_ci95) over the bins, grouped into
      bins of at least 4 inter-token latencies (a few decode steps: their bursts of tokens do not
      pass for noise), with batches at least BATCH_TAUS integrated correlation times and one request
      duration long (rates less than a request apart share most of their requests), the correlation
      time taken at its upper 95 % bound (stats.batch_length: Geyer's estimate from the same window
      runs low where the window holds few correlation times, and there the batches and the interval
      widen); none when the window holds fewer than two such batches;
    * the requests' ratio interval (request_ratio_ci), which holds with a few requests per window.

    No interval when the window holds fewer than MIN_REQUESTS_FOR_INTERVAL request durations and
    fewer than MANY_REQUESTS requests were sent in it.

    Returns ``ci``, ``method``, ``tau_s`` (the rate's correlation time, Geyer's estimate),
    ``tau_bound_s`` (its upper 95 % bound), ``correlation_times`` (window / tau_s), ``batch_s`` and
    ``warning`` (correlation_warning; None when the window pins its correlation down).
    """
    out = {"ci": None, "method": None, "tau_s": None, "tau_bound_s": None, "correlation_times": None,
           "batch_s": None, "warning": None}
    if not fine or window <= 0:
        return out
    tokens, durations = requests or ([], [])
    duration = math.fsum(durations) / len(durations) if durations else None
    if duration and window < MIN_REQUESTS_FOR_INTERVAL * duration and len(durations) < MANY_REQUESTS:
        return out  # a request or two per stream, and few streams: the window's rate is a request or two
    mean = math.fsum(fine) / len(fine)
    bin_s = window / len(fine)
    group = max(1, int(math.ceil(4 * step / bin_s)) if step > 0 else 1, -(-len(fine) // MAX_BINS))
    coarse = [sum(fine[i:i + group]) / group for i in range(0, len(fine) - group + 1, group)]
    named = []
    if len(coarse) >= 4:
        coarse_s = bin_s * group
        floor = int(math.ceil(duration / coarse_s)) if duration else 1
        batch, tau, bound = batch_length(coarse, floor)
        out.update(tau_s=round(tau * coarse_s, 4), tau_bound_s=round(bound * coarse_s, 4),
                   correlation_times=round(len(coarse) / tau, 2), batch_s=round(batch * coarse_s, 4),
                   warning=correlation_warning(len(coarse), tau, bound, coarse_s))
        ci, df = overlapping_batch_means_ci95(coarse, batch)[1:]
        if ci:
            named.append((f"overlapping batch means over {len(coarse)} bins of {coarse_s:.3g} s: batches of "
                          f"{batch * coarse_s:.3g} s (at least {BATCH_TAUS} correlation times of "
                          f"{bound * coarse_s:.3g} s, the upper 95 % bound of the estimate "
                          f"{tau * coarse_s:.3g} s" + (f", and one request of {duration:.3g} s" if duration else "")
                          + f"), {df:.1f} degrees of freedom", ci))
    ci = request_ratio_ci(tokens, durations, mean)
    if ci:
        named.append((f"the ratio of tokens to durations over the window's {len(durations)} requests", ci))
    if named:
        which, ci = max(named, key=lambda nc: nc[1][1] - nc[1][0])
        out["ci"] = ci
        out["method"] = which + ("" if len(named) == 1 else " (the wider of that and "
                                 + next(n for n, c in named if c is not ci).split(":")[0] + ")")
    return out


def single_window_ci(raws: list[dict], batch_rates: list[float], window: float) -> tuple[list[float] | None, str, dict]:
    """The 95 % interval of one window's rate (window_interval), its method and its figures."""
    del batch_rates
    fine = next((r.get("window_fine") for r in raws if r.get("window_fine")), None) or []
    tokens = [v for r in raws for v in r["out_tokens"]]
    durations = [v for r in raws for v in r["e2e"]]
    itl = [v for r in raws for v in r["itl"]]
    step = sum(itl) / len(itl) if itl else 0.0
    found = window_interval(fine, window, (tokens, durations), step)
    return found["ci"], found["method"], found


def describe_failures(kinds: dict, examples: dict, settings: dict) -> str:
    host, port = parse_base_url(settings["base_url"])[:2]
    parts = []
    for kind, n in sorted(kinds.items(), key=lambda kv: -kv[1]):
        base = kind if kind in KIND_HELP else ("http_5xx" if kind.startswith("http_5") else "http_4xx")
        text = KIND_HELP.get(base, kind).format(addr=f"{host}:{port}", timeout=settings["request_timeout_s"])
        parts.append(f"{n} x {kind} ({text}; e.g. {examples.get(kind, '')})")
    return "; ".join(parts)


def finished_tokens_check(raws: list[dict], settings: dict, tolerance: float) -> dict | None:
    """The server's generated-token counter against the client, for an engine that counts a
    request's tokens when it finishes (SGLang: srt/observability/metrics_collector.py,
    observe_one_finished_request): the counter's rise between two of its readings inside the
    window against the client's tokens of the requests that finished between those readings.

    Each reading happened somewhere within its request's round trip (``half_widths`` either
    side of its time), and the client receives a request's last chunk after the server counted it
    (by its mean read lag): requests finishing that close to a reading may fall on either side, so
    their tokens (``edge_slack_tokens``) widen the allowed gap, on top of ``tolerance``. None when
    no repeat had two readings inside its window."""
    lags = [g for r in raws for g in (r.get("lag") or []) if g is not None]
    lag = max(lags) if lags else 0.0
    server = client = slack = 0.0
    spans = 0
    for raw in raws:
        between = (raw.get("metrics") or {}).get("generated_between")
        if not between:
            continue
        spans += 1
        t0, t1 = between["from"], between["to"]
        w0, w1 = (w + lag for w in between["half_widths"])
        server += between["tokens"]
        for end, n in zip(raw["ends"], raw["end_tokens"]):  # noqa: B905
            if abs(end - t0) <= w0 or abs(end - t1) <= w1:
                slack += n
            elif t0 < end < t1:
                client += n
    if not spans:
        return None
    return {"basis": "tokens of the requests finished between two readings of the server's counter inside the "
                     "window (it counts a request when it finishes)",
            "server_tokens": round(server, 1), "client_tokens": round(client, 1),
            "edge_slack_tokens": round(slack, 1),
            "agree": abs(server - client) <= tolerance * client + slack}


REQUEST_COLUMNS = ["ttft_ms", "tpot_ms", "e2e_ms", "output_tokens"]


def request_latencies(raws: list[dict]) -> dict | None:
    """Each measured request's TTFT, TPOT (None for a one-token answer or no first token) and end-to-end
    latency in ms, with its output tokens, one row a request: goodput under any latency targets is
    counted from them after the run (specbench_compare.slo.goodput). None without requests."""
    rows = [[None if v is None else round(v * 1000.0, 3) for v in r[:3]] + [int(r[3])]
            for raw in raws for r in raw.get("requests") or []]
    return {"columns": REQUEST_COLUMNS, "rows": rows} if rows else None


def empty_level_fields() -> dict:
    return {"output_tok_per_s": None, "output_tok_per_s_ci95": None, "requests_ok": 0, "requests_failed": 0,
            "ttft_ms": None, "itl_ms": None, "tpot_ms": None, "e2e_ms": None, "accept_length": None}


def summarize(raws: list[dict], settings: dict, concurrency: int) -> dict:
    rates, batch_rates, windows = [], [], []
    for raw in raws:
        rate, batch, window = window_rates(raw, settings)
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
    correlation_note = None
    if len(rates) >= 2:
        mean, ci = mean_ci95(rates)
        method = f"t-interval over {len(rates)} repeats"
    elif rates:
        mean, ci, method, found = rates[0], *single_window_ci(raws, batch_rates, windows[0])
        level["window_correlation"] = {k: found[k] for k in ("tau_s", "tau_bound_s", "correlation_times",
                                                             "batch_s")}
        correlation_note = found["warning"]
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
        rate, unused, window = window_rates(raw, settings)
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
    level["ttft_ms"] = summary(ttft, 1000.0, ci=True)
    level["itl_ms"] = summary(itl, 1000.0)
    level["tpot_ms"] = summary([v for r in raws for v in r["tpot"]], 1000.0, ci=True)
    level["e2e_ms"] = summary([v for r in raws for v in r["e2e"]], 1000.0, ci=True)
    level["decode_tok_per_s_per_stream"] = summary([v for r in raws for v in r["decode"]], 1.0, ci=True)
    level["request_latencies"] = request_latencies(raws)
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
        # With the number of scrapes behind the mean and max (keepup.held_reasons counts them); none
        # where no scrape fell inside the window (server.MetricsPoller.result).
        gauges = metrics[-1] if "running" in metrics[-1] else None
        level["server_running"] = dict(gauges["running"], samples=gauges["samples"]) if gauges else None
        level["server_queued"] = dict(gauges["queued"], samples=gauges["samples"]) if gauges else None
        # Drafts over the windows (vLLM's spec_decode_num_drafts; SGLang's spec_verify_calls), zero
        # included; None where the engine does not count them.
        for key, name in (("spec_drafts", "server_spec_drafts"), ("spec_verify_calls", "server_spec_verify_calls")):
            counted = [m[key] for m in metrics if m.get(key) is not None]
            level[name] = round(sum(counted), 1) if counted else None
        rates = [m["generated_tok_per_s"] for m in metrics if m.get("generated_tok_per_s") is not None]
        level["server_output_tok_per_s"] = round(sum(rates) / len(rates), 3) if rates else None
        # What the scrapes allow the server's count over the window to be (server.counter_at):
        # the estimate above lies inside; one window's only (repeats are averaged).
        bounds = metrics[-1].get("generated_tokens_bounds") if len(metrics) == 1 else None
        level["server_generated_tokens"] = metrics[-1].get("generated_tokens") if bounds else None
        level["server_generated_tokens_bounds"] = bounds
    else:
        level["server_running"] = level["server_queued"] = level["server_output_tok_per_s"] = None
        level["server_generated_tokens"] = level["server_generated_tokens_bounds"] = None
        level["server_spec_drafts"] = level["server_spec_verify_calls"] = None
    level["edge_chunk_tokens"] = edge_chunk_tokens(raws)
    lost = schedule_lost(raws)
    if lost is not None:
        level["emulator_schedule_lost"] = lost
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
    tolerance = settings.get("_rate_tolerance", 0.1)
    if settings.get("_generated_on_finish"):
        # SGLang counts a request's tokens when it finishes: like with like, not with the rate.
        check = finished_tokens_check(raws, settings, tolerance)
        level["server_count_check"] = check
        if check and not check["agree"]:
            warnings.append(
                f"the server counted {check['server_tokens']:.0f} tokens of requests finished in the window, the "
                f"client {check['client_tokens']:.0f} (more apart than {100 * tolerance:g}% plus the "
                f"{check['edge_slack_tokens']:.0f} tokens of requests finishing near the window's edges): other "
                "clients on the server, or a client bottleneck")
    elif server_rate and mean and abs(mean / server_rate - 1) > tolerance:
        warnings.append(f"the server counted {server_rate:.1f} generated tok/s in the window, the client "
                        f"{mean:.1f} ({100 * (mean / server_rate - 1):+.1f}%, more than {100 * tolerance:g}%): "
                        "other clients on the server, or a client bottleneck")
    e2e_mean = level["e2e_ms"]["mean"] / 1000.0 if level["e2e_ms"] else None
    if len(windows) == 1 and e2e_mean and windows[0] / e2e_mean < MIN_EFFECTIVE_STRETCHES:
        warnings.append(f"the window ({windows[0]:.3g} s) covers only {windows[0] / e2e_mean:.1f} request durations "
                        f"({e2e_mean:.3g} s each): its interval cannot see slower swings; lengthen the window or "
                        "measure across launches (compare_launches)")
    if correlation_note:
        warnings.append(correlation_note)
    if len(windows) == 1 and rates and ci is None and ok:
        warnings.append("the window is too short for an interval (it needs two batches of at least one request "
                        "duration and a few correlation times each): lengthen the window")
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
