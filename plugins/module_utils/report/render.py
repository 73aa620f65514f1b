# Copyright: specbench developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""specbench report rendering: summary.csv, report.md and the PNG plots (the fleet index: specbench_index).

Everything here renders a summary that ``specbench_compare.summarize_host`` built: no maths
of its own. Text output is standard library only; the plots import matplotlib (Agg backend)
when called, so only the controller needs it.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import tempfile

from ansible_collections.specbench.core.plugins.module_utils.report.breakdown import (
    TERMS_PLOT,
    category_table,
    prompt_set_lines,
    render_terms_plot,
    separate_lines,
    terms_table,
)
from ansible_collections.specbench.core.plugins.module_utils.report.progress import attempts_lines
from ansible_collections.specbench.core.plugins.module_utils.report.sections import (
    _md,
    gpu_words,
    output_match_lines,
    provenance_lines,
    traffic_lines,
)
from ansible_collections.specbench.core.plugins.module_utils.specbench_client.labels import emulated_banner
from ansible_collections.specbench.core.plugins.module_utils.specbench_compare import fmt_conc
from ansible_collections.specbench.core.plugins.module_utils.specbench_compare.launch_noise import floor_text
from ansible_collections.specbench.core.plugins.module_utils.specbench_compare.sequential import method_text
from ansible_collections.specbench.core.plugins.module_utils.specbench_compare.serve_proof import (
    ACCEPT_LIFETIME,
    ACCEPT_OFF,
    moved_levels,
)

PLOTS = {
    "throughput": "throughput.png",
    "per_stream": "per-stream.png",
    "speedup": "speedup.png",
    "latency": "latency.png",
    "terms": TERMS_PLOT,
    "latency_p99": "latency-p99.png",
    "energy": "energy.png",
}
# Each plot's title, in report.md's image and report.html's figure.
PLOT_TITLES = {
    "throughput": "Output throughput",
    "per_stream": "Per-stream decode speed",
    "speedup": "Speedup",
    "latency": "Latency (TTFT p50 and TPOT)",
    "terms": "Accept length and step-time ratio",
    "latency_p99": "p99 latency (TPOT and TTFT) with intervals",
    "energy": "GPU energy per output token",
}
CSV_COLUMNS = (
    "host",
    "spec_mode",
    "concurrency",
    "baseline_tok_per_s",
    "baseline_tok_per_s_lo",
    "baseline_tok_per_s_hi",
    "spec_tok_per_s",
    "spec_tok_per_s_lo",
    "spec_tok_per_s_hi",
    "speedup",
    "speedup_lo",
    "speedup_hi",
    "per_stream_speedup",
    "per_stream_speedup_lo",
    "per_stream_speedup_hi",
    "tpot_speedup",
    "tpot_speedup_lo",
    "tpot_speedup_hi",
    "baseline_per_stream_tok_per_s",
    "spec_per_stream_tok_per_s",
    "baseline_tpot_ms",
    "spec_tpot_ms",
    "spec_accept_length",
    "verdict",
    "refined",
    "launches",
    "errors",
    "baseline_energy_j_per_token",
    "baseline_energy_j_per_token_lo",
    "baseline_energy_j_per_token_hi",
    "spec_energy_j_per_token",
    "spec_energy_j_per_token_lo",
    "spec_energy_j_per_token_hi",
    "energy_ratio",
    "energy_ratio_family_lo",
    "energy_ratio_family_hi",
    "energy_verdict",
    "energy_confounders",
    "baseline_tpot_p99_ms",
    "spec_tpot_p99_ms",
    "tpot_p99_ratio",
    "tpot_p99_ratio_family_lo",
    "tpot_p99_ratio_family_hi",
    "tpot_p99_verdict",
    "baseline_ttft_p99_ms",
    "spec_ttft_p99_ms",
    "ttft_p99_ratio",
    "ttft_p99_ratio_family_lo",
    "ttft_p99_ratio_family_hi",
    "ttft_p99_verdict",
    "baseline_slo_status",
    "baseline_goodput_tok_per_s",
    "baseline_goodput_tok_per_s_lo",
    "baseline_goodput_tok_per_s_hi",
    "spec_slo_status",
    "spec_goodput_tok_per_s",
    "spec_goodput_tok_per_s_lo",
    "spec_goodput_tok_per_s_hi",
)


# ---------------------------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------------------------
def write_if_changed(path: str, data: str | bytes) -> bool:
    """Write ``data`` unless the file already holds exactly it; True when written."""
    raw = data.encode() if isinstance(data, str) else data
    try:
        with open(path, "rb") as fh:
            if fh.read() == raw:
                return False
    except OSError:
        pass
    write_atomic(path, raw)
    return True


def write_atomic(path: str, data: str | bytes) -> None:
    """Write a whole file or nothing (a reader never sees half a report)."""
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix="." + os.path.basename(path) + ".")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode() if isinstance(data, str) else data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def dump_json(obj) -> str:
    return json.dumps(obj, indent=2, sort_keys=False) + "\n"


def adaptive_config_json(config: dict) -> str:
    """SGLang's adaptive config file, one batch-size row a line."""
    rows = [f"  {json.dumps(bs)}: {json.dumps(entry)}" for bs, entry in config.items()]
    return "{\n" + ",\n".join(rows) + "\n}\n"


# ---------------------------------------------------------------------------------------------
# CSV
# ---------------------------------------------------------------------------------------------
def _pair(ci, i):
    return "" if not ci else ci[i]


