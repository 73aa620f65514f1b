"""The client core's parsing and statistics, without timing: settings and their messages,
percentiles and intervals, redaction, and HTTP/SSE parsing against crafted byte streams
served over real loopback sockets (split at awkward places, chunked or not)."""
from __future__ import annotations

import json
import math
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ansible_collections.specbench.core.plugins.module_utils import specbench_client as sc
from ansible_collections.specbench.core.plugins.module_utils.node import scripts as bench_scripts

PACKAGE = Path(sc.__file__).resolve().parent


@pytest.fixture(scope="module")
def client(tmp_path_factory) -> Path:
    """The client as the node gets it: ``specbench_client.pyz`` built from the package the way
    bench_scripts builds it when it ships (the script tests run the artefact, not the sources)."""
    path = tmp_path_factory.mktemp("client") / "specbench_client.pyz"
    path.write_bytes(bench_scripts.zipapp_bytes(str(PACKAGE)))
    path.chmod(0o755)
    return path


# -- settings --------------------------------------------------------------------------------
@pytest.mark.parametrize(("value", "expected"), [
    ([1, 2, 5], [1, 2, 5]),
    ("1,2,5", [1, 2, 5]),
    ("1 2  5", [1, 2, 5]),
    ("[1, 2, 5]", [1, 2, 5]),
    (["30", 70], [30, 70]),
    (250, [250]),
    ([70, 1], [70, 1]),  # the given order is kept
])
def test_levels_parse(value, expected):
    assert sc.parse_levels(value) == expected


@pytest.mark.parametrize(("value", "message"), [
    ([], "concurrency is empty: give at least one level"),
    ("", "concurrency is empty"),
    ([1, "x"], "holds 'x', which is not a whole number"),
    ([1.5], "holds 1.5, which is not a whole number"),
    ([True], "holds True, which is not a whole number"),
    ([0], "holds 0: every level is a number of concurrent streams and must be at least 1"),
    ([-2], "holds -2"),
    ([3, 3], "holds 3 twice"),
    ("[1, ", "does not parse as a list"),
    ({"a": 1}, "not a list"),
    ([10**6], "above the client's limit"),
])
def test_levels_refused(value, message):
    with pytest.raises(sc.SettingsError, match=None) as err:
        sc.parse_levels(value)
    assert message in str(err.value)
    assert "e.g." in str(err.value) or "give" in str(err.value) or "limit" in str(err.value)


@pytest.mark.parametrize(("raw", "message"), [
    ({"output_len": 0}, "--output-len is 0, but it must be at least 1"),
    ({"input_len": "many"}, "--input-len is 'many', not a whole number"),
    ({"window_s": 0}, "--window-s is 0, but it must be above 0"),
    ({"warmup_s": -1}, "--warmup-s is -1, but it must be at least 0"),
    ({"request_timeout_s": "soon"}, "--request-timeout-s is 'soon', not a number of seconds"),
    ({"api": "grpc"}, "--api is 'grpc': give one of chat, completions, native"),
    ({"drain": "maybe"}, "--drain is 'maybe', not true or false"),
    ({"base_url": "https://h:1"}, "is https"),
    ({"base_url": "ftp://h"}, "is not an http://HOST:PORT address"),
    ({"base_url": "http://h:99999"}, "has an invalid port"),
    ({"requests": 5, "concurrency": [10]}, "fewer than the largest level (10 streams)"),
])
def test_settings_refused_with_the_fix(raw, message):
    with pytest.raises(sc.SettingsError) as err:
        sc.normalize_settings(raw)
    assert message in str(err.value)


def test_settings_labels_and_base_url():
    with pytest.raises(sc.SettingsError, match="bench_output_len is 0"):
        sc.normalize_settings({"output_len": 0}, label=lambda k: f"bench_{k}")
    s = sc.normalize_settings({"base_url": "http://127.0.0.1:30000/v1/", "concurrency": "1,2", "drain": "false"})
    assert sc.parse_base_url(s["base_url"]) == ("127.0.0.1", 30000, "")
    assert s["concurrency"] == [1, 2] and s["drain"] is False and s["output_len"] == 256
    assert sc.parse_base_url("http://[::1]:8000/proxy") == ("::1", 8000, "/proxy")


