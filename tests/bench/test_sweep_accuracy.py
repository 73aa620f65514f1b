"""The sweep's numbers against the emulator's truth, through real bench.yml runs.

Setting for the 2 % check (chosen so the emulator and the client stay accurate on 2 shared
cores, with other test suites running): the default profile with 128 input / 128 output
tokens and --chunked-prefill-size 200; the eight default levels on three hosts of one run
(they run in parallel): C=1..10 against an emulator at time scale 0.4, C=30, 70 and C=100,
250 against two at 0.2. Why: a closed loop loses the per-request turnaround (the client's
reply and the emulator's wake-up, a few ms under CPU contention) once per request, which the
analytic formula does not count; a C=1 request must last half a second for that to stay
under 1 %, while a C=250 request lasts 33 times longer and would make the run long at the
same scale. The prefill cap stops the emulator from batching prefills that arrive together,
which its analytic formula (one prefill per request) does not model either.

A level is accepted when it is within 2 % of the analytic figure and the server's own
generated-token counter agrees with the client (``server_count_check``: like SGLang's, the
emulator's ``sglang:generation_tokens_total`` grows only when a request finishes, so the
client's tokens of the requests finished between two readings are compared with its rise, within
2 % plus the tokens of requests finishing within a reading's round trip). Other processes
starving the emulator of CPU (it then misses its own schedule) make a level miss: such a level
is measured again, at most twice. A client that misreads misses every time and fails.
"""
from __future__ import annotations

import datetime as dt
import json
import math
import threading
import time
import urllib.request

import pytest
from acceptance_draws import accept_cv, accept_length_band
from benchlib import analytic, run_playbook

pytestmark = pytest.mark.slow

DEFAULT_LEVELS = [1, 2, 5, 10, 30, 70, 100, 250]
GROUPS = {"low": ([1, 2, 5, 10], 0.4), "mid": ([30, 70], 0.2), "high": ([100, 250], 0.2)}


def test_steady_state_within_two_percent_of_analytic_at_every_default_level(tmp_path, emulator):
    emus = {host: emulator("--tp-size", "8", "--chunked-prefill-size", "200", "--enable-metrics", time_scale=scale)
            for host, (_levels, scale) in GROUPS.items()}
    common = {"mode": "baseline", "engine": "external", "bench_input_len": 128, "bench_output_len": 128,
              "bench_warmup_s": 1, "bench_window_s": 3, "bench_drain": False, "bench_metrics_interval_s": 0.25}
    pending = {host: levels for host, (levels, _scale) in GROUPS.items()}
    rows: dict[int, tuple] = {}
    for attempt in range(3):
        run = run_playbook(tmp_path, {host: {**common, "base_url": emus[host].base_url, "bench_concurrency": levels}
                                      for host, levels in pending.items()}, name=f"a{attempt}")
        assert run.rc == 0, run.stdout
        retry: dict[str, list] = {}
        for host in pending:
            for level in run.results(host, "baseline")["levels"]:
                conc = level["concurrency"]
                truth = analytic(emus[host].base_url, conc, 128, 128)["output_tok_per_s"]
                # Wall-clock against wall-clock (the level's own figures are the node's).
                measured, check = level["wall_clock_output_tok_per_s"], level["server_count_check"]
                assert level["error"] is None, level
                server = (check["server_tokens"], check["client_tokens"], check["agree"])
                rows[conc] = (measured, truth, server, level["output_tok_per_s_ci95"], attempt)
                accepted = abs(measured / truth - 1) < 0.02 and check["agree"]
                if not accepted:
                    retry.setdefault(host, []).append(conc)
        pending = retry
        if not pending:
            break
    report = "\n".join(f"C={c:4d} measured {m:8.1f} analytic {a:8.1f} error {100 * (m / a - 1):+.2f}% server {s} "
                       f"ci {ci} attempt {n}" for c, (m, a, s, ci, n) in sorted(rows.items()))
    print(report)
    assert sorted(rows) == DEFAULT_LEVELS
    assert not pending, report


Z = 4.5  # standard errors for the acceptance draws of the requests cut by the window's edges


