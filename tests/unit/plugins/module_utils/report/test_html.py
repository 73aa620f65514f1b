"""report.html and index.html (module_utils/report/html.py): rendered from report.md's text and the
summary by Jinja2, verdict first, plots inline, escaped, nothing fetched. The browser test on a real
emulated run is tests/compare/test_report_html.py; these run in well under a second each."""

from __future__ import annotations

import base64
import re

from compare_synth import analytic_results, level, result

from ansible_collections.specbench.core.plugins.module_utils import specbench_compare as cmp
from ansible_collections.specbench.core.plugins.module_utils.report import html
from ansible_collections.specbench.core.plugins.module_utils.report import index as idx
from ansible_collections.specbench.core.plugins.module_utils.report import render as rep
from ansible_collections.specbench.core.plugins.module_utils.report.sections import verdict_line

PNG = b"\x89PNG\r\n\x1a\n"


def kimi_summary(**kw) -> dict:
    base, spec, _unused1 = analytic_results("kimi-k2.5-8x-rtx-pro-6000", [1, 2, 5, 10])
    return cmp.summarize_host({"baseline": base, "eagle3": spec}, "node-a", "run-1", **kw)


def rendered(summary: dict, tmp_path, plots: bool = True) -> tuple[str, str]:
    names = rep.render_plots(summary, str(tmp_path), dpi=40) if plots else {}
    markdown = rep.render_markdown(summary, names)
    images = {kind: (tmp_path / name).read_bytes() for kind, name in names.items()}
    return markdown, html.render_html(summary, markdown, images, rep.PLOT_TITLES)


def test_the_report_opens_with_the_verdict_then_the_plots_inline_and_every_section_of_report_md(tmp_path):
    summary = kimi_summary()
    markdown, page = rendered(summary, tmp_path)
    card = page.index('<section id="verdict" class="card')
    assert page.index("EMULATED, NOT MEASURED ON GPUS") < card  # the banner stays above everything, as in report.md
    order = [page.index(f'<h2>{title}') for title in ("Verdict", "Plots", "Confounders (0)", "eagle3 against baseline",
                                                     "Where the figures come from", "Method")]
    assert card < order[0] and order == sorted(order)
    # The verdict and the recommendation first, each once: report.md's Verdict section is the card's.
    assert page.count("<h2>Verdict</h2>") == 1 and page.count('id="verdict"') == 1
    recommendation = str(html.inline(summary["recommendation"]))
    assert page.count(recommendation) == 1 and page.index(recommendation) < order[1]
    assert "<strong>Recommendation</strong>" not in page and "<strong>Regions</strong>" not in page
    crossover = next(line[2:] for line in markdown.splitlines() if line.startswith("- **Crossover"))
    assert page.index(str(html.inline(crossover))) < order[1]  # the rest of report.md's Verdict, in the card
    # Every section of report.md is there: one text, two layouts.
    for heading in re.findall(r"^## (.+)$", markdown, flags=re.M):
        assert f"<h2>{html.inline(heading)}</h2>" in page, heading
    assert "Speculate (eagle3) up to concurrency 1" in page and "C=1 to C=2" in page
    # The plots: speedup first, each a PNG data URI that decodes, with its size; nothing external.
    uris = re.findall(r'<img src="data:image/png;base64,([^"]+)" alt="([^"]+)" width="(\d+)" height="(\d+)"', page)
    assert [alt for _unused, alt, _w, _h in uris] == ["Speedup", "Output throughput", "Per-stream decode speed",
                                                     "Latency (TTFT p50 and TPOT)", "p99 latency (TPOT and TTFT) with intervals",
                                                     "Accept length and step-time ratio"]
    for data, _alt, width, height in uris:
        raw = base64.b64decode(data, validate=True)
        assert raw.startswith(PNG) and html.png_size(raw) == (int(width), int(height))
    assert "<script" not in page and not re.search(r'(src|href)="(https?:)?//', page)
    # The level table keeps both intervals; the family-wise one is the verdict's.
    assert "family-wise: all levels at once, decides the verdict" in page
    family = summary["comparisons"]["eagle3"]["levels"][0]["speedup_ci_family"]
    assert f"[{family[0]:,.3f}, {family[1]:,.3f}]" in page


def test_verdicts_stay_as_they_are_and_an_incomplete_report_says_so_first(tmp_path):
    base = result("baseline", [level(1, 92.6), level(4, 300.0), level(8, 500.0)])
    spec = result("eagle3", [level(1, 96.1, accept=2.2), level(4, 301.0, accept=2.2, rel_half=0.2),
                             level(8, None, error="every request failed")])
    summary = cmp.summarize_host({"baseline": base, "eagle3": spec}, "node-a", "run-1",
                                 modes=["baseline", "eagle3", "ngram"],
                                 outcomes={"ngram": {"status": "failed", "error": "launch of ngram: exited"}})
    _unused, page = rendered(summary, tmp_path, plots=False)
    verdicts = [lv["verdict"] for lv in summary["comparisons"]["eagle3"]["levels"]]
    assert "unclear" in verdicts and "failed" in verdicts
    for verdict in set(verdicts):
        assert f'v-{verdict}">{verdict}</td>' in page
    assert page.index("INCOMPLETE") < page.index('id="verdict"')
    assert '<blockquote class="incomplete">' in page and 'class="card incomplete"' in page
    assert "ngram: failed: launch of ngram: exited" in page
    assert 'id="plots"' not in page  # no plots drawn: no empty section


