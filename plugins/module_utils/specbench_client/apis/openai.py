# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""What chat and completions share: OpenAI's streamed events and request body.

Tokens per chunk: the server's own count where every chunk carries usage (vLLM's
``continuous_usage_stats``, which the engine adapter asks for); else the words of each delta,
scaled afterwards so a request's total equals the server's ``usage.completion_tokens`` (exact
totals; exact per chunk on the emulator).
"""
from __future__ import annotations

SCALE_TO_USAGE = True  # per-chunk counts are word counts: scale them to usage.completion_tokens
fast = None  # no fast path: every event is parsed whole


def base_body(model: str, output_len: int) -> dict:
    """The body fields both OpenAI endpoints take: fixed length, greedy, streamed with usage."""
    return {"model": model, "max_tokens": output_len, "temperature": 0.0, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True}}


def handle_event(req, obj: dict, t: float, text_of) -> bool:
    """One OpenAI SSE event (chat or completions, told apart by ``text_of``); False: an error
    object."""
    choices = obj.get("choices")
    usage = obj.get("usage")
    if choices and usage and isinstance(usage.get("completion_tokens"), int):
        # Usage in every chunk (vLLM's continuous_usage_stats): the server's exact token count
        # so far, so this chunk's tokens are the increase (several with speculative decoding).
        c0 = choices[0]
        ct = usage["completion_tokens"]
        if ct > req.ct:
            req.ts.append(t)
            req.ks.append(ct - req.ct)
            req.ct = ct
            if req.first is None:
                req.first = t
        if c0.get("finish_reason"):
            req.finish = c0["finish_reason"]
            req.end = t
    elif choices:
        c0 = choices[0]
        text = text_of(c0)
        if text:
            req.ts.append(t)
            req.ks.append(len(text.split()) or 1)
            if req.first is None:
                req.first = t
        if c0.get("finish_reason"):
            req.finish = c0["finish_reason"]
            req.end = t
    elif "error" in obj or obj.get("object") == "error":
        return False
    if usage:
        req.usage_ct = usage.get("completion_tokens")
        req.prompt_tokens = usage.get("prompt_tokens")
    # vLLM launched with --per-request-spec-decode-metrics summary: the final usage chunk carries the
    # request's own verify steps and accepted draft tokens (vllm/entrypoints/openai/completion/serving.py
    # and chat_completion/serving.py, build_spec_decoding_metrics in
    # vllm/entrypoints/generate/base/serving.py; the fields in vllm/v1/metrics/stats.py, to_dict:
    # mean_acceptance_length = 1 + num_accepted_draft_tokens / num_spec_steps).
    spec = (obj.get("metrics") or {}).get("speculative_decoding") if isinstance(obj.get("metrics"), dict) else None
    if isinstance(spec, dict) and isinstance(spec.get("num_spec_steps"), int):
        req.verify = spec["num_spec_steps"]
        req.accepted = spec.get("num_accepted_draft_tokens") or 0
    # SGLang asked for return_spec_tokens_details: a chunk with no choices after the finish chunk
    # carries the request's verify steps (srt/entrypoints/openai/serving_chat.py and
    # serving_completions.py; SglExt and SpecTokensDetails in protocol.py; a list when n > 1). Its
    # accept length is then the output's tokens over them, as on /generate.
    ext = obj.get("sglext")
    details = ext.get("spec_tokens_details") if isinstance(ext, dict) else None
    if isinstance(details, list):
        details = details[0] if details else None
    if isinstance(details, dict) and isinstance(details.get("spec_verify_ct"), int) and details["spec_verify_ct"] > 0:
        req.verify = details["spec_verify_ct"]
    return True
