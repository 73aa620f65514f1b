"""The energy figure of a level, end to end on the emulator: the client samples the emulated GPUs'
energy counter during the window (specbench_client.telemetry), and the level's joules are held to
what the emulator's own power model (files/sglang_emulator/gpus.py, PowerModel) gives for the time
it ran its schedule in that window. ~10 s beside the suite."""
from __future__ import annotations

import pytest
from benchlib import analytic, kept_up_level, sc
from emulator_counters import CounterReads

from sglang_emulator.gpus import PowerModel

INTERVAL_S = 0.05  # 40 samples a 2-s window: bounds of +-P * 0.05 s at each edge


def test_energy_per_token_held_to_the_power_model(emulator):
    """C=1 without speculation: each request is one prefill of 64 tokens (power P(64)) then 63 decode
    steps at batch 1 (P(1)); between requests the GPUs idle (P_idle). Over the window of W seconds
    the engine ran its schedule S seconds (bounded from outside by GET /emulator/counters either
    side of each edge: emulator_counters.unscheduled_s), so each GPU drew

        E = S * P_busy + (W - S) * P_idle,  P_busy = (prefill * P(64) + 63 step * P(1)) / (prefill + 63 step)

    Tolerance, each part derived, none fixed: the counter's own sampling (the level's
    energy_j_bounds: the samples either side of each edge, at most 2 * P * interval apart); S's
    bounds; and at each edge one prefill more or fewer than its share of S, (P(64) - P(1)) * prefill.
    The figure per token is that energy over the window's tokens at the node's speed (/ time scale)."""
    scale = 0.2
    emu = emulator("--tp-size", "8", "--enable-metrics", time_scale=scale)
    s = sc.normalize_settings({"base_url": emu.base_url, "input_len": 64, "output_len": 64, "warmup_s": 0.3,
                               "window_s": 2.0, "drain": False, "concurrency": [1],
                               "telemetry_interval_s": INTERVAL_S})
    with CounterReads({"emu": emu.base_url}) as reads:
        level = kept_up_level(s, 1, sc.probe_server(s))
    assert level["error"] is None, level
    truth = analytic(emu.base_url, 1, 64, 64)
    model = PowerModel()
    window = level["gpu_telemetry"][-1]
    assert window["source"] == "emulated" and window["energy_source"] == "counter"
    assert len(window["gpus"]) == 8 and window["interval_s"] == INTERVAL_S
    prefill, step = truth["prefill_s"], truth["step_s"]  # wall-clock seconds at this time scale
    p_busy = (prefill * model.power(64) + 63 * step * model.power(1)) / (prefill + 63 * step)
    unscheduled = reads.unscheduled_s("emu", level)
    w = window["window_s"]
    # The reads either side of an edge may hold steps just outside the window: S is at most W (the
    # counter places each step at its scheduled time, whenever the engine emitted it).
    s_lo, s_hi = w - unscheduled[1], min(w, w - unscheduled[0])
    assert 0 < s_lo <= s_hi, (s_lo, s_hi, w)
    mix = 2 * (model.power(64) - model.power(1)) * prefill
    for gpu in window["gpus"]:
        lo, hi = gpu["energy_j_bounds"]
        assert hi - lo <= 2 * model.TDP_W * INTERVAL_S * 1.2 + 1e-6  # the samples' cadence (20% for late wake-ups)
        expected_lo = s_lo * p_busy + (w - s_lo) * model.IDLE_W - mix
        expected_hi = s_hi * p_busy + (w - s_hi) * model.IDLE_W + mix
        print(f"GPU {gpu['index']}: {gpu['energy_j']:.2f} J [{lo:.2f}, {hi:.2f}], model [{expected_lo:.2f}, "
              f"{expected_hi:.2f}] (S in [{s_lo:.3f}, {s_hi:.3f}] of {w} s)")
        assert lo <= expected_hi and hi >= expected_lo, (gpu, expected_lo, expected_hi)
        assert gpu["throttle_reasons"] in ([], ["gpu_idle"])
    assert level["energy_confounders"] == []
    tokens = level["wall_clock_output_tok_per_s"] * level["window_s"]
    per_token = window["energy_j"] / tokens / scale  # the node's joules per token
    assert level["energy_j_per_output_token"] == pytest.approx(per_token, rel=2e-3)
    lo_t, hi_t = level["energy_j_per_output_token_bounds"]
    assert lo_t <= level["energy_j_per_output_token"] <= hi_t
