# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""vLLM: so far only its Prometheus metric names (running, waiting, generated tokens).

It has no description endpoint or cache flush the client uses; its accept length comes
with the next issue (vLLM support), which fills in this file.
"""
from __future__ import annotations

NAME = "vllm"
INFO_PATH = None
FLUSH_PATH = None
METRIC_PREFIX = b"vllm:"
RUNNING = b"vllm:num_requests_running"
QUEUED = b"vllm:num_requests_waiting"
GENERATED = b"vllm:generation_tokens_total"


def describe(info: dict) -> dict:
    del info
    return {"version": None, "launch_command": None, "speculative_algorithm": None, "max_running_requests": None}


def accept_length(info) -> float | None:
    del info
    return None
