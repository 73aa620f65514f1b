"""bench.yml with engine=external, run through ansible-runner (as AWX runs it) against
emulators these tests start: results file, facts, progress lines, check mode, bad input and
every fault of issue 3, each keeping the levels measured before it."""
from __future__ import annotations

import re

import pytest
from benchlib import free_port, run_playbook

pytestmark = pytest.mark.slow

KEY = "sk-test-0123456789abcdef"
LATENCY = ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms")
STATS = {"mean", "p50", "p90", "p99"}


def quick(**extra) -> dict:
    """Small, fast sweep settings (the emulator runs at time scale 0.05 to 0.1)."""
    base = {"bench_input_len": 32, "bench_output_len": 32, "bench_warmup_s": 0.3, "bench_window_s": 1.0}
    base.update(extra)
    return base


def test_results_file_facts_and_progress(tmp_path, emulator):
    """Every field of the issue, in the file and the facts; one progress line per level; the
    API key in no log (even at -vvv), event, fact or result; two client processes at C=4."""
    emu = emulator("--tp-size", "8", "--api-key", KEY, "--enable-metrics", "--speculative-algorithm", "EAGLE3",
                   "--speculative-draft-model-path", "draft/eagle3", time_scale=0.1)
    run = run_playbook(tmp_path, {"localhost": {}}, {
        "mode": "eagle3", "engine": "external", "base_url": emu.base_url, "bench_api_key": KEY,
        "bench_concurrency": [1, 4], "bench_workers": 2, **quick()}, cmdline="-vvv")
    assert run.rc == 0, run.stdout
    doc = run.results("localhost", "eagle3")
    assert doc["mode"] == "eagle3" and doc["engine"] == "external" and doc["status"] == "complete"
    assert doc["error"] is None and doc["run_id"] == "t1"
    settings = doc["settings"]
    assert settings["concurrency"] == [1, 4] and settings["input_len"] == 32 and settings["output_len"] == 32
    assert settings["api"] == "chat" and settings["api_key_set"] is True and "api_key" not in settings
    server = doc["server"]
    assert server["version"] == "0.5.23+specbench-emulator" and server["model"] == "test/model"
    assert server["speculative_algorithm"] == "EAGLE3" and server["metrics_available"] is True
    assert "--speculative-algorithm EAGLE3" in server["launch_command"]
    assert "--api-key <redacted>" in server["launch_command"]
    assert server["server_info"]["api_key"] == "<redacted>"
    assert [lv["concurrency"] for lv in doc["levels"]] == [1, 4]
    for level in doc["levels"]:
        assert level["error"] is None, level
        assert level["output_tok_per_s"] > 0
        low, high = level["output_tok_per_s_ci95"]
        assert low <= level["output_tok_per_s"] <= high
        assert level["requests_ok"] > 0 and level["requests_failed"] == 0 and level["failures_by_kind"] == {}
        for key in LATENCY + ("decode_tok_per_s_per_stream",):
            assert STATS <= set(level[key]), key
            assert level[key]["p50"] <= level[key]["p90"] <= level[key]["p99"]
        assert 2.0 < level["accept_length"] < 2.4  # the profile's EAGLE-3: 2.18
        assert level["output_tok_per_s_whole_run"] > 0 and level["request_per_s"] > 0
        assert level["server_running"]["max"] <= level["concurrency"]
        assert level["server_queued"] is not None
        assert level["client"]["workers"] == min(2, level["concurrency"])
        assert level["client"]["cpu_percent"] is not None
        assert isinstance(level["client"]["bottleneck"], bool)
        assert level["output_tokens_mean"] == 32 and level["requests_short"] == 0
    # Facts for a later compare step.
    facts = run.facts("localhost")["specbench_sweep"]
    assert facts["results_file"] == str(run.results_path("localhost", "eagle3"))
    assert facts["levels"] == doc["levels"] and facts["mode"] == "eagle3" and facts["status"] == "complete"
    # One progress line per level on the console.
    # The emulator behind engine=external: labelled so, with its time scale, at the node's speed.
    lines = [ln for ln in run.stdout.splitlines() if re.search(r"localhost \| (engine: [^|]+\| )?C=\s*\d+ \|", ln)]
    assert len(lines) == 2 and "C=   1" in lines[0] and "C=   4" in lines[1]
    assert lines[0].startswith("localhost | engine: emulator, time scale 0.1 | C=")
    assert "tok/s at node speed [" in lines[0] and "TTFT p50" in lines[0] and "failed 0" in lines[0]
    # The key appears nowhere.
    assert KEY not in run.artifacts_text()
    assert KEY not in run.results_path("localhost", "eagle3").read_text()


