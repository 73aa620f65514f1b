# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""The engines: how each serving engine is launched and checked, one folder per engine.

- ``common``: what every engine's adapter shares (flags and capacity settings read and checked the
  same way for every mode, the parser probe, the server's address, the post-launch failure's wording);
- ``sglang/``: SGLang's command (``command``), its flags held against the node's own parser
  (``flags``), the node preflight (``preflight``) and the post-launch check (``postlaunch``:
  the speculative settings ``/server_info`` reports);
- ``vllm/``: vLLM's command and ``--speculative-config`` (``command``), its flags (``flags``) and
  the post-launch check (``postlaunch``: the spec-decode counters on ``/metrics``);
- ``emulator_scale``: the SGLang emulator's time scale, chosen from its own model.

Imports: the standard library and this package only (a bottom layer; see docs/ARCHITECTURE.md and
tests/layout/test_module_utils_layers.py).
"""
