# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""vLLM: /version for its description, /tokenize for prompts of an exact token length, usage in
every stream chunk (exact tokens per chunk), and its Prometheus counters: running, waiting,
generated tokens, and speculative decoding's drafts and accepted tokens (accept length over a
window = 1 + delta(accepted) / delta(drafts)).
"""
from __future__ import annotations

NAME = "vllm"
INFO_PATH = "/version"  # GET: {"version": "0.32.0"}
INFO_FALLBACK = None
FLUSH_PATH = None  # the prefix cache is not emptied: the counters are read over the window instead
METRIC_PREFIX = b"vllm:"
RUNNING = b"vllm:num_requests_running"
QUEUED = b"vllm:num_requests_waiting"
# Grows every engine step by the tokens it generated (vllm/v1/metrics/loggers.py, from the
# iteration stats): a per-step counter, compared with the client's tokens over the same window.
GENERATED = b"vllm:generation_tokens_total"
GENERATED_ON_FINISH = False
SPEC_VERIFY = None
SPEC_DRAFTS = b"vllm:spec_decode_num_drafts_total"  # present only when speculation is on
SPEC_ACCEPTED = b"vllm:spec_decode_num_accepted_tokens_total"
TOKENIZE_PATH = "/tokenize"  # POST {"model", "prompt"} or {"model", "messages"}: {"count": N}
# Added to the OpenAI APIs' stream_options: usage (exact token counts) in every chunk.
STREAM_OPTIONS = {"include_usage": True, "continuous_usage_stats": True}
RATE_TOLERANCE = 0.02  # exact per-chunk counts: warn when client and server rates differ by more
# Per-request verify steps need a launch flag (--per-request-spec-decode-metrics), not a request field.
SPEC_REQUEST_FIELDS = None
SPEC_REQUEST_SOURCE = "metrics.speculative_decoding per request (vLLM --per-request-spec-decode-metrics)"


def describe(info: dict) -> dict:
    return {"version": info.get("version"), "launch_command": None, "speculative_algorithm": None,
            "max_running_requests": None}


def recognise(info: dict) -> bool:
    """Whether the answer at INFO_PATH is vLLM's (a version and nothing of SGLang's)."""
    return isinstance(info.get("version"), str) and "internal_states" not in info


def speculative_from_metrics(text: bytes) -> str | None:
    """vLLM registers its spec-decode counters only when speculation is on."""
    return "vllm spec_decode (see the launch command)" if SPEC_DRAFTS in text else None


# The speculative config itself, served only with VLLM_SERVER_DEV_MODE=1 (GET /server_info:
# {"vllm_config": ...}, JSON with config_format=json; vllm/entrypoints/serve/dev/server_info/api_router.py).
# Without it, /metrics tells whether the server drafts and how many tokens: the per-position counter has
# one child per draft position, 0 .. num_speculative_tokens - 1, registered at start
# (vllm/v1/spec_decode/metrics.py, SpecDecodingProm: counter_spec_decode_num_accepted_tokens_per_pos).
SPEC_CONFIG_PATH = "/server_info?config_format=json"
_PER_POS = b"vllm:spec_decode_num_accepted_tokens_per_pos"


def _positions(text: bytes) -> int | None:
    """The draft positions /metrics lists (num_speculative_tokens), or None without the counter."""
    found = set()
    for line in text.splitlines():
        if line.startswith(_PER_POS) and b'position="' in line:
            found.add(line.split(b'position="', 1)[1].split(b'"', 1)[0])
    return len(found) or None


def speculation(info, metrics: bytes | None, config=None) -> dict:
    """What the server runs: {"algorithm" (vLLM's method; None: plain decoding; "unknown"), "num_draft_tokens",
    "source"}: the method from the speculative config where the server serves it, else only whether it
    drafts (the spec-decode counters exist only when speculation is on) and how many tokens."""
    del info
    spec = None
    vconf = config.get("vllm_config") if isinstance(config, dict) else None
    if isinstance(vconf, dict):
        spec = vconf.get("speculative_config")
        method = spec.get("method") if isinstance(spec, dict) else None
        return {"algorithm": str(method) if spec else None,
                "num_draft_tokens": spec.get("num_speculative_tokens") if isinstance(spec, dict) else None,
                "source": "GET /server_info (vllm_config.speculative_config)"}
    if metrics is None:
        return {"algorithm": "unknown", "source": None}
    if SPEC_DRAFTS not in metrics:
        return {"algorithm": None, "source": "/metrics (no spec_decode counters: speculation is off)"}
    return {"algorithm": "speculative (method not served)", "num_draft_tokens": _positions(metrics),
            "source": "/metrics (spec_decode counters present; the method needs VLLM_SERVER_DEV_MODE=1 "
                      "for /server_info)"}


def accept_length(info) -> dict | None:
    del info  # read from the spec-decode counters over the window instead
    return None
