# Copyright: specbench developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The fleet index of one run: index.json (one compact entry per host) and index.md.

Renders host summaries that ``specbench_compare.summarize_host`` built; the index shows each host's
verdict as its regions, so a status such as ``multiple`` never hides where speculation pays.
"""

from __future__ import annotations

from ansible_collections.specbench.core.plugins.module_utils.report.render import _md
from ansible_collections.specbench.core.plugins.module_utils.specbench_compare import SCHEMA, compact, fmt_conc

INDEX_SCHEMA = "specbench.compare-index/1"


def build_index(run_id: str, summaries: dict[str, dict], absent: dict[str, str] | None = None,
                fleet: dict | None = None) -> dict:
    """index.json: one compact entry per host, plus the hosts that produced nothing, and one verdict per kind of
    node (``fleet``: specbench_compare.fleet_kinds) where two or more complete nodes are of one kind."""
    hosts = {}
    for host, summary in sorted(summaries.items()):
        entry = compact(summary)
        entry["report"] = f"{host}/report.md"
        entry["report_html"] = f"{host}/report.html"
        entry["summary"] = f"{host}/summary.json"
        hosts[host] = entry
    for host, why in sorted((absent or {}).items()):
        hosts.setdefault(host, {"host": host, "status": "failed", "complete": False, "crossover_status": "unknown",
                                "crossover_concurrency": None, "crossover_ci95": None,
                                "recommendation": f"No results: {why}", "incomplete_reasons": [why], "report": None})
    statuses = [h["status"] for h in hosts.values()]
    return {
        "schema": INDEX_SCHEMA,
        "summary_schema": SCHEMA,
        "run_id": run_id,
        "hosts_total": len(hosts),
        "hosts_complete": statuses.count("complete"),
        "hosts": hosts,
        "kinds": (fleet or {}).get("kinds") or [],
        "apart": (fleet or {}).get("apart") or {},
        "kinds_method": (fleet or {}).get("method"),
    }


def regions_words(regs) -> str:
    """[{from 1, to 10, loses}, ...] -> 'loses C=1-10, pays C=30-70' ('-' without regions)."""
    words = []
    for r in regs or []:
        lo, hi = r["from_concurrency"], r["to_concurrency"]
        words.append(f"{r['verdict']} C={lo:g}" + ("" if hi == lo else f"-{hi:g}"))
    return ", ".join(words) or "-"


def host_row(h: dict) -> dict:
    """One host's cells in the fleet index (index.md's table row, index.html's), plain text."""
    ci = h.get("crossover_ci95")
    ci_text = "-" if not ci else f"{ci[0]:g} to {ci[1]:g}" if None not in ci else \
        f"{fmt_conc(ci[0]) if ci[0] is not None else 'open'} to {fmt_conc(ci[1]) if ci[1] is not None else 'open'}"
    cross = fmt_conc(h.get("crossover_concurrency")) if h.get("crossover_concurrency") is not None else "-"
    ranges = h.get("speculate_ranges") or []
    where = ", ".join(f"{a}+" if not b else f"{a}" if b == a + 1 else f"{a}-{b - 1}" for a, b in ranges) or "nowhere"
    return {"status": h.get("status"), "verdict": (h.get("crossover_status") or "-").replace("_", " "),
            "regions": regions_words(h.get("regions")), "crossover": cross, "interval": ci_text, "where": where,
            "confounders": h.get("confounders", 0)}


