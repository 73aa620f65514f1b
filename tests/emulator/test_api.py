"""The emulator's HTTP API against SGLang's shapes, over real sockets."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from specbench_testkit import EMULATOR, http

LLAMA = ["--emulator-profile", "llama-3.1-8b-1x-h100"]
EAGLE3 = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "test/draft"]


def sse_events(raw: bytes) -> list:
    events = []
    for line in raw.decode().splitlines():
        if line.startswith("data: "):
            payload = line[len("data: ") :]
            events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


def test_models_model_info_and_server_info(emulator):
    emu = emulator(*LLAMA, "--served-model-name", "llama-8b", "--max-running-requests", "64")
    status, _unused1, body = http("GET", emu.base_url + "/v1/models")
    assert status == 200
    models = json.loads(body)
    assert models["object"] == "list"
    assert models["data"][0]["id"] == "llama-8b" and models["data"][0]["owned_by"] == "sglang"
    status, _unused1, body = http("GET", emu.base_url + "/get_model_info")
    info = json.loads(body)
    assert info["model_path"] == "test/model" and info["is_generation"] is True
    status, _unused1, body = http("GET", emu.base_url + "/server_info")
    server = json.loads(body)
    assert server["version"] == "0.5.23+specbench-emulator"
    assert server["tp_size"] == 1 and server["max_running_requests"] == 64
    assert "--served-model-name llama-8b" in server["launch_command"]
    state = server["internal_states"][0]
    assert {"last_gen_throughput", "effective_max_running_requests_per_dp", "memory_usage"} <= set(state)
    assert "avg_spec_accept_length" not in state  # no speculation: SGLang leaves the key out


def test_chat_stream_with_usage_and_non_stream(emulator):
    emu = emulator(*LLAMA)
    body = {
        "model": "test/model",
        "messages": [{"role": "user", "content": "one two three"}],
        "max_tokens": 7,
        "ignore_eos": True,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    status, headers, raw = http("POST", emu.base_url + "/v1/chat/completions", body)
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    events = sse_events(raw)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert chunks[0]["object"] == "chat.completion.chunk"
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert len(text.split()) == 7
    finals = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert finals[-1]["choices"][0]["finish_reason"] == "length"
    usage = chunks[-1]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 7
    assert usage["usage"]["prompt_tokens"] == 3 + 3 + 1  # words plus the chat template's tokens
    body.update(stream=False)
    body.pop("stream_options")
    status, _unused1, raw = http("POST", emu.base_url + "/v1/chat/completions", body)
    full = json.loads(raw)
    assert full["object"] == "chat.completion"
    assert len(full["choices"][0]["message"]["content"].split()) == 7
    assert full["usage"]["total_tokens"] == full["usage"]["prompt_tokens"] + 7


def test_completions_stream_and_eos(emulator):
    emu = emulator(*LLAMA)
    body = {"prompt": "a b c d", "max_tokens": 5, "ignore_eos": True, "stream": True}
    events = sse_events(http("POST", emu.base_url + "/v1/completions", body)[2])
    chunks = [e for e in events[:-1] if e["choices"]]
    assert chunks[0]["object"] == "text_completion"
    assert len("".join(c["choices"][0]["text"] for c in chunks).split()) == 5
    assert not any(e["usage"] for e in events[:-1])  # no usage chunk unless asked
    # Without ignore_eos outputs end early at random lengths (why benchmarks set it).
    lengths = []
    for _unused1 in range(12):
        raw = http("POST", emu.base_url + "/v1/completions", {"prompt": "x", "max_tokens": 400})[2]
        lengths.append(json.loads(raw)["usage"]["completion_tokens"])
    assert min(lengths) < 400


def test_generate_native_meta_info_in_speculative_mode(emulator):
    emu = emulator(
        *LLAMA,
        *EAGLE3,
        "--speculative-num-steps",
        "3",
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        "4",
        "--max-running-requests",
        "32",
        "--decode-log-interval",
        "1",
    )
    body = {"text": "w " * 16, "sampling_params": {"max_new_tokens": 64, "temperature": 0, "ignore_eos": True}, "stream": True}
    events = sse_events(http("POST", emu.base_url + "/generate", body)[2])
    assert events[-1] == "[DONE]"
    last = events[-2]
    meta = last["meta_info"]
    assert meta["prompt_tokens"] == 16 and meta["completion_tokens"] == 64
    assert len(last["output_ids"]) == 64 and len(last["text"].split()) == 64
    assert meta["finish_reason"] == {"type": "length", "length": 64}
    assert meta["e2e_latency"] > 0
    assert 1 <= meta["spec_accept_length"] <= 4
    assert meta["spec_accept_length"] == pytest.approx(64 / meta["spec_verify_ct"])
    # As 0.5.23 (srt/managers/tokenizer_manager.py, _calculate_spec_decoding_metrics): the figures come
    # with the finished request only, proposed drafts are verify steps x (draft tokens - 1), and the
    # histogram counts verify steps by drafts accepted.
    assert all("spec_verify_ct" not in e["meta_info"] for e in events[:-2])
    assert meta["spec_num_proposed_drafts"] == 3 * meta["spec_verify_ct"]
    assert sum(meta["spec_correct_drafts_histogram"]) == meta["spec_verify_ct"]
    assert meta["spec_num_correct_drafts"] == sum(i * n for i, n in enumerate(meta["spec_correct_drafts_histogram"]))
    # The OpenAI APIs with return_spec_tokens_details: sglext.spec_tokens_details (every SpecTokensDetails
    # field, srt/entrypoints/openai/protocol.py) in a chunk with no choices between the finish chunk
    # and the usage chunk when streamed (serving_chat.py, serving_completions.py), at the response's top
    # level when not; nothing unasked.
    fields = {"spec_accept_rate", "spec_accept_length", "spec_cap_length", "spec_block_accept_length",
              "spec_num_correct_drafts", "spec_num_proposed_drafts", "spec_verify_ct",
              "spec_correct_drafts_histogram", "spec_cap_lens_histogram"}
    for path, prompt in (("/v1/chat/completions", {"messages": [{"role": "user", "content": "w " * 16}]}),
                         ("/v1/completions", {"prompt": "w " * 16})):
        body = {"model": "m", "max_tokens": 32, "ignore_eos": True, "return_spec_tokens_details": True, **prompt}
        chunks = sse_events(http("POST", emu.base_url + path,
                                 {**body, "stream": True, "stream_options": {"include_usage": True}})[2])
        ext, usage = chunks[-3], chunks[-2]
        assert chunks[-4]["choices"][0]["finish_reason"] == "length" and ext["choices"] == [] and usage["usage"]
        details = ext["sglext"]["spec_tokens_details"]
        assert set(details) == fields and details["spec_verify_ct"] > 0
        assert details["spec_accept_length"] == pytest.approx(32 / details["spec_verify_ct"])
        assert all("sglext" not in e for e in chunks[:-3] + chunks[-2:-1])
        whole = json.loads(http("POST", emu.base_url + path, body)[2])
        assert set(whole["sglext"]["spec_tokens_details"]) == fields
        unasked = json.loads(http("POST", emu.base_url + path, dict(body, return_spec_tokens_details=False))[2])
        assert "sglext" not in unasked
    # Cumulative text: each chunk extends the one before; a chunk can carry several tokens.
    counts = [e["meta_info"]["completion_tokens"] for e in events[:-1]]
    assert counts == sorted(counts) and max(b - a for a, b in zip(counts, counts[1:], strict=False)) > 1
    # The lifetime accept length in /server_info (folded at every decode log: interval 1 here),
    # reset by /flush_cache: the key is gone until the next fold, as SGLang's.
    state = json.loads(http("GET", emu.base_url + "/server_info")[2])["internal_states"][0]
    assert state["avg_spec_accept_length"] > 1
    assert http("POST", emu.base_url + "/flush_cache")[0] == 200
    state = json.loads(http("GET", emu.base_url + "/server_info")[2])["internal_states"][0]
    assert "avg_spec_accept_length" not in state


def test_api_key_guards_everything_but_health_and_metrics(emulator):
    emu = emulator(*LLAMA, "--api-key", "sekret", "--enable-metrics")
    assert http("GET", emu.base_url + "/v1/models")[0] == 401
    assert json.loads(http("GET", emu.base_url + "/v1/models")[2]) == {"error": "Unauthorized"}
    bad = {"Authorization": "Bearer wrong"}
    assert http("POST", emu.base_url + "/generate", {"text": "x"}, bad)[0] == 401
    good = {"Authorization": "Bearer sekret"}
    assert http("GET", emu.base_url + "/v1/models", headers=good)[0] == 200
    assert http("GET", emu.base_url + "/health")[0] == 200
    assert http("GET", emu.base_url + "/health_generate")[0] == 200
    assert http("GET", emu.base_url + "/metrics")[0] == 200


def test_metrics_only_when_enabled_and_with_sglang_names(emulator):
    plain = emulator(*LLAMA)
    assert http("GET", plain.base_url + "/metrics")[0] == 404
    emu = emulator(*LLAMA, "--enable-metrics", "--served-model-name", "m8")
    http("POST", emu.base_url + "/generate", {"text": "a b", "sampling_params": {"max_new_tokens": 9, "ignore_eos": True}})
    text = http("GET", emu.base_url + "/metrics")[2].decode()
    for name in (
        "sglang:num_running_reqs",
        "sglang:num_queue_reqs",
        "sglang:gen_throughput",
        "sglang:token_usage",
        "sglang:spec_accept_length",
        "sglang:prompt_tokens_total",
        "sglang:generation_tokens_total",
        "sglang:time_to_first_token_seconds_bucket",
        "sglang:inter_token_latency_seconds_count",
        "sglang:e2e_request_latency_seconds_sum",
    ):
        assert name in text
    assert 'sglang:generation_tokens_total{model_name="m8",is_streaming="true"} ' in text


def lost_seconds(base_url: str) -> float:
    text = http("GET", base_url + "/metrics")[2].decode()
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
              if line.startswith("specbench_emulator:schedule_lost_seconds_total{")]
    assert len(values) == 1, text
    return values[0]


def test_metrics_count_the_schedule_a_stalled_emulator_gave_up(emulator):
    """A stopped process is the stall this counter exists for: the scheduler loop wakes
    STOP_S late and gives that time up (engine.MAX_LAG_S). Bounds: at least STOP_S less one
    decode step (the loop may have been asleep until up to a step after the stop began), at most
    the wall time the stream ran (the counter can lose nothing it did not live through). The
    counter agrees with GET /emulator/counters, read in the same instant's state."""
    stop_s = 0.8
    # At time scale 1 the stream's 400 tokens take 2.5 s (6.3 ms a step): it is still running when
    # the stop comes 0.3 s in, however late this thread wakes on a busy machine.
    emu = emulator(*LLAMA, "--enable-metrics", time_scale=1.0)
    before = lost_seconds(emu.base_url)
    done = threading.Event()

    def stream():
        http("POST", emu.base_url + "/generate",
             {"text": "a b", "sampling_params": {"max_new_tokens": 400, "ignore_eos": True}}, timeout=60)
        done.set()

    start = time.monotonic()
    threading.Thread(target=stream, daemon=True).start()
    time.sleep(0.3)
    assert not done.is_set(), "the stream ended before the stall: lengthen it"
    os.kill(emu.proc.pid, signal.SIGSTOP)
    try:
        time.sleep(stop_s)
    finally:
        os.kill(emu.proc.pid, signal.SIGCONT)
    assert done.wait(60)
    lived = time.monotonic() - start
    lost = lost_seconds(emu.base_url) - before
    step = 0.05  # a decode step of one stream is 6.3 ms here; 0.05 s is generous
    assert stop_s - step <= lost <= lived, (lost, lived)
    counters = json.loads(http("GET", emu.base_url + "/emulator/counters")[2])
    assert counters["lag_resyncs"] >= 1
    assert abs(counters["schedule_lost_s"] - (before + lost)) < 1e-5


