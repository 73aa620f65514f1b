"""Role bench_mode's last step on the controller (module_utils/report/results_file, run by the
action plugin bench_results_file): the GPU state into the results file, then a tagged run filed
under its tag and the untagged file set aside before it put back. Unit tests, well under a second."""
from __future__ import annotations

import json
import stat

from ansible_collections.specbench.core.plugins.module_utils.report.results_file import file_results

GPU = {"before": {"clean": True}, "after": {"clean": True}, "killed_before": [], "killed_after": [{"pid": 7}]}


def test_the_gpu_state_goes_into_the_results_file_and_the_rest_is_kept(tmp_path):
    results = tmp_path / "baseline.json"
    results.write_text(json.dumps({"mode": "baseline", "levels": [{"concurrency": 1}], "gpu": None}))
    done = file_results(str(results), GPU)
    assert done == {"recorded": str(results), "filed_as": None, "restored": None}
    doc = json.loads(results.read_text())
    assert doc == {"mode": "baseline", "levels": [{"concurrency": 1}], "gpu": GPU}
    assert stat.S_IMODE(results.stat().st_mode) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["baseline.json"]  # no temporary file left


def test_a_tagged_run_is_filed_under_its_tag_and_the_untagged_file_is_put_back(tmp_path):
    results, tagged, held = tmp_path / "eagle3.json", tmp_path / "eagle3@refine1.json", tmp_path / ".eagle3.json.held"
    held.write_text('{"mode": "eagle3", "run": "untagged"}')
    results.write_text('{"mode": "eagle3", "run": "refine1"}')
    done = file_results(str(results), GPU, str(tagged), str(held))
    assert done == {"recorded": str(results), "filed_as": str(tagged), "restored": str(results)}
    assert json.loads(tagged.read_text()) == {"mode": "eagle3", "run": "refine1", "gpu": GPU}
    assert json.loads(results.read_text()) == {"mode": "eagle3", "run": "untagged"}
    assert not held.exists()


def test_nothing_measured_writes_nothing_but_still_puts_the_untagged_file_back(tmp_path):
    results, tagged, held = tmp_path / "ngram.json", tmp_path / "ngram@launch2.json", tmp_path / ".ngram.json.held"
    nothing = {"recorded": None, "filed_as": None, "restored": None}
    assert file_results(str(results), GPU, str(tagged), str(held)) == nothing
    held.write_text('{"mode": "ngram"}')
    assert file_results(str(results), GPU, str(tagged), str(held))["restored"] == str(results)
    assert json.loads(results.read_text()) == {"mode": "ngram"} and not tagged.exists()
