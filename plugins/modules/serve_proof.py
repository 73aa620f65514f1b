#!/usr/bin/python
# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: serve_proof
short_description: Hold the served configuration's sweep against the run and write serve.json
version_added: "0.1.0"
description:
  - Run on the controller (with C(delegate_to) localhost) after the proof sweep of M(specbench.core.serve_plan)'s
    plan. At each level of the run, the served throughput over the best static mode's (or, for a
    rollback's own check, over I(reference)'s), with the ratio's 95% interval
    (C(specbench_compare.proof_rows); verdicts C(better), C(matches), C(worse), C(unclear)).
  - Writes C(<results_dir>/<run_id>/<host>/serve.json) at once (atomically), before anything else can
    fail, then returns what C(serve_on_regression) says to do when a level is clearly worse, and the
    configuration to roll back to (the run's best static mode, no schedule, no table; none when that is
    the configuration served). With C(keep), a clearly worse level is a warning on the console.
  - One port, one current claim - every other run's C(serve.json) on this host that still says it is
    served at the same address is retired (C(state=retired)), its proof kept.
  - >-
    Every proof of one configuration on one node (held to the same references) is a look of one sequence, kept in
    C(<results_dir>/<run_id>/<host>/serve-looks.json) (written first, atomically) and in C(serve.json)'s C(looks):
    after look k the looks are pooled (one log ratio per served launch, the launches' mean; looks in place share their
    server's launch effect, launches held to one reference measurement share its) and held at look k's share of the
    family-wise 5%, planned at the sequence's first look for I(planned_looks) looks (C(sequential.planned_look_alpha)),
    and each level's verdict reads the intersection of the pooled intervals after each look
    (C(specbench_compare.combine_looks)), so a relaunch adds evidence and a re-run never replaces it.
  - >-
    A static configuration held against its own measurement in the run (a rollback's check, or a level where it is
    its own reference, measured at another time) that reads clearly slower or faster says the node changed: the
    level reads unclear with C(node_changed), and no C(action) follows from it.
  - >-
    A proof in place (the server of an earlier look, nothing relaunched) is first held to that look: the same
    process serving the same configuration is its own yardstick, and a level whose rate moved clearly since says
    the node changed since its references were measured (C(moved_since_look)): that level of this look makes no
    claim and is not combined.
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
    description: The run served.
    type: str
    required: true
  host:
    description: The host's folder in the run.
    type: str
    required: true
  served_file:
    description: The proof sweep's results file (role bench_sweep's).
    type: path
    required: true
  plan:
    description: The plan served (M(specbench.core.serve_plan)'s C(plan)).
    type: dict
    required: true
  server:
    description: The launch record of the served server (the launch role's C(specbench_server) fact).
    type: dict
    required: true
  margin:
    description: C(matches) when the ratio's interval lies inside [1 - margin, 1 / (1 - margin)].
    type: float
    default: 0.1
  on_regression:
    description: What a clearly worse level leads to.
    type: str
    choices: [rollback, keep, fail]
    default: rollback
  reference:
    description: Hold the sweep against this mode of the run only (a rollback's own check).
    type: str
  attempt:
    description: The serve.json of the configuration rolled back from (kept under C(rolled_back_from)).
    type: dict
  asked_for:
    description: >-
      The plan was asked for with serve_mode (not derived from the run); it is then held to the best static mode at
      every level. Otherwise each level is held to the plan's own reference (C(specbench_compare.proof_references)),
      the static counterpart where the plan speculates, the baseline where it does not.
    type: bool
    default: false
  noise_floor_max_age_days:
    description:
      - The served sweep is one launch, its references other launches (measured just before it, I(references_dir),
        or by the compare run); the host's noise floor (C(<results_dir>/noise-floor/<host>.json), the runs younger
        than this many days) holds that launch-to-launch variation in every ratio's interval. 0 reads none (the
        proof then says it is not held).
    type: float
    default: 30.0
  references_dir:
    description:
      - A folder of results files (C(<mode>.json)) of the proof's references measured again on the node, each in a
        launch of its own just before the served launch (the serve role's C(serve_measure_references)). A
        reference mode found there is held to instead of the run's measurement of it, taken at another time under
        another load; one not found there (its launch failed) falls back to the run's, with a warning.
      - Unset, every reference is the run's measurement.
    type: path
  noise_floor_prior_sd:
    description: The stated prior on the node's launch sd (as compare.yml's C(compare_noise_floor_prior_sd)).
    type: float
    default: 0.03
  planned_looks:
    description:
      - The number of proofs (the first and its re-proofs) a new sequence of looks plans for; the family-wise 5% is
        spent over them (45% of it on the first, the rest but a tenth equally on the others), and every look beyond
        the plan spends from the tenth left (C(sequential.planned_look_alpha)).
      - Fixed at a sequence's first look and kept to its end (a different value later is a warning, never applied),
        since changing the plan between looks could spend more than the error rate.
    type: int
    default: 3
  noise_floor_prior_df:
    description: The prior's strength in degrees of freedom (as compare.yml's C(compare_noise_floor_prior_df)).
    type: int
    default: 2
