# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""A mode's results file on the controller, once its teardown is done (role bench_mode,
tasks/record.yml; action plugin bench_results_file): the GPU state before and after goes into
the file (key ``gpu``), then, for a tagged run (compare_launches, refinement rounds), the file is
filed as ``<mode>@<tag>.json`` and an untagged file set aside before the run is put back.

Standard library only; every write is atomic (a temporary file, then a rename).
"""
from __future__ import annotations

import json
import os

ARGUMENT_SPEC = {
    "results_file": {"type": "path", "required": True},
    "gpu": {"type": "dict", "required": True},
    "tagged_file": {"type": "path"},
    "held_file": {"type": "path"},
}


def _write_json(path: str, doc) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(doc, handle, indent=4, sort_keys=True)
        handle.write("\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def file_results(results_file: str, gpu: dict, tagged_file: str | None = None, held_file: str | None = None) -> dict:
    """Record ``gpu`` in ``results_file`` (when the sweep wrote one), then move it to
    ``tagged_file`` and ``held_file`` back to ``results_file`` (when given and present).
    Returns what was done: recorded (the path written, or None), filed_as, restored."""
    done: dict = {"recorded": None, "filed_as": None, "restored": None}
    if os.path.isfile(results_file):
        with open(results_file, encoding="utf-8") as handle:
            doc = json.load(handle)
        doc["gpu"] = gpu
        _write_json(results_file, doc)
        done["recorded"] = results_file
        if tagged_file:
            os.replace(results_file, tagged_file)
            done["filed_as"] = tagged_file
    if tagged_file and held_file and os.path.isfile(held_file):
        os.replace(held_file, results_file)
        done["restored"] = results_file
    return done