def render_csv(summary: dict) -> str:
    """One row per speculative mode and level."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    base = summary.get("baseline_mode")
    slo_rows = {m: {r["concurrency"]: r for r in info["levels"]}
                for m, info in ((summary.get("slo") or {}).get("modes") or {}).items()}
    for spec_mode, comp in (summary.get("comparisons") or {}).items():
        for lv in comp.get("levels") or []:
            b, s = lv.get(base) or {}, lv.get(spec_mode) or {}
            goodput = [cell for mode in (base, spec_mode)
                       for row in [(slo_rows.get(mode) or {}).get(lv["concurrency"]) or {}]
                       for cell in (_blank(row.get("status")), _blank(row.get("goodput_tok_per_s")),
                                    _pair(row.get("goodput_tok_per_s_ci95"), 0),
                                    _pair(row.get("goodput_tok_per_s_ci95"), 1))]
            errors = "; ".join(e for e in (b.get("error"), s.get("error")) if e)
            writer.writerow(
                [
                    summary.get("host"),
                    spec_mode,
                    lv["concurrency"],
                    b.get("output_tok_per_s", ""),
                    _pair(b.get("output_tok_per_s_ci95"), 0),
                    _pair(b.get("output_tok_per_s_ci95"), 1),
                    s.get("output_tok_per_s", ""),
                    _pair(s.get("output_tok_per_s_ci95"), 0),
                    _pair(s.get("output_tok_per_s_ci95"), 1),
                    _blank(lv.get("speedup")),
                    _pair(lv.get("speedup_ci95"), 0),
                    _pair(lv.get("speedup_ci95"), 1),
                    _blank(lv.get("per_stream_speedup")),
                    _pair(lv.get("per_stream_speedup_ci95"), 0),
                    _pair(lv.get("per_stream_speedup_ci95"), 1),
                    _blank(lv.get("tpot_speedup")),
                    _pair(lv.get("tpot_speedup_ci95"), 0),
                    _pair(lv.get("tpot_speedup_ci95"), 1),
                    _blank(b.get("per_stream_tok_per_s")),
                    _blank(s.get("per_stream_tok_per_s")),
                    _blank(b.get("tpot_ms")),
                    _blank(s.get("tpot_ms")),
                    _blank(s.get("accept_length")),
                    lv.get("verdict"),
                    bool(lv.get("refined")),
                    lv.get("launches") or 1,
                    errors,
                    _blank(b.get("energy_j_per_output_token")),
                    _pair(b.get("energy_j_per_output_token_ci95"), 0),
                    _pair(b.get("energy_j_per_output_token_ci95"), 1),
                    _blank(s.get("energy_j_per_output_token")),
                    _pair(s.get("energy_j_per_output_token_ci95"), 0),
                    _pair(s.get("energy_j_per_output_token_ci95"), 1),
                    _blank(lv.get("energy_ratio")),
                    _pair(lv.get("energy_ratio_ci_family"), 0),
                    _pair(lv.get("energy_ratio_ci_family"), 1),
                    _blank(lv.get("energy_verdict")),
                    "; ".join(lv.get("energy_confounders") or []),
                    *(cell for name in ("tpot_p99", "ttft_p99") for cell in (
                        _blank(b.get(f"{name}_ms")), _blank(s.get(f"{name}_ms")), _blank(lv.get(f"{name}_ratio")),
                        _pair(lv.get(f"{name}_ratio_ci_family"), 0), _pair(lv.get(f"{name}_ratio_ci_family"), 1),
                        _blank(lv.get(f"{name}_ratio_verdict")))),
                    *goodput,
                ]
            )
    return out.getvalue()


def _blank(value):
    return "" if value is None else value


# ---------------------------------------------------------------------------------------------
# report.md
# ---------------------------------------------------------------------------------------------
def _f(value, digits: int = 1) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def _with_ci(value, ci, digits: int = 1) -> str:
    if value is None:
        return "-"
    if not ci:
        return _f(value, digits)
    return f"{_f(value, digits)} [{_f(ci[0], digits)}, {_f(ci[1], digits)}]"


def render_markdown(summary: dict, plots: dict | None = None) -> str:
    """report.md: confounders first, then the verdict, plots, a table per level, the advice."""
    plots = plots or {}
    host, run_id = summary.get("host"), summary.get("run_id")
    base, spec = summary.get("baseline_mode"), summary.get("spec_mode")
    lines = [f"# Speculative decoding A/B: {host}", ""]
    lines += emulated_banner(summary.get("servers") or {})
    finished = summary.get("results_finished_at")
    lines.append(f"Run `{run_id}`, modes {', '.join(f'`{m}`' for m in summary.get('modes') or [])}"
                 + (f", results up to {finished}." if finished else "."))
    lines.append("")
    if not summary.get("complete"):
        lines.append(f"> **INCOMPLETE**: {len(summary.get('incomplete_reasons') or [])} problem(s); the figures below use "
                     "what was measured.")
        lines.append(">")
        for reason in summary.get("incomplete_reasons") or []:
            lines.append(f"> - {_md(reason)}")
        lines.append("")
    conf = summary.get("confounders") or []
    lines.append(f"## Confounders ({len(conf)})")
    lines.append("")
    if conf:
        for item in conf:
            mark = "**error**" if item.get("severity") == "error" else "warning"
            lines.append(f"- {mark} `{item.get('kind')}`: {_md(item.get('text'))}")
    else:
        lines.append("None found: same capacity settings in every mode, no running-request cap reached, the client "
                     "never the bottleneck, GPUs clean before and after every mode, no level with errors.")
    lines.append("")
    lines.append("## Verdict")
    lines.append("")
    if spec:
        status = (summary.get("crossover_status") or "unknown").replace("_", " ")
        lines.append(f"- **Crossover ({spec} vs {base}, {status})**: {_md(summary.get('crossover_text'))}.")
    if (summary.get("slo") or {}).get("text"):
        lines.append(f"- **Latency SLO**: {_md(summary['slo']['text'])}.")
        regs = summary.get("regions") or []
        if regs and "regions:" not in str(summary.get("crossover_text") or ""):  # said once: in the crossover's text
            lines.append("- **Regions**: " + "; ".join(
                f"{r['verdict']} at C={r['from_concurrency']:g}"
                + ("" if r["to_concurrency"] == r["from_concurrency"] else f" to {r['to_concurrency']:g}")
                for r in regs) + ".")
    failed = summary.get("failed_levels") or []
    if failed:
        lines.append(f"- **Failed levels** (no verdict there or across them): C={', '.join(f'{c:g}' for c in failed)}.")
    for item in summary.get("saturated_levels") or []:
        lines.append(f"- **No evidence** at C={item['concurrency']:g} (saturated: {_md('; '.join(item['reasons']))}): "
                     "left out of the verdict, the regions and the crossover.")
    lines.append(f"- **Recommendation**: {_md(summary.get('recommendation'))}")
    for note in summary.get("notes") or []:
        lines.append(f"- Note: {_md(note)}")
    tracking = summary.get("tracking")
    if tracking:
        lines.append(f"- **Adaptive check**: {_md(tracking['text'])}.")
    lines.append("")
    lines.extend(output_match_lines(summary))
    lines.extend(traffic_lines(summary))
    if plots:
        lines.append("## Plots")
        lines.append("")
        for key, name in plots.items():
            lines.append(f"![{PLOT_TITLES.get(key, key)}]({name})")
            lines.append("")
    lines.extend(prompt_set_lines(summary))
    for spec_mode, comp in (summary.get("comparisons") or {}).items():
        lines.extend(_level_table(comp, base, spec_mode, spec_mode == spec))
        lines.extend(terms_table(comp, spec_mode))
        lines.extend(category_table(comp, spec_mode, summary.get("servers") or {}))
    lines.extend(slo_table(summary.get("slo")))
    lines.extend(separate_lines(summary))
    table = summary.get("adaptive_table")
    engines = {(info or {}).get("engine") for info in (summary.get("servers") or {}).values()}
    if "vllm" in engines:
        # SGLang's table means nothing to a vLLM server: vLLM's own per-batch-size schedule instead.
        lines.extend(_vllm_schedule_section(summary.get("serve_schedule")))
        table = None
    if table:
        lines.append("## SGLang adaptive speculation")
        lines.append("")
        ranges = summary.get("speculate_ranges") or []
        if ranges:
            where = ", ".join(f"from {a}" if not b else f"{a}" if b - 1 <= a else f"{a} to {b - 1}" for a, b in ranges)
            lines.append(f"This table speculates at batch sizes {where}, from a level that clearly pays (family-wise) "
                         "to the last level that clearly pays, and turns it off (candidate steps `[0]`, plain decode) "
                         "everywhere else: unclear, failed, saturated and unmeasured levels included, below the lowest "
                         "and above the highest level measured (SGLang's default rows there become `[0]`). Where it is "
                         "on, SGLang's adaptive logic picks the step count from the acceptance it sees.")
        else:
            lines.append("This table turns speculation off at every batch size: it pays clearly at no level measured.")
        lines.append("SGLang 0.5.23 reads `--speculative-adaptive-config` as the path of a JSON file (saved next to this "
                     "report as `adaptive-config.json`); it needs `--speculative-adaptive`, EAGLE or EAGLE3, "
                     "`--speculative-eagle-topk 1`. SGLang rounds the running batch up to its CUDA-graph batch size "
                     "before picking a row, so the switch can come a few requests early.")
        lines.append("")
        lines.append("```json")
        lines.append(adaptive_config_json(summary.get("adaptive_config")).rstrip())
        lines.append("```")
        lines.append("")
        lines.append("Launch SGLang with `--speculative-adaptive --speculative-adaptive-config adaptive-config.json` "
                     f"(as a table: `{json.dumps(table)}`). To check that the adaptive mode tracks the better of the two "
                     "modes, benchmark it with this table (`adaptive-vars.json` sets the launch role's "
                     "`sglang_server_adaptive_config`):")
        lines.append("")
        lines.append("```sh")
        lines.append("ansible-playbook playbooks/compare.yml -e '{\"compare_modes\": [\"baseline\", \"eagle3\", "
                     f"\"eagle3-adaptive\"]}}' --limit {summary.get('host')} -e @results/{summary.get('run_id')}/"
                     f"{summary.get('host')}/adaptive-vars.json")
        lines.append("```")
        lines.append("")
    if tracking:
        lines.append(f"## {tracking['adaptive_mode']} against the better mode")
        lines.append("")
        lines.append("| C | better mode | adaptive / better [95%] |")
        lines.append("|---:|---|---|")
        for row in tracking["levels"]:
            lines.append(f"| {row['concurrency']} | {row['better_mode']} | "
                         f"{_with_ci(row['ratio_to_better'], row['ratio_to_better_ci95'], 3)} |")
        lines.append("")
    lines.extend(_served_section(summary.get("served")))
    servers = summary.get("servers") or {}
    if servers:
        lines.append("## Servers")
        lines.append("")
        for mode, info in servers.items():
            cmd = info.get("command")
            cmd_text = " ".join(str(a) for a in cmd) if isinstance(cmd, list) else (cmd or "not recorded")
            lines.append(f"- `{mode}` ({info.get('engine') or 'engine not recorded'}, version "
                         f"{info.get('version') or 'unknown'}, running cap {info.get('running_cap') or 'unknown'}): "
                         f"`{_md(cmd_text)}`")
            if info.get("gpu"):
                lines.append(f"  - GPUs: {_md(gpu_words(info['gpu']))}")
        lines.append("")
    lines.extend(provenance_lines(summary))
    lines.extend(attempts_lines(summary.get("attempts") or []))
    lines.append("## Method")
    lines.append("")
    method = summary.get("method") or {}
    if method.get("verdicts"):
        family = summary.get("family") or {}
        lines.append(f"- Verdicts (error rate {100 * (family.get('alpha') or 0.05):.0f}% over all "
                     f"{family.get('levels', 'the')} levels at once): {method.get('verdicts')}.")
    lines.append(f"- Speedup interval (per level, 95% for that level alone): {method.get('speedup_ci95')}.")
    launch = summary.get("launch_variation") or {}
    if method.get("launch_variation"):
        floor = launch.get("floor")
        held = ("held: levels measured in several launches carry it in their spread" if launch.get("held") and not floor
                else f"held: this node's noise floor, {floor_text(floor)}" if floor
                else "NOT held: one launch per mode and no noise floor for this node yet (compare_launches: auto, the "
                     "default, launches twice on such a node: it measures and stores it)")
        lines.append(f"- Launch-to-launch variation ({held}): {method.get('launch_variation')}.")
        lines.append("- Each mode's tok/s interval is that window's own (\"this window\"): a drift slower than a window "
                     "moves a whole window and shows up as launch-to-launch variation, which the verdicts hold through "
                     "the node's floor; a window's interval alone does not.")
    budget = summary.get("sequential_budget") or {}
    if budget.get("rounds"):
        lines.append(f"- Sequential launches (compare_max_launches {budget.get('max_launches')}, up to "
                     f"{budget['rounds']} added round(s), {budget.get('rounds_done', 0)} made): "
                     f"{method_text(budget['rounds'])}. {_md(summary.get('sequential_stop') or '')}")
    lines.append(f"- Crossover: {method.get('crossover')}.")
    if summary.get("output_match"):
        lines.append(f"- Output match: {method.get('output_match')}.")
    if summary.get("traffic"):
        lines.append(f"- Traffic gain: {method.get('traffic')}.")
    lines.append("- Throughput is steady-state output tokens per second inside each level's measurement window; "
                 "per-stream decode speed is what one user sees; TPOT speedup is baseline TPOT / speculative TPOT "
                 "(above 1: speculation better).")
    lines.append("")
    sources = summary.get("sources") or {}
    if sources:
        lines.append("Results files: " + ", ".join(f"`{os.path.basename(p)}`" for p in sources.values()) + ".")
        lines.append("")
    return "\n".join(lines)


def _vllm_schedule_section(plan: dict | None) -> list[str]:
    """vLLM's num_speculative_tokens_per_batch_size (vllm/config/speculative.py), what serve.yml serves."""
    lines = ["## Speculation by batch size (vLLM)", ""]
    if not plan or not plan.get("schedule"):
        lines.append(f"serve.yml serves {_md((plan or {}).get('text') or 'the baseline')}.")
        lines.append("")
        return lines
    lines.append(f"serve.yml serves {_md(plan['text'])}. The rule: {_md(plan['rule'])}. Inside "
                 "`--speculative-config` as `num_speculative_tokens_per_batch_size` (`[range_start, range_end, k]`, "
                 "inclusive; k = 0 is plain decode):")
    lines.append("")
    lines.append("```json")
    lines.append(json.dumps(plan["schedule"]))
    lines.append("```")
    lines.append("")
    return lines


