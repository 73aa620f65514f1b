"""What the emulator itself did during a sweep level, read from outside it (GET
/emulator/counters every 50 ms: files/sglang_emulator/api.py, ``counters``, over engine.py's own
counts), and a level's rate held to the emulator's model over the time it ran its schedule: the
tests that compare the client's figure with the model take their tolerance from the window's own
counts here, not a fixed percentage."""
from __future__ import annotations

import json
import math
import threading
import time
import urllib.request

from acceptance_draws import accept_cv
from specbench_testkit import utc_edge

Z = 4.5  # standard errors for the acceptance draws of the requests cut by the window's edges


class CounterReads(threading.Thread):
    """Reads each emulator's GET /emulator/counters every 50 ms while a run lasts, stamped with the
    wall clock before the read was sent and after it was answered (the emulator read its counters in
    between): (sent, received, scheduled seconds, behind seconds, decode steps, their batches' sum,
    tokens emitted)."""

    def __init__(self, base_urls: dict):
        super().__init__(daemon=True)
        self.base_urls = base_urls
        self.reads: dict = {name: [] for name in base_urls}
        self.halt = threading.Event()

    def read_all(self) -> None:
        for name, url in self.base_urls.items():
            sent = time.time()
            with urllib.request.urlopen(url + "/emulator/counters", timeout=10) as resp:
                c = json.loads(resp.read())
            self.reads[name].append((sent, time.time(), c["scheduled_s"], c["behind_s"],
                                     c["decode_steps"], c["decode_batch_sum"], c["generated_tokens"]))

    def run(self) -> None:
        while True:
            self.read_all()
            if self.halt.wait(0.05):
                break

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.halt.set()
        self.join(15)
        self.read_all()  # sent after the run: they bound the window's end whatever the thread's pace

    def edges(self, name: str, level: dict) -> tuple:
        """The reads either side of each of the level's edges: ((last answered before the start,
        first sent after it), (the same at the end))."""
        reads = self.reads[name]
        ws, we = utc_edge(level["window_start_utc"]) - 0.0005, utc_edge(level["window_end_utc"]) + 0.0005

        def around(t: float) -> tuple:
            before = [r for r in reads if r[1] <= t]
            after = [r for r in reads if r[0] >= t]
            assert before and after, f"{name}: no counter reads either side of {t}"
            return before[-1], after[0]

        return around(ws), around(we)

    def inner_batches(self, name: str, level: dict) -> tuple[int, int, int, float]:
        """Over the reads just inside the window (the first sent after its start, the last answered
        before its end): decode steps, their batches' sum, the tokens emitted, and the fraction of
        the window outside those reads (at most, by their send and answer stamps)."""
        (unused_s0, s1), (e0, unused_e1) = self.edges(name, level)
        span = utc_edge(level["window_end_utc"]) - utc_edge(level["window_start_utc"])
        outside = 1 - max(0.0, e0[0] - s1[1]) / span
        return e0[4] - s1[4], e0[5] - s1[5], e0[6] - s1[6], outside

    def unscheduled_s(self, name: str, level: dict) -> tuple[float, float]:
        """(low, high) of the wall seconds in the level's window that the emulator did not run its
        modelled schedule: the window less the rise of its scheduled seconds (the modelled seconds
        of every step it emitted; files/sglang_emulator/api.py, counters), that counter bounded at
        each edge by the last read answered before it and the first sent after it. Idle (at C=1
        each response's turnaround to the client's next request), given up, or late: a stall that
        straddles an edge owes that edge's steps, emitted in a burst after it. The window less idle,
        lost and behind counted such a stall nowhere (behind_s is as of the loop's last wake): once,
        beside a vLLM loop, C=1 read 1 % over its model so."""
        (s0, s1), (e0, e1) = self.edges(name, level)
        window = level["window_s"]
        return window - (e1[2] - s0[2]), window - (e0[2] - s1[2])


