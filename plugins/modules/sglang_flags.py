#!/usr/bin/python
# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_flags
short_description: Check a launch command against the SGLang version installed on the node
version_added: "0.1.0"
description:
  - Builds the argument parser of the SGLang installed for I(python) (C(ServerArgs.add_cli_args),
    exactly what C(python -m sglang.launch_server) uses) or of the emulator, then checks that
    every flag of I(args) is one of its options and that the whole command parses.
  - "A flag the installed version does not know fails before anything launches, naming the flag,
    its replacement when I(renames) knows one (for example C(--cuda-graph-max-bs), gone from
    0.5.20, is C(--cuda-graph-max-bs-decode)), and the variable it came from."
  - Imports C(sglang.srt.server_args) only; no GPU, no CUDA initialisation, nothing started.
author:
  - specbench contributors (!UNKNOWN)
extends_documentation_fragment:
  - specbench.core.attributes
options:
  engine:
    description: C(sglang) checks SGLang's own parser; C(emulator) the emulator's.
    type: str
    choices: [sglang, emulator]
    required: true
  python:
    description: The interpreter to build the parser with (the one the server will run with).
    type: str
    default: python3
  emulator_path:
    description: The emulator folder on the node (engine C(emulator)).
    type: str
  args:
    description: The launch arguments (after C(-m sglang.launch_server) or the emulator folder).
    type: list
    elements: str
    required: true
  renames:
    description: "Known flag renames, each C({old, new, version}); read both ways."
    type: list
    elements: dict
    default: []
  origins:
    description: "For each flag, where it came from (a variable or a mode), to name in the error."
    type: dict
    default: {}
  require_version:
    description: Fail unless the installed version equals this (empty means any version).
    type: str
    default: ""
  timeout:
    description: Seconds allowed to import SGLang and build its parser.
    type: int
    default: 300
  missing_emulator_ok:
    description:
      - With engine C(emulator), succeed without checking (C(checked) false) when the emulator is not
        on the node yet, instead of failing. For a preflight that runs before the emulator is shipped.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    details: Read-only; runs the same in check mode.
  diff_mode:
    support: none
  facts:
    support: none
seealso:
  - module: specbench.core.sglang_command
"""

EXAMPLES = r"""
- name: Check the rendered flags against the node's SGLang
  specbench.core.sglang_flags:
    engine: sglang
    python: /opt/sglang/venv/bin/python
    args: "{{ launch_command.args }}"
    origins: "{{ launch_command.origins }}"
    renames:
      - {old: --cuda-graph-max-bs, new: --cuda-graph-max-bs-decode, version: "0.5.20"}
"""

RETURN = r"""
version:
  description:
    - The SGLang version the parser belongs to.
    - The emulator reports the version it emulates with a local label, e.g. C(0.5.23+specbench-emulator).
  returned: success
  type: str
  sample: "0.5.23"
options_count:
  description: How many option strings the parser has.
  returned: success
  type: int
  sample: 561
checked:
  description: Whether the flags were checked (false only with I(missing_emulator_ok) and no emulator).
  returned: success
  type: bool
flags:
  description: The flags checked.
  returned: success
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.specbench.core.plugins.module_utils.engines.common import FlagError, flags_in
from ansible_collections.specbench.core.plugins.module_utils.engines.sglang.flags import check, emulator_present, probe
from ansible_collections.specbench.core.plugins.module_utils.engines.sglang.versions import public_version


def main():
    module = AnsibleModule(
        argument_spec={
            "engine": {"type": "str", "choices": ["sglang", "emulator"], "required": True},
            "python": {"type": "str", "default": "python3"},
            "emulator_path": {"type": "str"},
            "args": {"type": "list", "elements": "str", "required": True},
            "renames": {"type": "list", "elements": "dict", "default": []},
            "origins": {"type": "dict", "default": {}},
            "require_version": {"type": "str", "default": ""},
            "timeout": {"type": "int", "default": 300},
            "missing_emulator_ok": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    p = module.params
    if p["engine"] == "emulator" and p["missing_emulator_ok"] and not emulator_present(p["emulator_path"]):
        module.exit_json(changed=False, checked=False, flags=[], version=None,
                         msg=f"the emulator is not at {p['emulator_path']} yet: its flags are checked before launch")
    try:
        info = probe(p["python"], p["engine"], p["emulator_path"], p["args"], timeout=p["timeout"])
    except FlagError as exc:
        module.fail_json(msg=str(exc))
    where = f"on this node ({p['python']})" if p["engine"] == "sglang" else f"in the emulator ({p['emulator_path']})"
    problems = check(p["args"], info, p["renames"], p["origins"], where)
    if p["require_version"] and public_version(info["version"]) != public_version(p["require_version"]):
        problems.append(f"SGLang {info['version']} {where} is not the required {p['require_version']} "
                        "(require_version).")
    result = {"version": info["version"], "options_count": len(info["options"]), "checked": True,
              "flags": flags_in(p["args"])}
    if problems:
        module.fail_json(msg=" ".join(problems), problems=problems, **result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
