"""bench.yml -e engine=vllm against a real vLLM server (CPU build, tiny model) that the playbook
launches, sweeps at C = 1, 4, 16 and tears down: baseline and n-gram on the completions API.
The server's counters are read by the test itself (vllmkit.Scraper), independently of the
client, and held against each level's recorded window."""
from __future__ import annotations

import pytest
import vllmkit

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

MODES = ("baseline", "ngram")
TOLERANCE = 0.02


@pytest.fixture(scope="module")
def bench(vllm_run):
    runs = {}

    def get(mode):
        if mode not in runs:
            runs[mode] = vllm_run(f"bench-{mode}", "bench.yml", {"mode": mode, "bench_api": "completions"})
        return runs[mode]

    return get


def levels_of(run, mode):
    doc = run.run.mode_results("localhost", mode)
    assert doc["status"] == "complete", doc.get("error")
    return doc


@pytest.mark.parametrize("mode", MODES)
def test_bench_launches_sweeps_and_leaves_nothing_running(bench, mode):
    run = bench(mode)
    assert run.run.rc == 0, run.run.stdout[-4000:]
    doc = levels_of(run, mode)
    assert doc["engine"] == "vllm" and doc["server"]["engine"] == "vllm"
    assert doc["server"]["version"] == "0.32.0"
    assert "vllm.entrypoints.openai.api_server" in " ".join(run.record["command"])
    assert (doc["server"]["speculative_algorithm"] is not None) == (mode != "baseline")
    assert [lv["concurrency"] for lv in doc["levels"]] == [1, 4, 16]
    for level in doc["levels"]:
        assert level["error"] is None and level["requests_ok"] > 0 and level["requests_failed"] == 0, level
        assert level["output_tokens_mean"] == 64
    # The teardown: the recorded server and everything in its session are gone, VLLM:: included.
    sid = run.record["pgid"]
    assert not vllmkit.session_processes(sid), vllmkit.session_processes(sid)
    assert not [p for p in vllmkit.vllm_titled() if p[0] in {q for q, unused in vllmkit.session_processes(sid)}]
    killed = doc["gpu"]["killed_after"]
    assert run.record["pid"] in [k["pid"] for k in killed]


@pytest.mark.parametrize("mode", MODES)
def test_each_level_records_its_window_in_utc_with_milliseconds(bench, mode):
    doc = levels_of(bench(mode), mode)
    for level in doc["levels"]:
        start, end = vllmkit.utc(level["window_start_utc"]), vllmkit.utc(level["window_end_utc"])
        assert end - start == pytest.approx(level["window_s"], abs=0.002)


@pytest.mark.parametrize("mode", MODES)
def test_client_throughput_agrees_with_the_servers_generation_counter(bench, mode):
    run = bench(mode)
    for level in levels_of(run, mode)["levels"]:
        server = run.scraper.over(level)["rate"]
        tolerance = vllmkit.rate_tolerance(level)
        assert level["output_tok_per_s"] == pytest.approx(server, rel=tolerance), (level["concurrency"], server)
        assert level["server_output_tok_per_s"] == pytest.approx(server, rel=tolerance)


@pytest.mark.parametrize("mode", MODES)
def test_prompts_hold_input_len_of_the_servers_tokens(bench, mode):
    for level in levels_of(bench(mode), mode)["levels"]:
        assert level["input_tokens_mean"] == pytest.approx(128, rel=TOLERANCE), level["prompt_calibration"]
        assert level["prompt_calibration"]["source"].startswith("POST /tokenize")


def test_ngram_accept_length_is_the_counters_over_the_window(bench):
    run = bench("ngram")
    for level in levels_of(run, "ngram")["levels"]:
        counted = run.scraper.over(level)["accept_length"]
        assert level["accept_length"] == pytest.approx(counted, rel=TOLERANCE), level["concurrency"]
        assert level["accept_length_source"].startswith("/metrics spec_decode counters")
        assert level["accept_length"] > 1.5  # a random model loops under greedy decoding: drafts land