def _served_section(served: dict | None) -> list[str]:
    """The serve proof (serve.json, written by playbooks/serve.yml), when the run was served."""
    if not served:
        return []
    lines = ["## Served", ""]
    if served.get("state") == "retired":
        lines.append(f"**No longer served** ({_md(served.get('retired_why') or 'retired')}, {served.get('retired_at')}). "
                     "The last proof, kept for the record:")
        lines.append("")
    verdict = "**verified**" if served.get("verified") else "**not verified**"
    service = served.get("service") or {}
    how = (f"systemd unit `{service.get('unit')}`" if service.get("launcher") == "systemd"
           else f"a detached session (pid {service.get('pid')})")
    reason = str(served.get("text") or "").split(": ", 1)[-1]
    lines.append(f"`{_md(served.get('mode'))}` {'was ' if served.get('state') == 'retired' else ''}served at "
                 f"{served.get('base_url')} as {how}, run `{served.get('run_id')}`: "
                 f"{verdict} ({_md(reason)}).")
    if served.get("rollback"):
        lines.append(f"Rolled back: {_md(served['rollback'].get('text'))}.")
    lines.append(f"Launch command: `{_md(' '.join(str(a) for a in served.get('launch_command') or []))}`")
    lines.append("")
    lines.append("| C | served tok/s [95%] | best static mode | its tok/s | served / best [95%] | verdict | "
                 "accept length (this window) |")
    lines.append("|---:|---|---|---:|---|---|---|")
    for row in served.get("levels") or []:
        lines.append(f"| {row['concurrency']} | {_with_ci(row['served_tok_per_s'], row['served_ci95'])} | "
                     f"{row['best_static_mode'] or '-'} | {_f(row['best_static_tok_per_s'])} | "
                     f"{_with_ci(row['ratio'], row['ratio_ci95'], 3)} | {row['verdict']} | {_proof_accept(row)} |")
    lines.append("")
    lines.extend(_looks_lines(served))
    return lines


