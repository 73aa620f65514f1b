# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""The report: what the controller writes about a run.

- ``results_file``: a mode's results file, rewritten after each level and given the GPU state;
- ``render``: a host's report.md, summary.csv and plots from its summary (matplotlib);
- ``sections``, ``breakdown``: the report's longer sections (the served configuration,
  the per-category breakdown);
- ``index``: the run's fleet index (index.md, index.json).

Imports: the standard library, matplotlib, specbench_compare and specbench_client (its labels);
nothing imports the report but the plugins (the top layer).
"""
