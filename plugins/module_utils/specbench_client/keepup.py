# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""Did the machine keep up? A level measured while the client or the engine was saturated is
evidence about the machine, not about the node: ``saturation`` names why, one string each
(``level["saturated"]``; an empty list is a level that kept up), and the comparison leaves
such levels out of its verdicts.

* The client: a worker busier than BOTTLENECK_FRACTION of a core, or reading data late
  (``level["client"]["bottleneck"]``, from summary.py).
* The engine, on the emulator only: its delivered rate against its own analytic model at
  this level, read from ``GET /emulator/analytic`` (files/sglang_emulator/api.py). That
  endpoint is the emulator's own (real SGLang has none, so it is never asked on a real
  engine); the figure is recorded as ``emulator_model``, labelled emulator-only. A real
  engine on a slow machine is simply slow: the node is what is measured there.
* The streams, on the emulator only: how many of the level's requests the emulator held
  (running plus queued, its /metrics gauges at each scrape in the window) against how many
  the closed loop kept open. A stall on the machine (the event loop starved for a fraction of
  a second) leaves requests between the client and the emulator's scheduler, and a short
  window's interval then grows too wide for the rate check above to fall below the model:
  seen in a fresh clone's CI, 20 of 32 held at both scrapes, the rate at 87% of the model with
  an interval of [0, 2x] the model, and the comparison pooled over three launches unclear.
* The schedule, on the emulator only: the seconds its scheduler loop fell so far behind its
  modelled schedule that it gave them up (files/sglang_emulator/engine.py: more than MAX_LAG_S
  behind, or still behind when the batch emptied), its own counter read at the window's edges
  (``level["emulator_schedule_lost"]``). On a machine that keeps up it moves only by a wake-up's
  lateness and the work of emitting the last tokens each time the engine goes idle (well under a
  millisecond; at C=1 once a request), far
  from 5% of a window; a stall that halves a launch's rate while every stream stays held (seen
  beside the suite: 385 against 700 tok/s, 31 of 32 held, an interval too wide for the rate check)
  moves it by the time stalled.
"""
from __future__ import annotations

import json
import math
import urllib.parse

from .labels import emulation
from .settings import ServerError

# The emulator's model agrees with its own delivered rate within 3% on an idle machine
# (tests/emulator/test_performance.py); 5% leaves room for that and for the closed loop's
# prefill staggering. A level whose whole interval lies further below the model than this
# was not served at the model's speed: the machine, not the node, set it.
MODEL_TOLERANCE = 0.05
ANALYTIC_PATH = "/emulator/analytic"
ANALYTIC_SOURCE = ("GET /emulator/analytic: the emulator's own analytic model (emulator-only, absent on real "
                   "engines), wall-clock tok/s at its time scale")


def client_reasons(level: dict) -> list[str]:
    client = level.get("client") or {}
    if not client.get("bottleneck"):
        return []
    return [f"client: a worker used {client.get('cpu_percent_max_worker') or 0:.0f}% of a core and read data "
            f"{client.get('read_lag_ms_mean') or 0:.1f} ms after it arrived: the client machine set this figure"]


def emulator_model(settings: dict, server: dict, level: dict, call) -> dict | None:
    """The emulator's analytic rate at this level (``call(settings, method, path)`` -> (status,
    body), server.http_call), or None on a real engine or when the emulator does not answer."""
    if emulation(server) is None:
        return None
    inputs = level.get("input_tokens_mean") or settings["input_len"]
    query = urllib.parse.urlencode({"concurrency": level["concurrency"], "input_len": int(round(inputs)),
                                    "output_len": settings["output_len"]})
    try:
        status, body = call(settings, "GET", f"{ANALYTIC_PATH}?{query}")
        truth = json.loads(body) if status == 200 else None
    except (ServerError, ValueError):
        truth = None
    if not isinstance(truth, dict) or not isinstance(truth.get("output_tok_per_s"), (int, float)):
        return None
    return {"output_tok_per_s": round(float(truth["output_tok_per_s"]), 3),
            "input_len": int(round(inputs)), "output_len": settings["output_len"], "source": ANALYTIC_SOURCE}


def engine_reasons(level: dict, model: dict | None) -> list[str]:
    """The engine fell behind its own model: the level's interval (or its figure, without
    one) lies entirely below the model's rate less MODEL_TOLERANCE."""
    rate = level.get("output_tok_per_s")
    if not model or not rate or not model.get("output_tok_per_s"):
        return []
    expected = model["output_tok_per_s"]
    ci = level.get("output_tok_per_s_ci95")
    top = ci[1] if ci else rate
    if top >= expected * (1 - MODEL_TOLERANCE):
        return []
    return [f"engine: delivered {100 * rate / expected:.0f}% of its own model's rate ({rate:.1f} of "
            f"{expected:.1f} tok/s wall-clock; interval up to {top:.1f}): the emulator could not keep its "
            "schedule on this machine (slow its time scale down or measure fewer streams at once)"]