def scheduled_rate(level: dict, unscheduled: tuple, truth: dict) -> tuple:
    """The level's node-speed rate over the time the emulator ran its schedule, as (low, high), and
    the tolerance its own window gives against the model's rate over that time. The rate's bounds
    hold the unscheduled time's and the chunks read late at each edge (``edge_chunk_tokens``). At each edge one
    prefill or step whose time counts without its tokens (or the reverse), one prefill more or
    fewer than the steady state's share, and, speculating, the acceptance draws of the two requests
    the edges cut (Z standard errors of their share of the window's verify steps)."""
    window = level["window_s"]
    tokens = level["wall_clock_output_tok_per_s"] * window
    # What arrived before an edge and was read with later data counts after it (the kernel stamps a
    # read with its last segment's arrival): the chunks of the first two reads after each edge hold it.
    edges = level["edge_chunk_tokens"]
    assert edges and edges["start"] is not None and edges["end"] is not None, edges
    scale = truth["time_scale"]
    low_s, high_s = window - unscheduled[1], window - unscheduled[0]
    assert 0 < low_s <= high_s, (window, unscheduled)
    rates = ((tokens - edges["start"]) / high_s * scale, (tokens + edges["end"]) / low_s * scale)
    longest = max(truth["step_s"], truth["prefill_s"])
    tolerance = (2 * longest + truth["prefill_s"]) / low_s
    if truth["accept_q_eff"] is not None:
        steps = low_s / truth["step_s"]  # verify steps in the window, at most
        per_request = truth["output_len"] / truth["accept_length"]
        tolerance += Z * accept_cv(truth["accept_q_eff"], truth["draft_steps"]) * math.sqrt(2 * per_request) / steps
    return rates, tolerance


def flat_target(truth: dict, batch_sum: int, emitted: int) -> float:
    """The model's node-speed rate at this level with the acceptance the emulator drew over the
    window (its tokens emitted per request-step, read inside the window; the prefills' first tokens,
    one in output_len, left out), not the model's mean: a request takes the model's time less its
    decode steps' share of the batch's step, plus that of the steps this acceptance needs."""
    out = truth["output_len"]
    per_request = out / truth["model_output_tok_per_s"]
    step = truth["step_s"] / truth["time_scale"] / truth["running"]  # one request's share of a step, node speed
    steps = (per_request - truth["prefill_s"] / truth["time_scale"]) / step
    drawn = emitted * (out - 1) / out / batch_sum
    return out / (per_request + ((out - 1) / drawn - steps) * step)


def flat_tolerance(truth: dict, scheduled_s: float, steps: int, batch_sum: int, outside: float) -> dict:
    """How far a batched level's rate over its scheduled time may sit from the model's rate at the
    acceptance drawn inside the window (flat_target), each part from the window's own counts (as
    tests/emulator/test_performance.window_tolerance):
    - edges: at each edge a step or prefill whose time counts without its tokens;
    - mix: one prefill more or fewer than the steady state's share;
    - batch: the closed loop leaves a slot empty between a response and its next request; the rate
      grows at most in proportion to the batch, so the mean batch's shortfall from the model's
      running requests bounds it (decode steps and their batches' sum, read inside the window);
    - draws: the draws in the part of the window outside the reads the acceptance was read over,
      Z standard errors of their share of the window's request-steps (none without speculation)."""
    assert steps > 0 and batch_sum > 0, (steps, batch_sum)
    longest = max(truth["step_s"], truth["prefill_s"])
    cv = accept_cv(truth["accept_q_eff"], truth["draft_steps"]) if truth["accept_q_eff"] is not None else 0.0
    return {"edges": 2 * longest / scheduled_s, "mix": truth["prefill_s"] / scheduled_s,
            "batch": max(0.0, 1 - batch_sum / steps / truth["running"]),
            "draws": Z * cv * math.sqrt(outside * batch_sum) / batch_sum}


def held_to_model(reads: CounterReads, name: str, level: dict, truth: dict) -> dict:
    """A batched level's rate against its model over the time the emulator ran its schedule: the
    rate's bounds there (scheduled_rate), the model's rate at the acceptance drawn inside the window
    (flat_target; the model's own without speculation) and the tolerance the window's counts give
    (flat_tolerance), with ``ok`` when the target lies within the bounds widened by it. The level
    must be drained, so the chunks read late at its end edge are recorded (edge_chunk_tokens)."""
    unscheduled = reads.unscheduled_s(name, level)
    (low, high), _one_request = scheduled_rate(level, unscheduled, truth)
    steps, batch_sum, emitted, outside = reads.inner_batches(name, level)
    scheduled_s = level["window_s"] - unscheduled[1]
    tolerance = flat_tolerance(truth, scheduled_s, steps, batch_sum, outside)
    target = (flat_target(truth, batch_sum, emitted) if truth["accept_q_eff"] is not None
              else truth["model_output_tok_per_s"])
    total = sum(tolerance.values())
    return {"low": round(low, 2), "high": round(high, 2), "target": round(target, 2),
            "scheduled_s": (round(scheduled_s, 3), round(level["window_s"] - unscheduled[0], 3)),
            "tolerance": {k: round(v, 4) for k, v in tolerance.items()},
            "ok": low * (1 - total) <= target <= high * (1 + total)}
