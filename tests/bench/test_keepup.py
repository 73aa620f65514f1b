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