def test_bad_input_is_refused_and_check_mode_measures_nothing(tmp_path):
    """In one --check run: each bad value fails in the first play with a message naming it and
    the fix; the good host says what it would run and sends nothing (no server listens)."""
    external = {"engine": "external", "base_url": f"http://127.0.0.1:{free_port()}", "mode": "baseline"}
    bad_prompts = tmp_path / "bad.jsonl"
    bad_prompts.write_text('{"messages": [{"role": "user", "content": "hi"}]}\n{"messages": [{"role": "bot"}]}\n')
    hosts = {
        "good": dict(external),
        "empty": {**external, "bench_concurrency": []},
        "word": {**external, "bench_concurrency": "1,two,5"},
        "zero": {**external, "bench_concurrency": [1, 0, 5]},
        "negative": {**external, "bench_concurrency": [-3]},
        "twice": {**external, "bench_concurrency": [1, 1]},
        "nooutput": {**external, "bench_output_len": 0},
        "nowindow": {**external, "bench_window_s": 0},
        "badapi": {**external, "bench_api": "grpc"},
        "nourl": {"engine": "external", "mode": "baseline"},
        "https": {**external, "base_url": "https://127.0.0.1:30000"},
        "nomode": {"engine": "external", "base_url": "http://127.0.0.1:9"},
        "noprompts": {**external, "bench_prompts_file": str(tmp_path / "missing.jsonl")},
        "badprompts": {**external, "bench_prompts_file": str(bad_prompts)},
    }
    run = run_playbook(tmp_path, hosts, cmdline="--check")
    failed = run.failures()
    expect = {
        "empty": "bench_concurrency is empty: give at least one level",
        "word": "bench_concurrency holds 'two', which is not a whole number",
        "zero": "bench_concurrency holds 0: every level is a number of concurrent streams and must be at least 1",
        "negative": "bench_concurrency holds -3",
        "twice": "bench_concurrency holds 1 twice",
        "nooutput": "bench_output_len is 0, but it must be at least 1",
        "nowindow": "bench_window_s is 0, but it must be above 0",
        "badapi": "bench_api",
        "nourl": "engine=external benchmarks a server that is already running",
        "https": "is https: the client speaks plain http",
        "nomode": "mode is not set",
        "noprompts": "bench_prompts_file",
        "badprompts": 'bad.jsonl\' line 2: field "messages[0].role" is \'bot\'',
    }
    for host, text in expect.items():
        assert text in failed.get(host, ""), (host, failed.get(host))
    assert "good" not in failed
    assert "good | bench_sweep baseline (check mode, nothing sent): would sweep C=[1, 2, 5, 10, 30, 70, 100, 250] " \
           f"against {external['base_url']}" in run.stdout
    assert not run.results_dir.exists()  # nothing measured, nothing written


