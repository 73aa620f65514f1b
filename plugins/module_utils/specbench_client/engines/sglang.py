# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""SGLang: what its server offers beyond the OpenAI API. The emulator in files/ speaks the same.

An engine module names: its description endpoint and how to read it (``describe``), how to
empty its prefix cache before a level, its accept length of speculative decoding, and its
Prometheus metric names for running and queued requests and generated tokens.
"""
from __future__ import annotations

NAME = "sglang"
INFO_PATH = "/get_server_info"  # GET: the server's own description (None: the engine has none)
FLUSH_PATH = "/flush_cache"  # POST: empty the prefix cache; 400 while requests still run
METRIC_PREFIX = b"sglang:"  # /metrics holds this engine's counters when it starts with this
RUNNING = b"sglang:num_running_reqs"
QUEUED = b"sglang:num_queue_reqs"
GENERATED = b"sglang:generation_tokens_total"
SPEC_DRAFTS = None  # the accept length comes from /get_server_info or /generate instead
SPEC_ACCEPTED = None
TOKENIZE_PATH = None  # prompts are sized in words (the emulator's tokens)
STREAM_OPTIONS = None  # the OpenAI APIs' default stream_options (usage at the end)
RATE_TOLERANCE = 0.1  # per-chunk counts are word counts scaled to usage: a looser agreement


def describe(info: dict) -> dict:
    """The fields of the probe's answer, from the description at INFO_PATH."""
    return {
        "version": info.get("version"),
        "launch_command": info.get("launch_command"),
        "speculative_algorithm": info.get("speculative_algorithm"),
        "max_running_requests": info.get("max_running_requests"),
    }


def recognise(info: dict) -> bool:
    """Whether the answer at INFO_PATH is this engine's (any JSON object at /get_server_info)."""
    return isinstance(info, dict)


def speculative_from_metrics(text: bytes) -> str | None:
    del text  # /get_server_info names the algorithm
    return None


def accept_length(info) -> float | None:
    """The server's own average accept length of speculative decoding (since its last cache
    flush), from the description at INFO_PATH; None when it gives none."""
    states = info.get("internal_states") if isinstance(info, dict) else None
    if isinstance(states, list) and states and isinstance(states[0], dict):
        value = states[0].get("avg_spec_accept_length")
        if isinstance(value, (int, float)) and value > 0:
            return float(value)
    return None
