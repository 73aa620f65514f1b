# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""The output match: the same fixed prompts, one at a time, greedy, their output tokens kept.

Speculative decoding with greedy verification must not change what the model says; the
comparison holds every mode's outputs against the baseline's (specbench_compare/output_match.py).
Sent after the launch and before the sweep's first warmup, so outside every measured window:
C = 1, temperature 0, ``max_tokens`` fixed, ``ignore_eos`` as the benchmark sends, not streamed.

Where the token ids come from, per API and engine (their own code):
- native ``/generate``: ``output_ids`` (SGLang, srt/managers/tokenizer_manager.py);
- completions with ``return_token_ids``: ``choices[0].token_ids`` (vLLM,
  vllm/entrypoints/openai/completion/serving.py; SGLang, srt/entrypoints/openai/serving_completions.py);
- chat with ``return_token_ids``: ``choices[0].token_ids`` (vLLM,
  vllm/entrypoints/openai/chat_completion/serving.py) or ``choices[0].response_token_ids`` (SGLang,
  srt/entrypoints/openai/serving_chat.py).
A server that returns no ids gives its text: ``source`` says which was kept.
"""
from __future__ import annotations

import hashlib
import json

from .apis.openai import base_body
from .request import synth_prompt
from .server import http_call
from .settings import ServerError

PROMPT_WORDS = 64  # words per synthesized prompt: the check is of the output, not of a long prompt


def match_prompts(settings: dict, count: int) -> list[str]:
    """The fixed prompts: the first ``count`` of the prompts file (cycled), else synthesized from the seed."""
    given = settings.get("prompts")
    if given:
        return [given[i % len(given)] for i in range(count)]
    words = min(int(settings.get("input_len") or PROMPT_WORDS), PROMPT_WORDS)
    return [synth_prompt(settings["seed"], f"output-match:{i}", words) for i in range(count)]


def request_body(api: str, model: str, prompt: str, max_tokens: int) -> tuple[str, dict]:
    """(path, body) of one greedy, fixed-length, unstreamed request that asks for token ids."""
    if api == "native":
        return "/generate", {"text": prompt, "stream": False,
                             "sampling_params": {"max_new_tokens": max_tokens, "temperature": 0.0, "ignore_eos": True}}
    body = base_body(model, max_tokens)
    body.update(stream=False, return_token_ids=True)
    body.pop("stream_options", None)
    if api == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
        return "/v1/chat/completions", body
    body["prompt"] = prompt
    return "/v1/completions", body


def read_output(api: str, obj) -> tuple[list | None, str | None]:
    """(token ids or None, text or None) from one answer."""
    if not isinstance(obj, dict):
        return None, None
    if api == "native":
        ids, text = obj.get("output_ids"), obj.get("text")
    else:
        choice = (obj.get("choices") or [None])[0]
        if not isinstance(choice, dict):
            return None, None
        ids = choice.get("token_ids")
        if ids is None:
            ids = choice.get("response_token_ids")
        text = choice.get("text") if api == "completions" else (choice.get("message") or {}).get("content")
    if not (isinstance(ids, list) and all(isinstance(t, int) for t in ids)):
        ids = None
    return ids, text if isinstance(text, str) else None


def collect_outputs(settings: dict, model: str, count: int, max_tokens: int) -> dict:
    """Send the fixed prompts one by one and keep each output: the results file's ``output_match``."""
    api = settings["api"]
    prompts = match_prompts(settings, count)
    outputs = []
    for i, prompt in enumerate(prompts):
        path, body = request_body(api, model, prompt, max_tokens)
        entry: dict = {"index": i, "token_ids": None, "text": None, "error": None}
        try:
            status, data = http_call(settings, "POST", path, timeout=float(settings["request_timeout_s"]), body=body)
        except ServerError as exc:
            entry["error"] = str(exc)
            outputs.append(entry)
            continue
        try:
            obj = json.loads(data)
        except ValueError:
            obj = None
        if status != 200:
            entry["error"] = f"HTTP {status}: {data[:200].decode(errors='replace')}"
        else:
            entry["token_ids"], entry["text"] = read_output(api, obj)
            if entry["token_ids"] is None and entry["text"] is None:
                entry["error"] = f"no output in the answer: {data[:200].decode(errors='replace')}"
        outputs.append(entry)
    answered = [o for o in outputs if not o["error"]]
    source = "token_ids" if answered and all(o["token_ids"] is not None for o in answered) else "text"
    return {
        "prompts": count,
        "concurrency": 1,
        "temperature": 0.0,
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "api": api,
        "source": source,
        "prompt_sha256": hashlib.sha256(json.dumps(prompts).encode()).hexdigest(),
        "outputs": outputs,
    }
