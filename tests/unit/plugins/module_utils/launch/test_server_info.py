"""The ready line's version for a server without /server_info (issue 38: vLLM's read "vLLM unknown"):
vLLM answers /version (vllm/entrypoints/serve/instrumentator/basic.py, show_version). A real HTTP
server on loopback, answering like vLLM's routes; one with neither still says unknown."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible_collections.specbench.core.plugins.module_utils.launch.process import server_info


def serve(routes: dict):
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            body = routes.get(self.path)
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(json.dumps(body if body is not None else {"detail": "Not Found"}).encode())

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


@pytest.mark.parametrize("routes,version,warned", [
    ({"/version": {"version": "0.11.2"}, "/v1/models": {"data": [{"id": "tiny"}]}}, "0.11.2", False),
    ({"/v1/models": {"data": [{"id": "tiny"}]}}, None, True),
])
def test_vllm_version_from_its_version_route(routes, version, warned):
    httpd = serve(routes)
    try:
        found, warnings = server_info(f"http://127.0.0.1:{httpd.server_address[1]}")
    finally:
        httpd.shutdown()
    assert found["server_info"].get("version") == version and found["models"] == ["tiny"]
    assert bool(warnings) == warned, warnings
    if version:
        assert found["info_path"] == "/version"