def test_scheduled_seconds_are_the_window_less_idle_lost_and_behind_through_a_stall(emulator):
    """GET /emulator/counters' scheduled_s (the modelled seconds of every step emitted) against the
    engine's own wall-clock accounts, between two reads with the engine idle (behind_s 0 at both):
    the rise in monotonic_s less those in idle_s and schedule_lost_s, through a stream that a
    SIGSTOP stalls past engine.MAX_LAG_S, to the counters' rounding (1e-6: six of them, 3e-6 at most).
    Each read answered while the stream ran never reads it lower than the one before."""
    emu = emulator(*LLAMA, time_scale=1.0)

    def read() -> dict:
        return json.loads(http("GET", emu.base_url + "/emulator/counters")[2])

    first = read()
    reads, done = [], threading.Event()

    def stream():
        http("POST", emu.base_url + "/generate",
             {"text": "a b", "sampling_params": {"max_new_tokens": 400, "ignore_eos": True}}, timeout=60)
        done.set()

    threading.Thread(target=stream, daemon=True).start()
    time.sleep(0.3)
    os.kill(emu.proc.pid, signal.SIGSTOP)
    try:
        time.sleep(0.8)
    finally:
        os.kill(emu.proc.pid, signal.SIGCONT)
    while not done.is_set():
        reads.append(read()["scheduled_s"])
        time.sleep(0.01)
    last = read()
    assert first["behind_s"] == last["behind_s"] == 0.0 and last["lag_resyncs"] > first["lag_resyncs"], last
    rise = {name: last[name] - first[name] for name in first}
    assert rise["decode_steps"] == 399, rise
    assert abs(rise["scheduled_s"] - (rise["monotonic_s"] - rise["idle_s"] - rise["schedule_lost_s"])) < 7e-6, rise
    assert reads == sorted(reads) and first["scheduled_s"] <= reads[0] and reads[-1] <= last["scheduled_s"]


