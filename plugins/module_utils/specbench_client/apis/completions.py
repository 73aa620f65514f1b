# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""The OpenAI completions API (/v1/completions)."""
from __future__ import annotations

from .openai import SCALE_TO_USAGE, base_body, fast, handle_event

__all__ = ["NAME", "PATH", "SCALE_TO_USAGE", "body", "fast", "handle"]

NAME = "completions"
PATH = "/v1/completions"


def body(model: str, prompt: str, output_len: int) -> dict:
    out = base_body(model, output_len)
    out["prompt"] = prompt
    return out


def text_of(choice: dict):
    return choice.get("text")


def handle(req, obj: dict, t: float) -> bool:
    return handle_event(req, obj, t, text_of)
