# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""The OpenAI chat completions API (/v1/chat/completions)."""
from __future__ import annotations

from .openai import SCALE_TO_USAGE, base_body, fast, handle_event

__all__ = ["NAME", "PATH", "SCALE_TO_USAGE", "body", "fast", "handle"]

NAME = "chat"
PATH = "/v1/chat/completions"


def body(model: str, prompt, output_len: int) -> dict:
    """``prompt``: a text (one user turn) or a conversation's messages (its history, sent as such)."""
    out = base_body(model, output_len)
    out["messages"] = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
    return out


def text_of(choice: dict):
    """A chunk's text: the delta's content (and reasoning content, which is output too)."""
    delta = choice.get("delta") or {}
    text = delta.get("content")
    if delta.get("reasoning_content"):
        text = (text or "") + delta["reasoning_content"]
    return text


def handle(req, obj: dict, t: float) -> bool:
    return handle_event(req, obj, t, text_of)