def _looks_lines(served: dict) -> list[str]:
    """The proof's sequence (serve.json's looks): every proof of this configuration on this node, with its time,
    its share of the error rate and its own verdicts; the table's verdicts are the looks combined."""
    looks = served.get("looks") or []
    if not looks:
        return []
    planned = (served.get("sequence") or {}).get("planned_looks")
    spend = (f"planned at its first look for {planned} look(s), every look past them spending from a tenth held back"
             if planned else "5% x 6/(pi^2 k^2): a sequence begun without a plan")
    lines = [f"Proofs of this configuration on this node: {len(looks)} look(s), one sequence; the table's verdicts "
             "combine them (after each look the looks pooled, one log ratio per served launch, held at that look's "
             f"share of the error rate ({spend}), and those intervals intersected: a relaunch adds evidence, "
             "a look in place shares its server's launch effect, and a re-run never replaces a look):", ""]
    for look in looks:
        how = "in place, nothing relaunched" if look.get("in_place") else "a launch of its own"
        verdicts = ", ".join(f"C={lv['concurrency']} {lv.get('verdict')}"
                             + (f" {_with_ci(lv.get('ratio'), lv.get('ratio_ci_family'), 3)}" if lv.get("ratio") else "")
                             for lv in look.get("levels") or [])
        lines.append(f"- look {look.get('look')}, {look.get('at')} ({how}, {100 * float(look.get('alpha') or 0):.2f}% "
                     f"of the error rate): {_md(verdicts)}")
    combined = ", ".join(f"C={r['concurrency']} {r['verdict']}"
                         + (f" [{_f(r['ratio_ci_combined'][0], 3)}, {_f(r['ratio_ci_combined'][1], 3)}]"
                            if r.get("ratio_ci_combined") else "")
                         + (f" ({r['launches_pooled']} launches pooled)" if (r.get("launches_pooled") or 0) > 1 else "")
                         for r in served.get("levels") or [])
    lines.append(f"- combined: {_md(combined)}")
    moved = moved_levels(served.get("levels") or [])
    own = [c for c in served.get("node_changed") or [] if c not in moved]
    if own:
        lines.append(f"- the node changed: clearly other than the run's own measurement of this configuration at "
                     f"C={', '.join(map(str, own))} (not a regression; compare again)")
    if moved:
        lines.append("- the node changed since an earlier look: the served server's own rate moved clearly at "
                     + ", ".join(f"C={c} (since look {k})" for c, k in moved.items())
                     + "; this look adds nothing there (not a regression; relaunch it or compare again)")
    if served.get("looks_disagree"):
        lines.append(f"- the looks' intervals lie apart at C={', '.join(map(str, served['looks_disagree']))}: the node "
                     "changed between them (compare again)")
    lines.append("")
    return lines


