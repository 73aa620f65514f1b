"""The emulator behaves like SGLang 0.5.23 where the client depends on it (issue 18, items 1-5).

Each test names the upstream file (inside the sglang package) whose behaviour it holds the
emulator to. Emulators run at time scale 0.1 unless a test needs a request in flight; the file
takes about 10 s.
"""

from __future__ import annotations

import http.client as httplib
import json
import re
import time

from specbench_testkit import http

LLAMA = ["--emulator-profile", "llama-3.1-8b-1x-h100"]
EAGLE3 = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "test/draft"]
TRIO = ["--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]


def metric(base_url: str, name: str) -> float:
    text = http("GET", base_url + "/metrics")[2].decode()
    values = [float(v) for v in re.findall(rf"^{re.escape(name)}(?:\{{[^}}]*\}})? (\S+)$", text, re.M)]
    assert values, f"{name} not in /metrics"
    return sum(values)


def info(base_url: str) -> dict:
    return json.loads(http("GET", base_url + "/server_info")[2])


def test_generation_tokens_total_moves_only_when_a_request_finishes(emulator):
    """srt/observability/metrics_collector.py (observe_one_finished_request, under
    ``if state.finished`` in srt/managers/tokenizer_manager.py): mid-stream the counter has not
    moved, after the finish it holds the whole request; spec_verify_calls_total likewise."""
    emu = emulator(*LLAMA, *EAGLE3, *TRIO, "--enable-metrics", time_scale=1.0)
    before = {name: metric(emu.base_url, name)  # the startup warmup's request is in already
              for name in ("sglang:generation_tokens_total", "sglang:spec_verify_calls_total")}
    conn = httplib.HTTPConnection("127.0.0.1", emu.port, timeout=60)
    body = {"text": "w " * 8, "stream": True, "sampling_params": {"max_new_tokens": 600, "ignore_eos": True}}
    conn.request("POST", "/generate", body=json.dumps(body), headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    seen = 0
    while seen < 3:  # a few chunks in: the request runs (600 tokens take about 2 s at node speed)
        line = resp.readline()
        seen += line.startswith(b"data: {")
    assert metric(emu.base_url, "sglang:generation_tokens_total") == before["sglang:generation_tokens_total"]
    assert metric(emu.base_url, "sglang:spec_verify_calls_total") == before["sglang:spec_verify_calls_total"]
    last = None
    for raw in resp.read().decode().splitlines():
        if raw.startswith("data: {"):
            last = json.loads(raw[6:])
    conn.close()
    assert metric(emu.base_url, "sglang:generation_tokens_total") == before["sglang:generation_tokens_total"] + 600
    verify = last["meta_info"]["spec_verify_ct"]
    assert verify > 0
    assert metric(emu.base_url, "sglang:spec_verify_calls_total") == before["sglang:spec_verify_calls_total"] + verify


def test_tokenize_on_both_paths_with_vllms_shapes(emulator):
    """srt/entrypoints/http_server.py serves /tokenize and /v1/tokenize; TokenizeRequest takes
    prompt or messages, TokenizeResponse is {tokens, count, max_model_len}
    (srt/entrypoints/openai/protocol.py). Counts are the generation endpoints' own."""
    emu = emulator(*LLAMA)
    for path in ("/tokenize", "/v1/tokenize"):
        status, _unused, raw = http("POST", emu.base_url + path, {"model": "x", "prompt": "the of and"})
        out = json.loads(raw)
        assert status == 200 and out["count"] == 3 and len(out["tokens"]) == 3 and out["max_model_len"] > 0
    chat = json.loads(http("POST", emu.base_url + "/tokenize",
                           {"messages": [{"role": "user", "content": "the of and"}]})[2])
    assert chat["count"] == 1 + 3 + 3  # the template's tokens, as /v1/chat/completions counts them
    body = {"messages": [{"role": "user", "content": "the of and"}], "max_tokens": 1, "ignore_eos": True}
    usage = json.loads(http("POST", emu.base_url + "/v1/chat/completions", body)[2])["usage"]
    assert usage["prompt_tokens"] == chat["count"]
    assert http("POST", emu.base_url + "/tokenize", {"model": "x"})[0] == 400


def test_continuous_usage_stats_puts_usage_in_every_chunk(emulator):
    """srt/entrypoints/openai/utils.py (should_include_usage) and serving_chat.py /
    serving_completions.py: with stream_options.continuous_usage_stats every chunk carries usage,
    so a chunk's tokens are exact; without it, chunks carry usage null."""
    emu = emulator(*LLAMA, *EAGLE3, *TRIO)
    for path, extra in (("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
                        ("/v1/completions", {"prompt": "hi"})):
        body = dict(extra, max_tokens=50, ignore_eos=True, stream=True,
                    stream_options={"include_usage": True, "continuous_usage_stats": True})
        raw = http("POST", emu.base_url + path, body)[2].decode()
        chunks = [json.loads(line[6:]) for line in raw.splitlines() if line.startswith("data: {")]
        counts = [c["usage"]["completion_tokens"] for c in chunks if c["choices"]]
        assert all(c["usage"] for c in chunks if c["choices"]), "a chunk without usage"
        assert counts == sorted(counts) and counts[-1] == 50
        assert max(b - a for a, b in zip(counts, counts[1:], strict=False)) > 1  # several tokens a chunk
        plain = dict(body, stream_options={"include_usage": True})
        raw = http("POST", emu.base_url + path, plain)[2].decode()
        chunks = [json.loads(line[6:]) for line in raw.splitlines() if line.startswith("data: {")]
        assert all(c["usage"] is None for c in chunks if c["choices"])


def test_get_server_info_is_deprecated_server_info_is_not(emulator):
    """srt/entrypoints/http_server.py: /get_server_info logs a deprecation warning on every call
    and answers what /server_info answers."""
    emu = emulator(*LLAMA)
    warning = "Endpoint '/get_server_info' is deprecated"
    assert info(emu.base_url)["version"]
    assert warning not in emu.log()
    old = json.loads(http("GET", emu.base_url + "/get_server_info")[2])
    http("GET", emu.base_url + "/get_server_info")
    time.sleep(0.2)
    assert emu.log().count(warning) == 2 and old["version"] == info(emu.base_url)["version"]


def test_accept_length_is_lifetime_per_rank_and_folds_at_the_decode_log(emulator):
    """srt/managers/scheduler_components/internal_state.py (_average_accept_length, one entry of
    internal_states per DP rank) and metrics_reporter.py (totals folded when the decode log fires,
    every --decode-log-interval batches): before the first fold the key is absent."""
    emu = emulator(*LLAMA, *EAGLE3, *TRIO, "--tp-size", "2", "--attn-dp-size", "2", "--decode-log-interval", "1000")
    body = {"text": "w " * 8, "sampling_params": {"max_new_tokens": 30, "ignore_eos": True}}
    http("POST", emu.base_url + "/generate", body)
    states = info(emu.base_url)["internal_states"]
    assert len(states) == 2 and all("avg_spec_accept_length" not in s for s in states)
    often = emulator(*LLAMA, *EAGLE3, *TRIO, "--tp-size", "2", "--attn-dp-size", "2", "--decode-log-interval", "1")
    for _unused in range(2):  # the DP controller's round robin: one request on each rank
        http("POST", often.base_url + "/generate", body)
    states = info(often.base_url)["internal_states"]
    assert [s["dp_rank"] for s in states] == [0, 1]
    assert all(1 < s["avg_spec_accept_length"] <= 4 for s in states)


def test_adaptive_is_turned_off_silently_where_sglang_cannot_run_it(emulator):
    """srt/speculative/adaptive_spec_params.py (adaptive_unsupported_reason) and
    srt/arg_groups/speculative_hook.py (_maybe_disable_adaptive): top-k != 1 and attention DP turn
    --speculative-adaptive off with a log warning only; /server_info says speculative_adaptive=False."""
    cases = ((["--speculative-num-steps", "3", "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "8"],
              "speculative_eagle_topk=4 (only topk=1 is supported)"),
             ([*TRIO, "--tp-size", "2", "--attn-dp-size", "2"], "attention DP is not supported"))
    for extra, reason in cases:
        emu = emulator(*LLAMA, *EAGLE3, "--speculative-adaptive", *extra)
        assert f"speculative_adaptive disabled: {reason}" in emu.log()
        assert info(emu.base_url)["speculative_adaptive"] is False
    fine = emulator(*LLAMA, *EAGLE3, "--speculative-adaptive", *TRIO)
    assert info(fine.base_url)["speculative_adaptive"] is True and "speculative_adaptive disabled" not in fine.log()
