# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""The APIs the client speaks, one module each.

An API module names its PATH and gives ``body(model, prompt, output_len)`` (the request),
``handle(req, obj, t)`` (one streamed event into the request's times and token counts; False
for an error object), ``fast`` (a parse of a plain chunk straight from the text, or None) and
SCALE_TO_USAGE (whether per-chunk counts are estimates to scale to the server's total).
"""
from __future__ import annotations

from . import chat, completions, native

ADAPTERS = {api.NAME: api for api in (chat, completions, native)}
APIS = tuple(ADAPTERS)  # ("chat", "completions", "native")
