"""serve_proof run whole, twice on one served configuration (issue 53): the second proof is look 2 of the same
sequence, kept in serve-looks.json and serve.json's looks, and the verdict is the two looks combined. Clearly
slower at look 1, a second proof that alone would read "matches" cannot turn it into a pass; a proof in place on
a node that moved since look 1 (the same server's own rate) adds no claim there and says the node changed; a
sequence file that cannot be read stops the proof, naming it."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from ansible.module_utils.common import warnings as ansible_warnings
from ansible.module_utils.testing import patch_module_args
from compare_synth import level, result

from ansible_collections.specbench.core.plugins.modules import serve_proof

LEVELS = [1, 4, 16]
RUN, HOST = "run1", "node"
PLAN = {"mode": "ngram", "engine": "vllm", "schedule": [[1, 1, 4], [2, 32, 0]]}


def write(path: Path, data: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def sweep(mode: str, per_stream: float, half: float = 0.01) -> dict:
    return result(mode, [level(c, per_stream * c, half) for c in LEVELS])


def prove(capsys, tmp_path: Path, served_per_stream: float, pid: int, fail: bool = False, **extra) -> dict:
    host_dir = tmp_path / "results" / RUN / HOST
    # The run: static n-gram 100 tok/s per stream; held to it (one mode: a rollback's check holds to one mode too).
    write(host_dir / "ngram.json", sweep("ngram", 100.0))
    served = write(host_dir / "serve" / RUN / HOST / "ngram.json", sweep("ngram", served_per_stream))
    fresh = write(host_dir / "serve" / "references" / RUN / HOST / "ngram.json", sweep("ngram", 100.0))
    args = {"results_dir": str(tmp_path / "results"), "run_id": RUN, "host": HOST, "served_file": str(served),
            "plan": PLAN, "server": {"base_url": "http://127.0.0.1:1", "pid": pid, "starttime": pid * 10},
            "reference": "ngram", "noise_floor_max_age_days": 0, "references_dir": str(fresh.parent), **extra}
    ansible_warnings._global_warnings.clear()
    with patch_module_args(args), pytest.raises(SystemExit) as exited:
        serve_proof.main()
    out = json.loads(capsys.readouterr().out)
    assert (exited.value.code != 0) == fail, out
    return out


def test_a_second_proof_is_the_second_look_and_cannot_turn_a_clearly_slower_level_into_a_pass(capsys, tmp_path):
    first = prove(capsys, tmp_path, 95.0, pid=11)
    assert first["look"] == 1 and [r["verdict"] for r in first["doc"]["levels"]] == ["worse"] * 3, first["doc"]
    assert first["action"] == "rollback"
    # Relaunched and proved again: alone, this look matches...
    second = prove(capsys, tmp_path, 98.0, pid=12)
    doc = second["doc"]
    assert second["look"] == 2 and doc["sequence"]["look"] == 2 and len(doc["looks"]) == 2
    assert [r["verdict_look"] for r in doc["levels"]] == ["matches"] * 3, doc["levels"]
    # ...but the combined evidence still says clearly slower: no pass, the same action.
    assert [r["verdict"] for r in doc["levels"]] == ["worse"] * 3 and second["verified"] is False
    assert second["action"] == "rollback" and "over 2 looks" in doc["text"]
    assert [r["look_verdicts"] for r in doc["levels"]] == [["worse", "matches"]] * 3
    for row in doc["levels"]:  # the combined interval: look 1's intersected with the two launches pooled
        a = doc["looks"][0]["levels"][doc["levels"].index(row)]["ratio_ci_family"]
        b = row["ratio_ci_pooled"]
        assert row["launches_pooled"] == 2 and b[0] < 0.97 < b[1]  # the launches' mean, 95 and 98 over 100
        assert row["ratio_ci_combined"] == pytest.approx([max(a[0], b[0]), min(a[1], b[1])], abs=1e-4)
    # The sequence planned for serve_planned_looks (3) at look 1: 2.25% of the error rate, then 1.125%.
    assert doc["sequence"]["planned_looks"] == 3
    assert [lo["alpha"] for lo in doc["looks"]] == pytest.approx([0.0225, 0.01125]) and doc["looks"][1]["in_place"] is False
    stored = json.loads((tmp_path / "results" / RUN / HOST / "serve-looks.json").read_text())
    assert stored["sequences"][doc["sequence"]["key"]]["looks"] == doc["looks"]


def test_a_proof_in_place_on_a_node_that_moved_adds_no_claim_and_says_so(capsys, tmp_path):
    prove(capsys, tmp_path, 100.0, pid=21)
    # The same server (pid and start time), its own rate 15% lower now: the node moved since look 1.
    out = prove(capsys, tmp_path, 85.0, pid=21)
    doc = out["doc"]
    assert doc["looks"][1]["in_place"] is True
    assert [r["moved_since_look"] for r in doc["levels"]] == [1, 1, 1]
    assert all(lv["ratio_ci_family"] is None for lv in doc["looks"][1]["levels"])
    # Look 1's verdict stands (it matched), the level says the node changed: not verified, no action.
    assert [r["verdict"] for r in doc["levels"]] == ["matches"] * 3 and doc["node_changed"] == LEVELS
    assert out["verified"] is False and out["action"] is None and "the node changed" in doc["text"]


def test_an_unreadable_sequence_stops_the_proof_naming_it(capsys, tmp_path):
    (tmp_path / "results" / RUN / HOST).mkdir(parents=True)
    (tmp_path / "results" / RUN / HOST / "serve-looks.json").write_text("{not json")
    out = prove(capsys, tmp_path, 100.0, pid=31, fail=True)
    assert "serve-looks.json" in out["msg"] and "move it aside" in out["msg"], out
    assert not (tmp_path / "results" / RUN / HOST / "serve.json").exists()


def test_a_sequence_keeps_its_plan_and_a_plan_of_no_looks_is_refused_before_anything_is_written(capsys, tmp_path):
    out = prove(capsys, tmp_path, 100.0, pid=31, fail=True, planned_looks=0)
    assert "planned_looks=0" in out["msg"] and "serve_planned_looks" in out["msg"]
    assert not (tmp_path / "results" / RUN / HOST / "serve-looks.json").exists()
    assert not (tmp_path / "results" / RUN / HOST / "serve.json").exists()
    prove(capsys, tmp_path, 100.0, pid=31, planned_looks=2)
    second = prove(capsys, tmp_path, 100.0, pid=32, planned_looks=5)
    # Planned for 2 at look 1, kept: look 2 spends the plan's second share (5% x 45%), not a 5-look plan's.
    assert second["doc"]["sequence"]["planned_looks"] == 2
    assert second["doc"]["looks"][1]["alpha"] == pytest.approx(0.05 * 0.45)
    assert "planned for 2 looks" in json.dumps(second.get("warnings")), second.get("warnings")
