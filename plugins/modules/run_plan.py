#!/usr/bin/python
# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""Documentation of the run_plan action plugin (the work runs on the controller)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: run_plan
short_description: Print what a run will do and its expected wall time, before the first launch
version_added: "0.1.0"
description:
  - At the start of bench.yml and compare.yml, per host, the hosts, the modes, the launches in the order they run
    with each one's levels, the warm-up and window, the budget for added rounds, and the expected wall time with
    how it was estimated.
  - At the start of serve.yml's launches, per host, the configuration served, the references measured again (or
    not), the proof's levels, window and warm-up, what happens should the proof find it clearly slower, and the
    expected wall time (I(run_state=false), I(progress_dir) the host's C(serve/) folder).
  - The model load is the median of the node's last launches of the engine on record in I(results_dir) (their
    results files' C(server.ready_s)), else a stated default per engine (emulator 10 s, vLLM 120 s, SGLang 300 s).
  - The lines go to the playbook's output (so to ansible-runner's and AWX's job events) and, as one C(plan) record,
    to C(<results_dir>/<run_id>/progress.jsonl); the plan is returned as the fact C(specbench_plan), which role
    bench_sweep reads for the run's ETA in its live progress lines.
  - The play's first host writes the run's state, C(<results_dir>/<run_id>/run-state.json) (status, settings,
    attempts), which an interrupted sweep marks incomplete with the command that resumes it.
  - Runs in the controller's worker through its action plugin; nothing runs on a node.
author:
  - specbench developers (!UNKNOWN)
extends_documentation_fragment:
  - specbench.core.attributes
options:
  playbook:
    description: The playbook's name in the lines (bench, compare, serve).
    type: str
    required: true
  results_dir:
    description: The results folder (C(specbench_results_dir)); the plan record goes to its run's progress.jsonl.
    type: path
    required: true
  run_id:
    description: The run id (C(specbench_run_id)); its own launches are not read as the node's history.
    type: str
    required: true
  engine:
    description: The node's engine (emulator, sglang, vllm), for its launches on record and its default load time.
    type: str
    default: emulator
  hosts:
    description: The hosts the run targets.
    type: list
    elements: str
    default: []
  modes:
    description: The modes the run compares (or the one it benchmarks).
    type: list
    elements: str
    default: []
  launches:
    description:
      - The launches in the order they run, each C({mode, launch, levels}); C(load=false) for a sweep of a server that
        already runs (no model load counted).
    type: list
    elements: dict
    default: []
  warmup_s:
    description: The warm-up before each level's window (bench_warmup_s).
    type: float
    default: 0
  window_s:
    description: Each level's window (bench_window_s).
    type: float
    default: 0
  window_max_s:
    description: The adaptive window's maximum (bench_window_max_s), named in the plan when set; 0 names none.
    type: float
    default: 0
  repeats:
    description: Repeats per level (bench_repeats).
    type: int
    default: 1
  interval_s:
    description: Seconds between live progress lines (bench_progress_interval_s), 5 to 600.
    type: raw
    default: 10
  budget:
    description: The budget for launches added after the plan, as the plan names it (compare_max_launches,
      compare_time_budget_s, refinement); empty names none.
    type: str
    default: ""
  fingerprint:
    description:
      - The settings a resumed run must share with the run it resumes (modes, launches, levels, lengths, windows...),
        kept in C(<results_dir>/<run_id>/run-state.json) with the run's status (running, incomplete, complete) and
        its attempts.
    type: dict
    default: {}
  resume:
    description:
      - Resume the incomplete run I(run_id) (the playbooks' C(-e resume=true)) as its next attempt; fails, before
        anything is launched, when that run is missing, complete or was made with another I(fingerprint).
      - Without it, an incomplete run of the same I(run_id) is not overwritten (the error says to resume it).
    type: bool
    default: false
  complete:
    description: Mark the run complete in its run-state.json (the playbook's last step); nothing is printed.
    type: bool
    default: false
  run_state:
    description:
      - Write the run's state (run-state.json, attempts, resume) as bench.yml and compare.yml do. C(false) for a plan
        with no state of its own (serve.yml's, of a finished run) writes nothing but the plan record, and the
        launches of I(run_id) count as the node's history for the model load's estimate.
    type: bool
    default: true
  progress_dir:
    description: The folder whose progress.jsonl gets the plan record; empty is C(<results_dir>/<run_id>).
    type: path
    default: ""
  served:
    description: What serve.yml serves there (the configuration, its proof, the launcher), a line of the plan.
    type: str
    default: ""
attributes:
  check_mode:
    support: full
    details: Prints the plan and writes no record.
  diff_mode:
    support: none
    details: Nothing to diff.
  facts:
    support: full
    details: Sets C(specbench_plan).
seealso:
  - module: specbench.core.bench_sweep
"""

EXAMPLES = r"""
- name: Print the plan and its expected wall time
  specbench.core.run_plan:
    playbook: compare
    results_dir: "{{ specbench_results_dir }}"
    run_id: "{{ specbench_run_id }}"
    launches:
      - {mode: baseline, launch: 1, levels: [1, 10]}
      - {mode: eagle3, launch: 1, levels: [1, 10]}
    warmup_s: 30
    window_s: 60
"""

RETURN = r"""
plan:
  description: The launches with their expected seconds, the total and how it was estimated (also the fact C(specbench_plan)).
  returned: always
  type: dict
lines:
  description: The lines printed.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.specbench.core.plugins.module_utils.report.progress import PLAN_ARGUMENT_SPEC


def main():
    # The options are declared here for the documentation's sake; the action plugin does the work.
    module = AnsibleModule(argument_spec=PLAN_ARGUMENT_SPEC, supports_check_mode=True, bypass_checks=True)
    module.fail_json(
        msg="specbench.core.run_plan runs on the controller through its action plugin; "
        "call it as a task (specbench.core.run_plan), not as a module on a host"
    )


if __name__ == "__main__":
    main()
