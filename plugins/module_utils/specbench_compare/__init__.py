# Copyright: specbench developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""specbench comparison maths: speedups with intervals, the verdict, the recommendation.

The one place where a speculative mode is held against the baseline. Standard library
only, so it runs on the controller (the action plugin compare_results), in tests, or by
hand. It reads the results files the bench_sweep role writes
(``<results_dir>/<run_id>/<host>/<mode>.json``, see docs/CONTRACTS.md) as plain dicts and
returns plain dicts (summary.json). Callers import from this package only
(``from ...module_utils.specbench_compare import summarize_host``); the parts:

- ``common``: the options (ARGUMENT_SPEC), CompareError, number checks, rounding;
- ``intervals``: the speedup's 95% interval (a ratio of two independent estimates) and the
  figures one level gives;
- ``verdict``: each level pays, loses, is unclear or failed (or is no evidence: saturated); the regions;
- ``crossover``: the whole-series status, the crossings and their model-free intervals (brackets);
- ``recommend``: where to speculate, and SGLang's adaptive table;
- ``confounders``: what makes the comparison less than fair;
- ``summarize``: one comparison, the host summary, the compact form the index carries;
- ``pooling``: several runs of one mode (compare_launches, refinement rounds) pooled per level;
- ``launch_noise``: launch-to-launch variation measured by relaunching, stored per node, held in
  the intervals of later runs measured in one launch per mode;
- ``refine``: the next refinement round;
- ``sequential``: levels left unclear measured again in added launches, the error spent over the looks;
- ``fleet``: one verdict per kind of node, the launches of every node of that kind pooled;
- ``output_match``: each mode's greedy outputs held against the baseline's;
- ``traffic``: the expected gain of a speedup series on a traffic mix; ``traffic_prometheus``:
  that mix read from Prometheus's running-requests history.
