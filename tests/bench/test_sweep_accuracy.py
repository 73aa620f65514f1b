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

import pytest
from acceptance_draws import accept_length_band
from benchlib import analytic, run_playbook
from emulator_counters import CounterReads, held_to_model, scheduled_rate

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
    C=1 figures are held to the model over the time the emulator ran its schedule: the rise of its
    scheduled seconds, the modelled seconds of the steps it emitted (GET /emulator/counters read
    every 50 ms, bounded by the reads either side of each edge: CounterReads.unscheduled_s), with the
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
        flat[concurrency] = dict(held_to_model(reads, host, level, model_truth), read=model[(host, concurrency)])
        assert flat[concurrency]["ok"], (
            f"C={concurrency}: {flat[concurrency]['read']} tok/s over the window; over the seconds the emulator ran "
            f"its schedule, against the model at the acceptance drawn: {flat[concurrency]}")
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
