# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""The engines the client knows, each one module (sglang.py is the reference).

Adding an engine: a new module shaped like sglang.py, and its name in ENGINES below (an
explicit list: Ansible packs only the module_utils files a module imports by name).
"""
from __future__ import annotations

from . import sglang, vllm

ENGINES = (sglang, vllm)  # the order the probe asks them in
BY_NAME = {engine.NAME: engine for engine in ENGINES}
DEFAULT = sglang
DESCRIBED = ("version", "launch_command", "speculative_algorithm", "max_running_requests")


def for_server(server: dict):
    """The engine a probed server runs (SGLang unless the probe found another)."""
    return BY_NAME.get(server.get("engine") or "", DEFAULT)