def _proof_accept(row: dict) -> str:
    """A proof row's accept length: the window's where the plan speculates (serve_proof._window_accept),
    else none, labelled (speculation off by the plan, only the server's lifetime figure, no step counted)."""
    if row.get("accept_length") is not None:
        return _f(row["accept_length"], 2)
    note = row.get("accept_length_note")
    if not note:
        return "-"
    return {ACCEPT_OFF: "none (speculation off here by the plan)",
            ACCEPT_LIFETIME: "none (the server gave only its lifetime figure)"}.get(
                note, "none (no speculative step counted over the window)")


def _level_table(comp: dict, base: str, spec_mode: str, primary: bool = False) -> list[str]:
    lines = [f"## {spec_mode} against {base}, per level", ""]
    lines.append(f"| C | {base} tok/s [95%, this window] | {spec_mode} tok/s [95%, this window] | speedup [95%, this level] | "
                 "speedup [family-wise: all levels at once, decides the verdict] | per-stream speedup [95%] | "
                 f"TPOT speedup [95%] | verdict | accept length | TTFT p50 ms ({base} / {spec_mode}) | errors |")
    lines.append("|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---|")
    for lv in comp.get("levels") or []:
        b, s = lv.get(base) or {}, lv.get(spec_mode) or {}
        errors = "; ".join(_md(e) for e in (b.get("error"), s.get("error")) if e) or ""
        if lv.get("saturated"):
            errors = "; ".join(x for x in (errors, "no evidence (saturated: " + _md("; ".join(lv["saturated"])) + ")") if x)
        mark = " (refined)" if lv.get("refined") else ""
        if (lv.get("launches") or 1) > 1:
            mark += f" ({lv['launches']} launches)"
        lines.append(
            f"| {lv['concurrency']}{mark} "
            f"| {_with_ci(b.get('output_tok_per_s'), b.get('output_tok_per_s_ci95'))} "
            f"| {_with_ci(s.get('output_tok_per_s'), s.get('output_tok_per_s_ci95'))} "
            f"| {_with_ci(lv.get('speedup'), lv.get('speedup_ci95'), 3)} "
            f"| {_with_ci(lv.get('speedup'), lv.get('speedup_ci_family'), 3)} "
            f"| {_with_ci(lv.get('per_stream_speedup'), lv.get('per_stream_speedup_ci95'), 3)} "
            f"| {_with_ci(lv.get('tpot_speedup'), lv.get('tpot_speedup_ci95'), 3)} "
            f"| {lv.get('verdict')} "
            f"| {_f(s.get('accept_length'), 2)} "
            f"| {_f(b.get('ttft_ms_p50'))} / {_f(s.get('ttft_ms_p50'))} "
            f"| {errors} |"
        )
    lines.append("")
    if any(lv.get("refined") for lv in comp.get("levels") or []):
        lines.append("(refined): a level added by compare_refine inside a bracket where the verdict changes. "
                     "(N launches): pooled over N server launches.")
        lines.append("")
    sequence = comp.get("sequential") or {}
    if sequence.get("levels"):
        lines.append(f"Launches per level ({sequence.get('looks')} look(s); a level keeps the first clear verdict of a "
                     "look while it was measured again in every look since): "
                     + "; ".join(f"C={conc}: {info['launches']} launch(es) per mode, {_md(info['why'])}"
                                 for conc, info in sequence["levels"].items()) + ".")
        lines.append("")
    if not primary:  # the primary comparison's crossover and recommendation are the Verdict's, said once there
        lines.append(f"Crossover: {_md(comp.get('crossover_text'))}. {_md(comp.get('recommendation'))}")
        lines.append("")
    lines += _energy_table(comp, base, spec_mode)
    lines += _latency_table(comp, base, spec_mode)
    return lines