- ``schedule``: what serve.yml serves (the mode, vLLM's per-batch-size schedule);
- ``serve_proof``: the served configuration's confirmatory sweep held against the run;
  ``proof_rule``: what each level of that proof is held against (the static counterpart where the
  plan speculates, the baseline where it does not) and its family-wise verdicts.
- ``serve_guard``: what serve.yml may serve (a complete run, the measured command, the run's
  workload), when a running configuration is up to date, the rollback configuration, retired records.
"""

from __future__ import annotations

from .common import ARGUMENT_SPEC, BASELINE, BORROWED_NOTE, CI_METHOD, SCHEMA, CompareError, fmt_conc
from .confounders import capacity_settings, confounders, gpu_checks, gpu_facts, outcome_error, running_cap
from .crossover import ADD_LEVELS_RATIO, CROSSOVER_METHOD, crossover, interpolated_crossing
from .fleet import FLEET_METHOD, fleet_kinds, node_kind
from .intervals import borrow_ci, family_ci, level_figures, log_half_width, ratio_ci
from .launch_noise import LAUNCH_METHOD, relaunch_levels
from .launch_noise import estimate as launch_estimate
from .launch_noise import floor_file as launch_floor_file
from .launch_noise import floor_from as launch_floor_from
from .launch_noise import floor_key as launch_floor_key
from .launch_noise import floor_text as launch_floor_text
from .launch_noise import launch_terms as launch_noise_terms
from .launch_noise import node_floor as launch_node_floor
from .launch_noise import read_parts as launch_read_parts
from .launch_noise import widen as launch_widen
from .launch_noise import widen_proof as launch_widen_proof
from .output_match import OUTPUT_MATCH_METHOD, OUTPUT_MATCH_MIN, check_minimum, compare_outputs, output_match
from .pooling import (
    OWN_FILES,
    POOLED_METHOD,
    load_host_results,
    load_host_runs,
    pool_level,
    pool_runs,
    run_seconds,
    split_run_name,
)
from .proof_rule import combine_looks, family_proof_verdicts, proof_references, read_interval, static_counterpart
from .recommend import (
    SGLANG_DEFAULT_ADAPTIVE,
    adaptive_table,
    adaptive_table_for,
    recommendation,
    sglang_adaptive_config,
    speculate_ranges,
)
from .refine import refine_plan
from .schedule import (
    BASELINE_SERVED,
    SCHEDULE_RULE,
    schedule_words,
    serve_plan,
    served_series,
    static_choice,
    vllm_schedule,
)
from .sequential import (
    look_alphas,
    merge_looks,
    open_look_alpha,
    plan_round,
    planned_look_alpha,
    rounds_done,
    runs_at_look,
)
from .sequential import method_text as sequential_method_text
from .serve_guard import (
    ADAPTIVE_ALGORITHMS,
    RETIRED,
    SERVED,
    WORKLOAD_KEYS,
    adaptive_refusal,
    identity_differences,
    incomplete_problems,
    measured_mode,
    proof_workload,
    proves_in_place,
    retire,
    retire_others,
    rollback_plan,
    run_time_scale,
    same_configuration,
    unclear_only,
    up_to_date,
    version_difference,
)
from .serve_proof import (
    LOOKS_METHOD,
    ON_REGRESSION,
    apply_looks,
    best_static,
    check_unmoved,
    ignored_schedule,
    launch_dominated,
    look_alpha,
    look_record,
    next_look,
    offs_drafting,
    proof_rows,
    proof_verdict,
    read_looks,
    reference_modes,
    regression_action,
    rollback_mode,
    same_server_look,
    self_referenced,
    sequence_key,
    sequence_plan,
)
from .summarize import compact, compare_pair, draft_steps, mode_series, summarize_host, tracking
from .traffic import TRAFFIC_METHOD, TrafficError, parse_traffic, traffic_gain, traffic_gains
from .traffic_prometheus import bin_running, check_traffic_input, read_traffic, resolve_traffic
from .verdict import (
    FAILED,
    FAMILY_ALPHA,
    FAMILY_METHOD,
    LOSES,
    PAYS,
    SATURATED,
    STARTS,
    STOPS,
    UNCLEAR,
    family_z,
    level_failure,
    level_saturation,
    level_verdict,
    paying_runs,
    regions,
    series_status,
)

__all__ = [
    "ADAPTIVE_ALGORITHMS", "adaptive_refusal",
    "ADD_LEVELS_RATIO", "ARGUMENT_SPEC", "BASELINE", "BORROWED_NOTE", "CI_METHOD", "CROSSOVER_METHOD", "FAILED",
    "LOSES", "PAYS", "POOLED_METHOD", "SATURATED", "SCHEMA", "SGLANG_DEFAULT_ADAPTIVE", "STARTS", "STOPS", "UNCLEAR",
    "adaptive_table", "adaptive_table_for", "borrow_ci", "capacity_settings", "compact", "compare_pair",
    "confounders", "crossover", "draft_steps", "fmt_conc", "gpu_checks", "gpu_facts", "interpolated_crossing", "level_failure",
    "level_figures", "level_saturation", "level_verdict", "log_half_width", "mode_series", "outcome_error",
    "pool_level", "pool_runs", "ratio_ci", "recommendation", "refine_plan", "regions", "run_seconds", "running_cap",
    "series_status", "sglang_adaptive_config", "SCHEDULE_RULE", "schedule_words", "serve_plan", "static_choice", "vllm_schedule",
    "BASELINE_SERVED", "served_series",
    "RETIRED", "SERVED", "WORKLOAD_KEYS", "identity_differences", "incomplete_problems", "measured_mode",
    "proof_workload", "retire",
    "retire_others",
    "rollback_plan", "run_time_scale", "same_configuration", "up_to_date", "proves_in_place", "version_difference",
    "unclear_only",
    "ON_REGRESSION", "best_static", "ignored_schedule", "offs_drafting", "proof_rows", "proof_verdict", "reference_modes",
    "regression_action", "rollback_mode",
    "speculate_ranges", "split_run_name", "summarize_host", "tracking", "OWN_FILES", "load_host_results",
    "LAUNCH_METHOD", "launch_estimate", "launch_floor_file", "launch_floor_from", "launch_node_floor", "relaunch_levels",
    "launch_read_parts", "launch_widen", "launch_widen_proof", "launch_noise_terms", "family_ci", "FAMILY_METHOD",
    "FAMILY_ALPHA", "family_z", "paying_runs", "family_proof_verdicts", "proof_references", "static_counterpart",
    "CompareError", "OUTPUT_MATCH_METHOD", "OUTPUT_MATCH_MIN", "TRAFFIC_METHOD", "TrafficError", "bin_running",
    "check_minimum", "compare_outputs", "output_match", "parse_traffic", "read_traffic", "traffic_gain",
    "traffic_gains", "check_traffic_input", "resolve_traffic",
    "launch_floor_key", "launch_floor_text", "load_host_runs", "look_alphas", "merge_looks", "plan_round", "rounds_done",
    "runs_at_look", "sequential_method_text", "FLEET_METHOD", "fleet_kinds", "node_kind",
    "combine_looks", "read_interval", "open_look_alpha", "planned_look_alpha", "sequence_plan", "launch_dominated",
    "LOOKS_METHOD", "apply_looks", "look_alpha", "look_record",
    "next_look", "read_looks", "self_referenced", "sequence_key", "check_unmoved", "same_server_look",
]
