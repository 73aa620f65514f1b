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


def describe(info: dict) -> dict:
    return {"version": info.get("version"), "launch_command": None, "speculative_algorithm": None,
            "max_running_requests": None}


def recognise(info: dict) -> bool:
    """Whether the answer at INFO_PATH is vLLM's (a version and nothing of SGLang's)."""
    return isinstance(info.get("version"), str) and "internal_states" not in info


def speculative_from_metrics(text: bytes) -> str | None:
    """vLLM registers its spec-decode counters only when speculation is on."""
    return "vllm spec_decode (see the launch command)" if SPEC_DRAFTS in text else None


def accept_length(info) -> dict | None:
    del info  # read from the spec-decode counters over the window instead
    return None
