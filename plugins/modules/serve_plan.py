#!/usr/bin/python
# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: serve_plan
short_description: What playbooks/serve.yml serves on a host, from a run's results
version_added: "0.1.0"
description:
  - Reads C(<results_dir>/<run_id>/<host>/summary.json) and the run's results files (run it on the
    controller, with C(delegate_to) localhost) and returns what to serve there, from
    C(specbench_compare.serve_plan) - SGLang and the emulator follow the run's recommendation (the
    adaptive table where speculation pays only somewhere); vLLM serves the speculative mode that pays
    at the most levels with a C(num_speculative_tokens_per_batch_size) schedule, or the baseline.
  - Refuses a run that is not complete (a failed level, a mode that never finished; its
    C(incomplete_reasons) named), whatever is asked for.
  - With I(settings) (the capacity settings the launch role rendered), refuses any that differ from
    the ones the run measured, naming the variable to set (compare's fairness rule). With I(argv)
    (the command the launch role rendered), refuses any difference in what is served from the command
    the run measured for the same configuration (model, draft model, speculative algorithm, steps,
    top-k, draft tokens for SGLang; C(--model) and C(--speculative-config) less the schedule for vLLM;
    C(specbench_compare.identity_differences)).
  - Also returns the run's levels and its exact workload (the proof sweep repeats it, prompt set,
    lengths mode, categories, warmup, window and the rest), the emulator time scale the run measured at,
    and the host's current C(serve.json), if any. Changes nothing.
author:
  - specbench developers (!UNKNOWN)
extends_documentation_fragment:
  - specbench.core.attributes
options:
  results_dir:
    description: The results folder on the controller.
    type: path
    required: true
  run_id:
    description: The run to serve (a folder under I(results_dir)).
    type: str
    required: true
  host:
    description: The host's folder in the run.
    type: str
    required: true
  engine:
    description: The engine served (C(emulator), C(sglang) or C(vllm)); must be the one the run measured.
    type: str
    required: true
  serve_mode:
    description: Serve this mode instead of the derived one (one the run compared).
    type: str
  settings:
    description: The capacity settings about to be launched (C(<launch role>_command.settings)); checked when given.
    type: dict
  on_regression:
    description: The serve_on_regression of this play; a configuration proved under another one is not up to date.
    type: str
    choices: [rollback, keep, fail]
    default: rollback
  reprove_unclear:
    description:
      - How a configuration whose proof was only unclear (no level clearly slower) and that still runs is proved
        again. C(in_place) on the server that runs it, nothing relaunched (looks in place share that server's launch
        effect, so they add no launch of evidence); C(relaunch) relaunched, its references measured again, a launch
        of its own. A proof that failed otherwise (a level clearly slower) is always proved again in place.
    type: str
    choices: [in_place, relaunch]
    default: in_place
  argv:
    description: The command about to be launched (C(<launch role>_command.argv)); its identity flags are checked when given.
    type: list
    elements: str
  version:
    description:
      - The engine version installed on the node now (SGLang's or the emulator's from C(sglang_preflight), vLLM's
        from C(vllm_command)); refused when the run measured the mode to serve on another version. Empty skips the
        check (the node's version was not read).
    type: str
attributes:
  check_mode:
    support: full
    details: Read-only; runs the same in check mode.
  diff_mode:
    support: none
  facts:
    support: none
"""

EXAMPLES = r"""
- name: What to serve
  specbench.core.serve_plan:
    results_dir: results
    run_id: 20260227T182500Z
    host: "{{ inventory_hostname }}"
    engine: vllm
  delegate_to: localhost
  register: plan
"""

RETURN = r"""
plan:
  description: "C({mode, engine, schedule, adaptive_config, text}): the mode to launch, vLLM's schedule, SGLang's table."
  returned: success
  type: dict
levels:
  description: The run's concurrency levels.
  returned: success
  type: list
  elements: int
references:
  description:
    - The mode the proof holds the served configuration to at each level (C(specbench_compare.reference_modes)) -
      the plan's static counterpart where it speculates, the baseline where it does not; the best static mode
      the run measured there when C(serve_mode) was given.
  returned: success
  type: dict
  sample: {"1": eagle3, "64": baseline}
reference_modes:
  description: The modes in C(references), each once (the serve role measures them again before the served launch).
  returned: success
  type: list
  elements: str
  sample: [baseline, eagle3]
bench:
  description: >-
    The run's workload (C(specbench_compare.WORKLOAD_KEYS): api, model, input_len, output_len, warmup_s, window_s,
    target_rel_ci, window_max_s, window_min_requests, requests, repeats, batches, seed, prompts_file, prompts_format,
    lengths, categories, request_timeout_s, saturated_retries), as the run recorded it.
  returned: success
  type: dict