# The held-streams check: in a closed loop a stream is at the server except while a request
# travels (the client sending it, the server parsing it, and after the last chunk the client
# starting the next) and while its prefill runs: the emulator's gauges read its running list and
# queue live (files/sglang_emulator/metrics.py), and a batch in prefill is in neither
# (files/sglang_emulator/engine.py, run). Emulator only: SGLang's own gauges are set from the
# decode batch every decode_log_interval steps (sglang/srt/managers/scheduler_components/
# metrics_reporter.py), so they may be steps old at a scrape. By Little's law the requests the
# gauges miss average at most the request rate times (TTFT + the client's read lag + TRANSIT_S),
# TTFT holding the way in, any queueing (which the gauges do count) and the prefill. The
# scrapes count the missed requests n times (n scrapes): a count of events that happen
# independently across streams, so Poisson with n times that mean at most. A level is flagged
# when the count the scrapes found is beyond that Poisson's upper HELD_ALPHA tail, and the
# shortfall beyond the allowance is material: more than MODEL_TOLERANCE of the concurrency.
# Streams short of the level run a smaller batch, and a step costs no less with more requests in
# it, so rate(C - d) = (C - d) / step(C - d) >= (1 - d / C) rate(C): a shortfall of d streams
# moves the rate by d / C at most. Past that tolerance the model's own comparison (above) is all
# that is claimed anyway; a 128-stream level whose scrapes held 120 where the law allowed 124 (a
# busy machine's slower turnaround, seen in a fresh clone: significant over its scrapes, 3% of the
# rate at most) is evidence about the node, and flagging it failed a clear comparison.
TRANSIT_S = 0.01
HELD_ALPHA = 1e-3


def poisson_tail(mean: float, k: int) -> float:
    """P(X >= k) for X ~ Poisson(mean), summed upwards from k in log space (no underflow at the
    means of hundreds of streams times dozens of scrapes); 1.0 where k <= mean (it is then about
    a half or more, far above any level of significance)."""
    if k <= 0 or k <= mean:
        return 1.0
    if mean <= 0:
        return 0.0
    total, term, i = 1.0, 1.0, k
    while term > 1e-12 * total:
        i += 1
        term *= mean / i
        total += term
    return min(1.0, math.exp(-mean + k * math.log(mean) - math.lgamma(k + 1)) * total)


def held_reasons(settings: dict, level: dict) -> list[str]:
    """The emulator held fewer of the level's open requests than the closed loop allows, beyond
    chance and by more than MODEL_TOLERANCE of them (the comment above); only over a window (a
    fixed number of requests ends with fewer open)."""
    if settings.get("requests"):
        return []
    running, queued = level.get("server_running") or {}, level.get("server_queued") or {}
    scrapes, conc = running.get("samples"), level.get("concurrency")
    rate, ttft = level.get("request_per_s"), (level.get("ttft_ms") or {}).get("mean")
    if not scrapes or not conc or running.get("mean") is None or rate is None or ttft is None:
        return []
    held = min(float(conc), running["mean"] + (queued.get("mean") or 0.0))
    missed = int(math.floor((conc - held) * scrapes + 0.5))
    lag = ((level.get("client") or {}).get("read_lag_ms_mean") or 0.0) / 1000.0
    allowed = rate * (ttft / 1000.0 + lag + TRANSIT_S)
    if conc - held - allowed <= MODEL_TOLERANCE * conc or poisson_tail(allowed * scrapes, missed) >= HELD_ALPHA:
        return []
    return [f"engine: held {held:.1f} of the {conc} requests the client kept open (running plus queued over "
            f"{scrapes} scrape(s) of /metrics; at most {allowed:.1f} on their way in or in prefill at "
            f"{rate:.1f} requests/s and a {ttft:.0f} ms TTFT): the rest waited between the client and the "
            "emulator's scheduler, which could not keep up on this machine (slow its time scale down or "
            "measure fewer streams at once)"]


def schedule_reasons(level: dict) -> list[str]:
    """The emulator may have given up more than MODEL_TOLERANCE of the window's schedule (module
    docstring): the scrapes cannot rule out that so much of the window ran below the modelled
    speed, the share by which its model may differ from what it delivers. The upper bound decides:
    it also counts what the emulator gave up between the window's edges and the nearest scrapes
    outside them (a scrape interval before the start, the halt after the end), but a stall that
    ends near the end is counted only when the loop wakes, and the last scrape inside the window
    misses it: beside the suite a launch read 14% under its neighbours at C=32 with [0, 0.56] s lost
    in a 4-s window. A level flagged for a stall just outside its window is measured again, which
    costs time; one passed with a stall inside it is wrong evidence. A window the reads did not
    bracket, from an emulator that serves the counter (summary.schedule_lost, ``unbracketed``), is
    flagged too: nothing there rules a stall out."""
    lost = level.get("emulator_schedule_lost") or {}
    bounds, window = lost.get("bounds_s"), lost.get("window_s")
    if lost.get("unbracketed") and window:
        return [f"engine: no reads of the emulator's /metrics bracketed {lost['unbracketed']} of the level "
                f"({window:.1f} s): whether it kept its schedule there is unknown (its server did not answer "
                "around the window: a stalled or overloaded machine; slow its time scale down or measure "
                "fewer streams at once)"]
    if not bounds or not window or bounds[1] <= MODEL_TOLERANCE * window:
        return []
    return [f"engine: the emulator gave up {bounds[0]:.2f} to {bounds[1]:.2f} s of its schedule in and around the "
            f"{window:.1f}-s window (up to {100 * bounds[1] / window:.0f}%, from its own "
            "specbench_emulator:schedule_lost_seconds_total): its scheduler stalled on this machine (slow its "
            "time scale down or measure fewer streams at once)"]


def saturation(settings: dict, server: dict, level: dict, call) -> list[str]:
    """Every reason the level does not describe the node; sets ``level["emulator_model"]``."""
    model = emulator_model(settings, server, level, call) if level.get("output_tok_per_s") else None
    if model is not None:
        level["emulator_model"] = model
    emulated = emulation(server) is not None
    held = held_reasons(settings, level) if emulated else []
    lost = schedule_reasons(level) if emulated else []
    return client_reasons(level) + engine_reasons(level, model) + held + lost
