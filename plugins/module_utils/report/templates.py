# Copyright: specbench developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The Jinja2 templates of report.html and index.html, as strings.

Kept in Python so that they travel wherever the collection does (a Galaxy install read-only, a
zipped module_utils) with no data file to find. Rendered by ``report.html`` with autoescape on:
every text is escaped, the only markup is the templates' own and ``inline``'s (code spans,
bold, links). Self-contained: inline CSS, plots as data URIs, no script, nothing fetched.
"""

from __future__ import annotations

STYLE = """
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1d1d1f;
       max-width: 1180px; margin: 0 auto; padding: 1.2em 1.5em 3em; }
h1 { font-size: 1.6em; margin: 0.2em 0 0.4em; }
h2 { font-size: 1.25em; border-bottom: 1px solid #ddd; padding-bottom: 0.2em; margin-top: 1.8em; }
code, pre { font-family: ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace; font-size: 0.88em; }
code { background: #f3f3f5; padding: 0 0.25em; border-radius: 3px; }
pre { background: #f6f8fa; padding: 0.7em 0.9em; overflow-x: auto; border-radius: 4px; }
pre code { background: none; padding: 0; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.9em; }
th, td { border: 1px solid #d0d7de; padding: 0.25em 0.55em; vertical-align: top; }
th { background: #f6f8fa; text-align: left; }
td.num, th.num { text-align: right; }
.table-wrap { overflow-x: auto; }
blockquote { margin: 0.8em 0; padding: 0.5em 1em; border-left: 5px solid #8c959f; background: #f6f8fa; }
blockquote.emulated { border-color: #bf8700; background: #fff8c5; }
blockquote.incomplete { border-color: #cf222e; background: #ffebe9; }
.card { border: 2px solid #0969da; border-radius: 8px; padding: 0.8em 1.2em; margin: 1em 0 1.4em; background: #f6faff; }
.card.incomplete { border-color: #cf222e; background: #fff5f5; }
.card h2 { margin-top: 0.2em; }
.card .recommendation { font-size: 1.15em; font-weight: 600; margin: 0.2em 0 0.6em; }
.card dl { display: grid; grid-template-columns: max-content 1fr; gap: 0.25em 1em; margin: 0; }
.card dt { font-weight: 600; color: #57606a; }
.card dd { margin: 0; }
.chip { display: inline-block; padding: 0.05em 0.55em; border-radius: 1em; margin: 0 0.3em 0.2em 0;
        font-size: 0.9em; border: 1px solid #d0d7de; background: #fff; }
.v-pays { background: #dafbe1; border-color: #1a7f37; }
.v-loses { background: #ffebe9; border-color: #cf222e; }
.v-unclear { background: #fff8c5; border-color: #bf8700; }
.v-failed, .v-saturated, .v-missing { background: #eaeef2; border-color: #57606a; }
figure { margin: 1em 0 1.6em; }
figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { font-size: 0.9em; color: #57606a; }
nav { font-size: 0.9em; margin: 0.5em 0 1em; }
nav a { margin-right: 0.8em; }
footer { margin-top: 3em; font-size: 0.85em; color: #57606a; }
@media print { nav { display: none; } figure, table { break-inside: avoid; } }
"""

MACROS = """
{%- macro render_blocks(blocks) -%}
{%- for b in blocks -%}
{%- if b.kind == "p" %}
<p>{{ b.text | inline }}</p>
{%- elif b.kind == "h" %}
<h3>{{ b.text | inline }}</h3>
{%- elif b.kind == "list" %}
<ul>
{%- for item in b["items"] %}
<li>{{ item.text | inline }}
{%- if item.sub %}<ul>{% for sub in item.sub %}<li>{{ sub | inline }}</li>{% endfor %}</ul>{% endif %}</li>
{%- endfor %}
</ul>
{%- elif b.kind == "quote" %}
<blockquote class="{{ b.cls }}">{{ render_blocks(b.blocks) }}</blockquote>
{%- elif b.kind == "code" %}
<pre><code>{{ b.text }}</code></pre>
{%- elif b.kind == "image" %}
<p>{{ b.alt }} ({{ b.src }})</p>
{%- elif b.kind == "table" %}
<div class="table-wrap"><table>
<thead><tr>{% for cell in b.header %}<th class="{{ b.align[loop.index0] }}">{{ cell | inline }}</th>{% endfor %}</tr></thead>
<tbody>
{%- for row in b.rows %}
<tr>{% for cell in row %}<td class="{{ b.align[loop.index0] }}{% if cell in verdicts %} v-{{ cell }}{% endif %}">
{{- cell | inline }}</td>{% endfor %}</tr>
{%- endfor %}
</tbody></table></div>
{%- endif -%}
{%- endfor -%}
{%- endmacro -%}
"""

REPORT = """{% from "macros" import render_blocks %}<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{ title }}</title>
<style>{{ style }}</style>
</head>
<body>
<header id="top">
<h1>{{ title | inline }}</h1>
{{ render_blocks(preamble) }}
</header>
<nav><a href="#verdict">Verdict</a>{% for s in sections %}<a href="#{{ s.id }}">{{ s.title | plain }}</a>{% endfor %}</nav>
<section id="verdict" class="card{% if not summary.complete %} incomplete{% endif %}">
<h2>Verdict</h2>
<p class="recommendation">{{ summary.recommendation or "No recommendation." }}</p>
<dl>
<dt>Status</dt><dd>{{ summary.status or "unknown" }}{% if not summary.complete %} (INCOMPLETE: see above){% endif %}</dd>
<dt>Verdict</dt><dd>{{ (summary.crossover_status or "unknown") | replace("_", " ") }}{% if summary.spec_mode %}
 ({{ summary.spec_mode }} against {{ summary.baseline_mode }}){% endif %}</dd>
{%- if summary.regions %}
<dt>Regions</dt><dd>{% for r in summary.regions %}<span class="chip v-{{ r.verdict }}">{{ r.verdict }}
 C={{ "%g" | format(r.from_concurrency) }}
{%- if r.to_concurrency != r.from_concurrency %} to {{ "%g" | format(r.to_concurrency) }}{% endif %}</span>
{%- endfor %}</dd>
{%- endif %}
{%- if summary.crossover_bracket %}
<dt>Bracket</dt><dd>{{ bracket }} (the last level that clearly pays and the first that clearly loses, family-wise)</dd>
{%- endif %}
{%- if summary.crossover_ci95_text %}
<dt>Crossover 95%</dt><dd>C = {{ summary.crossover_ci95_text }}{% if summary.crossover_concurrency is not none %};
 interpolated estimate {{ crossover }}{% endif %}</dd>
{%- endif %}
<dt>Confounders</dt><dd>{{ (summary.confounders or []) | length }}{% if summary.confounders %} (listed below){% endif %}</dd>
</dl>
{{ render_blocks(verdict_blocks) }}
</section>
{%- for s in sections %}
<section id="{{ s.id }}">
<h2>{{ s.title | inline }}</h2>
{%- if s.figures %}
{%- for f in s.figures %}
<figure>
<img src="data:image/png;base64,{{ f.data }}" alt="{{ f.title }}" width="{{ f.width }}" height="{{ f.height }}">
<figcaption><strong>{{ f.title }}</strong>{% if f.caption %}: {{ f.caption }}{% endif %}</figcaption>
</figure>
{%- endfor %}
{%- else %}
{{ render_blocks(s.blocks) }}
{%- endif %}
</section>
{%- endfor %}
<footer>Rendered by specbench.core from summary.json, as report.md is{% if generated %}; {{ generated }}{% endif %}.
Self-contained: opens offline.</footer>
</body>
</html>
"""

INDEX = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Speculative decoding A/B: run {{ index.run_id }}</title>
<style>{{ style }}</style>
</head>
<body>
<h1>Speculative decoding A/B: run <code>{{ index.run_id }}</code></h1>
<section id="hosts">
<p>{{ index.hosts_complete }} of {{ index.hosts_total }} host(s) complete.</p>
<div class="table-wrap"><table>
<thead><tr><th>host</th><th>status</th><th>verdict</th><th>regions</th><th class="num">crossover C (interpolated)</th>
<th>95% interval</th><th>speculate at</th><th class="num">confounders</th><th>report</th><th>recommendation</th></tr></thead>
<tbody>
{%- for host, h, row, notes in hosts %}
<tr class="{{ 'complete' if h.get('complete') else 'incomplete' }}">
<td>{{ host }}</td><td>{{ row.status }}</td><td>{{ row.verdict }}</td><td>{{ row.regions }}</td>
<td class="num">{{ row.crossover }}</td><td>{{ row.interval }}</td><td>{{ row.where }}</td>
<td class="num">{{ row.confounders }}</td>
<td>{% if h.get("report_html") %}<a href="{{ h.report_html }}">report</a> (<a href="{{ h.report }}">md</a>)
{%- else %}-{% endif %}</td>
<td>{{ h.recommendation }}{% if notes %}<ul>{% for note in notes %}<li>{{ note }}</li>{% endfor %}</ul>{% endif %}</td>
</tr>
{%- endfor %}
</tbody></table></div>
</section>
{%- if kinds or index.apart %}
<section id="kinds">
<h2>One verdict per kind of node</h2>
<p>{{ index.kinds_method }}.</p>
{%- if kinds %}
<div class="table-wrap"><table>
<thead><tr><th>kind</th><th>nodes</th><th>verdict</th><th>regions</th><th>speedup per level [family-wise]</th>
<th>recommendation</th></tr></thead>
<tbody>
{%- for row in kinds %}
<tr><td>{{ row.kind }} ({{ row.what }})</td><td>{{ row.hosts }}</td><td>{{ row.verdict }}</td><td>{{ row.regions }}</td>
<td>{{ row.levels }}</td><td>{{ row.recommendation }}</td></tr>
{%- endfor %}
</tbody></table></div>
{%- endif %}
{%- if index.apart %}<ul>
{%- for host, why in index.apart.items() %}<li>{{ host }} is not pooled: {{ why }}</li>{% endfor %}
</ul>{% endif %}
</section>
{%- endif %}
<footer>Rendered by specbench.core from index.json, as index.md is. Each report opens offline; keep the
host folders beside this file for the links.</footer>
</body>
</html>
"""

TEMPLATES = {"macros": MACROS, "report.html": REPORT, "index.html": INDEX}
