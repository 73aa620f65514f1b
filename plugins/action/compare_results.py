# Copyright: specbench developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Action plugin compare_results: the A/B comparison and report, on the controller.

See plugins/modules/compare_results.py for the documentation. Reads the results files,
calls specbench_compare for the maths and specbench_report for the files.
"""

from __future__ import annotations

import datetime
import json
import os
import re

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.specbench.core.plugins.module_utils.report import html as report_html
from ansible_collections.specbench.core.plugins.module_utils.report import index as fleet_index
from ansible_collections.specbench.core.plugins.module_utils.report import progress as live
from ansible_collections.specbench.core.plugins.module_utils.report import render as report
from ansible_collections.specbench.core.plugins.module_utils.report.sections import verdict_line
from ansible_collections.specbench.core.plugins.module_utils.specbench_compare import (
    ARGUMENT_SPEC,
    CompareError,
    TrafficError,
    check_minimum,
    check_traffic_input,
    compact,
    fleet_kinds,
    launch_estimate,
    launch_floor_file,
    launch_floor_from,
    launch_floor_key,
    launch_node_floor,
    launch_read_parts,
    load_host_runs,
    look_alphas,
    plan_round,
    pool_runs,
    refine_plan,
    relaunch_levels,
    resolve_traffic,
    rounds_done,
    runs_at_look,
    summarize_host,
)
from ansible_collections.specbench.core.plugins.module_utils.specbench_compare.slo import parse_slo

SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@:-]*$")
OUTCOME_STATUSES = ("ok", "failed", "skipped", "teardown_failed", "missing", "unreachable")


def _load_json(path: str):
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        del validation
        check = bool(self._task.check_mode)
        warnings: list[str] = []
        try:
            match_min = check_minimum(args["output_match_min"])
            check_traffic_input(args["traffic"])
            slo = parse_slo(args["slo"])
        except ValueError as exc:  # TrafficError and SloError are ones
            raise AnsibleActionFail(str(exc)) from exc
        if args["validate_only"]:
            result.update(changed=False, msg="compare_output_match_min, compare_traffic and compare_slo are valid")
            return result
        self._check_floor_args(args)
        if args["plan_launches"] is not None:
            return self._plan_launches(result, args, warnings)
        traffic_by_engine: dict = {}
        run_id = args["run_id"].strip()
        if not run_id or not SAFE_NAME.match(run_id) or run_id in (".", ".."):
            raise AnsibleActionFail(
                f"run_id {args['run_id']!r} is not a folder name: give the run id of a compare or bench run, "
                "e.g. -e run_id=20260227T182500Z (letters, digits, . _ - @ :)"
            )
        results_dir = os.path.abspath(os.path.expanduser(args["results_dir"]))
        run_dir = os.path.join(results_dir, run_id)
        outcomes_arg = args["outcomes"]
        if not os.path.isdir(run_dir) and not outcomes_arg:
            runs = []
            if os.path.isdir(results_dir):
                runs = sorted(n for n in os.listdir(results_dir) if os.path.isdir(os.path.join(results_dir, n)))
            hint = f"runs there: {', '.join(runs[-10:])}" if runs else "that folder holds no run"
            raise AnsibleActionFail(
                f"no results for run {run_id} in {results_dir} ({hint}): give -e run_id= of an existing run, "
                "or -e results_dir= where its results are"
            )
        if args["dpi"] < 20 or args["dpi"] > 600:
            raise AnsibleActionFail(f"dpi must be between 20 and 600 (got {args['dpi']})")
        baseline = args["baseline"]
        modes_arg = args["modes"]
        if modes_arg is not None:
            if len(modes_arg) < 2 or baseline not in modes_arg or len(set(modes_arg)) != len(modes_arg):
                raise AnsibleActionFail(
                    f"modes must list the baseline {baseline!r} and at least one other mode, each once "
                    f"(got {modes_arg}); e.g. [baseline, eagle3]"
                )
        for host, per_mode in (outcomes_arg or {}).items():
            if not isinstance(per_mode, dict):
                raise AnsibleActionFail(f"outcomes[{host!r}] must map modes to their outcome (got {per_mode!r})")
            for mode, outcome in per_mode.items():
                status = (outcome or {}).get("status") if isinstance(outcome, dict) else None
                if status not in OUTCOME_STATUSES:
                    raise AnsibleActionFail(
                        f"outcomes[{host!r}][{mode!r}].status must be one of {', '.join(OUTCOME_STATUSES)} (got {status!r})"
                    )

        existing = []
        if os.path.isdir(run_dir):
            existing = sorted(n for n in os.listdir(run_dir) if os.path.isdir(os.path.join(run_dir, n)))
        hosts = list(args["hosts"]) if args["hosts"] is not None else sorted(set(existing) | set(outcomes_arg or {}))
        for host in hosts:
            if not SAFE_NAME.match(host) or host in (".", ".."):
                raise AnsibleActionFail(f"host {host!r} cannot name a results folder")

        files: list[str] = []
        changed_files: list[str] = []
        summaries: dict = {}
        refine_plans: dict = {}
        sequential_plans: dict = {}
        fleet_hosts: dict = {}
        absent: dict = {}
        for host in hosts:
            host_dir = os.path.join(run_dir, host)
            saved_path = os.path.join(host_dir, "compare-run.json")
            saved = {}
            if os.path.isfile(saved_path):
                try:
                    saved = _load_json(saved_path)
                except (OSError, ValueError) as exc:
                    warnings.append(f"{saved_path}: not readable ({exc}); the run's record of failed modes is lost")
            outcomes = (outcomes_arg or {}).get(host)
            if outcomes is None:
                outcomes = saved.get("outcomes") or {}
            modes = (args["host_modes"] or {}).get(host) or modes_arg or saved.get("modes")
            if modes is not None and (not isinstance(modes, list) or baseline not in modes):
                raise AnsibleActionFail(
                    f"{host}: the modes compared must be a list with the baseline {baseline!r} in it (got {modes!r})"
                )
            host_runs = load_host_runs(host_dir, modes, warnings)
            host_results = {mode: pool_runs(found) for mode, found in host_runs.items()}
            if not host_results and not outcomes:
                absent[host] = (
                    "no results: the host was unreachable or failed before any mode ran"
                    if host in (outcomes_arg or {}) or args["hosts"] is not None
                    else "no results files in its folder"
                )
                continue
            if modes is None:
                modes = [baseline] + sorted((set(host_results) | set(outcomes)) - {baseline})
            traffic = None
            if args["traffic"] not in (None, "", [], {}):
                engine = next((r.get("engine") for r in host_results.values() if r.get("engine")), "sglang")
                if engine not in traffic_by_engine:
                    try:  # read once per engine (the default query names its metric)
                        traffic_by_engine[engine] = resolve_traffic(args["traffic"], engine)
                    except TrafficError as exc:  # the reports are still written, saying why
                        warnings.append(str(exc))
                        traffic_by_engine[engine] = {"error": str(exc)}
                traffic = traffic_by_engine[engine]
            floor = self._noise_floor(results_dir, host, run_id, host_results, args, check, warnings)
            if outcomes_arg is None and isinstance(saved.get("max_launches"), int):
                # A re-render (report.yml) spends the error rate as the run did, whatever its own default.
                args = dict(args, max_launches=saved["max_launches"])
            looks, alphas, rounds = self._looks(results_dir, host, run_id, host_runs, baseline, args, warnings)
            try:
                summary = summarize_host(host_results, host, run_id, baseline, list(modes), outcomes,
                                         output_match_min=match_min, traffic=traffic, launch_floor=floor,
                                         alpha=alphas[len(looks)], looks=looks if rounds else None, slo=slo)
            except CompareError as exc:
                raise AnsibleActionFail(f"{host}: {exc}") from exc
            # A resumed run: which levels of each results file came from which attempt (the report's "Attempts").
            summary["attempts"] = live.attempts_of(host_runs)
            summary["sequential_budget"] = {"max_launches": args["max_launches"], "rounds": rounds,
                                            "time_budget_s": args["time_budget_s"], "alphas": alphas,
                                            "rounds_done": len(looks)}
            if rounds:
                # The plan for the next round: made before it (sequential_round), or said as why the run stopped.
                plan = self._sequential(summary, args, host_results, baseline, len(looks) + 1, rounds)
                summary["sequential_stop"] = plan["text"] if plan["done"] else (
                    f"stopped before its added rounds were all made: the next would have been {plan['text']}")
                if args["sequential_round"] is not None:
                    sequential_plans[host] = plan
            served_path = os.path.join(host_dir, "serve.json")
            if os.path.isfile(served_path):  # playbooks/serve.yml's proof: the report's "Served" section
                try:
                    summary["served"] = _load_json(served_path)
                except (OSError, ValueError) as exc:
                    warnings.append(f"{served_path}: not readable ({exc}); the report leaves out what was served")
            plots = {}
            if args["plots"] and not check:
                try:
                    written = []
                    plots = report.render_plots(summary, host_dir, dpi=args["dpi"], changed=written)
                    changed_files.extend(os.path.join(host_dir, name) for name in written)
                except ImportError as exc:
                    warnings.append(f"no plots for {host}: matplotlib is missing on the controller ({exc}); "
                                    "pip install -r requirements.txt")
            elif args["plots"]:
                plots = dict(report.PLOTS)
            summary["files"] = {"report": "report.md", "html": "report.html", "csv": "summary.csv", "plots": plots}
            if summary.get("adaptive_config"):
                summary["files"]["adaptive_config"] = "adaptive-config.json"
                summary["files"]["adaptive_vars"] = "adaptive-vars.json"
            markdown = report.render_markdown(summary, plots)
            outputs = {
                "summary.json": report.dump_json(summary),
                "summary.csv": report.render_csv(summary),
                "report.md": markdown,
                # The same report, self-contained (plots inline): rendered from report.md's text and the summary.
                "report.html": report_html.render_html(summary, markdown, self._images(host_dir, plots, check),
                                                       report.PLOT_TITLES),
            }
            if summary.get("adaptive_config"):
                outputs["adaptive-config.json"] = report.adaptive_config_json(summary["adaptive_config"])
                outputs["adaptive-vars.json"] = report.dump_json({"sglang_server_adaptive_config": summary["adaptive_config"]})
            if outcomes_arg is not None and host in outcomes_arg:
                outputs["compare-run.json"] = report.dump_json(
                    {"run_id": run_id, "host": host, "baseline": baseline, "modes": list(modes), "outcomes": outcomes,
                     "max_launches": args["max_launches"]}
                )
            for name, text in outputs.items():
                path = os.path.join(host_dir, name)
                if not check and report.write_if_changed(path, text):
                    changed_files.append(path)
                files.append(path)
            files.extend(os.path.join(host_dir, name) for name in plots.values())
            summaries[host] = summary
            fleet_hosts[host] = {"results": host_results, "comparisons": summary.get("comparisons") or {},
                                 "modes": list(modes), "complete": bool(summary.get("complete"))}
            if args["refine"]:
                refine_plans[host] = self._refine(summary, args["refine"], host_results)

        index = None
        if args["index"]:
            index = fleet_index.build_index(run_id, summaries, absent, fleet_kinds(fleet_hosts, baseline))
            for name, text in (("index.json", report.dump_json(index)), ("index.md", fleet_index.render_index_md(index)),
                               ("index.html", report_html.render_index_html(index))):
                path = os.path.join(run_dir, name)
                if not check and report.write_if_changed(path, text):
                    changed_files.append(path)
                files.append(path)

        compact_hosts = {}
        for host, summary in summaries.items():
            entry = compact(summary)
            entry["report"] = os.path.join(run_dir, host, "report.md")
            entry["report_html"] = os.path.join(run_dir, host, "report.html")
            entry["verdict"] = verdict_line(summary)
            compact_hosts[host] = entry
        incomplete = sorted([h for h, s in summaries.items() if not s["complete"]] + list(absent))
        result.update(
            changed=bool(changed_files) if not check else bool(files),
            changed_files=changed_files,
            hosts=compact_hosts,
            reports={host: {"html": h["report_html"], "md": h["report"], "verdict": h["verdict"]}
                     for host, h in compact_hosts.items()},
            summaries=summaries,
            index=index,
            files=files,
            run_dir=run_dir,
            incomplete_hosts=incomplete,
            refine=refine_plans,
            sequential=sequential_plans,
            sequential_done=all(plan.get("done") for plan in sequential_plans.values()),
        )
        if absent:
            result["absent_hosts"] = absent
        for text in warnings:
            self._display.warning(text)
        if warnings:
            result["warnings"] = warnings
        verb = "would write" if check else "wrote"
        result["msg"] = (
            f"{verb} the A/B report of {len(summaries)} host(s) in {run_dir}"
            + (f"; incomplete: {', '.join(incomplete)}" if incomplete else "")
        )
        return result

    @staticmethod
    def _images(host_dir: str, plots: dict, check: bool) -> dict:
        """The plots just written, as bytes for report.html (none in check mode: nothing was drawn)."""
        images = {}
        for kind, name in ({} if check else plots).items():
            try:
                with open(os.path.join(host_dir, name), "rb") as fh:
                    images[kind] = fh.read()
            except OSError:
                continue
        return images

    def _plan_launches(self, result: dict, args: dict, warnings: list[str]) -> dict:
        """How many launches per mode this run makes on one host (compare_launches): a number as given; ``auto``,
        one while the host's noise floor (launch_noise) is fresh and has ``noise_floor_min_df`` degrees of
        freedom, else two (A B B A) that measure it. Reads the floor file only, writes nothing."""
        want = str(args["plan_launches"]).strip().lower()
        hosts = args["hosts"] or []
        if len(hosts) != 1 or not SAFE_NAME.match(hosts[0]) or hosts[0] in (".", ".."):
            raise AnsibleActionFail(f"plan_launches needs one host that can name a results folder (got {hosts!r})")
        if want != "auto" and not (want.isdigit() and 1 <= int(want) <= 10):
            raise AnsibleActionFail(
                f"compare_launches must be auto or a whole number from 1 to 10 (got {args['plan_launches']!r}): auto "
                "launches each mode twice (A B B A) until the node has a noise floor, then once")
        min_df = args["noise_floor_min_df"]
        if min_df < 1:
            raise AnsibleActionFail(f"compare_noise_floor_min_df must be 1 or more (got {min_df}), e.g. 2: one run "
                                    "of two launches of two modes")
        floor_levels = args["noise_floor_levels"]
        if floor_levels < 0:
            raise AnsibleActionFail(f"compare_noise_floor_levels must be 0 or more (got {floor_levels}), e.g. 2: the "
                                    "levels a run without a floor measures in a second launch of each mode (0: all)")
        host, max_age = hosts[0], args["noise_floor_max_age_days"]
        results_dir = os.path.abspath(os.path.expanduser(args["results_dir"]))
        path = launch_floor_file(results_dir, host)
        floor = launch_node_floor(results_dir, host, max_age, warnings, key=args["noise_floor_key"] or None,
                                  prior_sd=args["noise_floor_prior_sd"], prior_df=args["noise_floor_prior_df"])
        again: list[int] = []
        if want != "auto":
            launches, why = int(want), f"compare_launches: {want}"
        elif floor and floor.get("df_data", floor["df"]) >= min_df:
            launches = 1
            why = (f"compare_launches auto: one launch per mode; {host}'s noise floor (launch sd "
                   f"{100 * floor['launch_sd']:.1f}%, {floor.get('df_data', floor['df'])} degrees of freedom from "
                   f"{len(floor['runs'])} run(s) "
                   f"younger than {max_age:g} days, {path}) holds launch-to-launch variation in the intervals")
        else:
            launches = 2
            if max_age <= 0:
                lack = "noise floors are off (compare_noise_floor_max_age_days: 0)"
            elif floor:
                lack = (f"{host}'s noise floor has {floor.get('df_data', floor['df'])} degrees of freedom, fewer than "
                        f"compare_noise_floor_min_df ({min_df})")
            else:
                lack = f"{host} has no noise floor younger than {max_age:g} days ({path})"
            levels = sorted({int(c) for c in args["plan_levels"] or []})
            again = relaunch_levels(levels, floor_levels) if levels else []
            if again and len(again) < len(levels):
                second = (f"; the second launches re-measure C={', '.join(map(str, again))} only "
                          f"(compare_noise_floor_levels: {floor_levels}), the other levels hold that floor")
            else:
                again, second = [], ""
            why = (f"compare_launches auto: two launches per mode, A B B A: {lack}; this run measures "
                   "launch-to-launch variation" + (" and stores it as the node's floor" if max_age > 0 else "")
                   + second)
        for text in warnings:
            self._display.warning(text)
        result.update(changed=False, launches=launches, relaunch_levels=again, noise_floor=floor, floor_path=path,
                      msg=why)
        if warnings:
            result["warnings"] = warnings
        return result

    @staticmethod
    def _check_floor_args(args: dict) -> None:
        """The floor's prior and the sequential budget, checked before anything is read or written."""
        sd, df = args["noise_floor_prior_sd"], args["noise_floor_prior_df"]
        if not 0 <= sd <= 0.5:
            raise AnsibleActionFail(f"compare_noise_floor_prior_sd must be a relative sd from 0 to 0.5 (got {sd}), e.g. "
                                    "0.03: a launch moves a level's rate by 3% until the node's own runs say otherwise")
        if df < 0 or (df > 0 and sd <= 0):
            raise AnsibleActionFail(f"compare_noise_floor_prior_df must be 0 (no prior) or more, with a prior sd above 0 "
                                    f"(got df {df}, sd {sd}), e.g. 2: the prior weighs as much as one A B B A run")
        if args["max_launches"] < 0 or args["max_launches"] > 20:
            raise AnsibleActionFail(f"compare_max_launches must be a whole number from 0 to 20 (got {args['max_launches']}):"
                                    " the launches per mode a run may make, added rounds included; 0 adds none")
        if args["time_budget_s"] < 0:
            raise AnsibleActionFail(f"compare_time_budget_s must be 0 (no limit but compare_max_launches) or more seconds "
                                    f"(got {args['time_budget_s']})")

    def _looks(self, results_dir: str, host: str, run_id: str, host_runs: dict, baseline: str, args: dict,
               warnings: list[str]) -> tuple[list, list[float], int]:
        """The run's earlier looks ([(results, floor, alpha), ...], sequential.py), every look's share of the error
        rate and the rounds the budget allows: compare_max_launches less the launches planned (the baseline's runs
        that are no added round or refinement), never fewer than the rounds already made."""
        done = rounds_done(host_runs)
        planned = len([t for t, unused in host_runs.get(baseline) or [] if not (t or "").startswith(("round", "refine"))])
        rounds = max(done, args["max_launches"] - planned if args["max_launches"] else 0)
        alphas = look_alphas(rounds)
        looks = []
        for look in range(1, done + 1):
            then = {mode: pool_runs(found) for mode, found in runs_at_look(host_runs, look).items() if found}
            floor = self._noise_floor(results_dir, host, run_id, then, args, True, warnings)
            looks.append((then, floor, alphas[look - 1]))
        return looks, alphas, rounds

    def _sequential(self, summary: dict, args: dict, host_results: dict, baseline: str, look: int, rounds: int) -> dict:
        """The next added round for a host (sequential.plan_round), with its cost estimated from the run's launches."""
        spent, level_cost, launch_cost = self._costs(host_results, "round")
        return plan_round(summary.get("comparisons") or {}, look, rounds, args["max_launches"], spent,
                          args["time_budget_s"] or None, level_cost, launch_cost, baseline)

    @staticmethod
    def _costs(host_results: dict, tag_prefix: str) -> tuple[float, float, float]:
        """Seconds spent in runs tagged ``tag_prefix``..., a level's warm-up and window, a launch's fixed cost."""
        settings = next((r.get("settings") or {} for r in host_results.values()), {})
        level_cost = float(settings.get("warmup_s") or 0) + float(settings.get("window_s") or 0)
        spent = 0.0
        per_launch = []
        for result in host_results.values():
            for run in result.get("runs") or [{"tag": None, "seconds": None, "levels": []}]:
                secs = run.get("seconds")
                if secs is not None and (run.get("tag") or "").startswith(tag_prefix):
                    spent += secs
                if secs is not None and run.get("levels"):
                    per_launch.append(max(0.0, secs - level_cost * len(run["levels"])))
        return spent, level_cost, (sum(per_launch) / len(per_launch) if per_launch else 0.0)

    @staticmethod
    def _noise_floor(results_dir: str, host: str, run_id: str, host_results: dict, args: dict, check: bool,
                     warnings: list[str]) -> dict | None:
        """The host's launch-to-launch noise floor (launch_noise): this run's measurement stored by run id
        (rendering it again replaces it; ``check``: not stored), then the floor from every run of the same kind
        (engine, version, model, GPUs: launch_noise.floor_key) younger than the age limit, with the stated prior."""
        max_age = args["noise_floor_max_age_days"]
        if not max_age or max_age <= 0:
            return None
        path = launch_floor_file(results_dir, host)
        parts = launch_read_parts(path, host, warnings)
        mine = launch_estimate(host_results)
        key = launch_floor_key(host_results)
        if mine:
            mine["key"] = key
            when = max((str(r.get("finished_at")) for r in host_results.values() if r.get("finished_at")), default=None)
            mine["measured_at"] = when or datetime.datetime.now(datetime.UTC).isoformat()
            mine["run_id"] = run_id
            if parts.get(run_id) != mine:
                parts[run_id] = mine
                if not check:
                    os.makedirs(os.path.dirname(path), exist_ok=True)
                    report.write_if_changed(path, report.dump_json({"host": host, "runs": parts}))
        return launch_floor_from(parts, max_age_days=max_age, key=key, prior_sd=args["noise_floor_prior_sd"],
                                 prior_df=args["noise_floor_prior_df"])

    def _refine(self, summary: dict, opts: dict, host_results: dict) -> dict:
        """The next refinement round for a host (the primary comparison), with its cost estimate."""
        spec_mode = summary.get("spec_mode")
        comparison = (summary.get("comparisons") or {}).get(spec_mode) or {}
        spent, level_cost, launch_cost = self._costs(host_results, "refine")
        return refine_plan(comparison, ratio=float(opts.get("ratio") or 1.3), budget_s=opts.get("budget_s"),
                           spent_s=spent, level_cost_s=level_cost, launch_cost_s=launch_cost,
                           max_new=int(opts.get("max_levels") or 4), modes=2)
