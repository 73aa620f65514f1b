# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""The report: what the controller writes about a run.

- ``results_file``: a mode's results file, rewritten after each level and given the GPU state;
- ``render``: a host's report.md, summary.csv and plots from its summary (matplotlib);
- ``sections``, ``breakdown``: the report's longer sections (the served configuration,
  the per-category breakdown);
- ``index``: the run's fleet index (index.md, index.json);
- ``html``, ``templates``: report.html and index.html, the same report self-contained (Jinja2
  templates kept as Python strings, rendered from report.md's text and the summary; plots inline).

Imports: the standard library, matplotlib and Jinja2 (when called: the controller's),
specbench_compare and specbench_client (its labels);
nothing imports the report but the plugins (the top layer).
"""