def test_every_text_is_escaped_and_markdown_escapes_are_undone():
    summary = kimi_summary()
    summary["recommendation"] = "<script>alert(1)</script> & | pipes"
    summary["confounders"] = [{"kind": "x", "severity": "error", "text": 'a <b>"bold"</b> | cell'}]
    page = html.render_html(summary, rep.render_markdown(summary), {})
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt; &amp; | pipes" in page
    assert "a &lt;b&gt;&#34;bold&#34;&lt;/b&gt; | cell" in page and "\\|" not in page


def test_markdown_blocks_reads_the_subset_the_report_writes():
    blocks = html.markdown_blocks(["> **INCOMPLETE**: 1", ">", "> - why", "", "| C | a \\| b |", "|---:|---|",
                                   "| 1 | x |", "", "- one", "  - sub", "- two", "", "```json", "{\"1\": 2}", "```",
                                   "text", "more"])
    assert [b["kind"] for b in blocks] == ["quote", "table", "list", "code", "p"]
    assert blocks[0]["cls"] == "incomplete" and blocks[0]["blocks"][1]["items"][0]["text"] == "why"
    assert blocks[1]["header"] == ["C", "a \\| b"] and blocks[1]["align"] == ["num", ""] and blocks[1]["rows"] == [["1", "x"]]
    assert blocks[2]["items"] == [{"text": "one", "sub": ["sub"]}, {"text": "two", "sub": []}]
    assert blocks[3]["text"] == '{"1": 2}' and blocks[4]["text"] == "text more"
    assert str(html.inline("`a|b` **c** [r](x/report.html) [j](javascript:x)")) == \
        '<code>a|b</code> <strong>c</strong> <a href="x/report.html">r</a> <a href="#">j</a>'


def test_the_fleet_index_links_each_report_and_lists_hosts_without_one():
    index = idx.build_index("run-1", {"node-a": kimi_summary()}, {"node-b": "unreachable <ssh>"})
    assert index["hosts"]["node-a"]["report_html"] == "node-a/report.html"
    page = html.render_index_html(index)
    assert '<a href="node-a/report.html">report</a> (<a href="node-a/report.md">md</a>)' in page
    assert "node-b" in page and "unreachable &lt;ssh&gt;" in page and "<script" not in page
    row = idx.host_row(index["hosts"]["node-a"])
    assert f"| node-a | complete | crosses | {row['regions']} | 1.29 | 1 to 2 |" in idx.render_index_md(index)


def test_the_one_line_verdict_names_the_host_and_an_incomplete_run():
    assert verdict_line(kimi_summary()).startswith("node-a: crosses: Speculate (eagle3) up to concurrency 1")
    base, _unused1, _unused2 = analytic_results("kimi-k2.5-8x-rtx-pro-6000", [1, 2])
    summary = cmp.summarize_host({"baseline": base}, "node-b", "run-1", modes=["baseline", "eagle3"],
                                 outcomes={"eagle3": {"status": "failed", "error": "launch of eagle3: exited"}})
    assert verdict_line(summary).startswith("node-b: INCOMPLETE: ")


def test_where_the_figures_come_from_names_emulated_real_gpus_and_what_was_computed():
    gpu = {"before": {"backend": "nvml", "driver_version": "550.54.15", "clean": True,
                      "gpus": [{"index": 0, "name": "NVIDIA H100 80GB HBM3"}, {"index": 1, "name": "NVIDIA H100 80GB HBM3"}]},
           "after": {"clean": True}}
    base, spec, _unused = analytic_results("llama-3.1-8b-1x-h100", [8, 16])
    for res in (base, spec):
        res.update(engine="sglang", gpu=gpu)
    spec["engine"] = "emulator"
    summary = cmp.summarize_host({"baseline": base, "eagle3": spec}, "node-a", "run-1")
    text = rep.render_markdown(summary)
    section = text[text.index("## Where the figures come from"):text.index("## Method")]
    assert ("`baseline`'s throughput, latencies and accept lengths: measured: a real engine (sglang 0.5.23) on real "
            "GPUs: 2 x NVIDIA H100 80GB HBM3; driver 550.54.15; read through nvml.") in section
    assert "`eagle3`'s throughput, latencies and accept lengths: emulated" in section
    assert "Computed by specbench from those figures" in section
    assert "  - GPUs: 2 x NVIDIA H100 80GB HBM3; driver 550.54.15; read through nvml" in text
    # An emulated node's first read (before its first launch made the device folder) lists none: the read after does.
    spec["gpu"] = {"before": {"backend": "emulated", "gpus": []},
                   "after": {"backend": "emulated", "driver_version": "590.48.01", "gpus": [{"name": "RTX"}]}}
    assert cmp.gpu_facts(spec) == {"backend": "emulated", "driver_version": "590.48.01", "gpus": ["RTX"]}