def test_prompts_file(tmp_path):
    good = tmp_path / "p.jsonl"
    good.write_text('{"prompt": "hello there"}\n\n{"text": "second"}\n')
    assert [r["messages"][0]["content"] for r in sc.load_prompts(str(good))] == ["hello there", "second"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\nnot json\n')
    with pytest.raises(sc.SettingsError, match="line 2 is not JSON"):
        sc.load_prompts(str(bad))
    empty = tmp_path / "empty.jsonl"
    empty.write_text('{"other": 1}\n')
    with pytest.raises(sc.SettingsError, match='line 1 has no field "conversations"'):
        sc.load_prompts(str(empty))
    with pytest.raises(sc.SettingsError, match="cannot be read"):
        sc.load_prompts(str(tmp_path / "missing.jsonl"))


# -- statistics ------------------------------------------------------------------------------
def test_percentiles_are_numpys_linear():
    values = [1.0, 2.0, 3.0, 4.0, 10.0]
    assert sc.percentile(values, 50) == 3.0
    assert sc.percentile(values, 90) == pytest.approx(7.6)  # numpy.percentile(values, 90)
    assert sc.percentile(values, 99) == pytest.approx(9.76)
    assert sc.percentile([5.0], 99) == 5.0
    s = sc.summary([0.001, 0.002, 0.003], scale=1000.0)
    assert s == {"mean": 2.0, "p50": 2.0, "p90": 2.8, "p99": 2.98}
    assert sc.summary([]) is None


def test_confidence_interval():
    mean, ci = sc.mean_ci95([10.0, 12.0, 11.0, 13.0])
    assert mean == 11.5
    half = 3.182 * math.sqrt((2.25 + 0.25 + 0.25 + 2.25) / 3 / 4)
    assert ci == pytest.approx([11.5 - half, 11.5 + half])
    assert sc.mean_ci95([4.0]) == (4.0, None)
    assert sc.t975(1) == 12.706 and sc.t975(200) == pytest.approx(1.972)
    with_ci = sc.summary([1.0, 2.0, 3.0], ci=True)
    assert with_ci["mean_ci95"][0] < 2.0 < with_ci["mean_ci95"][1]


def test_metrics_text():
    text = (b'# HELP sglang:num_running_reqs x\nsglang:num_running_reqs{model_name="m"} 12.0\n'
            b'sglang:num_running_reqs{model_name="m",dp="1"} 3\nsglang:num_queue_reqs{model_name="m"} 7\n'
            b"sglang:num_running_reqs_total 99\n")
    assert sc.parse_metrics(text) == (15.0, 7.0)
    assert sc.parse_metrics(b"vllm:num_requests_running 4\nvllm:num_requests_waiting 1\n") == (4.0, 1.0)
    assert sc.parse_metrics(b"nothing 1\n") == (None, None)


def test_redaction():
    key = "sk-secret-42"
    doc = {"server_info": {"api_key": key, "admin_api_key": None, "port": 1},
           "command": ["python3", "-m", "sglang.launch_server", "--api-key", key, "--port", "1"],
           "launch_command": f"python3 -m sglang.launch_server --api-key={key} --port 1",
           "note": f"the key {key} leaked"}
    out = sc.redact(doc, [key])
    assert key not in json.dumps(out)
    assert out["server_info"]["api_key"] == "<redacted>" and out["server_info"]["admin_api_key"] is None
    assert out["command"][4] == "<redacted>" and out["command"][6] == "1"
    assert out["launch_command"] == "python3 -m sglang.launch_server --api-key=<redacted> --port 1"


def test_progress_line():
    level = {"concurrency": 30, "output_tok_per_s": 673.94, "output_tok_per_s_ci95": [670.0, 677.9],
             "ttft_ms": {"p50": 45.2}, "accept_length": 2.18, "requests_ok": 120, "requests_failed": 1,
             "client": {"bottleneck": True}, "error": "C=30: 1 of 121 requests failed"}
    line = sc.format_level_line(level, "h | ")
    assert line == ("h | C=  30 | output     673.9 tok/s [670.0, 677.9] | TTFT p50 45 ms | accept 2.18 | "
                    "ok 120 failed 1 | CLIENT-BOUND | ERROR: C=30: 1 of 121 requests failed")
    assert "output      -  tok/s" in sc.format_level_line({"concurrency": 1, "output_tok_per_s": None})


# -- parsing over real sockets ----------------------------------------------------------------
def chunked(*parts: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


def chat_event(text: str | None = None, finish=None, usage=None) -> bytes:
    obj = {"object": "chat.completion.chunk", "choices": [] if usage else [
        {"index": 0, "delta": {"content": text} if text is not None else {}, "finish_reason": finish}]}
    if usage:
        obj["usage"] = usage
    return b"data: " + json.dumps(obj, ensure_ascii=False).encode() + b"\n\n"


class CannedServer:
    """Serves one canned response per request, written in pieces of ``piece`` bytes."""

    def __init__(self, response: bytes, piece: int, keep_alive: bool = True):
        self.response, self.piece, self.keep_alive = response, piece, keep_alive
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.requests = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        self.sock.settimeout(0.2)
        while not self.stop.is_set():
            try:
                conn = self.sock.accept()[0]
            except OSError:
                continue
            threading.Thread(target=self.handle, args=(conn,), daemon=True).start()

    def handle(self, conn: socket.socket) -> None:
        conn.settimeout(5)
        buf = b""
        try:
            while not self.stop.is_set():
                while b"\r\n\r\n" not in buf:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buf += data
                head, unused, rest = buf.partition(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                while len(rest) < length:
                    rest += conn.recv(65536)
                buf = rest[length:]
                self.requests += 1
                for i in range(0, len(self.response), self.piece):
                    conn.sendall(self.response[i:i + self.piece])
                if not self.keep_alive:
                    return
        except OSError:
            return
        finally:
            conn.close()

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


def measure(port: int, api: str = "chat", output_len: int = 3, concurrency: int = 2) -> dict:
    settings = sc.normalize_settings({"base_url": f"http://127.0.0.1:{port}", "api": api, "output_len": output_len,
                                      "input_len": 4, "warmup_s": 0, "window_s": 0.3, "concurrency": [concurrency],
                                      "requests": 6, "request_timeout_s": 3})
    server = {"model": "m", "speculative_algorithm": None, "metrics_available": False}
    return sc.run_level(settings, concurrency, server)


HEAD_CHUNKED = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
CHAT_BODY = [chat_event("", None), chat_event(" álpha", None), chat_event(" béta 日本", None),  # split mid-character too
             chat_event(None, "length"), chat_event(usage={"prompt_tokens": 8, "completion_tokens": 3}),
             b"data: [DONE]\n\n"]


@pytest.mark.parametrize("piece", [1, 7, 4096])
def test_chunked_sse_split_anywhere(piece):
    """Byte-by-byte or whole: the same three tokens per request, a chunk of two counted as two."""
    server = CannedServer(HEAD_CHUNKED + chunked(*CHAT_BODY), piece)
    try:
        level = measure(server.port)
    finally:
        server.close()
    assert level["error"] is None, level
    assert level["requests_ok"] >= 6 and level["requests_failed"] == 0
    assert level["output_tokens_mean"] == 3 and level["input_tokens_mean"] == 8
    # The canned server ignores max_tokens: each stream's shortened first request is "short".
    assert level["requests_short"] == 2
    assert level["itl_ms"] is not None and level["ttft_ms"] is not None


def test_crlf_events_comments_and_close_delimited_body():
    body = b"".join(e.replace(b"\n\n", b"\r\n\r\n") for e in CHAT_BODY)
    body = b": keep-alive comment\r\n\r\nevent: message\r\n" + body
    response = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n" + body
    server = CannedServer(response, 5, keep_alive=False)
    try:
        level = measure(server.port)
    finally:
        server.close()
    assert level["error"] is None, level
    assert level["output_tokens_mean"] == 3


def test_word_counts_are_scaled_to_the_servers_usage():
    """A real tokenizer's count wins: 2 words reported as 4 tokens."""
    body = [chat_event(" one"), chat_event(" two"), chat_event(None, "length"),
            chat_event(usage={"prompt_tokens": 4, "completion_tokens": 4}), b"data: [DONE]\n\n"]
    server = CannedServer(HEAD_CHUNKED + chunked(*body), 4096)
    try:
        level = measure(server.port, output_len=4)
    finally:
        server.close()
    assert level["output_tokens_mean"] == 4


def test_native_generate_counts_from_meta_info():
    def event(ct, finish=None, verify=None):
        meta = {"id": "x", "prompt_tokens": 4, "completion_tokens": ct, "finish_reason": finish}
        if verify is not None:
            meta["spec_verify_ct"] = verify
        return b"data: " + json.dumps({"text": "w " * ct, "meta_info": meta}).encode() + b"\n\n"

    body = [event(1, verify=0), event(3, verify=1), event(5, {"type": "length", "length": 5}, verify=2),
            b"data: [DONE]\n\n"]
    server = CannedServer(HEAD_CHUNKED + chunked(*body), 3)
    try:
        level = measure(server.port, api="native", output_len=5)
    finally:
        server.close()
    assert level["error"] is None, level
    assert level["output_tokens_mean"] == 5
    # ITL: the chunk of 2 tokens splits its gap in two, so there are 4 gaps per request of 5 tokens.
    assert level["itl_ms"]["p50"] >= 0


@pytest.mark.parametrize(("response", "kind", "text"), [
    (HEAD_CHUNKED + chunked(b"data: {broken\n\n"), "malformed", "event data is not JSON"),
    (HEAD_CHUNKED + chunked(b"garbage line\n\n"), "malformed", "not a server-sent event"),
    (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}", "malformed",
     "expected an event stream"),
    (b"HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\ncontent-length: 25\r\n\r\n"
     b'{"error": "Unauthorized"}', "http_401", "HTTP 401: Unauthorized"),
    (b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 38\r\n\r\n"
     b'{"object": "error", "message": "long"}', "http_4xx", "HTTP 400: long"),
    (HEAD_CHUNKED + chunked(b'data: {"object": "error", "message": "boom"}\n\n'), "server_error", "boom"),
    (HEAD_CHUNKED + chunked(chat_event(" a")), "incomplete", "without [DONE] or a finish reason"),
    (HEAD_CHUNKED + b"zz\r\n", "malformed", "bad chunk size"),
])
def test_bad_responses_fail_with_their_kind(response, kind, text):
    server = CannedServer(response, 4096)
    try:
        level = measure(server.port)
    finally:
        server.close()
    assert level["requests_ok"] == 0 and level["failures_by_kind"].get(kind), level["failures_by_kind"]
    assert text in level["failure_examples"][kind]
    assert level["error"].startswith("C=2: every request failed")


def test_script_help_and_probe_error(client):
    out = subprocess.run([sys.executable, str(client), "--help"], capture_output=True, text=True, check=True)
    assert "--concurrency" in out.stdout and "Standard library only" in " ".join(out.stdout.split())
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    out = subprocess.run([sys.executable, str(client), "--base-url", f"http://127.0.0.1:{port}", "--probe"],
                         check=False, capture_output=True, text=True)
    assert out.returncode == 2 and f"connection refused: nothing listens at 127.0.0.1:{port}" in out.stderr


def test_standard_library_only():
    """The node runs the package as one file: it imports nothing outside the standard library
    (and nothing from Ansible); inside the package only relative imports."""
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) > 10
    imported = set()
    for path in files:
        for line in path.read_text().splitlines():
            if line.startswith(("import ", "from ")) and "__future__" not in line and not line.startswith("from ."):
                imported.add(line.split()[1].split(".")[0])
    assert imported <= set(sys.stdlib_module_names), imported - set(sys.stdlib_module_names)


def test_events_larger_than_small_read_buffers():
    """A 300 KB event (aiohttp's default buffer is 64 KiB): read whole, counted right."""
    big = " ".join(["w"] * 150000)
    body = [chat_event(big), chat_event(None, "length"),
            chat_event(usage={"prompt_tokens": 4, "completion_tokens": 150000}), b"data: [DONE]\n\n"]
    server = CannedServer(HEAD_CHUNKED + chunked(*body), 65536)
    try:
        level = measure(server.port, output_len=150000, concurrency=1)
    finally:
        server.close()
    assert level["error"] is None, level
    assert level["output_tokens_mean"] == 150000


def feed_events(api: str, events: list[bytes], fast: bool) -> tuple[list, list, object]:
    """(times, token counts, request) after feeding ``events`` (one HTTP chunk each) to a worker,
    with or without the fast path."""
    settings = sc.normalize_settings({"base_url": "http://127.0.0.1:9", "api": api, "output_len": 100})
    plan = {"settings": settings, "model": "m", "t0": 0.0, "bin_w": 0.01, "starts": [0.0], "budget": None,
            "key": "k", "trace": 0}
    worker = sc.Worker(plan, [0])
    hits = []
    real = worker.fast

    def counting(*args):
        taken = bool(fast and real(*args))
        hits.append(taken)
        return taken

    if real is not None:
        worker.fast = counting
    st = worker.streams[0]
    st.req = sc.Req(0, 0.0, False, 100)
    st.req.status = 200
    st.phase, st.chunked = sc.BODY, True
    for i, event in enumerate(events):
        worker._feed(st, b"%x\r\n%s\r\n" % (len(event), event), float(i + 1))
    return st.req.ts, st.req.ks, st.req, sum(hits)


@pytest.mark.parametrize("compact", [True, False])
@pytest.mark.parametrize("api", ["chat", "completions", "native"])
def test_fast_path_reads_what_the_full_parse_reads(api, compact):
    """SGLang's compact JSON and the spaced kind; escapes, brackets and unicode in the text; the
    same tokens and times with /generate's fast path as with the full parse."""
    sep = (",", ":") if compact else (", ", ": ")
    texts = ["", " alpha", ' say \\"hi\\"\\n', " {braces} [x]", " caf\\u00e9 日本", " two words", " w"]

    def event(obj):
        return b"data: " + json.dumps(obj, separators=sep, ensure_ascii=False).encode() + b"\n\n"

    events = []
    total = 0
    for i, escaped in enumerate(texts):
        text = json.loads(f'"{escaped}"')
        last = i == len(texts) - 1
        if api == "native":
            total += len(text.split()) or 1
            meta = {"id": "r", "prompt_tokens": 4, "completion_tokens": total, "cached_tokens": 0,
                    "spec_verify_ct": i, "finish_reason": {"type": "length", "length": total} if last else None}
            events.append(event({"text": "x" * total, "output_ids": list(range(total)), "meta_info": meta}))
        else:
            key = "delta" if api == "chat" else "text"
            choice = {"index": 0, key: {"role": "assistant", "content": text} if api == "chat" else text,
                      "logprobs": None, "finish_reason": "length" if last else None}
            events.append(event({"id": "x", "choices": [choice], "usage": None}))
    if api != "native":
        events.append(event({"id": "x", "choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 9}}))
    events.append(b"data: [DONE]\n\n")
    fast = feed_events(api, events, fast=True)
    slow = feed_events(api, events, fast=False)
    assert fast[0] == slow[0] and fast[1] == slow[1]
    assert fast[2].usage_ct == slow[2].usage_ct and fast[2].verify == slow[2].verify
    assert fast[2].done and slow[2].done and fast[2].finish == slow[2].finish
    assert len(fast[0]) >= 5
    if api == "native":  # the only API with a fast path: the plain chunks took it
        assert fast[3] >= 3 and slow[3] == 0


@pytest.mark.parametrize(("stop_on_error", "measured", "status"), [
    (True, [1, 2], "stopped"),
    (False, [1, 2, 5], "complete_with_errors"),
])
def test_one_sweep_loop_stops_after_a_failed_level(stop_on_error, measured, status):
    """The loop the CLI, the module and the action plugin share: every level in order, the
    callback after each, a stop after a failed one when stop_on_error is set."""
    settings = sc.normalize_settings({"concurrency": [1, 2, 5], "stop_on_error": stop_on_error})
    seen = []

    def measure(concurrency, run_settings):
        assert run_settings is settings  # categories: mixed, one run of the levels
        return {"concurrency": concurrency, "error": "C=2: boom" if concurrency == 2 else None}

    levels = sc.sweep(settings, {}, on_level=lambda level: seen.append(level["concurrency"]), measure=measure)
    assert [lv["concurrency"] for lv in levels] == seen == measured
    assert sc.sweep_outcome(levels, stop_on_error) == (status, "C=2: boom")
    assert sc.sweep_outcome(levels[:1], stop_on_error) == ("complete", None)


@pytest.mark.parametrize(("retries", "saturated_attempts", "calls", "still_saturated"), [
    (1, 1, 2, False),  # one saturated attempt, then one that kept up: the second is the level
    (1, 2, 2, True),   # saturated twice: the level stays saturated (left out of every verdict)
    (0, 1, 1, True),   # no retries asked: measured once
    (2, 2, 3, False),
])
def test_a_level_the_machine_did_not_keep_up_with_is_measured_again(
        retries, saturated_attempts, calls, still_saturated):
    """The sweep measures a saturated level again (saturated_retries times at most), keeps the
    earlier attempts' reasons in remeasured_after, and leaves a level that stays saturated named
    so; a failed level is never measured again (it is an error, not the machine)."""
    settings = sc.normalize_settings({"concurrency": [4, 8], "saturated_retries": retries})
    attempts = {4: 0, 8: 0}

    def measure(concurrency, run_settings):
        del run_settings
        attempts[concurrency] += 1
        busy = concurrency == 4 and attempts[4] <= saturated_attempts
        return {"concurrency": concurrency, "error": None, "started_at": f"t{attempts[concurrency]}",
                "output_tok_per_s": 80.0 if busy else 100.0,
                "saturated": ["engine: delivered 80% of its own model's rate"] if busy else []}

    levels = sc.sweep(settings, {}, measure=measure)
    assert attempts == {4: calls, 8: 1}
    assert bool(levels[0]["saturated"]) == still_saturated
    earlier = levels[0].get("remeasured_after", [])
    assert [e["started_at"] for e in earlier] == [f"t{i}" for i in range(1, calls)]
    assert all(e["saturated"] and e["output_tok_per_s"] == 80.0 for e in earlier)
    assert "remeasured_after" not in levels[1]

    tries = []

    def fails(concurrency, run_settings):
        del run_settings
        tries.append(concurrency)
        return {"concurrency": concurrency, "error": f"C={concurrency}: boom", "saturated": ["client: busy"]}

    failed = sc.sweep(settings, {}, measure=fails)
    assert tries == [4] and "remeasured_after" not in failed[0]  # stop_on_error: the sweep stops there


def test_saturated_retries_must_be_a_whole_number_of_zero_or_more():
    with pytest.raises(sc.SettingsError, match="saturated.retries is -1.*at least 0"):
        sc.normalize_settings({"concurrency": [1], "saturated_retries": -1})


def test_unmeasured_level_has_the_fields_of_a_measured_one():
    level = sc.unmeasured_level(30, "C=30: the module returned no result")
    assert level["error"] == "C=30: the module returned no result" and level["requests_ok"] == 0
    for key in ("output_tok_per_s", "output_tok_per_s_ci95", "output_tok_per_s_whole_run", "request_per_s",
                "failures_by_kind", "ttft_ms", "itl_ms", "tpot_ms", "e2e_ms", "decode_tok_per_s_per_stream",
                "accept_length", "server_running", "server_queued", "client", "warnings"):
        assert key in level
    assert sc.format_level_line(level).startswith("C=  30 | output      -  tok/s")


# -- the server's counters at a window's edges ----------------------------------------------
def _stepped_counter(t: float) -> float:
    """A counter that moves in steps, as a server's does at C = 1: 64 tokens every 0.25 s."""
    return 64.0 * math.floor(t / 0.25)


def _scrapes(latencies: list[float], start: float = 0.0, interval: float = 0.1) -> list[tuple]:
    """(sent, received, value) scrapes; each reads the counter at some instant between the two."""
    out, t = [], start
    for i, lat in enumerate(latencies):
        read = t + lat * ((i * 0.37) % 1.0)  # somewhere inside the round trip
        out.append((t, t + lat, _stepped_counter(read)))
        t += lat + interval
    return out


def test_counter_at_bounds_the_truth_whatever_the_scrape_latency():
    from ansible_collections.specbench.core.plugins.module_utils.specbench_client.server import counter_at

    samples = _scrapes([0.002, 0.3, 0.01, 0.05, 0.4, 0.003] * 20)
    for i in range(1, 200):
        t = i * 0.0513
        found = counter_at(samples, t)
        if found is None:
            continue
        low, estimate, high = found
        assert low <= _stepped_counter(t) <= high and low <= estimate <= high, (t, found)
    assert counter_at(samples, -1.0) is None and counter_at(samples, 1e6) is None


def test_over_window_gives_bounds_that_hold_and_accept_length_bounds():
    from ansible_collections.specbench.core.plugins.module_utils.specbench_client.server import MetricsPoller

    poller = MetricsPoller({"metrics_interval_s": 0.1}, 0.0)
    for sent, received, value in _scrapes([0.01, 0.2, 0.02] * 40):
        # running, queued, generated, drafts (one per 4 tokens), accepted (3 of every 4), verify calls
        poller.samples.append((sent, received, 1.0, 0.0, value, value / 4, value * 3 / 4, None, None))
    out = poller.over_window(1.0, 5.0)
    truth = _stepped_counter(5.0) - _stepped_counter(1.0)
    low, high = out["generated_tokens_bounds"]
    assert low <= truth <= high and low <= out["generated_tokens"] <= high
    a_low, a_high = out["accept_length_bounds"]
    assert a_low <= 4.0 <= a_high and a_low <= out["accept_length"] <= a_high


def test_over_window_bounds_sglangs_finish_time_accept_length():
    """SGLang counts generated tokens and verify calls as requests finish: accept length is
    delta(generated) / delta(verify calls), with bounds from each counter's extremes."""
    from ansible_collections.specbench.core.plugins.module_utils.specbench_client.server import MetricsPoller

    poller = MetricsPoller({"metrics_interval_s": 0.1}, 0.0)
    for sent, received, value in _scrapes([0.01, 0.2, 0.02] * 40):
        poller.samples.append((sent, received, 1.0, 0.0, value, None, None, value / 2.5, None))
    out = poller.over_window(1.0, 5.0)
    low, high = out["accept_length_bounds"]
    assert low <= 2.5 <= high and low <= out["accept_length"] <= high


class SlowMetrics:
    """A /metrics endpoint on loopback whose answers take as long as ``delays`` says, read by read
    (the last delay repeats); its generation counter rises by 100 tokens a second."""

    def __init__(self, delays: list[float]):
        import http.server

        self.delays, self.sent = list(delays), []
        self.t0 = time.monotonic()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                outer.sent.append(time.monotonic())
                delay = outer.delays.pop(0) if len(outer.delays) > 1 else outer.delays[0]
                time.sleep(delay)
                value = 100.0 * (time.monotonic() - outer.t0)
                body = f"vllm:num_requests_running 4\nvllm:generation_tokens_total {value}\n".encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                del args

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _poll(delays: list[float], warmup: float, window: float, halt_after: float):
    """A poller as level.run_level uses it: started with the level, halted ``halt_after`` seconds
    after the window's end; returns (poller, window start, window end, the server's read times)."""
    from ansible_collections.specbench.core.plugins.module_utils.specbench_client.server import MetricsPoller

    server = SlowMetrics(delays)
    try:
        t0 = time.monotonic() + 0.05
        poller = MetricsPoller({"base_url": f"http://127.0.0.1:{server.port}", "metrics_interval_s": 0.2}, t0)
        poller.start()
        ws, we = t0 + warmup, t0 + warmup + window
        time.sleep(we + halt_after - time.monotonic())
        poller.halt.set()
        poller.join(timeout=poller.FINAL_TRIES * (poller.FINAL_TIMEOUT_S + 1))
        assert not poller.is_alive()
        return poller, ws, we, server.sent
    finally:
        server.close()


def test_the_window_start_is_bounded_when_the_warmups_reads_answer_late():
    """The read sent with the level's first requests answers 1.5 s later, after a 1-s warmup ended:
    the read before the level (answered at once) still bounds the counter at the start."""
    poller, ws, we, unused = _poll([0.0, 1.5, 0.01], warmup=1.0, window=0.6, halt_after=0.05)
    assert [s for s in poller.samples if s[1] <= ws], "no read answered before the window's start"
    out = poller.over_window(ws, we)
    low, high = out["generated_tokens_bounds"]
    assert low <= out["generated_tokens"] <= high


@pytest.mark.parametrize("slow_read", [0.15, 0.5])
def test_the_window_end_is_bounded_by_a_read_sent_after_the_halt(slow_read):
    """Every read takes ``slow_read`` s; the halt comes 0.02 s after the window's end, while a read
    sent before the end is in flight (the reads go out every 0.2 s + their latency, so one straddles
    it, or the halt finds the poller waiting): the poller sends one more, after the halt, and the
    counter over the window is bounded either way."""
    poller, ws, we, sent = _poll([0.0, slow_read], warmup=0.3, window=0.8, halt_after=0.02)
    assert any(s[0] >= we for s in poller.samples), "no read sent after the window's end"
    assert sent[-1] >= we
    low, high = poller.over_window(ws, we)["generated_tokens_bounds"]
    # the counter rises 100 tokens/s: over a 0.8-s window 80 tokens, inside the bounds the reads allow
    assert low <= 80.0 <= high, (low, high)


def test_edge_chunks_are_the_chunks_of_the_first_two_reads_after_each_edge_of_requests_sent_before_it():
    """What the server may have counted before an edge and the client received after it (a merged
    chunk carries a stalled stream's pending steps; a read carries its last segment's stamp, so
    chunks that arrived before the edge and were read with later ones count after it): the chunks
    with tokens of the first two reads after the edge (one stamp per read), for requests sent
    before it and still receiving after it."""
    import types

    from ansible_collections.specbench.core.plugins.module_utils.specbench_client.worker import Worker

    w = types.SimpleNamespace(ws=10.0, we=15.0, edge_tokens=[0.0, 0.0])
    Worker._edge_chunks(w, 9.0, [9.5, 10.2, 10.3, 10.4], [1, 0, 7, 2])    # straddles ws: 7 + 2 (the empty chunk skipped)
    Worker._edge_chunks(w, 14.0, [14.5, 15.1, 15.2, 15.3], [1, 18, 1, 1])  # straddles we: 18 + 1, a merged chunk
    Worker._edge_chunks(w, 11.0, [11.5, 12.0], [3, 3])                     # inside: neither edge
    Worker._edge_chunks(w, 15.5, [15.6, 16.0], [5, 5])                     # sent after the end: nothing
    Worker._edge_chunks(w, 9.0, [9.5, 16.0], [4, 4])                       # straddles both: 4 at each
    assert w.edge_tokens == [13.0, 23.0]
    # One read after ws held three chunks (backlog read at once, one stamp), the next read one more.
    w = types.SimpleNamespace(ws=10.0, we=15.0, edge_tokens=[0.0, 0.0])
    Worker._edge_chunks(w, 9.0, [9.5, 10.2, 10.2, 10.2, 10.3, 10.4], [1, 3, 3, 3, 2, 5])
    assert w.edge_tokens == [11.0, 0.0]


def test_a_request_that_straddled_the_start_and_finished_before_the_window_opened_counts_at_the_edge():
    """The window's start reaches a worker from its parent once every worker is ready: a request
    that straddled it and finished first was accounted before the worker knew the edge. Its chunks
    after the edge still count there (_open_window), exactly as for one that finished after: on a
    loaded machine vLLM's C=1 level recorded none at the start, and the client read 40 tokens more
    than vLLM's counter where the start edge allowed for none. A request that ended before the
    earliest possible start (the warmup's end, less one bin) is not kept."""

    def finished(worker, sent: float, ts: list, ks: list) -> None:
        req = sc.Req(0, sent, False, sum(ks))
        req.ts, req.ks, req.end, req.first = ts, ks, ts[-1], ts[0]
        worker._account(req, True)

    def worker_at(ws: float | None):
        settings = sc.normalize_settings({"base_url": "http://127.0.0.1:9", "api": "completions", "output_len": 16,
                                          "warmup_s": 1.0, "window_s": 5.0})
        plan = {"settings": settings, "model": "m", "t0": 0.0, "bin_w": 0.02, "starts": [0.0], "budget": None,
                "key": "k", "trace": 0}
        worker = sc.Worker(plan, [0])
        if ws is not None:
            worker._open_window(ws)
        return worker

    requests = [(0.2, [0.5, 0.9], [8, 8]),                        # ended before the warmup did: not kept
                (0.9, [1.0, 1.04, 1.08, 1.08, 1.1], [2, 5, 3, 4, 2]),  # straddles 1.02: reads 1.04 and 1.08
                (1.1, [1.2, 1.3], [8, 8])]                        # sent after the start: inside
    late = worker_at(None)
    for request in requests:
        finished(late, *request)
    kept = len(getattr(late, "pre_window", []))
    late._open_window(1.02)
    early = worker_at(1.02)
    for request in requests:
        finished(early, *request)
    assert late.edge_tokens == early.edge_tokens == [12.0, 0.0]
    assert kept == 2 and late.pre_window == []


def test_edge_chunk_tokens_only_for_one_fixed_window_and_no_end_where_requests_were_cut():
    from ansible_collections.specbench.core.plugins.module_utils.specbench_client.summary import (
        edge_chunk_tokens as edge,
    )

    raw = {"edge_tokens": [13.0, 23.0], "cut": 0, "window_end": 15.0, "we": 15.0}
    assert edge([raw]) == {"start": 13.0, "end": 23.0}
    assert edge([dict(raw, cut=2)]) == {"start": 13.0, "end": None}       # the cut requests' chunks never came
    assert edge([dict(raw, window_end=14.0)]) == {"start": 13.0, "end": None}  # closed before its planned end
    assert edge([raw, raw]) is None                                          # repeats
    assert edge([dict(raw, edge_tokens=None)]) is None                       # adaptive or fixed-count window


def test_the_kernel_stamps_a_read_with_its_last_segments_arrival():
    """What the edge reads allow for (worker.Worker._edge_chunks): two writes 50 ms apart on loopback,
    read at once, carry one SO_TIMESTAMPNS stamp, the second write's arrival (tcp_recvmsg reports
    the receive time of the last skb it copied), so the first write's data is placed 50 ms late.
    Bounds: the stamp is no earlier than the second send began (its data cannot arrive before),
    hence at least the sleep between the sends after the first."""
    import struct

    from ansible_collections.specbench.core.plugins.module_utils.specbench_client.worker import SO_TIMESTAMPNS

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    client = socket.create_connection(server.getsockname())
    peer, _unused = server.accept()
    try:
        client.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        first = time.time()
        peer.sendall(b"a" * 10)
        time.sleep(0.05)
        second = time.time()
        peer.sendall(b"b" * 10)
        time.sleep(0.05)
        buf = bytearray(100)
        n, anc, _flags, _addr = client.recvmsg_into([buf], 64)
        assert n == 20 and anc, (n, anc)  # both writes in one read
        sec, nsec = struct.unpack("@ll", anc[0][2])
        stamp = sec + nsec * 1e-9
        assert stamp >= second - 0.001 and stamp - first >= 0.049, (stamp - first, stamp - second)
    finally:
        for sock in (client, peer, server):
            sock.close()


def test_a_kernel_stamp_places_data_when_it_arrived_never_before_the_requests_previous_read():
    """worker.arrival: the kernel's CLOCK_REALTIME stamp moved to the monotonic clock by the offset
    read at the read. A read that came without a stamp is timed when it was read, and the next
    read's stamp can fall before that: placed as it was, a request's chunks ran out of order, and the
    worker's binning (which sizes its bins by the last chunk) raised IndexError beside the suite."""
    arrival = sc.worker.arrival
    wall_offset = 1_700_000_000.0  # the wall clock less the monotonic one
    read_at = 100.0
    stamp = wall_offset + 99.9993  # arrived 0.7 ms before the read
    assert arrival(read_at, stamp, wall_offset + read_at, sent=99.0, prev=None) == pytest.approx(99.9993, abs=1e-6)
    # Before the request was sent (a wall-clock step back, or a stale stamp), or not in the 30 s
    # before the read, or after it: the read time.
    assert arrival(read_at, stamp, wall_offset + read_at, sent=99.9995, prev=None) == read_at
    assert arrival(read_at, wall_offset + 60.0, wall_offset + read_at, sent=None, prev=None) == read_at
    assert arrival(read_at, wall_offset + 100.5, wall_offset + read_at, sent=None, prev=None) == read_at
    # A wall-clock step of -20 s between the arrival and the read moves the stamp and the offset alike.
    assert arrival(read_at, stamp - 20, wall_offset - 20 + read_at, sent=99.0, prev=None) == pytest.approx(99.9993, abs=1e-6)
    # The previous read of the request had no stamp and was timed at its read, 99.9995: this one's
    # stamp, 0.2 ms before that, is placed with it, not before it.
    assert arrival(read_at, stamp, wall_offset + read_at, sent=99.0, prev=99.9995) == 99.9995
    # In sequence: a read without a stamp, then a read whose stamp falls before it. The chunks keep
    # their order, so the bin of the last one is the latest (worker._account sizes its bins by it).
    ts = [99.9995]
    ts.append(arrival(read_at, stamp, wall_offset + read_at, sent=99.0, prev=ts[-1]))
    assert ts == sorted(ts)
    bin_w = 0.001
    assert int(max(ts) / bin_w) == int(ts[-1] / bin_w)