def test_faults_keep_earlier_levels(tmp_path, emulator, fault_proxy):
    """Unreachable URL, wrong key, unknown model, a server dying mid-level, a level where every
    request fails (and the sweep going on past it), malformed SSE and a stalled stream: each
    names its cause on the console and in the results, and keeps what was measured before."""
    # Count mode makes the request numbers exact: level 1 sends one first request + 4 measured. No
    # second measurement of a level the loaded machine did not keep up with (bench_saturated_retries):
    # the faults come after a number of requests, so a retry would move them into level 1.
    count = {"bench_requests": 4, "bench_warmup_s": 0, "bench_input_len": 16, "bench_output_len": 16,
             "bench_concurrency": [1, 2], "bench_request_timeout_s": 1.0, "mode": "baseline",
             "engine": "external", "bench_saturated_retries": 0}
    after_level1 = 1 + 4
    keyed = emulator("--tp-size", "8", "--api-key", KEY, time_scale=0.05)
    crashing = emulator("--tp-size", "8", "--emulator-crash-after", str(after_level1 + 3), time_scale=0.05)
    shared = emulator("--tp-size", "8", time_scale=0.05)
    ngram = emulator("--tp-size", "8", "--speculative-algorithm", "NGRAM", time_scale=0.05)
    failing = fault_proxy(shared.port, "fail", after_level1)
    malformed = fault_proxy(shared.port, "malformed", after_level1)
    stalled = fault_proxy(shared.port, "stall", after_level1)
    dead = f"http://127.0.0.1:{free_port()}"
    hosts = {
        "unreachable": {**count, "base_url": dead},
        "badkey": {**count, "base_url": keyed.base_url, "bench_api_key": "wrong-key"},
        "nomodel": {**count, "base_url": keyed.base_url, "bench_api_key": KEY, "bench_model": "no/such-model"},
        "crash": {**count, "base_url": crashing.base_url},
        "failing": {**count, "base_url": failing.base_url, "bench_stop_on_error": False,
                    "bench_concurrency": [1, 2, 3]},
        "malformed": {**count, "base_url": malformed.base_url},
        "stalled": {**count, "base_url": stalled.base_url},
        # The mode held against what the server runs (issue 36, item 7): refused at the probe, both named.
        "notspec": {**count, "base_url": shared.base_url, "mode": "eagle3"},
        "notplain": {**count, "base_url": ngram.base_url},
    }
    # Every host shares one node folder: hosts of one run hold its node lock together (issue 37), none waits.
    run = run_playbook(tmp_path, hosts)
    failed = run.failures()

    def check_probe_failure(host: str, text: str) -> None:
        assert text in failed[host], failed[host]
        doc = run.results(host, "baseline")
        assert doc["status"] == "failed" and text in doc["error"] and doc["levels"] == []
        assert text in run.stdout

    check_probe_failure("unreachable", "connection refused: nothing listens at 127.0.0.1")
    check_probe_failure("badkey", "answered 401 Unauthorized to GET /v1/models: the API key is wrong")
    check_probe_failure("nomodel", "does not serve model 'no/such-model'; it serves 'test/model'")
    for host, mode, text in (
            ("notspec", "eagle3", f"mode eagle3 asks for EAGLE3 with a fixed step count, but {shared.base_url} runs "
                                  "plain decoding (from /server_info (resolved server arguments)): its results would "
                                  "be filed under the wrong mode. Benchmark it as -e mode=baseline"),
            ("notplain", "baseline", f"mode baseline asks for plain decoding, but {ngram.base_url} runs NGRAM")):
        assert text in failed[host], failed[host]
        doc = run.results(host, mode)
        assert doc["status"] == "failed" and text in doc["error"] and doc["levels"] == []
        assert doc["mode_check"]["ok"] is False and doc["mode_check"]["checked"] is True
    assert "-e mode=ngram" in failed["notplain"]

    def check_stopped(host: str, kinds: set, text: str) -> dict:
        doc = run.results(host, "baseline")
        first, second = doc["levels"][0], doc["levels"][1]
        assert first["error"] is None and first["requests_ok"] == 5 and first["output_tok_per_s"] > 0
        assert second["error"] and text in second["error"], second["error"]
        assert kinds <= set(second["failures_by_kind"]), second["failures_by_kind"]
        assert doc["status"] == "stopped" and len(doc["levels"]) == 2 and doc["error"] == second["error"]
        assert text in failed[host] and "the levels measured before it are in" in failed[host]
        assert re.search(rf"{host} \| (engine: [^|]+\| )?C=   2 \|", run.stdout) and "ERROR: C=2" in run.stdout
        return second

    second = check_stopped("crash", set(), "requests failed")
    assert second["requests_ok"] > 0  # it died mid-level
    # In flight when it died: disconnected; sent after: connection refused.
    assert set(second["failures_by_kind"]) <= {"disconnected", "connect_refused"}, second["failures_by_kind"]
    assert "(the server is down or has crashed)" in second["error"] or "mid-response" in second["error"]
    # A level whose server died failed: no keep-up reasons (a dead server's /metrics stop answering), and the
    # console says FAILED, never SATURATED (issue 38).
    assert second["saturated"] == [], second["saturated"]
    (line,) = [x for x in run.stdout.splitlines() if re.search(r"crash \| (engine: [^|]+\| )?C=   2 \|", x)]
    assert "FAILED: the server went down during the level" in line and "SATURATED" not in line, line
    check_stopped("malformed", {"malformed"}, "every request failed")
    check_stopped("stalled", {"timeout"}, "per-request timeout of 1 s")
    # The sweep went on past a level where every request failed (stop_on_error false).
    assert "failing" not in failed
    doc = run.results("failing", "baseline")
    assert doc["status"] == "complete_with_errors" and [lv["concurrency"] for lv in doc["levels"]] == [1, 2, 3]
    assert doc["levels"][0]["error"] is None and doc["levels"][0]["requests_ok"] == 5
    for level in doc["levels"][1:]:
        assert "every request failed" in level["error"] and "HTTP 500: emulated internal failure" in level["error"]
        assert level["requests_ok"] == 0 and set(level["failures_by_kind"]) == {"http_5xx"}
    facts = run.facts("failing")["specbench_sweep"]
    assert facts["status"] == "complete_with_errors" and facts["levels"][2]["error"]
