"""The mode held against what the server runs (issue 36, item 7): SGLang's resolved /server_info
fields and vLLM's speculative config or spec-decode counters, read by the engine modules, and the
check that refuses a mode the server does not run, naming both. Pure functions: well under 1 s.
The same readers run against the emulator (tests/bench/test_sweep_playbook.py) and vLLM's CPU
build (tests/vllm/test_vllm_postlaunch.py)."""
from __future__ import annotations

import pytest

from ansible_collections.specbench.core.plugins.module_utils.specbench_client import modecheck
from ansible_collections.specbench.core.plugins.module_utils.specbench_client.engines import sglang, vllm

URL = "http://127.0.0.1:30000"


def sglang_server(**info) -> dict:
    return {"engine": None, "base_url": URL, "speculation": sglang.speculation(info, b"")}


EAGLE3 = {"speculative_algorithm": "EAGLE3", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
          "speculative_num_draft_tokens": 4, "speculative_adaptive": False}


def test_sglang_reads_the_resolved_fields():
    spec = sglang.speculation(EAGLE3, None)
    assert spec["algorithm"] == "EAGLE3" and spec["num_steps"] == 3 and spec["num_draft_tokens"] == 4
    assert modecheck.describe_running(spec) == "EAGLE3 (steps 3, top-k 1, draft tokens 4)"
    assert sglang.speculation({"speculative_algorithm": None}, None) == {
        "algorithm": None, "source": "/server_info (resolved server arguments)"}
    assert sglang.speculation(None, None)["algorithm"] == "unknown"
    # A foreign server's /server_info without SGLang's field is not read as plain decoding.
    assert sglang.speculation({"version": "1.0"}, None)["algorithm"] == "unknown"


@pytest.mark.parametrize(("mode", "info", "ok"), [
    ("eagle3", EAGLE3, True),
    ("baseline", {"speculative_algorithm": None}, True),
    ("ngram", {"speculative_algorithm": "NGRAM", "speculative_num_draft_tokens": 8}, True),
    ("nextn", {**EAGLE3, "speculative_algorithm": "EAGLE"}, True),  # NEXTN resolves to EAGLE
    ("eagle3-adaptive", {**EAGLE3, "speculative_adaptive": True}, True),
    ("standalone", {**EAGLE3, "speculative_algorithm": "STANDALONE"}, True),
    ("eagle3", {"speculative_algorithm": None}, False),
    ("baseline", EAGLE3, False),
    ("eagle3", {**EAGLE3, "speculative_adaptive": True}, False),  # adaptive steps are another mode
    ("eagle3-adaptive", EAGLE3, False),
    ("ngram", EAGLE3, False),
])
def test_sglang_modes(mode, info, ok):
    out = modecheck.check(mode, sglang_server(**info))
    assert out["checked"] and out["ok"] is ok, out
    if not ok:
        running = modecheck.describe_running(out["running"])
        assert f"mode {mode} asks for {out['expected']}" in out["message"]
        assert f"but {URL} runs {running}" in out["message"]


def test_a_refusal_names_the_mode_that_fits():
    out = modecheck.check("eagle3", sglang_server(speculative_algorithm=None))
    assert out["message"] == (
        f"mode eagle3 asks for EAGLE3 with a fixed step count, but {URL} runs plain decoding (from /server_info "
        "(resolved server arguments)): its results would be filed under the wrong mode. Benchmark it as "
        "-e mode=baseline, or point base_url at a server that runs EAGLE3 with a fixed step count")
    out = modecheck.check("baseline", sglang_server(**{**EAGLE3, "speculative_adaptive": True}))
    assert "runs EAGLE3 (steps 3, top-k 1, draft tokens 4, adaptive steps)" in out["message"]
    assert "-e mode=eagle3-adaptive" in out["message"]


def test_unknown_names_and_silent_servers_are_warned_about_not_refused():
    out = modecheck.check("my-eagle", sglang_server(**EAGLE3))
    assert out["ok"] and not out["checked"]
    assert "mode 'my-eagle' is not a mode specbench knows for sglang" in out["message"]
    assert "EAGLE3 (steps 3" in out["message"]
    out = modecheck.check("eagle3", {"base_url": URL})
    assert out["ok"] and not out["checked"] and "does not say what it runs" in out["message"]


# vLLM's /metrics with speculation on (vllm/v1/spec_decode/metrics.py: one per-position child per
# draft position, registered at start) and off (no spec_decode counters).
VLLM_ON = b"""# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 0.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 0.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 0.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 0.0
vllm:num_requests_running{engine="0",model_name="m"} 0.0
"""
VLLM_OFF = b'vllm:num_requests_running{engine="0",model_name="m"} 0.0\n'


def vllm_server(metrics, config=None) -> dict:
    return {"engine": "vllm", "base_url": URL, "speculation": vllm.speculation({"version": "0.32.0"}, metrics, config)}


def test_vllm_from_metrics_alone():
    on = vllm_server(VLLM_ON)
    assert on["speculation"]["num_draft_tokens"] == 3
    assert modecheck.check("baseline", vllm_server(VLLM_OFF))["ok"]
    out = modecheck.check("ngram", on)
    assert out["ok"] and out["checked"] and "serves no speculative method" in out["message"]
    out = modecheck.check("baseline", on)
    assert not out["ok"] and "runs speculative (method not served) (draft tokens 3)" in out["message"]
    out = modecheck.check("ngram", vllm_server(VLLM_OFF))
    assert not out["ok"] and "runs plain decoding" in out["message"] and "-e mode=baseline" in out["message"]


def test_vllm_from_its_speculative_config():
    config = {"vllm_config": {"speculative_config": {"method": "ngram", "num_speculative_tokens": 4}}}
    assert modecheck.check("ngram", vllm_server(VLLM_ON, config)) == {
        "mode": "ngram", "engine": "vllm", "checked": True, "ok": True, "expected": "ngram",
        "running": {"algorithm": "ngram", "num_draft_tokens": 4,
                    "source": "GET /server_info (vllm_config.speculative_config)"},
        "message": None}
    out = modecheck.check("eagle3", vllm_server(VLLM_ON, config))
    assert not out["ok"] and "mode eagle3 asks for eagle3, but" in out["message"] and "-e mode=ngram" in out["message"]
    plain = {"vllm_config": {"speculative_config": None}}
    assert modecheck.check("baseline", vllm_server(VLLM_OFF, plain))["ok"]
