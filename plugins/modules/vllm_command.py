#!/usr/bin/python
# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_command
short_description: Render a vLLM launch command for one serving mode and check it against the installed vLLM
version_added: "0.1.0"
description:
  - "Renders C(python -m vllm.entrypoints.openai.api_server) for I(mode) from the modes table of role
    C(specbench.core.vllm_server): the capacity settings every mode shares (fairness), rendered
    identically for every mode, and the mode's speculative settings as C(--speculative-config) JSON."
  - "Refuses, before anything launches, naming the fix: an unknown mode, a capacity setting unset
    or set per mode through extra arguments, a model or draft-model folder that does not exist, a
    draft model whose vocabulary differs from the target's."
  - With I(check_flags), builds the argument parser of the vLLM installed for I(python) (what the
    api_server builds; no model loaded, no device touched) and fails on a flag it does not know or
    a speculative method it does not have.
author:
  - specbench contributors (!UNKNOWN)
extends_documentation_fragment:
  - specbench.core.attributes
options:
  mode:
    description: The serving mode to render (a key of I(modes)).
    type: str
    required: true
  modes:
    description: "The modes table: C({name: {speculative: {method: ..., ...}, required: {key: variable}}})."
    type: dict
    required: true
  settings:
    description: The capacity settings every mode shares, each C({name, flag, aliases, variable, kind, value, why}).
    type: list
    elements: dict
    default: []
  extra_args:
    description: Arguments for every mode (never a capacity setting or a flag the role renders).
    type: list
    elements: str
    default: []
  mode_extra_args:
    description: Arguments for one mode, by mode name (recorded as a confounder).
    type: dict
    default: {}
  model_path:
    description: The model (a folder on the node, or a model id on the Hub).
    type: str
    required: true
  served_model_name:
    description: Name reported in /v1/models (empty, vLLM's default, the model path).
    type: str
    default: ""
  host:
    description: Address the server binds.
    type: str
    default: 127.0.0.1
  port:
    description: Port the server binds.
    type: int
    required: true
  python:
    description: The interpreter of the venv holding vLLM (the server runs with it).
    type: str
    default: python3
  check_flags:
    description: Check every flag and the speculative method against the installed vLLM's parser.
    type: bool
    default: true
  timeout:
    description: Seconds allowed to import vLLM and build its parser.
    type: int
    default: 300
  parser:
    description:
      - "What an earlier check of this node's vLLM returned (its C(parser) result, for the same I(python)):
        the flags and the speculative method are checked against it without importing vLLM again."
      - Empty means ask the installed vLLM now.
    type: dict
    default: {}
  cache_dir:
    description:
      - "A folder on the node where the parser read from its vLLM is kept, one file per interpreter and vLLM
        install (the interpreter's real path, and the inode, size and modification time of vLLM's
        C(__init__.py); an upgrade or reinstall makes a new entry). A later run with the same vLLM reads it
        instead of importing vLLM again (seconds, a minute on a busy node); hosts probing at once wait for
        the first. Read only when it is this user's regular file. Unset, or a folder that cannot be
        written, probes every run."
      - "A parser from the cache does not parse the command itself (as for a second command in one run);
        the flags and the speculative method are still held to it."
    type: path
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  facts:
    support: none
"""

EXAMPLES = r"""
- name: Render and check the n-gram launch
  specbench.core.vllm_command:
    mode: ngram
    modes:
      baseline: {speculative: {}}
      ngram: {speculative: {method: ngram, num_speculative_tokens: 4, prompt_lookup_max: 4}}
    settings:
      - {name: max_num_seqs, flag: --max-num-seqs, aliases: [], variable: vllm_server_max_num_seqs,
         kind: count, value: 64}
    model_path: /models/tiny
    port: 8000
    python: /opt/vllm/bin/python
  register: cmd
"""

RETURN = r"""
argv:
  description:
    - The full command (interpreter, module, arguments).
    - With I(check_flags), the module is the entry module the installed vLLM has
      (C(vllm.entrypoints.openai.api_server), else C(vllm.entrypoints.launchers.api_server)).
  returned: success
  type: list
  elements: str
args:
  description: The arguments after C(-m vllm.entrypoints.openai.api_server).
  returned: success
  type: list
  elements: str
base_url:
  description: Where a client on the node reaches the server.
  returned: success
  type: str
settings:
  description: The capacity settings rendered, by name.
  returned: success
  type: dict
speculative_config:
  description: The mode's C(--speculative-config) (empty for plain decoding).
  returned: success
  type: dict
mode_flags:
  description: What the mode adds over the shared settings.
  returned: success
  type: dict
confounders:
  description: Differences between modes beyond speculation (per-mode extra arguments).
  returned: success
  type: list
  elements: str
origins:
  description: For each extra flag, the variable it came from.
  returned: success
  type: dict
version:
  description: The installed vLLM's version (null unless I(check_flags)).
  returned: success
  type: str
checked:
  description: Whether the flags were checked against the installed vLLM.
  returned: success
  type: bool
parser:
  description:
    - The installed vLLM's version, options and speculative methods (empty unless I(check_flags)).
    - "Where it keeps its parser (C(parser_module), C(vllm.entrypoints.launchers.cli_args) or else
      C(vllm.entrypoints.openai.cli_args)) and its server (C(entry_module))."
  returned: success
  type: dict
parser_cache:
  description: >-
    Where the parser came from when this task asked vLLM: C(hit) (I(cache_dir)), C(stored) (probed, then kept),
    C(off) (no I(cache_dir)) or why nothing was kept; null when it reused I(parser) or checked nothing.
  returned: success
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.specbench.core.plugins.module_utils.engines.common import CommandError, FlagError
from ansible_collections.specbench.core.plugins.module_utils.engines.vllm.command import render
from ansible_collections.specbench.core.plugins.module_utils.engines.vllm.flags import cached_probe, check, use_entry


def main():
    module = AnsibleModule(
        argument_spec={
            "mode": {"type": "str", "required": True},
            "modes": {"type": "dict", "required": True},
            "settings": {"type": "list", "elements": "dict", "default": []},
            "extra_args": {"type": "list", "elements": "str", "default": []},
            "mode_extra_args": {"type": "dict", "default": {}},
            "model_path": {"type": "str", "required": True},
            "served_model_name": {"type": "str", "default": ""},
            "host": {"type": "str", "default": "127.0.0.1"},
            "port": {"type": "int", "required": True},
            "python": {"type": "str", "default": "python3"},
            "check_flags": {"type": "bool", "default": True},
            "timeout": {"type": "int", "default": 300},
            "parser": {"type": "dict", "default": {}},
            "cache_dir": {"type": "path"},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        out = render(p)
    except CommandError as exc:
        module.fail_json(msg=str(exc))
    out.update(version=None, checked=False, parser={}, parser_cache=None)
    if p["check_flags"]:
        info = p["parser"]
        if not info.get("options"):
            try:
                info = cached_probe(p["python"], out["args"], timeout=p["timeout"], cache_dir=p["cache_dir"])
            except FlagError as exc:
                module.fail_json(msg=str(exc), **out)
        problems = check(out["args"], info, out["origins"], out["speculative_config"], f"on this node ({p['python']})")
        out = use_entry(out, info)
        parser = {k: info.get(k) for k in ("version", "options", "methods", "parser_module", "entry_module")}
        out.update(version=info.get("version"), checked=True, parser=parser, parser_cache=info.get("cache"))
        if problems:
            module.fail_json(msg=" ".join(problems), problems=problems, **out)
    module.exit_json(changed=False, **out)


if __name__ == "__main__":
    main()
