"""The client against an older SGLang (issue 18, items 2-3): one that has only /get_server_info,
no /tokenize and ignores stream_options.continuous_usage_stats. The client falls back and says so
in the results. The stand-in is a loopback HTTP/1.1 server in a thread, shaped like SGLang's
answers (srt/entrypoints/openai/serving_chat.py before continuous usage); about 3 s."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible_collections.specbench.core.plugins.module_utils import specbench_client as sc

TOKENS = 16


class OldSGLang(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    seen: list = []

    def log_message(self, *args):  # quiet
        del args

    def _json(self, status: int, obj) -> None:
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):  # noqa: N802 - http.server's name
        self.seen.append(("GET", self.path))
        if self.path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": "old", "object": "model"}]})
        elif self.path == "/get_server_info":
            self._json(200, {"version": "0.4.0", "speculative_algorithm": None, "internal_states": [{}]})
        else:
            self._json(404, {"detail": "Not Found"})

    def do_POST(self):  # noqa: N802
        self.seen.append(("POST", self.path))
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        if self.path != "/v1/chat/completions":
            self._json(404, {"detail": "Not Found"})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        n = body.get("max_tokens") or TOKENS
        words = len(body["messages"][0]["content"].split())

        def send(obj) -> None:
            data = b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

        for i in range(n):  # usage null in every chunk: continuous_usage_stats not honoured
            send({"id": "x", "object": "chat.completion.chunk", "model": "old", "usage": None,
                  "choices": [{"index": 0, "delta": {"content": " tok"}, "finish_reason": "length" if i == n - 1
                               else None}]})
        send({"id": "x", "object": "chat.completion.chunk", "model": "old", "choices": [],
              "usage": {"prompt_tokens": words, "completion_tokens": n, "total_tokens": words + n}})
        send(b"[DONE]")
        self.wfile.write(b"0\r\n\r\n")


@pytest.fixture
def old_sglang():
    server = ThreadingHTTPServer(("127.0.0.1", 0), OldSGLang)
    OldSGLang.seen = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_an_older_sglang_is_read_through_its_fallbacks_and_the_results_say_so(old_sglang):
    settings = sc.normalize_settings({"base_url": old_sglang, "api": "chat", "input_len": 32, "output_len": TOKENS,
                                      "warmup_s": 0.2, "window_s": 1.0, "drain": False, "concurrency": [1]})
    server = sc.probe_server(settings)
    assert server["info_path"] == "/get_server_info" and server["version"] == "0.4.0"
    assert ("GET", "/server_info") in OldSGLang.seen  # asked first, as 0.5.23 wants
    level = sc.run_level(settings, 1, server)
    assert level["error"] is None and level["requests_ok"] > 0, level
    assert ("POST", "/tokenize") in OldSGLang.seen
    assert level["prompt_calibration"] is None
    assert level["token_count_source"].startswith("words per chunk, scaled to usage.completion_tokens")
    text = " ".join(level["warnings"])
    assert "did not answer POST /tokenize: prompts are sized in words" in text
    assert "sent no usage in its stream chunks although asked (stream_options.continuous_usage_stats)" in text
    assert level["output_tokens_mean"] == TOKENS


def test_vllms_dev_mode_server_info_is_not_taken_for_sglangs():
    """vLLM serves /server_info too with VLLM_SERVER_DEV_MODE=1
    (vllm/entrypoints/serve/dev/server_info/api_router.py): the probe must go on to /version."""
    from ansible_collections.specbench.core.plugins.module_utils.specbench_client.engines import sglang, vllm

    dev = {"vllm_config": "...", "vllm_env": {}, "system_env": {}}
    assert not sglang.recognise(dev)
    assert sglang.recognise({"version": "0.5.23", "internal_states": [{}]})
    assert vllm.recognise({"version": "0.32.0"})
