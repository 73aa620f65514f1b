# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""SGLang's native API (/generate).

Tokens per chunk are exact: ``meta_info.completion_tokens`` counts the output so far, and
``spec_verify_ct`` the verify steps of speculative decoding (so the accept length is
sum(completion_tokens) / sum(spec_verify_ct)).
"""
from __future__ import annotations

NAME = "native"
PATH = "/generate"
SCALE_TO_USAGE = False  # the counts are the server's own


def body(model: str, prompt: str, output_len: int) -> dict:
    del model  # /generate serves the one model the server loaded
    return {"text": prompt, "stream": True,
            "sampling_params": {"max_new_tokens": output_len, "temperature": 0.0, "ignore_eos": True}}


def handle(req, obj: dict, t: float) -> bool:
    """One /generate event; False: an error object."""
    meta = obj.get("meta_info")
    if not isinstance(meta, dict):
        if "error" in obj or obj.get("object") == "error":
            return False
        return True
    ct = meta.get("completion_tokens")
    if isinstance(ct, int) and ct > req.ct:
        req.ts.append(t)
        req.ks.append(ct - req.ct)
        req.ct = ct
        if req.first is None:
            req.first = t
    verify = meta.get("spec_verify_ct")
    if verify is not None:
        req.verify = verify
    if req.prompt_tokens is None:
        req.prompt_tokens = meta.get("prompt_tokens")
    if meta.get("finish_reason"):
        req.finish = meta["finish_reason"]
        req.end = t
        req.usage_ct = ct
    return True


# The fast path of /generate: its chunks repeat the whole text and output_ids so far, so a
# full parse grows with the output; a plain chunk is read from its counters instead. Anything
# else (the first and last chunks, errors, odd layouts) answers False: the full parse.
def fast(req, s: str, a: int, b: int, t: float) -> bool:
    if req.prompt_tokens is None:  # the first chunk: parse it all once
        return False
    find = s.find
    k = find('"finish_reason":', a, b)
    if k < 0 or not _null_at(s, k + 16, b) or find('"error"', a, b) >= 0:
        return False
    ct = _int_at(s, find('"completion_tokens":', a, b), 20, b)
    if ct is None:
        return False
    k = find('"spec_verify_ct":', a, b)
    if k >= 0:
        verify = _int_at(s, k, 17, b)
        if verify is None:
            return False
        req.verify = verify
    if ct > req.ct:
        req.ts.append(t)
        req.ks.append(ct - req.ct)
        req.ct = ct
        if req.first is None:
            req.first = t
    return True


def _null_at(s: str, i: int, end: int) -> bool:
    """Whether the JSON value starting at ``s[i]`` (after spaces) is null."""
    while i < end and s[i] == " ":
        i += 1
    return s.startswith("null", i, end)


def _int_at(s: str, k: int, skip: int, end: int):
    """The non-negative integer after the key found at ``k`` (``skip`` = len of '"key":')."""
    if k < 0:
        return None
    i = k + skip
    while i < end and s[i] == " ":
        i += 1
    j = i
    while j < end and "0" <= s[j] <= "9":
        j += 1
    return int(s[i:j]) if j > i else None