class CounterReads(threading.Thread):
    """Reads each emulator's GET /emulator/counters every 50 ms while a run lasts, stamped with the
    wall clock before the read was sent and after it was answered (the emulator read its counters in
    between): (sent, received, idle and lost seconds, behind seconds, decode steps, their batches'
    sum, tokens emitted)."""

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
            self.reads[name].append((sent, time.time(), c["idle_s"] + c["schedule_lost_s"], c["behind_s"],
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
        ws, we = utc(level["window_start_utc"]) - 0.0005, utc(level["window_end_utc"]) + 0.0005

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
        span = utc(level["window_end_utc"]) - utc(level["window_start_utc"])
        outside = 1 - max(0.0, e0[0] - s1[1]) / span
        return e0[4] - s1[4], e0[5] - s1[5], e0[6] - s1[6], outside

    def unscheduled_s(self, name: str, level: dict) -> tuple[float, float]:
        """(low, high) of the wall seconds in the level's window that the emulator did not run its
        modelled schedule: idle (at C=1 each response's turnaround to the client's next request:
        the client's reply, the emulator's wake-up) and given up, from the last read answered before
        each edge and the first sent after it; plus the lateness it carried at the end less that at
        the start (behind_s, read at those reads: each edge takes the least and the most of its two)."""
        (s0, s1), (e0, e1) = self.edges(name, level)
        behind_s = (min(s0[3], s1[3]), max(s0[3], s1[3]))
        behind_e = (min(e0[3], e1[3]), max(e0[3], e1[3]))
        return e0[2] - s1[2] + behind_e[0] - behind_s[1], e1[2] - s0[2] + behind_e[1] - behind_s[0]


def utc(text: str) -> float:
    """Seconds since the epoch of a level's UTC edge (ISO 8601 with milliseconds)."""
    return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.UTC).timestamp()


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
      Z standard errors of their share of the window's request-steps."""
    assert steps > 0 and batch_sum > 0, (steps, batch_sum)
    longest = max(truth["step_s"], truth["prefill_s"])
    cv = accept_cv(truth["accept_q_eff"], truth["draft_steps"])
    return {"edges": 2 * longest / scheduled_s, "mix": truth["prefill_s"] / scheduled_s,
            "batch": max(0.0, 1 - batch_sum / steps / truth["running"]),
            "draws": Z * cv * math.sqrt(outside * batch_sum) / batch_sum}


def test_seeds_figures_on_the_default_profile(tmp_path, emulator):
    """Baseline 92.6 and EAGLE-3 96.1 tok/s at C=1 (256 in, 256 out); EAGLE-3 flat near
    340 tok/s from C=70 with --max-running-requests unset. The levels hold the node's figures
    (wall-clock x scale), the measured ones in wall_clock_*.

    Four hosts in one run, each with its own emulator. The baseline's C=1 runs at time scale 0.4
    for 16 s, EAGLE-3's at 0.2 for 16 s (twice the requests for its acceptance draw). A closed
    loop loses the turnaround between a request's last chunk and the next (the client's reply, the
    emulator's wake-up) once per request, which the model does not count, and a loaded machine
    stretches it: beside the suite and two test loops (load 8-11 on 2 cores) EAGLE-3's C=1 read
    91.4 tok/s, 3.8 % under its model, with the 2.5 % this test once allowed for timing. So the
    C=1 figures are held to the model over the time the emulator ran its schedule: the window less
    its idle and given-up seconds and the lateness it carried (GET /emulator/counters read every
    50 ms, bounded by the reads either side of each edge: CounterReads.unscheduled_s), with the
    chunks read late at each edge, within what the window itself allows (scheduled_rate: a prefill
    or step at each edge, one prefill of mix, and for EAGLE-3 the draws of the two requests the
    edges cut). EAGLE-3's draw over the window is divided out: the level is held to the model's
    request time with the decode steps its own accept length gives (255 / accept steps of the
    model's step cost). The flat levels run at 0.1, each held to its model over its scheduled time
    likewise, within flat_tolerance (its edges, prefill mix, batch shortfall and draws); every level
    is drained, so the chunks read late at its end edge are recorded."""
    spec = ("--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "draft/eagle3")
    hosts = {"base": ("baseline", [1], 0.4, ()), "eagle-one": ("eagle3", [1], 0.2, spec),
             "eagle-mid": ("eagle3", [70, 100], 0.1, spec), "eagle-high": ("eagle3", [250], 0.1, spec)}
    # With /metrics, so the sweep's keep-up checks read the emulator's held requests and its lost
    # schedule (keepup.py), and a level the machine did not keep up with is measured again.
    emus = {host: emulator("--tp-size", "8", "--enable-metrics", *flags, time_scale=scale)
            for host, (_mode, _levels, scale, flags) in hosts.items()}
    # Drained, so each level records the chunks read late at its end edge (edge_chunk_tokens.end).
    common = {"engine": "external", "bench_warmup_s": 1, "bench_window_s": 8, "bench_drain": True,
              "bench_saturated_retries": 3}
    with CounterReads({host: emus[host].base_url for host in hosts}) as reads:
        run = run_playbook(tmp_path, {
            host: {**common, "mode": mode, "base_url": emus[host].base_url, "bench_concurrency": levels,
                   **({"bench_window_s": 16} if host in ("eagle-one", "base") else {})}
            for host, (mode, levels, _scale, _flags) in hosts.items()})
    assert run.rc == 0, run.stdout
    levels = {(host, lv["concurrency"]): lv for host, (mode, _levels, _scale, _flags) in hosts.items()
              for lv in run.results(host, mode)["levels"]}
    # A level the machine could not keep up with (measured again once by the sweep) fails with why.
    slow = {key: lv["saturated"] for key, lv in levels.items() if lv.get("saturated")}
    assert not slow, f"the machine did not keep up: {slow}"
    model = {key: lv["output_tok_per_s"] for key, lv in levels.items()}  # the node's speed, as recorded
    for key, lv in levels.items():
        assert lv["wall_clock_output_tok_per_s"] * hosts[key[0]][2] == pytest.approx(model[key], rel=1e-6)
    print({k: round(v, 1) for k, v in model.items()})
    base = analytic(emus["base"].base_url, 1, 256, 256)
    truth = analytic(emus["eagle-one"].base_url, 1, 256, 256)
    assert base["model_output_tok_per_s"] == pytest.approx(92.6, abs=0.05)  # the seeds' figures are the model's
    assert truth["model_output_tok_per_s"] == pytest.approx(96.1, abs=0.05)
    step = truth["step_s"] / truth["time_scale"]  # one decode step at node speed
    drawn = levels[("eagle-one", 1)]["accept_length"]
    request_s = 256 / truth["model_output_tok_per_s"] + 255 * (1 / drawn - 1 / truth["accept_length"]) * step
    targets = {"base": base["model_output_tok_per_s"], "eagle-one": 256 / request_s}
    scheduled = {}
    for host, model_truth in (("base", base), ("eagle-one", truth)):
        level = levels[(host, 1)]
        unscheduled = reads.unscheduled_s(host, level)
        (low, high), tolerance = scheduled_rate(level, unscheduled, model_truth)
        scheduled[host] = (low + high) / 2
        print(f"{host} C=1: {model[(host, 1)]} over the window, [{low:.2f}, {high:.2f}] over the scheduled time "
              f"(unscheduled {unscheduled[0]:.3f}-{unscheduled[1]:.3f} s), model {targets[host]:.2f} +-{100 * tolerance:.2f}%")
        assert low * (1 - tolerance) <= targets[host] <= high * (1 + tolerance), (
            f"{host} C=1: {model[(host, 1)]} tok/s over the window, [{low:.2f}, {high:.2f}] over the "
            f"{level['window_s'] - unscheduled[1]:.3f}-{level['window_s'] - unscheduled[0]:.3f} s the emulator ran "
            f"its schedule, against the model's {targets[host]:.2f} +-{100 * tolerance:.2f}% (accept length {drawn})")
    assert scheduled["eagle-one"] > scheduled["base"], scheduled
    # The plateau: the model's rates at C=70, 100 and 250 are the seeds' 340 tok/s, and each level is
    # held to its model over the time the emulator ran its schedule (flat_tolerance), as C=1 is; a fixed
    # 3 % failed beside three loops, C=250 at 320.7 tok/s, the emulator behind its schedule.
    flat = {}
    for host, concurrency in (("eagle-mid", 70), ("eagle-mid", 100), ("eagle-high", 250)):
        level, model_truth = levels[(host, concurrency)], analytic(emus[host].base_url, concurrency, 256, 256)
        assert model_truth["model_output_tok_per_s"] == pytest.approx(340, rel=0.02), model_truth
        unscheduled = reads.unscheduled_s(host, level)
        (low, high), unused_c1 = scheduled_rate(level, unscheduled, model_truth)
        steps, batch_sum, emitted, outside = reads.inner_batches(host, level)
        tolerance = flat_tolerance(model_truth, level["window_s"] - unscheduled[1], steps, batch_sum, outside)
        flat[concurrency] = (model[(host, concurrency)], round(low, 2), round(high, 2),
                             round(flat_target(model_truth, batch_sum, emitted), 2),
                             {k: round(v, 4) for k, v in tolerance.items()})
        assert low * (1 - sum(tolerance.values())) <= flat[concurrency][3] <= high * (1 + sum(tolerance.values())), (
            f"C={concurrency}: {flat[concurrency][0]} tok/s over the window, [{low:.2f}, {high:.2f}] over the "
            f"{level['window_s'] - unscheduled[1]:.3f}-{level['window_s'] - unscheduled[0]:.3f} s the emulator ran its "
            f"schedule, against the model's {flat[concurrency][3]:.2f} at the acceptance drawn, tolerance {flat[concurrency][4]}")
    print(flat)
    # Accept length: the seeds' 2.18 is the model's (256 tokens over a request's mean verify steps,
    # acceptance_draws.verify_steps), and each level reads it within the draws of the requests its
    # source covers (accept_length_band: 4.5 standard errors, about 0.09 at C=1's ~28 requests and
    # 0.05 at C=250's ~100; a fixed 0.06 was 2.9 of them at C=1).
    accepts = {}
    for (host, concurrency), level in levels.items():
        assert level["error"] is None, level
        if host == "base":
            assert level["accept_length"] is None
            continue
        expected, band, n = accept_length_band(level, analytic(emus[host].base_url, concurrency, 256, 256), 256)
        accepts[concurrency] = (level["accept_length"], round(expected, 4), round(band, 4), n)
        assert expected == pytest.approx(2.18, abs=0.005), expected
        assert level["accept_length"] == pytest.approx(expected, abs=band), (
            f"{host} C={concurrency}: accept length {level['accept_length']} against the model's {expected:.4f} "
            f"+-{band:.4f} over {n} requests ({level['accept_length_source']})")
    print("accept length (read, model, band, requests):", accepts)