time_scale:
  description: The emulator time scale the run's servers ran at (null for a real engine or the emulator's default).
  returned: success
  type: float
current:
  description: The host's serve.json as it is now (empty when the run was never served there).
  returned: success
  type: dict
up_to_date:
  description: >-
    C({ok, why, in_place}) from C(specbench_compare.up_to_date): serve.json is this run's, still served, its
    configuration is the plan (or the plan's rollback), its proof verified, under the same serve_on_regression. The
    play also checks that the recorded server runs that command and answers. C(in_place) (not up to date, but
    serve.json's configuration is the plan itself: C(specbench_compare.proves_in_place)) says that a server running
    serve.json's command and answering is proved again where it runs, with nothing relaunched (not where its proof was
    only unclear and C(reprove_unclear) is C(relaunch)).
  returned: success
  type: dict
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.specbench.core.plugins.module_utils import specbench_compare as cmp


def _read(path: str):
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def fairness(results: dict, settings: dict) -> list[str]:
    """Each capacity setting about to be launched that differs from the run's (compare's rule)."""
    launched = cmp.capacity_settings({"server": {"settings": settings}})
    problems = []
    for mode, result in results.items():
        measured = cmp.capacity_settings({"server": {"settings": (result.get("server") or {}).get("settings") or {}}})
        for key in sorted(set(launched) & set(measured)):
            if str(launched[key]) != str(measured[key]):
                problems.append(f"{key} is {launched[key]} now, {measured[key]} when the run measured {mode}")
    return sorted(set(problems))


def main():
    module = AnsibleModule(
        argument_spec={
            "results_dir": {"type": "path", "required": True},
            "run_id": {"type": "str", "required": True},
            "host": {"type": "str", "required": True},
            "engine": {"type": "str", "required": True},
            "serve_mode": {"type": "str"},
            "settings": {"type": "dict"},
            "argv": {"type": "list", "elements": "str"},
            "version": {"type": "str"},
            "on_regression": {"type": "str", "choices": list(cmp.ON_REGRESSION), "default": "rollback"},
            "reprove_unclear": {"type": "str", "choices": ["in_place", "relaunch"], "default": "in_place"},
        },
        supports_check_mode=True,
    )
    p = module.params
    host_dir = os.path.join(p["results_dir"], p["run_id"], p["host"])
    path = os.path.join(host_dir, "summary.json")
    try:
        summary = _read(path)
    except (OSError, ValueError) as exc:
        module.fail_json(msg=f"no readable summary for run {p['run_id']} on {p['host']} ({path}: {exc}): give -e run_id= "
                             "of a compare.yml run that measured this host, or -e results_dir= where it is")
    warnings: list[str] = []
    results = cmp.load_host_results(host_dir, summary.get("modes"), warnings)
    engines = sorted({str(r.get("engine")) for r in results.values() if r.get("engine")})
    if engines and p["engine"] not in engines:
        module.fail_json(msg=f"run {p['run_id']} measured engine {', '.join(engines)} on {p['host']}, not {p['engine']}: "
                             f"serve it with -e engine={engines[0]}")
    if p["serve_mode"] and p["serve_mode"] not in (summary.get("modes") or []):
        module.fail_json(msg=f"serve_mode={p['serve_mode']} was not compared in run {p['run_id']} (compared: "
                             f"{', '.join(summary.get('modes') or [])}): pick one of those, or leave serve_mode unset")
    incomplete = cmp.incomplete_problems(summary)
    if incomplete:
        module.fail_json(msg=f"run {p['run_id']} is not complete on {p['host']}, so it is not served: "
                             + "; ".join(incomplete) + ". What it did not measure would be served unproven: "
                             "run compare.yml again (a complete run), then serve that run's id.")
    try:
        plan = cmp.serve_plan(summary, p["engine"], p["serve_mode"] or None)
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    if p["settings"] is not None:
        problems = fairness(results, p["settings"])
        if problems:
            module.fail_json(msg="the capacity settings differ from the ones the run measured: " + "; ".join(problems)
                                 + ". Serve with the run's settings (the same inventory and -e values as compare.yml), "
                                 "or measure again with compare.yml.")
    if p["argv"] is not None:
        problems = cmp.identity_differences(p["argv"], results, plan["mode"], p["engine"])
        if problems:
            hint = ""
            if plan["mode"].endswith("-adaptive") and any(x.startswith("--speculative-eagle-topk") for x in problems):
                hint = (f" SGLang's adaptive speculation runs top-k 1 only, so the run's table was built from "
                        f"{cmp.measured_mode(plan['mode'], results)} measured at another top-k: measure it at top-k 1 "
                        "(sglang_server_speculative_num_steps, sglang_server_speculative_eagle_topk: 1, "
                        "sglang_server_speculative_num_draft_tokens) with compare.yml, or serve a mode the run measured "
                        "as it ran (-e serve_mode=...).")
            module.fail_json(msg=f"{plan['mode']} would serve something other than what the run measured: "
                                 + "; ".join(problems) + ". Serve with the run's model and speculative settings "
                                 "(the same inventory and -e values as compare.yml), or measure these with compare.yml."
                                 + hint)
    if p["version"]:
        problem = cmp.version_difference(p["version"], results, plan["mode"], p["engine"])
        if problem:
            module.fail_json(msg=f"{plan['mode']} would serve something other than what the run measured: {problem}.")
    current = {}
    if os.path.isfile(os.path.join(host_dir, "serve.json")):
        try:
            current = _read(os.path.join(host_dir, "serve.json"))
        except (OSError, ValueError):
            warnings.append(f"{host_dir}/serve.json is not readable: served again")
    levels = sorted({lv["concurrency"] for r in results.values() for lv in r.get("levels") or []
                     if isinstance(lv, dict) and isinstance(lv.get("concurrency"), int)})
    bench = cmp.proof_workload(results, summary.get("baseline_mode") or cmp.BASELINE)
    fresh, why = cmp.up_to_date(current, p["run_id"], plan, p["on_regression"])
    in_place = not fresh and cmp.proves_in_place(current, p["run_id"], plan, p["reprove_unclear"])
    if not fresh and not in_place and cmp.proves_in_place(current, p["run_id"], plan):
        why += ("; it was only unclear, so it is relaunched with its references measured again, a launch of "
                "evidence more (serve_reprove_unclear=relaunch: looks in place share one launch effect)")
    references = cmp.reference_modes(summary, results, plan, levels, bool(p["serve_mode"]))
    # Warnings through AnsibleModule.warn (passing them to exit_json is deprecated in ansible-core 2.19).
    for text in warnings:
        module.warn(text)
    module.exit_json(changed=False, plan=plan, levels=levels, references=references,
                     reference_modes=sorted(set(references.values())), bench=bench, time_scale=cmp.run_time_scale(results),
                     current=current, up_to_date={"ok": fresh, "why": why, "in_place": in_place})


if __name__ == "__main__":
    main()
