# Copyright: specbench developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""report.md's sections on the outputs under speculation, the traffic-weighted gain and where the
figures come from (also the one-line verdict).

Rendered from summary.json's ``output_match`` and ``traffic`` (specbench_compare's
``output_match.py`` and ``traffic.py``); ``specbench_report.render_markdown`` places them after
the verdict, and ``specbench_index`` the one-line forms.
"""

from __future__ import annotations

from ansible_collections.specbench.core.plugins.module_utils.specbench_client.labels import emulated_banner


def _md(text) -> str:
    """Text safe inside a Markdown table cell (the report's and the index's one escaping)."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def output_match_lines(summary: dict) -> list[str]:
    """## Outputs unchanged by speculation: per mode, the share matching the baseline's."""
    matches = summary.get("output_match") or {}
    if not matches:
        return []
    minimum = summary.get("output_match_min")
    lines = ["## Outputs unchanged by speculation", ""]
    lines.append(f"The same prompts at C=1, temperature 0, against `{summary.get('baseline_mode')}`'s outputs; a mode "
                 f"below {minimum:g} is a confounder (listed first above).")
    lines.append("")
    lines.append("| mode | match | compared as | first differences | status |")
    lines.append("|---|---:|---|---|---|")
    for mode, m in matches.items():
        share = "-" if m.get("share") is None else f"{100 * m['share']:.0f}% ({m['matched']}/{m['compared']})"
        unit = "token" if m.get("source") == "token_ids" else "char"
        diffs = ", ".join(f"#{d['index']} @{unit} {d['first_difference']}" for d in (m.get("mismatches") or [])[:4])
        source = {"token_ids": "token ids", "text": "text (no ids from the API)"}.get(m.get("source"), "-")
        lines.append(f"| `{mode}` | {share} | {source} | {diffs or '-'} | {m.get('status', '-').replace('_', ' ')} |")
    lines.append("")
    return lines


def traffic_lines(summary: dict) -> list[str]:
    """## Weighed by traffic: each mode's expected gain on the traffic mix, with its interval."""
    traffic = summary.get("traffic")
    if not traffic:
        return []
    source = traffic.get("source") or {}
    lines = ["## Weighed by traffic", ""]
    if traffic.get("error"):
        lines += [f"Not weighed: the traffic could not be read ({_md(traffic['error'])}).", ""]
        return lines
    if source.get("kind") == "prometheus":
        idle = traffic.get("idle_share")
        lines.append(f"Traffic: `{_md(source.get('query'))}` from {source.get('prometheus')}, {source.get('start')} to "
                     f"{source.get('end')} every {source.get('step')} ({traffic.get('samples')} samples"
                     + (f", {100 * idle:.0f}% idle, left out" if idle else "") + ").")
    else:
        lines.append("Traffic: the shares given in `compare_traffic`.")
    mix = ", ".join(f"C={t['concurrency']:g} {100 * t['share']:.0f}%" for t in (traffic.get("traffic") or [])[:12])
    lines.append(f"Mix: {mix}" + ("..." if len(traffic.get("traffic") or []) > 12 else "") + ".")
    lines.append("")
    lines.append("| series | expected gain [95%] | verdict | known | unknown | outside measured range |")
    lines.append("|---|---|---|---:|---:|---:|")
    for name, g in (traffic.get("gains") or {}).items():
        gain = "-" if g.get("gain") is None else f"{g['gain']:.3f}x [{g['gain_ci95'][0]:.3f}, {g['gain_ci95'][1]:.3f}]"
        lines.append(f"| `{name}` | {gain} | {g.get('verdict')} | {100 * g['known_share']:.0f}% | "
                     f"{100 * g['unknown_share']:.0f}% | {100 * g['outside_share']:.0f}% |")
    lines.append("")
    for name, g in (traffic.get("gains") or {}).items():
        lines.append(f"- `{name}`: {_md(g.get('text'))}.")
    lines.append("")
    lines.append("The gain is by tokens: the tokens the series serves over the mix divided by the tokens the baseline "
                 "serves over it (each concurrency weighed by its time share x the baseline's throughput there; the "
                 "speedup interpolated linear in log C between measured levels). Every level counts, an unclear one "
                 "with its uncertainty; traffic next to a failed, saturated or unmeasured level is unknown and traffic "
                 "outside the measured levels is never extrapolated: neither counts as a gain. A served series is "
                 "expected from the run, not measured: serve.yml's proof measures it.")
    lines.append("")
    return lines


REAL_GPU_BACKENDS = ("nvml", "nvidia-smi")


def gpu_words(gpu: dict) -> str:
    """A mode's GPU facts (summary ``servers.<mode>.gpu``) in words: '8 x NVIDIA H100 80GB HBM3;
    driver 550.54.15; read through nvml'."""
    names = gpu.get("gpus") or []
    counts: dict = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    listed = ", ".join(f"{n} x {name}" for name, n in counts.items()) or "none listed"
    backend = gpu.get("backend")
    how = "emulated (the emulator's device folder)" if backend == "emulated" else f"read through {backend}"
    driver = f"; driver {gpu['driver_version']}" if gpu.get("driver_version") else ""
    return f"{listed}{driver}; {how}"


def figure_source(info: dict) -> str:
    """Where one mode's measured figures come from: emulated, a real engine on real GPUs, or a real
    engine without a GPU record (summary ``servers.<mode>``)."""
    emulated = bool(emulated_banner({"mode": info}))
    gpu = info.get("gpu") or {}
    engine = info.get("engine") or "engine not recorded"
    if emulated:
        return "emulated: the specbench emulator's performance model of the node, not a measurement of it"
    if gpu.get("backend") in REAL_GPU_BACKENDS:
        return (f"measured: a real engine ({engine} {info.get('version') or 'version unknown'}) on real GPUs: "
                f"{gpu_words(gpu)}")
    return (f"measured: a real engine ({engine} {info.get('version') or 'version unknown'}); no GPU was recorded "
            "(a CPU build, or a results file from before the GPU record)")


def provenance_lines(summary: dict) -> list[str]:
    """## Where the figures come from: each mode's measurements (emulated or a real engine, on real
    GPUs or not) and what specbench computed from them."""
    servers = summary.get("servers") or {}
    if not servers:
        return []
    lines = ["## Where the figures come from", ""]
    for mode, info in servers.items():
        lines.append(f"- `{mode}`'s throughput, latencies and accept lengths: {_md(figure_source(info or {}))}.")
    lines.append("- Computed by specbench from those figures, nothing measured again: every speedup and its "
                 "intervals, the verdicts, regions, crossover and bracket, the recommendation"
                 + (", the adaptive table" if summary.get("adaptive_table") else "")
                 + (", the traffic gain" if summary.get("traffic") else "") + " and the plots.")
    lines.append("")
    return lines


def verdict_line(summary: dict) -> str:
    """One line for a host: its status, the verdict's kind and the recommendation (AWX's set_stats,
    the playbook's last message)."""
    status = "" if summary.get("complete") else "INCOMPLETE: "
    kind = (summary.get("crossover_status") or "unknown").replace("_", " ")
    return f"{summary.get('host')}: {status}{kind}: {summary.get('recommendation')}"