def test_health_is_503_while_loading(emulator):
    emu = emulator(*LLAMA, "--emulator-load-seconds", "40", time_scale=0.1, wait=False)
    deadline = time.monotonic() + 10
    status = None
    while time.monotonic() < deadline:
        try:
            status = http("GET", emu.base_url + "/health_generate", timeout=2)[0]
            break
        except OSError:
            time.sleep(0.05)
    assert status == 503
    assert http("GET", emu.base_url + "/health")[0] == 503
    emu.wait_ready(timeout=30)
    assert http("GET", emu.base_url + "/health")[0] == 200


def test_flush_cache_refused_while_requests_run(emulator):
    emu = emulator(*LLAMA, time_scale=1.0)
    body = {"text": "x", "sampling_params": {"max_new_tokens": 300, "ignore_eos": True}}
    worker = threading.Thread(target=http, args=("POST", emu.base_url + "/generate", body))
    worker.start()
    time.sleep(0.3)
    status, _unused1, raw = http("POST", emu.base_url + "/flush_cache")
    assert status == 400 and b"not be performed" in raw
    worker.join()
    assert http("GET", emu.base_url + "/flush_cache")[0] == 200


def test_bad_requests_get_openai_errors(emulator):
    emu = emulator(*LLAMA)
    status, _unused1, raw = http("POST", emu.base_url + "/v1/chat/completions", {"messages": []})
    assert status == 400 and json.loads(raw)["object"] == "error"
    status, _unused1, raw = http("POST", emu.base_url + "/v1/completions", {"prompt": "x", "max_tokens": 200_000})
    assert status == 400 and "maximum context length" in json.loads(raw)["message"]
    assert http("GET", emu.base_url + "/nope")[0] == 404