def host_notes(h: dict) -> list[str]:
    """What the index says under a host's recommendation: why it is incomplete, its outputs, its
    traffic gain, its levels without evidence (plain text)."""
    notes = [f"incomplete: {reason}" for reason in h.get("incomplete_reasons") or []]
    for mode, m in (h.get("output_match") or {}).items():
        share = "not checked" if m.get("share") is None else f"{100 * m['share']:.0f}% match the baseline's"
        notes.append(f"outputs of {mode}: {share} ({(m.get('status') or '-').replace('_', ' ')})")
    for mode, g in (h.get("traffic_gains") or {}).items():
        gain = "unknown" if g.get("gain") is None else \
            f"{g['gain']:.2f}x [{g['gain_ci95'][0]:.2f}, {g['gain_ci95'][1]:.2f}] ({g.get('verdict')})"
        notes.append(f"on the traffic, {mode}: {gain}; {100 * (g.get('known_share') or 0):.0f}% of it known, "
                     f"{100 * (g.get('outside_share') or 0):.0f}% outside the measured range")
    saturated = h.get("saturated_levels") or []
    if saturated:
        at = ", ".join(f"{item['concurrency']:g}" for item in saturated)
        notes.append(f"no evidence (saturated: C={at}): " + "; ".join(r for s in saturated for r in s["reasons"]))
    return notes


def kind_rows(index: dict) -> list[dict]:
    """One row per kind of node (index.md's and index.html's), plain text."""
    rows = []
    for n, kind in enumerate(index.get("kinds") or [], 1):
        key = kind.get("key") or {}
        parts = (key.get("model"), key.get("engine"), key.get("engine_version"),
                 f"{key.get('gpus')} x {key.get('gpu')}" if key.get("gpu") else None)
        what = ", ".join(str(v) for v in parts if v)
        levels = "; ".join(
            f"C={lv['concurrency']} {lv['speedup']:.3f} [{lv['speedup_ci_family'][0]:.3f}, "
            f"{lv['speedup_ci_family'][1]:.3f}] {lv['verdict']}"
            if lv.get("speedup") is not None and lv.get("speedup_ci_family") else f"C={lv['concurrency']} {lv['verdict']}"
            for lv in kind.get("levels") or [])
        rows.append({"kind": f"kind {n}", "what": what or "-", "hosts": ", ".join(kind.get("hosts") or []),
                     "verdict": (kind.get("crossover_status") or "-").replace("_", " "),
                     "regions": regions_words(kind.get("regions")), "recommendation": kind.get("recommendation") or "-",
                     "levels": levels or "-"})
    return rows


def render_index_md(index: dict) -> str:
    lines = [f"# Speculative decoding A/B: run `{index['run_id']}`", ""]
    lines.append(f"{index['hosts_complete']} of {index['hosts_total']} host(s) complete.")
    lines.append("")
    lines.append("| host | status | verdict | regions | crossover C (interpolated) | 95% interval | speculate at | "
                 "confounders | report |")
    lines.append("|---|---|---|---|---:|---|---|---:|---|")
    for host, h in index["hosts"].items():
        row = host_row(h)
        report = f"[report]({h['report']})" if h.get("report") else "-"
        lines.append(f"| {host} | {row['status']} | {row['verdict']} | {row['regions']} | {row['crossover']} | "
                     f"{row['interval']} | {row['where']} | {row['confounders']} | {report} |")
    lines.append("")
    for host, h in index["hosts"].items():
        lines.append(f"- **{host}**: {_md(h.get('recommendation'))}")
        lines.extend(f"  - {_md(note)}" for note in host_notes(h))
    lines.append("")
    kinds = kind_rows(index)
    if kinds or index.get("apart"):
        lines.append("## One verdict per kind of node")
        lines.append("")
        method = index.get("kinds_method") or ""
        lines.append(f"{_md(method[:1].upper() + method[1:])}.")
        lines.append("")
    if kinds:
        lines.append("| kind | nodes | verdict | regions | speedup per level [family-wise] |")
        lines.append("|---|---|---|---|---|")
        for row in kinds:
            lines.append(f"| {row['kind']} ({_md(row['what'])}) | {_md(row['hosts'])} | {row['verdict']} | "
                         f"{row['regions']} | {_md(row['levels'])} |")
        lines.append("")
        for row in kinds:
            lines.append(f"- **{row['kind']}**: {_md(row['recommendation'])}")
        lines.append("")
    for host, why in (index.get("apart") or {}).items():
        lines.append(f"- {host} is not pooled: {_md(why)}")
    if index.get("apart"):
        lines.append("")
    return "\n".join(lines)
