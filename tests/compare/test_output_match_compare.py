"""Outputs unchanged by speculation (specbench_compare/output_match.py): match, mismatch with its first
position, missing baseline, the confounder named first, and the summary, report and index that carry it;
plus the traffic section of the report. Pure computation."""

from __future__ import annotations

from compare_synth import level, result

from ansible_collections.specbench.core.plugins.module_utils import specbench_compare as cmp
from ansible_collections.specbench.core.plugins.module_utils.report import index as fleet_index
from ansible_collections.specbench.core.plugins.module_utils.report import render as report


def block(outputs, source="token_ids", **extra):
    """A results file's output_match as the client files it."""
    key = "token_ids" if source == "token_ids" else "text"
    return dict({"prompts": len(outputs), "concurrency": 1, "temperature": 0.0, "max_tokens": 8, "ignore_eos": True,
                 "api": "chat", "source": source, "prompt_sha256": "abc",
                 "outputs": [{"index": i, "token_ids": None, "text": None, "error": None, key: o}
                             if o is not None else {"index": i, "token_ids": None, "text": None, "error": "HTTP 500"}
                             for i, o in enumerate(outputs)]}, **extra)


BASE = block([[1, 2, 3, 4], [5, 6, 7, 8], [9, 9, 9, 9], [1, 1, 1, 1]])


def test_identical_outputs_match():
    got = cmp.compare_outputs(BASE, block([[1, 2, 3, 4], [5, 6, 7, 8], [9, 9, 9, 9], [1, 1, 1, 1]]))
    assert (got["status"], got["share"], got["matched"], got["compared"], got["mismatches"]) == ("ok", 1.0, 4, 4, [])


def test_a_mismatch_gives_its_first_differing_position():
    got = cmp.compare_outputs(BASE, block([[1, 2, 3, 4], [5, 6, 0, 8], [9, 9, 9, 9], [1, 1, 1]]))
    assert (got["status"], got["share"], got["matched"]) == ("below_min", 0.5, 2)
    assert got["mismatches"] == [{"index": 1, "first_difference": 2, "baseline_len": 4, "len": 4},
                                 {"index": 3, "first_difference": 3, "baseline_len": 4, "len": 3}]
    assert "2/4 outputs match" in got["text"] and "#1 at token 2" in got["text"]
    assert cmp.compare_outputs(BASE, block([[1, 2, 3, 4], [5, 6, 0, 8], [9, 9, 9, 9], [1, 1, 1, 1]]),
                               minimum=0.75)["status"] == "ok"


def test_missing_baseline_errors_and_other_request_sets_are_never_a_match():
    assert cmp.compare_outputs(None, BASE)["status"] == "no_baseline"
    assert cmp.compare_outputs(BASE, None)["status"] == "not_measured"
    failed = cmp.compare_outputs(BASE, {"prompts": 4, "max_tokens": 8, "outputs": [], "error": "HTTP 500"})
    assert failed["status"] == "not_measured" and "HTTP 500" in failed["text"]
    other = cmp.compare_outputs(BASE, block([[1, 2, 3, 4]] * 4, max_tokens=16))
    assert other["status"] == "not_comparable" and "max_tokens" in other["text"]
    errors = cmp.compare_outputs(BASE, block([[1, 2, 3, 4], None, None, None]))
    assert (errors["share"], errors["compared"], errors["errors"]) == (1.0, 1, 3)
    text = cmp.compare_outputs(block(["a b c"], source="text"), block(["a b d"], source="text"))
    assert text["mismatches"][0]["first_difference"] == 4 and "character 4" in text["text"]


def synthetic(spec_outputs):
    base = dict(result("baseline", [level(1, 100.0), level(4, 300.0)]), output_match=BASE)
    spec = dict(result("eagle3", [level(1, 200.0), level(4, 330.0)]), output_match=spec_outputs)
    return {"baseline": base, "eagle3": spec}


def test_a_mode_whose_outputs_changed_is_the_first_confounder_and_every_output_carries_it():
    results = synthetic(block([[1, 2, 3, 4], [0, 6, 7, 8], [9, 9, 9, 9], [1, 1, 1, 1]]))
    results["eagle3"]["server"]["confounders"] = ["an earlier confounder"]
    traffic = {"traffic": cmp.parse_traffic([{"concurrency": 1, "share": 3}, {"concurrency": 2, "share": 1},
                                             {"concurrency": 8, "share": 1}]), "source": {"kind": "given"}}
    summary = cmp.summarize_host(results, "h1", "r1", traffic=traffic)
    first = summary["confounders"][0]
    assert (first["kind"], first["severity"], first["mode"]) == ("output_mismatch", "error", "eagle3")
    assert "3/4 outputs match" in first["text"] and "compare_output_match_min" in first["text"]
    assert summary["output_match"]["eagle3"]["share"] == 0.75
    md = report.render_markdown(summary)
    assert md.index("`output_mismatch`") < md.index("an earlier confounder")
    assert "## Outputs unchanged by speculation" in md and "| `eagle3` | 75% (3/4) | token ids | #1 @token 0 |" in md
    assert "- Output match: the same fixed prompts" in md and "- Traffic gain: gain by tokens" in md
    assert "## Weighed by traffic" in md and "`eagle3`" in md.split("## Weighed by traffic")[1]
    gains = summary["traffic"]["gains"]["eagle3"]
    assert (gains["known_share"], gains["outside_share"]) == (0.8, 0.2)
    index = fleet_index.build_index("r1", {"h1": summary})
    entry = index["hosts"]["h1"]
    assert entry["output_match"] == {"eagle3": {"share": 0.75, "status": "below_min"}}
    assert entry["traffic_gains"]["eagle3"]["outside_share"] == 0.2
    text = fleet_index.render_index_md(index)
    assert "outputs of eagle3: 75% match" in text and "20% outside the measured range" in text


def test_matching_outputs_raise_no_confounder_and_a_traffic_error_is_said():
    summary = cmp.summarize_host(synthetic(BASE), "h1", "r1", traffic={"error": "cannot read http://p:9090"})
    assert not [c for c in summary["confounders"] if c["kind"].startswith("output")]
    md = report.render_markdown(summary)
    assert "| `eagle3` | 100% (4/4) |" in md and "Not weighed: the traffic could not be read" in md
    none = cmp.summarize_host({m: dict(r, output_match=None) for m, r in synthetic(BASE).items()}, "h1", "r1")
    assert none["output_match"] == {} and none["traffic"] is None
    assert "## Outputs unchanged" not in report.render_markdown(none)