attributes:
  check_mode:
    support: full
    details: Computes the verdicts, writes nothing.
  diff_mode:
    support: none
  facts:
    support: none
"""

EXAMPLES = r"""
- name: Hold the served sweep against the run
  specbench.core.serve_proof:
    results_dir: results
    run_id: 20260227T182500Z
    host: "{{ inventory_hostname }}"
    served_file: results/20260227T182500Z/node-a/serve/20260227T182500Z/node-a/eagle3-adaptive.json
    plan: "{{ serve_plan_result.plan }}"
    server: "{{ specbench_server }}"
  delegate_to: localhost
  register: proof
"""

RETURN = r"""
doc:
  description: What serve.json holds (docs/CONTRACTS.md, serve.json).
  returned: success
  type: dict
path:
  description: The serve.json written.
  returned: success
  type: str
verified:
  description: Every level better than or as fast as the reference.
  returned: success
  type: bool
action:
  description: rollback, keep or fail when a level is clearly worse; null otherwise.
  returned: success
  type: str
rollback_mode:
  description: The static mode to roll back to (fastest at the most levels of the run).
  returned: success
  type: str
rollback_plan:
  description: >-
    The configuration to roll back to (C(specbench_compare.rollback_plan)); null when the run has no static
    configuration other than the one served.
  returned: success
  type: dict
look:
  description: The number of this proof in its configuration's sequence (1 for the first).
  returned: success
  type: int
retired:
  description: The other runs whose serve.json on this host was retired (they claimed the same address).
  returned: success
  type: list
  elements: str
