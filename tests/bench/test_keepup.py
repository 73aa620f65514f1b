"""Did the machine keep up (specbench_client.keepup): pure computation, no server (milliseconds)."""

from __future__ import annotations

import json

from ansible_collections.specbench.core.plugins.module_utils.specbench_client import keepup
from ansible_collections.specbench.core.plugins.module_utils.specbench_client.settings import ServerError

SETTINGS = {"input_len": 64, "output_len": 64}
EMULATOR = {"server_info": {"version": "0.5.23+specbench-emulator", "emulator": {"time_scale": 4.0}}}
SGLANG = {"server_info": {"version": "0.5.23"}}


def analytic(rate: float, calls: list):
    def call(settings, method, path):
        calls.append(path)
        return 200, json.dumps({"output_tok_per_s": rate, "model_output_tok_per_s": rate * 4.0}).encode()
    return call


def level(rate, ci, bottleneck=False):
    return {"concurrency": 64, "output_tok_per_s": rate, "output_tok_per_s_ci95": ci, "input_tokens_mean": 63.6,
            "client": {"bottleneck": bottleneck, "cpu_percent_max_worker": 91.0, "read_lag_ms_mean": 12.5}}


def test_an_emulator_level_at_55_percent_of_its_own_model_is_saturated_by_the_engine():
    calls: list = []
    lv = level(550.0, [530.0, 570.0])
    reasons = keepup.saturation(SETTINGS, EMULATOR, lv, analytic(1000.0, calls))
    assert reasons == [reasons[0]] and reasons[0].startswith("engine: delivered 55% of its own model's rate")
    assert calls == ["/emulator/analytic?concurrency=64&input_len=64&output_len=64"]
    assert lv["emulator_model"]["output_tok_per_s"] == 1000.0
    assert "emulator-only" in lv["emulator_model"]["source"]


def test_a_level_whose_interval_reaches_the_model_less_its_tolerance_kept_up():
    """The model agrees with the emulator within 3% on an idle machine; 5% below is still the model."""
    assert keepup.saturation(SETTINGS, EMULATOR, level(940.0, [900.0, 960.0]), analytic(1000.0, [])) == []
    assert keepup.saturation(SETTINGS, EMULATOR, level(1010.0, None), analytic(1000.0, [])) == []


def test_a_busy_client_is_named_first():
    reasons = keepup.saturation(SETTINGS, EMULATOR, level(550.0, [530.0, 570.0], bottleneck=True),
                                analytic(1000.0, []))
    assert [r.split(":")[0] for r in reasons] == ["client", "engine"]
    assert "91% of a core" in reasons[0]


def test_a_real_engine_is_never_asked_for_the_emulators_model():
    calls: list = []
    lv = level(550.0, [530.0, 570.0])
    assert keepup.saturation(SETTINGS, SGLANG, lv, analytic(1000.0, calls)) == []
    assert calls == [] and "emulator_model" not in lv


def test_an_emulator_that_does_not_answer_leaves_only_the_clients_check():
    def down(settings, method, path):
        raise ServerError("cannot reach 127.0.0.1:1")
    lv = level(550.0, [530.0, 570.0], bottleneck=True)
    reasons = keepup.saturation(SETTINGS, EMULATOR, lv, down)
    assert [r.split(":")[0] for r in reasons] == ["client"] and "emulator_model" not in lv


# The held-streams check (keepup.held_reasons), on the figures of the level that made a fresh
# clone's CI red: the MoE profile's baseline at C=32, a 2-s window, two scrapes, wall-clock figures.
def stalled(**more) -> dict:
    lv = {"concurrency": 32, "output_tok_per_s": 1199.5, "output_tok_per_s_ci95": [0.0, 2777.8],
          "request_per_s": 32.5, "ttft_ms": {"mean": 72.6}, "client": {"bottleneck": False, "read_lag_ms_mean": 1.3},
          "server_running": {"mean": 20.0, "max": 20.0, "samples": 2},
          "server_queued": {"mean": 0.0, "max": 0.0, "samples": 2}}
    lv.update(more)
    return lv


def test_a_stall_that_left_requests_between_client_and_emulator_is_named():
    """20 of 32 held at both scrapes: 24 missed where Little's law allows 32.5/s x (72.6 + 1.3 + 10) ms
    = 2.7 per scrape; the rate check alone let this level through (its interval reaches 2x the model)."""
    reasons = keepup.saturation(SETTINGS, EMULATOR, stalled(), analytic(1378.6, []))
    assert len(reasons) == 1 and reasons[0].startswith("engine: held 20.0 of the 32 requests"), reasons
    assert "at most 2.7 on their way in or in prefill" in reasons[0]
    assert keepup.held_reasons(SETTINGS, stalled(server_running={"mean": 20.0, "max": 20.0, "samples": 1}))