def test_analytic_endpoint_scales_with_time(emulator):
    emu = emulator(*LLAMA, time_scale=0.5)
    truth = json.loads(http("GET", emu.base_url + "/emulator/analytic?concurrency=1&input_len=256&output_len=256")[2])
    assert truth["model_output_tok_per_s"] == pytest.approx(158, rel=0.02)
    assert truth["output_tok_per_s"] == pytest.approx(2 * truth["model_output_tok_per_s"])
    assert http("GET", emu.base_url + "/emulator/analytic?concurrency=0")[0] == 400


def run_cli(*flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(EMULATOR), *flags], check=False, capture_output=True, text=True, timeout=30)


def test_unknown_flag_exits_naming_it():
    result = run_cli("--model-path", "m", "--no-such-flag", "3")
    assert result.returncode == 2
    assert "unrecognized arguments: --no-such-flag" in result.stderr


def test_removed_cuda_graph_flag_is_ambiguous_as_in_sglang_0_5_20():
    result = run_cli("--model-path", "m", "--cuda-graph-max-bs", "8")
    assert result.returncode == 2 and "ambiguous option: --cuda-graph-max-bs" in result.stderr


def test_spec_trio_must_be_all_or_none():
    result = run_cli("--model-path", "m", *EAGLE3, "--speculative-num-steps", "3")
    assert result.returncode == 1 and "set all of --speculative-num-steps" in result.stdout


def test_speculative_mode_caps_running_requests_at_48_with_sglangs_warning(emulator):
    emu = emulator("--tp-size", "8", *EAGLE3)
    assert "Max running requests is reset to 48 for speculative decoding." in emu.log()
    info = json.loads(http("GET", emu.base_url + "/server_info")[2])
    assert info["max_running_requests"] == 48
    explicit = emulator("--tp-size", "8", *EAGLE3, "--max-running-requests", "256")
    assert "reset to 48" not in explicit.log()
    assert json.loads(http("GET", explicit.base_url + "/server_info")[2])["max_running_requests"] == 256


def test_startup_log_reads_like_sglangs(emulator):
    emu = emulator(*LLAMA, "--decode-log-interval", "5")
    http("POST", emu.base_url + "/generate", {"text": "x", "sampling_params": {"max_new_tokens": 40, "ignore_eos": True}})
    log = emu.log()
    assert "The server is fired up and ready to roll!" in log
    assert "server_args=ServerArgs(" in log
    assert "TP0] Decode batch, #running-req: 1," in log and "gen throughput (token/s):" in log


def test_runs_without_emulated_gpus(tmp_path):
    from specbench_testkit import free_port

    port = free_port()
    log = tmp_path / "emu.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                str(EMULATOR),
                "--model-path",
                "m",
                "--port",
                str(port),
                *LLAMA,
                "--tp-size",
                "2",
                "--emulator-time-scale",
                "0.1",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if http("GET", f"http://127.0.0.1:{port}/health_generate", timeout=2)[0] == 200:
                    break
            except OSError:
                pass
            assert proc.poll() is None, log.read_text()
            time.sleep(0.05)
        body = {"text": "a b", "sampling_params": {"max_new_tokens": 3, "ignore_eos": True}}
        assert http("POST", f"http://127.0.0.1:{port}/generate", body)[0] == 200
        assert "Traceback" not in log.read_text()
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