def slo_table(slo: dict | None) -> list[str]:
    """Per level and mode: the SLO status (family-wise) and the goodput under it with its interval."""
    if not slo or not slo.get("modes"):
        return []
    modes = list(slo["modes"])
    by_mode = {m: {r["concurrency"]: r for r in info["levels"]} for m, info in slo["modes"].items()}
    concs = sorted({c for rows in by_mode.values() for c in rows})
    lines = ["## Latency SLO and goodput, per level", "",
             "| C | " + " | ".join(f"{m} SLO | {m} goodput tok/s [95%]" for m in modes) + " |",
             "|---:|" + "---|---:|" * len(modes)]
    for conc in concs:
        cells = []
        for mode in modes:
            row = by_mode[mode].get(conc) or {}
            cells += [str(row.get("status") or "-"),
                      _with_ci(row.get("goodput_tok_per_s"), row.get("goodput_tok_per_s_ci95"))]
        lines.append(f"| {conc} | " + " | ".join(cells) + " |")
    lines.append("")
    if slo.get("text"):
        lines.append(f"{_md(slo['text'])}.")
        lines.append("")
    lines.append(f"SLO: {_md(slo.get('method'))}. Goodput: {_md(slo.get('goodput_method'))}.")
    lines.append("")
    return lines


def _latency_table(comp: dict, base: str, spec_mode: str) -> list[str]:
    """p99 TPOT and TTFT per mode with their intervals, and each ratio's family-wise verdict."""
    levels = comp.get("levels") or []
    if not any(lv.get("tpot_p99_ratio") is not None or lv.get("ttft_p99_ratio") is not None for lv in levels):
        return []
    lines = [f"### p99 latency, {spec_mode} against {base}", "",
             f"| C | {base} TPOT p99 ms [95%] | {spec_mode} TPOT p99 ms [95%] | TPOT p99 ratio [family-wise] | verdict "
             f"| {base} TTFT p99 ms [95%] | {spec_mode} TTFT p99 ms [95%] | TTFT p99 ratio [family-wise] | verdict |",
             "|---:|---:|---:|---:|---|---:|---:|---:|---|"]
    for lv in levels:
        b, s = lv.get(base) or {}, lv.get(spec_mode) or {}
        cells = []
        for name in ("tpot_p99", "ttft_p99"):
            cells += [_with_ci(b.get(f"{name}_ms"), b.get(f"{name}_ms_ci95")),
                      _with_ci(s.get(f"{name}_ms"), s.get(f"{name}_ms_ci95")),
                      _with_ci(lv.get(f"{name}_ratio"), lv.get(f"{name}_ratio_ci_family"), 3),
                      str(lv.get(f"{name}_ratio_verdict"))]
        lines.append(f"| {lv['concurrency']} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(f"Ratios below 1: speculation is faster at that percentile. {_md((comp.get('latency') or {}).get('method'))}")
    lines.append("")
    return lines


def _energy_table(comp: dict, base: str, spec_mode: str) -> list[str]:
    """Energy per output token per mode and the ratio's family-wise verdict, where any level has telemetry."""
    levels = comp.get("levels") or []
    if not any((lv.get(base) or {}).get("energy_j_per_output_token") or (lv.get(spec_mode) or {}).get(
            "energy_j_per_output_token") for lv in levels):
        return []
    energy = comp.get("energy") or {}
    lines = [f"### GPU energy per output token, {spec_mode} against {base}", "",
             f"| C | {base} J/token [95%] | {spec_mode} J/token [95%] | energy ratio [family-wise] | verdict | "
             "confounders |", "|---:|---:|---:|---:|---|---|"]
    for lv in levels:
        b, s = lv.get(base) or {}, lv.get(spec_mode) or {}
        lines.append(
            f"| {lv['concurrency']} "
            f"| {_with_ci(b.get('energy_j_per_output_token'), b.get('energy_j_per_output_token_ci95'), 4)} "
            f"| {_with_ci(s.get('energy_j_per_output_token'), s.get('energy_j_per_output_token_ci95'), 4)} "
            f"| {_with_ci(lv.get('energy_ratio'), lv.get('energy_ratio_ci_family'), 3)} "
            f"| {lv.get('energy_verdict')} | {_md('; '.join(lv.get('energy_confounders') or []))} |")
    lines.append("")
    # The throughput crossover is said once, in the Verdict; this line names only the energy one.
    lines.append(f"Energy crossover: {_md((energy.get('crossover') or {}).get('text'))}. {_md(energy.get('method'))}")
    lines.append("")
    return lines


# ---------------------------------------------------------------------------------------------
# Plots (matplotlib, Agg)
# ---------------------------------------------------------------------------------------------
def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _series_xy(series: list[dict], key: str):
    xs, ys, lo, hi = [], [], [], []
    for pt in series:
        value = pt.get(key)
        if value is None or value <= 0:
            continue
        ci = pt.get(key + "_ci95") or [value, value]
        xs.append(pt["concurrency"])
        ys.append(value)
        lo.append(max(0.0, value - ci[0]))
        hi.append(max(0.0, ci[1] - value))
    return xs, ys, lo, hi


def _mark_crossover(ax, summary: dict, xmin: float, xmax: float) -> None:
    point, ci = summary.get("crossover_concurrency"), summary.get("crossover_ci95")
    if ci:
        lo = ci[0] if ci[0] is not None else xmin
        hi = ci[1] if ci[1] is not None else xmax
        if hi > lo:
            ax.axvspan(lo, hi, color="tab:red", alpha=0.10, label="crossover 95% interval (bracket of clear levels)")
    if point is not None:
        ax.axvline(point, color="tab:red", linestyle="--", linewidth=1.2, label=f"crossover C={fmt_conc(point)} (interpolated)")


def _finish_axes(ax, levels: list[float]) -> None:
    from matplotlib.ticker import FixedLocator, NullFormatter, NullLocator

    ax.set_xscale("log")
    if levels:
        ax.xaxis.set_major_locator(FixedLocator(levels))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xticklabels([f"{c:g}" for c in levels])
        span = math.log(max(levels) / min(levels)) if min(levels) > 0 and max(levels) > min(levels) else 1.0
        pad = math.exp(0.06 * span) if span > 0 else 1.5
        ax.set_xlim(min(levels) / pad, max(levels) * pad)
    ax.set_xlabel("concurrency (concurrent streams, log scale)")
    ax.grid(True, which="major", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, loc="best")


def render_plots(summary: dict, outdir: str, dpi: int = 100, changed: list | None = None) -> dict:
    """Write throughput, per-stream and speedup plots; returns {kind: file name}.

    Files whose bytes are unchanged are left alone; the names of those written go to ``changed``.
    """
    changed = [] if changed is None else changed
    plt = _pyplot()
    series = summary.get("series") or {}
    levels = sorted({pt["concurrency"] for pts in series.values() for pt in pts})
    written = {}
    if not levels:
        return written
    xmin, xmax = min(levels) / 2, max(levels) * 2

    def save(kind: str, fig) -> None:
        """The figure as PNG bytes, written only when they changed."""
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=dpi)
        plt.close(fig)
        if write_if_changed(os.path.join(outdir, PLOTS[kind]), buf.getvalue()):
            changed.append(PLOTS[kind])
        written[kind] = PLOTS[kind]
    host = summary.get("host")
    for kind, key, ylabel, title in (
        ("throughput", "output_tok_per_s", "output tokens / s", "Output throughput"),
        ("per_stream", "per_stream_tok_per_s", "decode tokens / s per stream", "Per-stream decode speed"),
    ):
        fig, ax = plt.subplots(figsize=(7.5, 4.4))
        for mode, pts in series.items():
            xs, ys, lo, hi = _series_xy(pts, key)
            if xs:
                ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", markersize=4, capsize=3, linewidth=1.4, label=mode)
        _mark_crossover(ax, summary, xmin, xmax)
        ax.set_ylabel(ylabel)
        ax.set_title(f"{title}: {host} (95% intervals)", fontsize=10)
        if kind == "per_stream":
            from matplotlib.ticker import FuncFormatter

            ax.set_yscale("log")
            plain = FuncFormatter(lambda value, _pos: f"{value:g}")
            ax.yaxis.set_major_formatter(plain)
            ax.yaxis.set_minor_formatter(plain)
        _finish_axes(ax, levels)
        fig.tight_layout()
        save(kind, fig)
    comps = summary.get("comparisons") or {}
    if comps:
        fig, ax = plt.subplots(figsize=(7.5, 4.0))
        for i, (spec_mode, comp) in enumerate(comps.items()):
            color = f"C{i}"
            levels_of = comp.get("levels") or []
            # The family-wise interval (all levels at once) decides the verdict: drawn wide and pale
            # behind the level's own 95% interval, which decides nothing.
            family = [{"concurrency": lv["concurrency"], "speedup": lv["speedup"],
                       "speedup_ci95": lv.get("speedup_ci_family")} for lv in levels_of if lv.get("speedup_ci_family")]
            xs, ys, lo, hi = _series_xy(family, "speedup")
            if xs:
                ax.errorbar(xs, ys, yerr=[lo, hi], fmt="none", ecolor=color, alpha=0.3, elinewidth=7, capsize=0,
                            label=f"{spec_mode}: family-wise interval (decides the verdict)")
            pts = [{"concurrency": lv["concurrency"], "speedup": lv["speedup"], "speedup_ci95": lv["speedup_ci95"]}
                   for lv in levels_of]
            xs, ys, lo, hi = _series_xy(pts, "speedup")
            if xs:
                ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", markersize=4, capsize=3, linewidth=1.4, color=color,
                            label=f"{spec_mode} / {summary.get('baseline_mode')}, 95% for the level alone")
        ax.axhline(1.0, color="black", linewidth=0.8)
        _mark_crossover(ax, summary, xmin, xmax)
        ax.set_ylabel("speedup (throughput ratio)")
        ax.set_title(f"Speedup of speculation: {host} (above 1: it pays)", fontsize=10)
        _finish_axes(ax, levels)
        fig.tight_layout()
        save("speedup", fig)
        fig = _latency_plot(plt, summary, levels)
        if fig is not None:
            save("latency", fig)
        fig = render_terms_plot(plt, summary, _finish_axes, levels)
        if fig is not None:
            save("terms", fig)
        for kind, draw in (("latency_p99", _p99_plot), ("energy", _energy_plot)):
            fig = draw(plt, summary, levels)
            if fig is not None:
                save(kind, fig)
    return written


