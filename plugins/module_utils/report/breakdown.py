# Copyright: specbench developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The report's "why" parts (specbench_compare/breakdown.py computes them): each level's
speedup beside its two terms, the per-category table, the prompt set used, and the plot of
accept length and step-time ratio against concurrency. Rendering only."""

from __future__ import annotations

from ansible_collections.specbench.core.plugins.module_utils.specbench_client.labels import emulated_banner

TERMS_PLOT = "speedup-terms.png"


def _f(value, digits: int = 2) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def prompt_set_lines(summary: dict) -> list[str]:
    """Which prompt set each mode used (the results' settings.prompt_set)."""
    out = []
    for mode, given in (summary.get("bench_settings") or {}).items():
        settings = given or {}
        info = settings.get("prompt_set")
        if info:
            cats = ", ".join(f"{k} ({v})" for k, v in (info.get("categories") or {}).items())
            out.append(f"- `{mode}`: {info.get('count')} prompts from `{info.get('source')}` (format "
                       f"{info.get('format')}, lengths {settings.get('lengths', 'fixed')}); categories: {cats}")
        else:
            out.append(f"- `{mode}`: {settings.get('prompts_source') or 'synthesized'} prompts "
                       f"(seed {settings.get('seed')}, {settings.get('input_len')} in / {settings.get('output_len')} out)")
    return (["## Prompt set", ""] + out + [""]) if out else []


def terms_table(comp: dict, spec_mode: str) -> list[str]:
    """Per level: speedup [95%], accept length, step-time ratio, accept / ratio."""
    rows = [lv for lv in comp.get("levels") or [] if lv.get("accept_length") is not None]
    if not rows:
        return []
    lines = [f"## Why the crossover falls there ({spec_mode})", "",
             "Speedup ~= accept length / step-time ratio, where step-time ratio = (speculative mean ITL x accept "
             "length) / baseline mean ITL: the cost of one verify step over one plain decode step at that level. "
             "Acceptance falling lowers the first term; verification getting expensive at the batch size raises "
             "the second. The two terms cover decode only (TTFT and prefill left out).", "",
             "| C | speedup [95%] | accept length | step-time ratio | accept / ratio | verdict |",
             "|---:|---:|---:|---:|---:|---|"]
    for lv in rows:
        ci = lv.get("speedup_ci95")
        speed = _f(lv.get("speedup"), 3) + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")
        lines.append(f"| {lv['concurrency']} | {speed} | {_f(lv.get('accept_length'))} | "
                     f"{_f(lv.get('step_time_ratio'), 3)} | {_f(lv.get('speedup_from_terms'), 3)} | {lv.get('verdict')} |")
    lines.append("")
    return lines


def category_table(comp: dict, spec_mode: str, servers: dict) -> list[str]:
    """Per category per level: accept length, throughput share, speedup (labelled emulated where a
    mode ran on the emulator)."""
    rows = [lv for lv in comp.get("levels") or [] if lv.get("categories")]
    if not rows:
        return []
    emulated = bool(emulated_banner(servers))
    lines = [f"## Per category ({spec_mode}{', EMULATED' if emulated else ''})", ""]
    if emulated:
        lines.append("Emulated: the emulator's per-category acceptance tables (it reads the category from the built-in "
                     "set's prompt text), not a measurement of a model.")
        lines.append("")
    lines.append("Per request, by its prompt's category, over the requests finished in each window. In a mixed batch "
                 "every request shares the step, so a category's decode speedup is its accept length / the level's "
                 "step-time ratio; its interval adds the category's own sampling error to the level's.")
    lines.append("")
    lines.append("| C | category | accept length | throughput share | decode speedup [95%] | verdict |")
    lines.append("|---:|---|---:|---:|---:|---|")
    for lv in rows:
        for cat in lv["categories"]:
            ci = cat.get("speedup_ci95")
            speed = _f(cat.get("speedup"), 3) + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")
            lines.append(f"| {lv['concurrency']} | {cat['category']} | {_f(cat.get('accept_length'))} | "
                         f"{_f(cat.get('throughput_share'), 3)} | {speed} | {cat.get('verdict') or ''} |")
    lines.append("")
    paying = comp.get("categories_paying")
    if paying:
        lines.append(f"Which categories keep speculation paying longest: {paying['text']}.")
        lines.append("")
    return lines


def render_terms_plot(plt, summary: dict, finish_axes, levels: list) -> object | None:
    """Accept length and step-time ratio against concurrency (one figure, two axes), or None."""
    comps = summary.get("comparisons") or {}
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9.0, 3.8))
    drawn = False
    for spec_mode, comp in comps.items():
        pts = [lv for lv in comp.get("levels") or [] if lv.get("step_time_ratio") is not None]
        if not pts:
            continue
        drawn = True
        xs = [lv["concurrency"] for lv in pts]
        ax1.plot(xs, [lv["accept_length"] for lv in pts], marker="o", markersize=4, label=spec_mode)
        ax2.plot(xs, [lv["step_time_ratio"] for lv in pts], marker="o", markersize=4, label=spec_mode)
    if not drawn:
        plt.close(fig)
        return None
    ax1.set_ylabel("accept length (tokens per verify step)")
    ax2.set_ylabel("step-time ratio (verify step / plain step)")
    ax2.axhline(1.0, color="black", linewidth=0.8)
    ax1.set_title("Acceptance", fontsize=10)
    ax2.set_title("Cost of a step (speedup ~= accept / ratio)", fontsize=10)
    for ax in (ax1, ax2):
        finish_axes(ax, levels)
    fig.suptitle(f"Speedup's two terms: {summary.get('host')}", fontsize=10)
    fig.tight_layout()
    return fig


def separate_lines(summary: dict) -> list[str]:
    """bench_categories: separate: the crossover of each category, and who pays longest."""
    cross = summary.get("category_crossovers")
    if not cross:
        return []
    emulated = " (EMULATED)" if emulated_banner(summary.get("servers") or {}) else ""
    lines = [f"## Crossover per category{emulated}", ""]
    if summary.get("headline_category"):
        lines.append(f"Each category ran separately; the verdict and tables above are `{summary['headline_category']}`'s.")
        lines.append("")
    lines += ["| category | crossover | clearly pays up to C |", "|---|---|---:|"]
    for name, row in cross["categories"].items():
        upto = "" if row["pays_up_to"] is None else str(row["pays_up_to"])
        lines.append(f"| {name} | {row.get('crossover_text') or ''} | {upto} |")
    lines += ["", f"Which categories keep speculation paying longest: {cross['text']}.", ""]
    return lines