"""

import json
import os
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.specbench.core.plugins.module_utils import specbench_compare as cmp
from ansible_collections.specbench.core.plugins.module_utils.report import render as report

SCHEMA = "specbench.serve/1"


def main():
    module = AnsibleModule(
        argument_spec={
            "results_dir": {"type": "path", "required": True},
            "run_id": {"type": "str", "required": True},
            "host": {"type": "str", "required": True},
            "served_file": {"type": "path", "required": True},
            "plan": {"type": "dict", "required": True},
            "server": {"type": "dict", "required": True},
            "margin": {"type": "float", "default": 0.1},
            "on_regression": {"type": "str", "choices": list(cmp.ON_REGRESSION), "default": "rollback"},
            "reference": {"type": "str"},
            "attempt": {"type": "dict"},
            "asked_for": {"type": "bool", "default": False},
            "noise_floor_max_age_days": {"type": "float", "default": 30.0},
            "references_dir": {"type": "path"},
            "noise_floor_prior_sd": {"type": "float", "default": 0.03},
            "noise_floor_prior_df": {"type": "int", "default": 2},
            "planned_looks": {"type": "int", "default": 3},
        },
        supports_check_mode=True,
    )
    p = module.params
    if p["planned_looks"] < 1:
        module.fail_json(msg=f"planned_looks={p['planned_looks']}: a proof's sequence plans for 1 or more looks; set "
                             "serve_planned_looks to the proofs you mean to take of one configuration (3 by default)")
    host_dir = os.path.join(p["results_dir"], p["run_id"], p["host"])
    warnings: list[str] = []
    results = cmp.load_host_results(host_dir, None, warnings)
    try:
        with open(p["served_file"], encoding="utf-8") as fh:
            served = json.load(fh)
    except (OSError, ValueError) as exc:
        served = {"levels": []}
        warnings.append(f"the proof sweep left no readable results ({p['served_file']}: {exc}): every level unclear")
    references, summary, chosen = None, None, None
    levels = sorted({lv["concurrency"] for r in results.values() for lv in r.get("levels") or []
                     if isinstance(lv, dict) and isinstance(lv.get("concurrency"), int)})
    if not p["reference"] and not p["asked_for"]:
        try:
            with open(os.path.join(host_dir, "summary.json"), encoding="utf-8") as fh:
                summary = json.load(fh)
        except (OSError, ValueError) as exc:
            summary = None
            warnings.append(f"no readable summary.json in {host_dir} ({exc}): held to the best static mode instead")
        if summary:
            references = cmp.proof_references(summary, p["plan"], levels)
    if not p["reference"] and not references:
        # The best static mode at each level, as the run measured it (serve_plan's reference_modes): chosen from the
        # run's figures, so that a mode measured again reads against the run's choice, not a new one.
        chosen = cmp.reference_modes(None, results, p["plan"], levels, True)
    # The references measured again just before the served launch replace the run's measurement of those modes.
    held_to, fresh = results, {}
    if p["references_dir"]:
        fresh = cmp.load_host_results(p["references_dir"], None, warnings)
        wanted = {p["reference"]} if p["reference"] else set((references or chosen or {}).values())
        for mode in sorted(wanted - set(fresh)):
            warnings.append(f"{mode} was not measured again before the served launch (no results in "
                            f"{p['references_dir']}): held against the run's measurement of it, taken at another time")
        held_to = {**results, **fresh}
    # The served sweep is one launch, its references other launches (just before it, or the compare run's): the
    # node's noise floor (the compare run's own part included) holds that variation in every ratio.
    # Read only where it was measured on this node's engine, model and GPUs (the compare run's own key).
    floor = cmp.launch_node_floor(p["results_dir"], p["host"], p["noise_floor_max_age_days"], warnings,
                                  key=cmp.launch_floor_key(results), prior_sd=p["noise_floor_prior_sd"],
                                  prior_df=p["noise_floor_prior_df"])
    # This proof is one look of its configuration's sequence on this node: the earlier looks are read first.
    looks_path = os.path.join(host_dir, "serve-looks.json")
    try:
        store = cmp.read_looks(looks_path, warnings)
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    key = cmp.sequence_key(p["plan"], p["reference"], p["asked_for"])
    sequence = store["sequences"].get(key) or {"mode": p["plan"].get("mode"), "plan": p["plan"],
                                               "reference": p["reference"] or None, "looks": []}
    look = cmp.next_look(sequence)
    planned = cmp.sequence_plan(sequence, p["planned_looks"], warnings)
    server = p["server"]
    try:
        rows = cmp.proof_rows(served, held_to, p["margin"], p["reference"], references or chosen,
                              (summary or {}).get("baseline_mode") or cmp.BASELINE if references else cmp.BASELINE,
                              launch_floor=floor, measured_now=set(fresh), judge_plan=bool(references),
                              alpha=cmp.look_alpha(look, planned))
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    # A proof in place (the server of an earlier look): first check the node is as it was at that look.
    earlier = cmp.same_server_look(sequence, server)
    in_place = earlier is not None
    cmp.check_unmoved(rows, earlier, cmp.look_alpha(look, planned))
    sequence["looks"] = sequence["looks"] + [cmp.look_record(rows, look, now, server, in_place, floor, planned)]
    cmp.apply_looks(rows, sequence["looks"], p["margin"], p["plan"])
    store["sequences"][key] = sequence
    if not module.check_mode:
        report.write_atomic(looks_path, report.dump_json(store))
    verdict = cmp.proof_verdict(rows)
    action = cmp.regression_action(rows, p["on_regression"])
    if verdict["changed"] or verdict["disagree"]:
        warnings.append(f"{p['plan'].get('mode')}: {verdict['text'].split(': ', 1)[-1]}")
    doc = {
        "schema": SCHEMA,
        "run_id": p["run_id"],
        "host": p["host"],
        "mode": p["plan"].get("mode"),
        "engine": p["plan"].get("engine"),
        "plan": p["plan"],
        "launch_command": server.get("command"),
        "base_url": server.get("base_url"),
        "service": {"launcher": server.get("launcher"), "unit": server.get("unit"), "pid": server.get("pid"),
                    "starttime": server.get("starttime"), "log_path": server.get("log_path")},
        "reference": p["reference"] or ("the plan's own reference at each level (its static counterpart where it "
                                        "speculates, the baseline where it does not)" if references
                                        else "best static mode"),
        "reference_measured": (
            f"again on this node, each in a launch of its own just before the served launch: "
            f"{', '.join(sorted(fresh))}" + ("; the others as the compare run measured them"
                                             if any(not r.get("reference_now") for r in rows
                                                    if r.get("best_static_mode")) else "")
            if fresh else "as the compare run measured them (another time, another load)"),
        "margin": p["margin"],
        "launch_variation": {"floor": floor, "held": bool(floor),
                             "widened": [r["concurrency"] for r in rows if r.get("ratio_ci95_window")],
                             "text": (f"held: the node's noise floor, sd {100 * floor['launch_sd']:.1f}% per launch on "
                                      f"{floor['df']} degrees of freedom, in every ratio" if floor else
                                      "NOT held: this node has no noise floor, so a ratio's interval holds the two "
                                      "windows alone; a launch-to-launch difference may read as a regression")},
        "levels": rows,
        "sequence": {"key": key, "look": look, "looks": len(sequence["looks"]), "planned_looks": planned,
                     "file": os.path.basename(looks_path),
                     "method": cmp.LOOKS_METHOD},
        "looks": sequence["looks"],
        "node_changed": verdict["changed"],
        "looks_disagree": verdict["disagree"],
        "verified": verdict["verified"],
        "text": verdict["text"],
        "on_regression": p["on_regression"],
        "action": action,
        "proof_file": os.path.relpath(p["served_file"], host_dir),
        "state": cmp.SERVED,
        "written_at": now,
    }
    if p["attempt"]:
        doc["rolled_back_from"] = p["attempt"]
        doc["rollback"] = {"from": p["attempt"].get("mode"), "to": doc["mode"],
                           "text": f"{p['attempt'].get('mode')} was clearly slower than its reference at "
                                   f"C={', '.join(map(str, p['attempt'].get('worse') or []))}; serving {doc['mode']} "
                                   "as the run measured it (static: no schedule, no adaptive table; the static mode "
                                   "fastest at the most levels of the run), held against its own measurement"}
    doc["worse"] = verdict["worse"]
    doc["unclear"] = verdict["unclear"]
    doc["ignored_schedule"] = verdict["ignored"]
    path = os.path.join(host_dir, "serve.json")
    if not module.check_mode:
        report.write_atomic(path, report.dump_json(doc))
    retired = cmp.retire_others(p["results_dir"], p["host"], doc["base_url"], p["run_id"],
                                f"replaced by run {p['run_id']} ({doc['mode']}) at {doc['base_url']}",
                                write=not module.check_mode)
    if action == "keep":
        warnings.append(f"{doc['mode']} is clearly slower than its reference at C="
                        f"{', '.join(map(str, verdict['worse']))} and keeps running (serve_on_regression: keep); "
                        f"see {path}")
    static = cmp.rollback_mode(results)
    # Warnings through AnsibleModule.warn (passing them to exit_json is deprecated in ansible-core 2.19).
    for text in warnings:
        module.warn(text)
    module.exit_json(changed=not module.check_mode, doc=doc, path=path, verified=verdict["verified"], action=action,
                     look=look,
                     rollback_mode=static, rollback_plan=cmp.rollback_plan(static, p["plan"]), retired=retired)


if __name__ == "__main__":
    main()