def _mode_points(summary: dict, key: str) -> dict[str, list[dict]]:
    """{mode: [{concurrency, <key>, <key>_ci95}, ...]} from the comparisons' per-mode level figures (the
    baseline's once)."""
    base = summary.get("baseline_mode")
    out: dict = {}
    for spec_mode, comp in (summary.get("comparisons") or {}).items():
        for lv in comp.get("levels") or []:
            for mode in (base, spec_mode):
                fig_of = lv.get(mode) or {}
                out.setdefault(mode, {})[lv["concurrency"]] = {
                    "concurrency": lv["concurrency"], key: fig_of.get(key), f"{key}_ci95": fig_of.get(f"{key}_ci95")}
    return {mode: [pts[c] for c in sorted(pts)] for mode, pts in out.items()}


def _p99_plot(plt, summary: dict, levels: list):
    """p99 TPOT and TTFT of every mode per level with their 95% intervals (distribution-free, by request), the
    SLO targets as lines where compare_slo gives them; None when no level has either."""
    targets = (summary.get("slo") or {}).get("targets") or {}
    fig, axes = plt.subplots(1, 2, figsize=(9.0, 3.8))
    drawn = False
    for ax, key, label in ((axes[0], "tpot_p99_ms", "TPOT p99 (ms per output token)"),
                           (axes[1], "ttft_p99_ms", "TTFT p99 (ms)")):
        for mode, pts in _mode_points(summary, key).items():
            xs, ys, lo, hi = _series_xy(pts, key)
            if xs:
                drawn = True
                ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", markersize=4, capsize=3, linewidth=1.4, label=mode)
        if targets.get(key):
            ax.axhline(targets[key], color="tab:red", linestyle="--", linewidth=1.0,
                       label=f"SLO {targets[key]:g} ms (compare_slo)")
        ax.set_ylabel(label)
    if not drawn:
        plt.close(fig)
        return None
    axes[0].set_title("Time per output token, p99", fontsize=10)
    axes[1].set_title("Time to first token, p99", fontsize=10)
    for ax in axes:
        _finish_axes(ax, levels)
    fig.suptitle(f"p99 latency: {summary.get('host')} (95% intervals by request; lower is better)", fontsize=10)
    fig.tight_layout()
    return fig


