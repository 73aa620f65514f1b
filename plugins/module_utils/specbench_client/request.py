# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""Requests: prompts (synthesized from a seed or given), the HTTP request bytes for an API,
and the record one request's arrivals go into.
"""
from __future__ import annotations

import json
import random

from . import prompts as prompt_sets
from .apis import ADAPTERS
from .settings import __version__

VOCAB = (
    "time person year way day thing man world life hand part child eye woman place work week case point "
    "government company number group problem fact water room mother area money story month lot right study "
    "book word business issue side kind head house service friend father power hour game line end member "
    "law car city community name president team minute idea body information back parent face others level "
    "office door health art war history party result change morning reason research girl guy moment air "
    "teacher force education foot boy age policy process music market sense nation plan college interest"
).split()


def synth_prompt(seed: int, key: str, words) -> str:
    """Random words from VOCAB; a fractional ``words`` (from a calibration) rounds up or down
    per prompt so that the prompts average it."""
    rng = random.Random(f"{seed}:{key}")
    if isinstance(words, float):
        whole = int(words)
        words = whole + (1 if random.Random(f"{seed}:{key}:len").random() < words - whole else 0)
    return " ".join(rng.choices(VOCAB, k=words))


def synth_prompt_tokens(seed: int, key: str, costs: dict, budget: int) -> str:
    """Random words from VOCAB adding up to ``budget`` of a server's tokens, from each word's own
    token count there (``costs``; a byte-level BPE splits text into words first, so the counts
    add up): words are drawn while they fit, then one-token words fill what is left."""
    rng = random.Random(f"{seed}:{key}")
    words = [w for w in VOCAB if costs.get(w)]
    ones = [w for w in words if costs[w] == 1]
    out: list = []
    total = 0
    draws = 4 * budget
    while draws > 0:
        draws -= 1
        word = rng.choice(words)
        if total + costs[word] <= budget:
            out.append(word)
            total += costs[word]
        if total >= budget or (ones and budget - total <= 1):
            break
    while ones and total < budget:
        out.append(rng.choice(ones))
        total += 1
    return " ".join(out)


class RequestFactory:
    """HTTP request bytes for one API; each request gets its own prompt."""

    def __init__(self, settings: dict, model: str, host: str, port: int, prefix: str):
        self.api = settings["api"]
        self.adapter = ADAPTERS[self.api]
        self.model = model
        self.input_len = settings["input_len"]
        self.output_len = settings["output_len"]
        self.seed = settings["seed"]
        # Given prompts in the seed's order (prompts.order): the same sequence in every mode and launch.
        records = settings.get("prompts")
        self.prompts = prompt_sets.order(records, self.seed) if records else None
        self.categories = prompt_sets.categories(records) if records else []
        self.lengths = settings.get("lengths", "fixed")
        # Words per synthesized prompt: input_len (the emulator counts words as tokens), unless a
        # calibration against the server's tokenizer sized prompts in its tokens (below).
        self.words = settings.get("_prompt_words") or self.input_len
        self.costs = settings.get("_word_tokens")  # each VOCAB word's tokens on the server, when calibrated
        self.budget = settings.get("_prompt_budget")
        self.stream_options = settings.get("_stream_options") if self.api != "native" else None
        # The engine's fields for per-request speculation figures (engines/*.py SPEC_REQUEST_FIELDS).
        self.extra_fields = settings.get("_spec_request_fields") if self.api != "native" else None
        path = self.adapter.PATH
        host_header = f"[{host}]" if ":" in host else host
        head = [f"POST {prefix}{path} HTTP/1.1", f"Host: {host_header}:{port}", "User-Agent: specbench-client/"
                + __version__, "Accept: text/event-stream", "Content-Type: application/json"]
        if settings.get("api_key"):
            head.append(f"Authorization: Bearer {settings['api_key']}")
        self.head = ("\r\n".join(head) + "\r\nContent-Length: ").encode()

    def record(self, index: int):
        """The given prompt record request ``index`` of the level takes, or None (synthesized)."""
        return self.prompts[index % len(self.prompts)] if self.prompts else None

    def output_len_of(self, index: int) -> int:
        """Output tokens for request ``index``: output_len, or the record's own (lengths: data)."""
        record = self.record(index)
        return prompt_sets.output_len_of(record, self.lengths, self.output_len) if record else self.output_len

    def category_of(self, index: int) -> int:
        """The index in ``categories`` of request ``index``'s category (-1: synthesized)."""
        record = self.record(index)
        if record is None:
            return -1
        return self.categories.index(record.get("category") or "uncategorised")

    def prompt(self, key: str, index: int):
        """The text, or for a multi-turn record on the chat API the messages, request ``index`` sends."""
        record = self.record(index)
        if record is not None:
            if self.api == "chat":
                return record["messages"]
            return prompt_sets.flatten(record["messages"])
        if self.costs and self.budget:
            return synth_prompt_tokens(self.seed, key, self.costs, self.budget)
        return synth_prompt(self.seed, key, self.words)

    def body(self, prompt, output_len: int) -> dict:
        out = self.adapter.body(self.model, prompt, output_len)
        if self.stream_options:
            out["stream_options"] = dict(out.get("stream_options") or {}, **self.stream_options)
        if self.extra_fields:
            out.update(self.extra_fields)
        return out

    def build(self, key: str, index: int, output_len: int) -> bytes:
        data = json.dumps(self.body(self.prompt(key, index), output_len), separators=(",", ":")).encode()
        return self.head + str(len(data)).encode() + b"\r\n\r\n" + data


class Req:
    """One request: its send time, and the time and token count of every chunk that arrived."""

    __slots__ = ("accepted", "category", "ct", "done", "end", "expect", "finish", "first", "index", "ks",
                 "measured", "prompt_tokens", "status", "t_send", "ts", "usage_ct", "verify")

    def __init__(self, index: int, t_send: float, measured: bool, expect: int):
        self.index = index
        self.expect = expect
        self.t_send = t_send
        self.measured = measured
        self.ts: list[float] = []
        self.ks: list[int] = []
        self.first = None
        self.end = None
        self.done = False
        self.finish = None
        self.ct = 0
        self.usage_ct = None
        self.prompt_tokens = None
        self.verify = None  # verify steps: SGLang's spec_verify_ct, vLLM's num_spec_steps
        self.accepted = None  # vLLM: draft tokens accepted (metrics.speculative_decoding); None on SGLang
        self.category = -1  # index in RequestFactory.categories (-1: synthesized prompt)
        self.status = 0
