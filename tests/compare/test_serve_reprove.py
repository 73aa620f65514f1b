"""serve.yml run twice on the emulator with ``serve_reprove_unclear: relaunch``: a proof that was only unclear is
relaunched on the re-run (a new server process, its references measured again just before it), not proved in place,
and its second look is a launch of its own that the sequence pools with the first (``launches_pooled`` 2).

The accuracy run's llama host (compare_kit.accuracy_run: static EAGLE-3 served, held to its own measurement in the
run, which both launches share) is served with ``serve_match_margin`` 0.001: an interval as narrow as +-0.1% never occurs, so a
configuration equal to its reference reads ``unclear`` wherever it does not read clearly other (at most the proof's
5% error rate over its levels), and the re-run has an only-unclear proof to relaunch.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import compare_kit
import pytest
from compare_kit import run_playbook
from specbench_testkit import PlaybookRun, inventory, kill_node_servers, shared_run

from ansible_collections.specbench.core.plugins.module_utils import specbench_compare as cmp

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

RUN_ID = "acc"


@pytest.fixture(scope="module")
def reproved(tmp_path_factory):
    _compare, compared, _nodes = compare_kit.accuracy_run(tmp_path_factory)

    def build(tmp: Path):
        node, unused, hosts = compare_kit.llama_serve_host(tmp, compared, RUN_ID)
        extra = {"results_dir": str(tmp / "results"), "run_id": RUN_ID, "serve_match_margin": 0.001,
                 "serve_on_regression": "keep", "serve_reprove_unclear": "relaunch"}
        run = None
        try:
            for name in ("serve", "again"):
                run = run_playbook(tmp / name, "playbooks/serve.yml", inventory(hosts), extravars=extra, timeout=300)
                run.save(tmp / f"{name}.json")
                shutil.copy(tmp / "results" / RUN_ID / "llama" / "serve.json", tmp / f"{name}-serve.json")
        finally:
            kill_node_servers(node)
        return run

    unused, tmp = shared_run(tmp_path_factory, "serve-reprove", build)
    runs = {name: PlaybookRun.load(tmp / f"{name}.json") for name in ("serve", "again")}
    docs = {name: json.loads((tmp / f"{name}-serve.json").read_text()) for name in ("serve", "again")}
    return runs, docs


def test_an_only_unclear_proof_is_relaunched_and_its_launches_pooled(reproved):
    runs, docs = reproved
    first, second = docs["serve"], docs["again"]
    assert runs["serve"].rc == 0 and runs["again"].rc == 0, runs["again"].stdout[-6000:]
    if not cmp.unclear_only(first):
        pytest.skip(f"look 1 read clearly other somewhere (the proof's 5% error rate): {first['text']}")
    said = " ".join(runs["again"].stdout.split())  # the console wraps a long message
    assert "it was only unclear, so it is relaunched" in said, runs["again"].stdout[-6000:]
    assert "proving it again where it runs" not in said
    assert runs["again"].task_started("Launch SGLang or the emulator"), "the re-run launched nothing"
    assert second["service"]["pid"] != first["service"]["pid"]
    assert [lo["look"] for lo in second["looks"]] == [1, 2] and second["looks"][0] == first["looks"][0]
    assert second["looks"][1]["in_place"] is False
    assert second["looks"][1]["server"]["pid"] == second["service"]["pid"]
    for row in second["levels"]:
        # Static EAGLE-3 is its own reference: the run's figure, one measurement both launches share (never narrower
        # for it than that measurement's own launch part).
        assert row["best_static_mode"] == "eagle3" and not row["reference_now"], row
        both = all(lo["levels"][second["levels"].index(row)]["ratio_ci_family"] for lo in second["looks"])
        assert row["launches_pooled"] == (2 if both else row["launches_pooled"]), row
        if both:  # two launches pooled: the combined interval lies within look 1's
            one = second["looks"][0]["levels"][second["levels"].index(row)]["ratio_ci_family"]
            low, high = row["ratio_ci_combined"] or (None, None)
            # (to the fourth decimal the stored intervals keep)
            assert low is None or (one[0] - 1e-3 <= low <= high <= one[1] + 1e-3), row
