# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
from __future__ import annotations


class ModuleDocFragment:
    """The attributes every specbench module documents; each module states its own support."""

    DOCUMENTATION = r"""
options: {}
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
  facts:
    description: Action returns an C(ansible_facts) dictionary that will update existing host facts.
"""
