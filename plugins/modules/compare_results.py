#!/usr/bin/python
# Copyright: specbench developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Documentation of the compare_results action plugin (the work runs on the controller)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: compare_results
short_description: Compare speculative modes against the baseline and render the A/B report
version_added: "0.1.0"
description:
  - Reads the results files of one run, C(<results_dir>/<run_id>/<host>/<mode>.json), as the bench_sweep role
    writes them, and for each host compares every speculative mode against the baseline mode.
  - Per level the speedup (speculative / baseline throughput), the per-stream decode speedup and the TPOT
    speedup, each with a 95% interval (delta method on the log scale over both sides' intervals).
  - Each level pays, loses, is unclear (its speedup interval straddles 1) or failed (a mode measured nothing);
    a level where the client or the engine was saturated is no evidence and is left out, named. Unclear and
    failed levels stay a region of their own (C(pays_then_unclear) and kin), never read as their neighbours.
  - The crossover concurrency where speculation stops paying, with its model-free 95% interval, the bracket
    between the last level that clearly pays and the first that clearly loses; the point inside it is a
    log-linear interpolation, labelled as an estimate.
  - A recommendation (speculate below concurrency N) and an SGLang C(--speculative-adaptive-config) table built
    from clear verdicts only (speculation off where the data cannot tell); every recommendation names the
    levels not measured at both ends.
  - Confounders first in the report (capacity settings that differ, a running-request cap reached, the client
    saturated, GPUs not clean, levels with errors, modes that failed).
  - Writes, per host, C(summary.json), C(summary.csv), C(report.md), C(report.html), C(adaptive-config.json),
    C(throughput.png), C(per-stream.png), C(speedup.png), C(latency.png), C(speedup-terms.png) (matplotlib, Agg),
    C(compare-run.json) (what the run recorded about each mode, so a later re-render keeps it); and for the run
    C(index.json), C(index.md) and C(index.html) across hosts.
  - C(report.html) is report.md as one self-contained page (Jinja2, autoescaped), verdict and recommendation
    first, the plots inline as PNG data URIs, no script and nothing fetched, so it opens offline (an AWX artifact,
    an e-mail); C(index.html) links each host's C(report.html).
  - Runs entirely on the controller (an action plugin); it never connects to a host and never changes a results
    file the benchmark wrote.
author:
  - specbench developers (!UNKNOWN)
extends_documentation_fragment:
  - specbench.core.attributes
options:
  results_dir:
    description: Folder holding one sub-folder per run id.
    type: path
    required: true
  run_id:
    description: The run to compare (a sub-folder of I(results_dir)).
    type: str
    required: true
  hosts:
    description:
      - Hosts to compare (sub-folders of the run). Default every sub-folder found.
      - A host named here with no folder and no outcome is listed in the index as having produced nothing.
    type: list
    elements: str
  baseline:
    description: The mode the others are held against.
    type: str
    default: baseline
  modes:
    description:
      - The modes compared, the baseline among them; the first other one gives the top-level crossover.
      - Default what the run recorded in C(compare-run.json), else every C(<mode>.json) found.
    type: list
    elements: str
  host_modes:
    description: Per host, the list of modes compared there (wins over I(modes)).
    type: dict
  outcomes:
    description:
      - What the run recorded, per host and mode, a dict of dicts of dicts with keys C(status), C(error),
        C(gpu_before), C(gpu_after); C(status) is C(ok), C(failed), C(skipped), C(teardown_failed), C(missing) or
        C(unreachable). Saved as C(compare-run.json).
      - Omitted (a re-render), the saved C(compare-run.json) of each host is used.
    type: dict
  plots:
    description: Render the PNG plots (needs matplotlib on the controller).
    type: bool
    default: true
  dpi:
    description: Resolution of the plots.
    type: int
    default: 100
  index:
    description: Write the fleet index C(index.json), C(index.md) and C(index.html) for the run.
    type: bool
    default: true
  output_match_min:
    description:
      - Least share (0 to 1) of the fixed prompts whose output tokens must match the baseline's exactly; a mode
        below it is a confounder named first in the report (its results' C(output_match), from the sweep).
    type: float
    default: 0.95
  traffic:
    description:
      - The traffic to weigh each mode's speedup by (summary C(traffic), a report section); unset, none.
      - A list of C({concurrency, share}) (shares normalised to sum to 1), or
        C({prometheus, start, end, step, query}) read on the controller through Prometheus's
        C(/api/v1/query_range) (default query C(sum(vllm:num_requests_running)) or
        C(sum(sglang:num_running_reqs)) by the results' engine), binned by whole running requests.
      - A Prometheus that cannot be read leaves the reports written, with the reason in their traffic section.
    type: raw
  slo:
    description:
      - "Latency targets, C({tpot_p99_ms: 50, ttft_p99_ms: 2000}) (C(<ttft|tpot|e2e>_<p50|p90|p99>_ms)): per mode the
        highest measured concurrency meeting every target, held family-wise, and the goodput per level (tokens/s of
        the requests meeting every target, with its interval) (summary C(slo), a report line and table, CSV columns).
        Empty, none."
    type: raw
    default: {}
  validate_only:
    description: Only check I(output_match_min), I(traffic) and I(slo) (the compare role's preflight), read and write nothing.
    type: bool
    default: false
  noise_floor_max_age_days:
    description:
      - Each host's launch-to-launch variation, measured by a run with several launches of a mode, is stored in
        C(<results_dir>/noise-floor/<host>.json) by run id; a later run whose levels were measured in one launch
        per mode holds it in its intervals. Runs older than this many days are left out of the floor; 0 stores
        and reads none.
    type: float
    default: 30.0
  plan_launches:
    description:
      - Only decide how many launches per mode a compare run makes on the one host in I(hosts) (the compare role's
        preflight), from C(compare_launches) - a number from 1 to 10 as given, or C(auto) - once when the host's
        noise floor (see I(noise_floor_max_age_days)) has at least I(noise_floor_min_df) degrees of freedom, else
        twice, A B B A, so that this run measures the launch-to-launch variation and stores it.
      - Returns C(launches), C(relaunch_levels), C(noise_floor), C(floor_path) and C(msg) (the reason); reads the
        floor file, writes nothing, renders no report.
    type: str
  noise_floor_min_df:
    description: With I(plan_launches=auto), the least degrees of freedom of the host's floor for one launch per mode.
    type: int
    default: 2
  plan_levels:
    description:
      - With I(plan_launches=auto), the sweep's levels (C(bench_concurrency)); with I(noise_floor_levels), they name
        the levels the second launches re-measure (C(relaunch_levels)).
    type: list
    elements: int
  noise_floor_levels:
    description:
      - With I(plan_launches=auto) on a host without a floor, how many of I(plan_levels) the second launch of each
        mode re-measures, spread over them from the lowest; the other levels are measured once per mode and hold
        the floor this run measures. 0 re-measures every level.
    type: int
    default: 2
  noise_floor_prior_sd:
    description:
      - The stated prior on a host's launch sd (relative), as strong as I(noise_floor_prior_df) degrees of freedom,
        combined with the host's own runs (weighted by their per-mode degrees of freedom); it keeps a floor from
        reading no launch variation from two launches.
    type: float
    default: 0.03
  noise_floor_prior_df:
    description: The degrees of freedom the prior weighs; 0 - no prior.
    type: int
    default: 2
  noise_floor_key:
    description:
      - With I(plan_launches), what the host's floor must have been measured on (C(engine), C(model), and any of
        C(engine_version), C(gpu), C(gpus), C(gpu_uuids), C(driver)); stored runs measured on something else are
        left out. Rendering keys the floor by what the results files name.
    type: dict
  max_launches:
    description:
      - Sequential launches - launches per mode a run may make in all, the planned ones included; the rounds added
        after the planned launches (C(<mode>@roundN.json)) and the looks' shares of the family-wise error rate
        follow from it. 0 - no round is added and the planned launches spend the whole error rate.
    type: int
    default: 0
  time_budget_s:
    description: With I(sequential_round), seconds all added rounds may take together; 0 - no limit but I(max_launches).
    type: float
    default: 0.0
  sequential_round:
    description:
      - Also plan the next added round per host (returned as C(sequential)), from every launch so far; unset, no plan.
    type: int
  refine:
    description:
      - Also plan the next refinement round per host (returned as C(refine)); unset, no plan.
      - C(<mode>@<tag>.json) files next to C(<mode>.json) are further runs of that mode (other launches,
        refinement rounds C(refine<N>)) and are always pooled with it.
    type: dict
    suboptions:
      ratio:
        description: Refine until every crossing's 95% interval is narrower than this (hi/lo).
        type: float
        default: 1.3
      budget_s:
        description: Stop when the next round's estimated seconds would overrun this, counting the refinement rounds already run.
        type: float
      max_levels:
        description: At most this many levels added per mode in all rounds together.
        type: int
        default: 4
attributes:
  check_mode:
    support: full
    details: Computes everything and returns it, writes no file.
  diff_mode:
    support: none
  facts:
    support: none
notes:
  - The maths lives in the package C(plugins/module_utils/specbench_compare/) (standard library only), the rendering in
    C(plugins/module_utils/report/render.py).
  - SGLang 0.5.23 reads C(--speculative-adaptive-config) as the path of a JSON file whose integer keys each hold
    an object with C(candidate_steps), a list of step counts; C(adaptive-config.json) is that file.
seealso:
  - module: specbench.core.bench_sweep
    description: >-
      C(playbooks/compare.yml) (C(ansible-playbook specbench.core.compare)) sweeps every mode on every host,
      then runs this.
"""

EXAMPLES = r"""
- name: Compare | Render the report of every host of a run
  specbench.core.compare_results:
    results_dir: "{{ specbench_results_dir }}"
    run_id: 20260227T182500Z
  register: compare

- name: Compare | Compare eagle3 and ngram against the baseline on two hosts
  specbench.core.compare_results:
    results_dir: /srv/specbench/results
    run_id: "{{ specbench_run_id }}"
    hosts: [gpu-node-1, gpu-node-2]
    modes: [baseline, eagle3, ngram]
    plots: false

- name: Compare | Decide the launches per mode (auto - two, A B B A, until this node has a noise floor, then one)
  specbench.core.compare_results:
    results_dir: "{{ specbench_results_dir }}"
    run_id: "{{ specbench_run_id }}"
    hosts: ["{{ inventory_hostname }}"]
    plan_launches: auto
  register: compare_launch_decision
"""

RETURN = r"""
hosts:
  description:
    - Per host, the compact summary (the full one is in summary.json), with C(report) and C(report_html) (the paths
      of report.md and report.html) and C(verdict) (one line - the host, INCOMPLETE where it is, the verdict's kind
      and the recommendation).
  returned: always
  type: dict
  sample:
    gpu-node-1:
      status: complete
      complete: true
      spec_mode: eagle3
      crossover_status: crosses
      crossover_concurrency: 1.31
      crossover_ci95: [1, 2]
      regions: [{from_concurrency: 1, to_concurrency: 1, verdict: pays, levels: 1},
                {from_concurrency: 2, to_concurrency: 10, verdict: loses, levels: 3}]
      speculate_ranges: [[1, 2]]
      failed_levels: []
      saturated_levels: []
      recommendation: Speculate (eagle3) below concurrency 2; from 2 concurrent requests run without speculation.
      speculate_below: 2
      adaptive_config: {"1": {"candidate_steps": [1, 3, 5, 7]}, "2": {"candidate_steps": [0]}}
      confounders: 0
      levels: [{concurrency: 1, speedup: 1.04, speedup_ci95: [1.02, 1.06], verdict: pays}]
      report: /srv/specbench/results/20260227T182500Z/gpu-node-1/report.md
      report_html: /srv/specbench/results/20260227T182500Z/gpu-node-1/report.html
      verdict: "gpu-node-1: crosses: Speculate (eagle3) below concurrency 2; from 2 concurrent requests run without
        speculation."
reports:
  description:
    - Per host, where its reports are and what they conclude - C(html) (report.html, self-contained), C(md)
      (report.md) and C(verdict) (the one line of I(hosts)); what the compare role hands AWX through set_stats.
  returned: always
  type: dict
  sample:
    gpu-node-1:
      html: /srv/specbench/results/20260227T182500Z/gpu-node-1/report.html
      md: /srv/specbench/results/20260227T182500Z/gpu-node-1/report.md
      verdict: "gpu-node-1: crosses: Speculate (eagle3) below concurrency 2; from 2 concurrent requests run without
        speculation."
summaries:
  description: Per host, the full summary as written to summary.json.
  returned: always
  type: dict
refine:
  description:
    - Per host, the next refinement round (with I(refine) set; else empty) - C(done), C(reason), C(levels)
      (to measure in both modes), C(new), C(repeat), C(why), C(widths) (hi/lo per crossing), C(cost_s),
      C(launches), C(spent_s), C(text).
  returned: always
  type: dict
sequential:
  description:
    - Per host, the next added round (with I(sequential_round); else empty) - C(done), C(levels) (mode to the levels it
      measures again), C(order) (the modes in launch order), C(candidates), C(estimate_s), C(text).
  returned: always
  type: dict
sequential_done:
  description: Whether no host has an added round to make (always true without I(sequential_round)).
  returned: always
  type: bool
index:
  description: The fleet index as written to index.json (null with I(index=false)).
  returned: always
  type: dict
files:
  description: Every file written (in check mode, that would be written).
  returned: always
  type: list
  elements: str
incomplete_hosts:
  description: Hosts whose comparison is incomplete or failed.
  returned: always
  type: list
  elements: str
run_dir:
  description: The run's folder.
  returned: always
  type: str
launches:
  description: With I(plan_launches), the launches per mode the run makes on the host.
  returned: with plan_launches
  type: int
  sample: 2
noise_floor:
  description:
    - With I(plan_launches), the host's noise floor - C(launch_sd) (relative sd of one launch, with the prior),
      C(launch_sd_data) (the runs' own), C(launch_sd_upper) (one-sided 95% bound), C(total_sd), C(df) (the prior's and
      the runs' per-mode degrees of freedom), C(df_data), C(df_levels), C(prior), C(key), C(runs) (the run ids
      pooled), C(oldest), C(max_age_days) - or null when it has none younger than the limit.
  returned: with plan_launches
  type: dict
relaunch_levels:
  description:
    - With I(plan_launches), the levels the launches after the first of each mode measure; empty - every level.
  returned: with plan_launches
  type: list
  elements: int
  sample: [1, 30]
floor_path:
  description: With I(plan_launches), the host's noise floor file.
  returned: with plan_launches
  type: str
  sample: /srv/specbench/results/noise-floor/gpu-node-1.json
warnings:
  description: Problems that did not stop the report (an unreadable results file, no matplotlib).
  returned: when any
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.specbench.core.plugins.module_utils.specbench_compare import ARGUMENT_SPEC


def main():
    # The options are declared here for the documentation's sake; the action plugin does the work.
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True, bypass_checks=True)
    module.fail_json(
        msg="specbench.core.compare_results runs on the controller through its action plugin; "
        "call it as a task (specbench.core.compare_results), not as a module on a host"
    )


if __name__ == "__main__":
    main()
