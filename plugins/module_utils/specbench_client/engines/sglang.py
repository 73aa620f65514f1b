# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""SGLang: what its server offers beyond the OpenAI API. The emulator in files/ speaks the same.

An engine module names: its description endpoint and how to read it (``describe``), how to
empty its prefix cache before a level, its accept length of speculative decoding, its tokenize
endpoint and stream options, and its Prometheus metric names for running and queued requests,
generated tokens and speculative steps. Each behaviour relied on is SGLang 0.5.23's, read in its
source (paths inside the sglang package).
"""
from __future__ import annotations

NAME = "sglang"
# GET: the server's own description. /get_server_info is deprecated in 0.5.23 (a warning in the
# server log on every call, removal announced): /server_info first, the old path for older servers
# (srt/entrypoints/http_server.py).
INFO_PATH = "/server_info"
INFO_FALLBACK = "/get_server_info"
FLUSH_PATH = "/flush_cache"  # POST: empty the prefix cache; 400 while requests still run
METRIC_PREFIX = b"sglang:"  # /metrics holds this engine's counters when it starts with this
RUNNING = b"sglang:num_running_reqs"
QUEUED = b"sglang:num_queue_reqs"
# Grows only when a request finishes, by its whole output (srt/observability/metrics_collector.py,
# observe_one_finished_request, called under `if state.finished` in
# srt/managers/tokenizer_manager.py): compare it with the requests that finished in the window.
GENERATED = b"sglang:generation_tokens_total"
GENERATED_ON_FINISH = True
# Likewise on finish, by the request's spec_verify_ct (same function): over a window,
# delta(generated) / delta(verify calls) is the accept length of the requests finished in it.
SPEC_VERIFY = b"sglang:spec_verify_calls_total"
SPEC_DRAFTS = None  # vLLM's counters; SGLang counts verify calls instead
SPEC_ACCEPTED = None
# POST {"model", "prompt"} or {"model", "messages"}: {"tokens", "count", "max_model_len"}, vLLM's
# shapes (srt/entrypoints/openai/protocol.py, TokenizeRequest/TokenizeResponse; served at
# /tokenize and /v1/tokenize by srt/entrypoints/http_server.py).
TOKENIZE_PATH = "/tokenize"
# Usage in every chunk: honoured on chat and completions (srt/entrypoints/openai/utils.py,
# should_include_usage; serving_chat.py, serving_completions.py).
STREAM_OPTIONS = {"include_usage": True, "continuous_usage_stats": True}
RATE_TOLERANCE = 0.02  # exact per-chunk counts: warn when client and server differ by more
# Added to the OpenAI APIs' body of a speculative server: the finished request's verify steps come back
# as sglext.spec_tokens_details.spec_verify_ct, in a chunk with no choices after the finish chunk
# (srt/entrypoints/openai/protocol.py, return_spec_tokens_details, SglExt, SpecTokensDetails;
# serving_chat.py and serving_completions.py; the figures are meta_info's, set when the request
# finishes: srt/managers/tokenizer_manager.py, _calculate_spec_decoding_metrics).
SPEC_REQUEST_FIELDS = {"return_spec_tokens_details": True}
# Where the OpenAI APIs' per-request verify steps come from, for the results' source texts.
SPEC_REQUEST_SOURCE = "sglext.spec_tokens_details.spec_verify_ct per request (return_spec_tokens_details)"


def describe(info: dict) -> dict:
    """The fields of the probe's answer, from the description at INFO_PATH."""
    return {
        "version": info.get("version"),
        "launch_command": info.get("launch_command"),
        "speculative_algorithm": info.get("speculative_algorithm"),
        "max_running_requests": info.get("max_running_requests"),
    }


# The resolved speculative settings /server_info reports at its top level (ServerArgs.resolved_dict
# through build_server_info in srt/utils/common.py; NEXTN is already resolved to EAGLE there,
# srt/arg_groups/speculative_hook.py).
SPECULATION_FIELDS = ("speculative_algorithm", "speculative_adaptive", "speculative_num_steps",
                      "speculative_eagle_topk", "speculative_num_draft_tokens")
SPEC_CONFIG_PATH = None  # /server_info (INFO_PATH) holds it


def speculation(info, metrics: bytes | None, config=None) -> dict:
    """What the server runs: {"algorithm" (None: plain decoding), "adaptive", "num_steps", "eagle_topk",
    "num_draft_tokens", "source"}, from /server_info's resolved fields; "algorithm" is "unknown" when the
    server gave no description."""
    del metrics, config
    if not isinstance(info, dict):
        return {"algorithm": "unknown", "source": None}
    if "speculative_algorithm" not in info:  # not SGLang's server arguments: a foreign server's /server_info
        return {"algorithm": "unknown", "source": "/server_info without speculative_algorithm"}
    algo = info.get("speculative_algorithm")
    out = {"algorithm": str(algo).upper() if algo else None, "source": "/server_info (resolved server arguments)"}
    if algo:
        out.update(adaptive=bool(info.get("speculative_adaptive")), num_steps=info.get("speculative_num_steps"),
                   eagle_topk=info.get("speculative_eagle_topk"),
                   num_draft_tokens=info.get("speculative_num_draft_tokens"))
    return out


def recognise(info: dict) -> bool:
    """Whether the answer at INFO_PATH is this engine's: a JSON object at /server_info, but not
    vLLM's (which serves /server_info too with VLLM_SERVER_DEV_MODE=1: {"vllm_config", "vllm_env",
    "system_env"}, vllm/entrypoints/serve/dev/server_info/api_router.py)."""
    return isinstance(info, dict) and "vllm_config" not in info


def speculative_from_metrics(text: bytes) -> str | None:
    del text  # /server_info names the algorithm
    return None


def accept_length(info) -> dict | None:
    """The server's own average accept length over every DP rank ({"value", "ranks"}), from the
    description at INFO_PATH; None when no rank gives one.

    Each ``internal_states`` entry is one DP rank; its ``avg_spec_accept_length`` is a lifetime
    figure since the last /flush_cache, folded in only when the rank's decode log fires (every
    --decode-log-interval batches) and absent before the first fold
    (srt/managers/scheduler_components/internal_state.py, _average_accept_length;
    metrics_reporter.py). The ranks give no step counts, so they are averaged unweighted."""
    states = info.get("internal_states") if isinstance(info, dict) else None
    values = []
    for state in states if isinstance(states, list) else []:
        value = state.get("avg_spec_accept_length") if isinstance(state, dict) else None
        if isinstance(value, (int, float)) and value > 0:
            values.append(float(value))
    if not values:
        return None
    return {"value": sum(values) / len(values), "ranks": len(values), "of": len(states)}