def test_held_requests_are_counted_only_where_the_loop_keeps_them_open():
    # Every request held (queued ones count): nothing to say.
    assert keepup.held_reasons(SETTINGS, stalled(server_running={"mean": 29.0, "max": 31.0, "samples": 2},
                                                 server_queued={"mean": 3.0, "max": 5.0, "samples": 2})) == []
    # In prefill, missed by the gauges: a long TTFT allows for them (32.5/s x 0.4 s = 13 per scrape).
    assert keepup.held_reasons(SETTINGS, stalled(ttft_ms={"mean": 400.0})) == []
    # A fixed number of requests ends with fewer open; a real engine's gauges are not the emulator's.
    assert keepup.held_reasons(dict(SETTINGS, requests=200), stalled()) == []
    assert keepup.saturation(SETTINGS, SGLANG, stalled(), analytic(1378.6, [])) == []
    # Results from before the scrape count was recorded, or without /metrics: no check.
    assert keepup.held_reasons(SETTINGS, stalled(server_running={"mean": 20.0, "max": 20.0})) == []
    assert keepup.held_reasons(SETTINGS, stalled(server_running=None, server_queued=None)) == []


def test_the_held_check_names_a_machine_that_kept_up_at_most_at_its_stated_rate():
    """False alarms by simulation against a known truth: levels that kept up, the gauges missing on
    average exactly what Little's law allows (rate x (TTFT + lag + transit)), each stream missed
    independently at each scrape (binomial: its tail is below the Poisson the check uses). Over 20 000
    levels the alarms stay within HELD_ALPHA's expectation plus four of its standard deviations. And
    the same levels with a third of their streams stalled at every scrape, where the law allows a
    tenth and there are two scrapes or more at C >= 32 (the CI stall: 12 of 32 where it allowed 2.7),
    are all named."""
    import random
    rng = random.Random(16)
    levels = 20000
    alarms, stalls, missed_stalls = 0, 0, []
    for _unused in range(levels):
        conc = rng.choice([1, 2, 4, 8, 16, 32, 64, 128, 256])
        scrapes = rng.randint(1, 60)
        rate = rng.uniform(0.5, 200.0)
        ttft = rng.uniform(5.0, 500.0)
        allowed = rate * (ttft / 1000.0 + 0.001 + keepup.TRANSIT_S)
        share = min(1.0, allowed / conc)
        missed = sum(rng.random() < share for _dummy in range(scrapes * conc))
        lv = stalled(concurrency=conc, request_per_s=rate, ttft_ms={"mean": ttft},
                     client={"read_lag_ms_mean": 1.0},
                     server_running={"mean": round(conc - missed / scrapes, 2), "samples": scrapes},
                     server_queued={"mean": 0.0, "samples": scrapes})
        alarms += bool(keepup.held_reasons(SETTINGS, lv))
        if conc >= 32 and scrapes >= 2 and allowed <= conc / 10:
            stalls += 1
            held = max(0.0, conc - missed / scrapes - -(-conc // 3))
            lv["server_running"] = {"mean": round(held, 2), "samples": scrapes}
            if not keepup.held_reasons(SETTINGS, lv):
                missed_stalls.append((conc, scrapes, round(allowed, 1), held))
    expected = keepup.HELD_ALPHA * levels
    assert alarms <= expected + 4 * expected ** 0.5, alarms
    assert stalls > 1000 and not missed_stalls, missed_stalls[:5]


# The schedule check (keepup.schedule_reasons), on the figures of a level beside the suite that no
# other check caught: the MoE profile's baseline at C=32, a 4-s window, 385 tok/s against a model of
# 697 (TTFT p90 443 ms against 51-54 in the other launches), 30.75 of 32 held, interval [0, 1172].
def halved(lost=None, **more) -> dict:
    lv = stalled(output_tok_per_s=385.0, output_tok_per_s_ci95=[0.0, 1172.0], request_per_s=6.0,
                 ttft_ms={"mean": 180.0}, server_running={"mean": 30.75, "max": 32.0, "samples": 16},
                 server_queued={"mean": 0.0, "max": 0.0, "samples": 16})
    if lost is not None:
        lv["emulator_schedule_lost"] = {"bounds_s": lost, "window_s": 4.0}
    lv.update(more)
    return lv


def test_a_stall_the_emulator_counted_is_named_where_the_other_checks_pass():
    assert keepup.saturation(SETTINGS, EMULATOR, halved(), analytic(697.0, [])) == []
    reasons = keepup.saturation(SETTINGS, EMULATOR, halved([1.71, 1.83]), analytic(697.0, []))
    assert len(reasons) == 1 and reasons[0].startswith("engine: the emulator gave up 1.71 to 1.83 s"), reasons
    assert "up to 46%" in reasons[0]


def test_the_schedule_check_flags_what_the_scrapes_cannot_rule_out_beyond_the_models_tolerance():
    # 5% of 4 s is 0.2 s: up to 0.2 s lost is within what the model may differ by; the launch that
    # read 14% under its neighbours had [0, 0.56] s, its stall counted after the last scrape inside.
    assert keepup.schedule_reasons(halved([0.0, 0.2])) == []
    assert keepup.schedule_reasons(halved([0.0, 0.5595]))
    assert keepup.schedule_reasons(halved([0.21, 0.3]))
    # Nothing lost (every level on a machine that kept up), or no counter (a real engine, old results).
    assert keepup.schedule_reasons(halved([0.0, 0.0])) == []
    assert keepup.schedule_reasons(halved()) == []
    # A real engine is never asked, whatever its level holds.
    assert keepup.saturation(SETTINGS, SGLANG, halved([3.0, 3.0]), analytic(697.0, [])) == []


def test_the_levels_lost_schedule_sums_its_windows_and_needs_every_one():
    from ansible_collections.specbench.core.plugins.module_utils.specbench_client.summary import schedule_lost

    def raw(bounds, ws=10.0, end=14.0):
        return {"metrics": {"schedule_lost_s_bounds": bounds} if bounds is not None else {}, "ws": ws,
                "window_end": end}
    lost = schedule_lost([raw([0.0, 0.1]), raw([0.5, 0.75], 20.0, 22.0)])
    assert lost["bounds_s"] == [0.5, 0.85] and lost["window_s"] == 6.0
    assert schedule_lost([raw([0.0, 0.1]), raw(None)]) is None
    assert schedule_lost([]) is None
    # The emulator serves the counter, but no reads bracketed one window: unknown, and flagged.
    unread = raw(None)
    unread["metrics"]["schedule_lost_served"] = True
    lost = schedule_lost([raw([0.0, 0.1]), unread])
    assert lost["bounds_s"] is None and lost["unbracketed"] == "1 of 2 window(s)" and lost["window_s"] == 8.0
    reasons = keepup.schedule_reasons(halved(emulator_schedule_lost=lost))
    assert len(reasons) == 1 and reasons[0].startswith("engine: no reads of the emulator's /metrics bracketed 1 of 2")


def test_a_window_with_no_scrape_inside_keeps_the_counters_read_either_side():
    """MetricsPoller.result over a window no scrape fell inside (a 1-s window, reads 2 s apart): no
    gauges, the counters' bounds from the reads either side, which hold the truth."""
    from ansible_collections.specbench.core.plugins.module_utils.specbench_client.server import MetricsPoller

    poller = MetricsPoller({"metrics_interval_s": 2.0}, 0.0)
    # (sent, received, running, queued, generated, drafts, accepted, verify, lost): 100 tok/s, and
    # 0.4 s of schedule given up between the reads at 1.0 and 3.0
    for sent, lost in ((0.0, 0.0), (1.0, 0.0), (3.0, 0.4)):
        poller.samples.append((sent, sent + 0.01, 4.0, 0.0, 100.0 * sent, None, None, None, lost))
    out = poller.result(1.5, 2.5)
    assert "running" not in out and out["samples"] == 0 and out["schedule_lost_served"]
    assert out["schedule_lost_s_bounds"] == [0.0, 0.4]
    low, high = out["generated_tokens_bounds"]
    assert low <= 100.0 <= high and low <= out["generated_tokens"] <= high
    # No read answered at all: nothing to say. A server without the emulator's counter: not served.
    assert MetricsPoller({"metrics_interval_s": 2.0}, 0.0).result(1.5, 2.5) is None
    poller.samples[:] = [s[:8] + (None,) for s in poller.samples]
    assert not poller.result(1.5, 2.5)["schedule_lost_served"]


def test_a_shortfall_within_the_models_tolerance_is_not_flagged_however_significant():
    """The fresh clone's MoE baseline at C=128: 120 held where the law allowed 4.1 in transit, over
    many scrapes (a Poisson tail far below HELD_ALPHA), but 3.9 streams short is 3% of 128: the rate
    moved by 3% at most (keepup's comment), inside MODEL_TOLERANCE. Twice that is flagged."""
    def busy(held, scrapes=40):
        return stalled(concurrency=128, request_per_s=85.0, ttft_ms={"mean": 36.9},
                       client={"bottleneck": False, "read_lag_ms_mean": 1.3},
                       server_running={"mean": held, "max": 128.0, "samples": scrapes},
                       server_queued={"mean": 0.0, "max": 0.0, "samples": scrapes})
    allowed = 85.0 * (0.0369 + 0.0013 + keepup.TRANSIT_S)
    assert round(allowed, 1) == 4.1
    assert keepup.poisson_tail(allowed * 40, (128 - 120) * 40) < keepup.HELD_ALPHA
    assert keepup.held_reasons(SETTINGS, busy(120.0)) == []
    assert keepup.held_reasons(SETTINGS, busy(128 - 4.1 - 0.05 * 128 - 0.2))