def _energy_plot(plt, summary: dict, levels: list):
    """GPU energy per output token of every mode per level with its 95% interval; None without telemetry."""
    key = "energy_j_per_output_token"
    fig, ax = plt.subplots(figsize=(7.5, 4.0))
    drawn = False
    for mode, pts in _mode_points(summary, key).items():
        xs, ys, lo, hi = _series_xy(pts, key)
        if xs:
            drawn = True
            ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", markersize=4, capsize=3, linewidth=1.4, label=mode)
    if not drawn:
        plt.close(fig)
        return None
    from matplotlib.ticker import FuncFormatter

    ax.set_yscale("log")
    plain = FuncFormatter(lambda value, _pos: f"{value:g}")
    ax.yaxis.set_major_formatter(plain)
    ax.yaxis.set_minor_formatter(plain)
    ax.set_ylabel("joules per output token (server's GPUs)")
    emulated = bool(emulated_banner(summary.get("servers") or {}))
    ax.set_title(f"GPU energy per output token: {summary.get('host')} (95% intervals; lower is better)"
                 + (" - emulated GPUs" if emulated else ""), fontsize=10)
    _finish_axes(ax, levels)
    fig.tight_layout()
    return fig


def _latency_plot(plt, summary: dict, levels: list):
    """TTFT p50 and TPOT of every mode against concurrency (two axes), from the comparisons'
    levels; None when no level has either."""
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9.0, 3.8))
    drawn = False
    for ax, key in ((ax1, "ttft_ms_p50"), (ax2, "tpot_ms")):
        for mode, points in _mode_points(summary, key).items():
            pts = [(p["concurrency"], p[key]) for p in points if p[key] is not None and p[key] > 0]
            if pts:
                drawn = True
                ax.plot([c for c, _v in pts], [v for _c, v in pts], marker="o", markersize=4, label=mode)
    if not drawn:
        plt.close(fig)
        return None
    ax1.set_ylabel("TTFT p50 (ms)")
    ax2.set_ylabel("TPOT (ms per output token)")
    ax1.set_title("Time to first token", fontsize=10)
    ax2.set_title("Time per output token", fontsize=10)
    for ax in (ax1, ax2):
        _finish_axes(ax, levels)
    fig.suptitle(f"Latency: {summary.get('host')} (lower is better)", fontsize=10)
    fig.tight_layout()
    return fig
