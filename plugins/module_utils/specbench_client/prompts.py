# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""Prompt sets: the files people have, read into one record shape, in one seeded order.

Formats (``prompts_format``; ``auto`` tells them apart from the file itself):

* ``sharegpt``: a JSON array (or JSONL) of objects with ``conversations``: a list of
  ``{"from": "human"|"gpt"|"system", "value": "..."}`` (``user``/``assistant`` accepted too).
* ``chat``: OpenAI chat JSONL, one ``{"messages": [{"role", "content"}, ...]}`` a line.
* ``prompt``: plain JSONL, one ``{"prompt": "..."}`` (or ``"text"``) a line.

Each may carry a ``category`` string (ShareGPT also ``source``-less ``category``) and an
``output_len`` (whole number of tokens). A record is ``{"messages": [...], "category": str |
None, "reply_words": int | None, "output_len": int | None}``: the messages up to the last user
turn (the conversation's history, sent as such on the chat API); a trailing assistant turn is
the reference reply, not sent, whose word count sizes the output under ``lengths: data``.

Multi-turn on completions and native /generate: the history is flattened by one rule,
``flatten`` below: each turn as ``"<Role>: <content>"`` (System, User, Assistant), turns joined
by a blank line, ending with ``"\\n\\nAssistant:"`` so the model answers the last user turn.

Order: the records shuffled once with the seed (``order``): request k of a level (counted over
the level's worker processes) takes record k modulo their number, so every mode and launch
sends the same prompts in the same order.
"""
from __future__ import annotations

import json
import math
import random

from .prompts_builtin import records as builtin_records

FORMATS = ("auto", "sharegpt", "chat", "prompt")
LENGTHS = ("fixed", "data")
ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "chatgpt": "assistant",
         "bing": "assistant", "bard": "assistant", "model": "assistant", "system": "system"}
TOKENS_PER_WORD = 4 / 3  # lengths: data without output_len: a reference reply of W words asks ceil(W * 4/3) tokens
BUILTIN = "builtin"


class PromptsError(ValueError):
    """A prompts file cannot be used; the message names the file, the line and the field."""


def _where(path: str, line) -> str:
    return f"{path!r} line {line}" if line else repr(path)


def _fix(fmt: str) -> str:
    return {"sharegpt": 'each entry must be {"conversations": [{"from": "human", "value": "..."}, ...]}',
            "chat": 'each line must be {"messages": [{"role": "user", "content": "..."}, ...]}',
            "prompt": 'each line must be {"prompt": "..."}'}[fmt]


def _extras(obj: dict, where: str, fmt: str) -> tuple:
    category = obj.get("category")
    if category is not None and (not isinstance(category, str) or not category.strip()):
        raise PromptsError(f"{where}: field \"category\" is {category!r}: give a non-empty string, or leave it out")
    output_len = obj.get("output_len")
    if output_len is not None and (isinstance(output_len, bool) or not isinstance(output_len, int)
                                   or output_len < 1):
        raise PromptsError(f"{where}: field \"output_len\" is {output_len!r}: give a whole number of tokens of "
                           f"at least 1, or leave it out ({_fix(fmt)})")
    return (category.strip() if category else None), output_len


def _record(turns: list, obj: dict, where: str, fmt: str, field: str) -> dict:
    """A record from checked (role, content) turns: history up to the last user turn."""
    if not turns:
        raise PromptsError(f"{where}: field \"{field}\" is empty: {_fix(fmt)}")
    reply = None
    if turns[-1][0] == "assistant":
        reply = turns[-1][1]
        turns = turns[:-1]
    if not turns or turns[-1][0] != "user":
        raise PromptsError(f"{where}: field \"{field}\" has no user turn to answer (the last turn before any "
                           f"reference reply must be the user's): {_fix(fmt)}")
    category, output_len = _extras(obj, where, fmt)
    return {"messages": [{"role": r, "content": c} for r, c in turns], "category": category,
            "reply_words": len(reply.split()) if reply else None, "output_len": output_len}


def _parse(obj, where: str, fmt: str) -> dict:
    if not isinstance(obj, dict):
        raise PromptsError(f"{where} is {type(obj).__name__}, not an object: {_fix(fmt)}")
    if fmt == "prompt":
        key = "prompt" if "prompt" in obj else "text"
        text = obj.get(key)
        if not isinstance(text, str) or not text.strip():
            raise PromptsError(f"{where}: field \"prompt\" is missing or not a non-empty string: {_fix(fmt)}")
        return _record([("user", text)], obj, where, fmt, key)
    field, role_key, text_key = (("conversations", "from", "value") if fmt == "sharegpt"
                                 else ("messages", "role", "content"))
    items = obj.get(field)
    if not isinstance(items, list):
        raise PromptsError(f"{where}: field \"{field}\" is missing or not a list: {_fix(fmt)}")
    turns = []
    for i, item in enumerate(items):
        at = f"{where}: field \"{field}[{i}]"
        if not isinstance(item, dict):
            raise PromptsError(f"{at}\" is not an object: {_fix(fmt)}")
        role = ROLES.get(str(item.get(role_key, "")).strip().lower())
        if role is None:
            raise PromptsError(f"{at}.{role_key}\" is {item.get(role_key)!r}: give one of "
                               f"{', '.join(sorted(ROLES))}")
        text = item.get(text_key)
        if not isinstance(text, str) or not text.strip():
            raise PromptsError(f"{at}.{text_key}\" is missing or not a non-empty string: {_fix(fmt)}")
        turns.append((role, text))
    return _record(turns, obj, where, fmt, field)


def detect(obj) -> str | None:
    """The format one entry is in (None: none of them)."""
    if isinstance(obj, dict):
        if "conversations" in obj:
            return "sharegpt"
        if "messages" in obj:
            return "chat"
        if "prompt" in obj or "text" in obj:
            return "prompt"
    return None


def parse_text(text: str, path: str, fmt: str = "auto") -> tuple[list[dict], str]:
    """(records, the format read) from a file's text (``path`` only names it in errors)."""
    if fmt not in FORMATS:
        raise PromptsError(f"prompts_format is {fmt!r}: give one of {', '.join(FORMATS)}")
    entries: list = []  # (line, object)
    stripped = text.lstrip()
    if stripped.startswith("["):  # one JSON array (ShareGPT's own files)
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise PromptsError(f"{path!r} line {getattr(exc, 'lineno', '?')} is not JSON ({exc}): give a JSON array "
                               "of ShareGPT entries, or JSONL (one object a line)") from None
        entries = [(f"entry {i}", obj) for i, obj in enumerate(data)]
    else:
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                entries.append((number, json.loads(line)))
            except ValueError as exc:
                raise PromptsError(f"{path!r} line {number} is not JSON ({exc}): each line must be one object, "
                                   'such as {"prompt": "..."} or {"messages": [...]}') from None
    if not entries:
        raise PromptsError(f"{path!r} holds no prompts: give one object a line, such as {{\"prompt\": \"...\"}}")
    chosen = fmt
    if fmt == "auto":
        first_line, first = entries[0]
        chosen = detect(first)
        if chosen is None:
            keys = sorted(first) if isinstance(first, dict) else type(first).__name__
            raise PromptsError(f"{_where(path, first_line)} has no field \"conversations\" (ShareGPT), \"messages\" "
                               f"(OpenAI chat) or \"prompt\" (plain), only {keys}: give one, or set prompts_format")
    out = []
    for line, obj in entries:
        where = f"{path!r} {line}" if isinstance(line, str) else _where(path, line)
        out.append(_parse(obj, where, chosen))
    return out, chosen


def load(path: str, fmt: str = "auto", label: str = "prompts_file") -> tuple[list[dict], str]:
    """(records, format) from ``path`` (or the built-in set for ``builtin``)."""
    if path == BUILTIN:
        return builtin_records(), "builtin"
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise PromptsError(f"{label} {path!r} cannot be read ({getattr(exc, 'strerror', None) or exc}): give a "
                           "ShareGPT JSON, OpenAI chat JSONL or plain JSONL file, or \"builtin\"") from None
    return parse_text(text, path, fmt)


def from_setting(items, label: str = "prompts") -> list[dict]:
    """Records given directly (the module's ``prompts``): records, or bare strings."""
    if not isinstance(items, list) or not items:
        raise PromptsError(f"{label} must be a non-empty list of prompt records or strings")
    out = []
    for i, item in enumerate(items):
        if isinstance(item, str):
            out.append(_parse({"prompt": item}, f"{label}[{i}]", "prompt"))
        elif isinstance(item, dict) and isinstance(item.get("messages"), list):
            out.append(_parse(dict(item), f"{label}[{i}]", "chat"))
        else:
            raise PromptsError(f"{label}[{i}] is {type(item).__name__}: give a string or a {{\"messages\": [...]}} "
                               "record")
    return out


def order(records: list[dict], seed: int) -> list[dict]:
    """The records in the seed's order, the same for every mode and launch, with every category
    spread evenly over it: each category shuffled on its own, its j-th of n records placed at
    (j + u) / n, u a seeded offset per category in [0, 1). Any stretch of requests (a short
    window, a level's first requests) then holds the categories in their proportions, give or
    take one request each, instead of whatever a plain shuffle put first."""
    rng = random.Random(f"prompts:{seed}")
    groups: dict = {}
    for r in records:
        groups.setdefault(r.get("category") or "", []).append(r)
    keyed = []
    for name in sorted(groups):
        items = groups[name]
        rng.shuffle(items)
        offset = rng.random()
        keyed.extend(((j + offset) / len(items), name, j, r) for j, r in enumerate(items))
    keyed.sort(key=lambda item: item[:3])
    return [item[3] for item in keyed]


def flatten(messages: list[dict]) -> str:
    """The history as one text for completions and /generate (the rule in the module docstring)."""
    if len(messages) == 1 and messages[0]["role"] == "user":
        return messages[0]["content"]
    parts = [f"{m['role'].capitalize()}: {m['content']}" for m in messages]
    return "\n\n".join(parts) + "\n\nAssistant:"


def output_len_of(record: dict, lengths: str, cap: int) -> int:
    """Output tokens asked for one record: ``fixed``: cap; ``data``: the record's output_len, else
    ceil(reference reply words x 4/3), else cap; never above cap."""
    if lengths != "data":
        return cap
    if record.get("output_len"):
        return max(1, min(cap, record["output_len"]))
    if record.get("reply_words"):
        return max(1, min(cap, math.ceil(record["reply_words"] * TOKENS_PER_WORD)))
    return cap


def categories(records: list[dict]) -> list[str]:
    """The categories named, in first-seen order ("uncategorised" for records without one)."""
    seen: list[str] = []
    for r in records:
        name = r.get("category") or "uncategorised"
        if name not in seen:
            seen.append(name)
    return seen


def describe(records: list[dict], source: str, fmt: str) -> dict:
    """What the results say about the set: where from, format, how many, per category."""
    counts: dict = {}
    for r in records:
        name = r.get("category") or "uncategorised"
        counts[name] = counts.get(name, 0) + 1
    return {"source": source, "format": fmt, "count": len(records), "categories": counts,
            "multi_turn": sum(1 for r in records if len(r["messages"]) > 1)}
