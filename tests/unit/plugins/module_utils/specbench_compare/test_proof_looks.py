"""A served configuration's proofs add up (issue 53, item 1): every proof of one configuration on one node is a look
of one sequence, look k spending its share of the family-wise 5% planned at the first look (sequential.planned_look_alpha;
a sequence without a plan: alpha * 6 / (pi^2 k^2), sequential.open_look_alpha), and a
level's verdict reads the intersection, over the looks, of the looks so far pooled (proof_rule.combine_looks:
one log ratio per served launch, their mean; looks in place share a launch, launches share a reference measurement).

Pure computation: the rule on hand-made looks (a clear verdict stays, a tie narrows to "matches", looks that lie
apart say the node changed), and the error control by simulation through the package's own proof_rows: a true tie
proved up to five times, re-run until it passes, reads worse or better somewhere in at most 5% of sequences."""

from __future__ import annotations

import math
import random

import pytest
from compare_synth import level, result

from ansible_collections.specbench.core.plugins.module_utils import specbench_compare as cmp
from ansible_collections.specbench.core.plugins.module_utils.specbench_client.stats import t975
from ansible_collections.specbench.core.plugins.module_utils.specbench_compare import proof_rule

Z = 1.959964
MARGIN = 0.1


def test_the_spending_never_runs_out_and_sums_to_the_family_wise_rate():
    shares = [cmp.open_look_alpha(k) for k in range(1, 100001)]
    assert shares[0] == pytest.approx(0.05 * 6 / math.pi ** 2) and shares[1] == pytest.approx(shares[0] / 4)
    assert all(a > b > 0 for a, b in zip(shares, shares[1:], strict=False))  # every look gets some, ever less
    assert math.fsum(shares) < 0.05 and math.fsum(shares) == pytest.approx(0.05, rel=1e-4)
    with pytest.raises(ValueError, match="look must be 1 or more"):
        cmp.open_look_alpha(0)


def test_a_planned_sequence_spends_most_where_it_plans_to_look_and_still_sums_to_the_family_wise_rate():
    shares = [cmp.planned_look_alpha(k, 3) for k in range(1, 100001)]
    assert shares[:4] == pytest.approx([0.0225, 0.01125, 0.01125, 0.005 * 6 / math.pi ** 2])
    assert math.fsum(shares) < 0.05 and math.fsum(shares) == pytest.approx(0.05, rel=1e-4)
    # The plan's third look gets more than three times the open rule's: what lets three relaunches decide.
    assert shares[2] > 3 * cmp.open_look_alpha(3)
    assert all(a > b > 0 for a, b in zip(shares[2:], shares[3:], strict=False))  # past the plan: ever less, never 0
    one = [cmp.planned_look_alpha(k, 1) for k in range(1, 100001)]
    assert one[0] == pytest.approx(0.045) and math.fsum(one) == pytest.approx(0.05, rel=1e-4)
    eight = [cmp.planned_look_alpha(k, 8) for k in range(1, 100001)]
    assert eight[1] == eight[7] == pytest.approx(0.05 * 0.45 / 7) and math.fsum(eight) == pytest.approx(0.05, rel=1e-4)
    # A sequence stored without a plan keeps the open rule to its end.
    assert [cmp.planned_look_alpha(k, None) for k in (1, 2, 9)] == [cmp.open_look_alpha(k) for k in (1, 2, 9)]
    with pytest.raises(ValueError, match="serve_planned_looks must be 1 or more"):
        cmp.planned_look_alpha(1, -2)
    with pytest.raises(ValueError, match="look must be 1 or more"):
        cmp.planned_look_alpha(0, 3)


def test_a_sequence_keeps_the_plan_of_its_first_look_and_says_when_asked_for_another():
    warnings: list[str] = []
    sequence = {"looks": []}
    assert cmp.sequence_plan(sequence, 3, warnings) == 3 and sequence["planned_looks"] == 3 and not warnings
    sequence["looks"].append({"look": 1})
    assert cmp.sequence_plan(sequence, 8, warnings) == 3  # never re-planned between looks
    assert len(warnings) == 1 and "planned for 3 looks" in warnings[0] and "serve_planned_looks=8" in warnings[0]
    old = {"looks": [{"look": 1}]}  # begun before sequences kept a plan
    assert cmp.sequence_plan(old, 3, warnings) is None and "open rule" in warnings[1]


def look(k: int, cis: dict[int, list | None]) -> dict:
    return {"look": k, "levels": [{"concurrency": c, "ratio_ci_family": ci, "verdict": cmp.read_interval(ci, MARGIN)}
                                  for c, ci in cis.items()]}


def test_clearly_slower_then_matches_stays_clearly_slower_where_the_looks_agree():
    # Look 1: C=16 clearly slower; look 2 alone would read "matches" there, and overlaps look 1's interval.
    looks = [look(1, {1: [0.97, 1.04], 16: [0.90, 0.98]}), look(2, {1: [0.96, 1.05], 16: [0.95, 1.06]})]
    assert [lv["verdict"] for lv in looks[1]["levels"]] == ["matches", "matches"]
    combined = cmp.combine_looks(looks, MARGIN)
    assert combined[16]["verdict"] == "worse" and combined[16]["ratio_ci_combined"] == [0.95, 0.98]
    assert combined[16]["verdicts"] == ["worse", "matches"] and combined[16]["looks"] == 2
    assert combined[1]["verdict"] == "matches" and combined[1]["ratio_ci_combined"] == [0.97, 1.04]


def test_a_tie_too_wide_to_match_alone_matches_once_its_looks_narrow_it():
    looks = [look(1, {4: [0.85, 1.08]}), look(2, {4: [0.93, 1.20]})]
    assert [lv["verdict"] for lo in looks for lv in lo["levels"]] == ["unclear", "unclear"]
    combined = cmp.combine_looks(looks, MARGIN)
    assert combined[4]["verdict"] == "matches" and combined[4]["ratio_ci_combined"] == [0.93, 1.08]


def test_looks_that_lie_apart_say_the_node_changed_and_never_verify_again():
    looks = [look(1, {16: [0.70, 0.80]}), look(2, {16: [0.95, 1.05]}), look(3, {16: [0.97, 1.03]})]
    combined = cmp.combine_looks(looks, MARGIN)
    assert combined[16]["verdict"] == "unclear" and combined[16]["disagree"] is True
    assert combined[16]["ratio_ci_combined"] is None


def test_a_look_without_an_interval_adds_nothing():
    combined = cmp.combine_looks([look(1, {1: [0.9, 0.97]}), look(2, {1: None})], MARGIN)
    assert combined[1]["verdict"] == "worse" and combined[1]["looks"] == 1 and combined[1]["verdicts"] == ["worse",
                                                                                                        "unclear"]


def test_a_later_look_is_held_at_its_smaller_share_and_the_floor_part_on_the_whole_family():
    rows = [{"concurrency": c, "ratio": 1.0, "ratio_ci95": [0.97, 1.031],
             "ci_parts": [[[0.02, None]], [[0.02, [4, 12]]]]} for c in (1, 4, 16)]
    widths = []
    for k in (1, 2, 5):
        out = cmp.family_proof_verdicts([dict(r) for r in rows], MARGIN, cmp.open_look_alpha(k))
        widths.append(out[0]["ratio_ci_family"][1] - out[0]["ratio_ci_family"][0])
    assert widths[0] < widths[1] < widths[2]


def served(rng: random.Random, levels: list[int], truth: float, half: float, launch: float) -> dict:
    return result("ngram", [level(c, 100.0 * c * truth * launch * math.exp(rng.gauss(0, half / Z)), half)
                            for c in levels])


def proved_sequence(rng: random.Random, truth: float, looks: int, launch_sd: float = 0.0,
                    planned: int | None = None) -> list[str]:
    """One configuration proved ``looks`` times against one reference (the run's, pooled from one launch), each
    look a launch of its own; returns the combined verdicts after each look (the rule serve_proof applies)."""
    levels = [1, 4, 16]
    ref_launch = math.exp(rng.gauss(0, launch_sd))
    ref = {"ngram": result("ngram", [level(c, 100.0 * c * ref_launch * math.exp(rng.gauss(0, 0.02 / Z)), 0.02)
                                     for c in levels])}
    plan = {"mode": "ngram", "schedule": [[1, 1, 4]]}
    kept, out = [], []
    for k in range(1, looks + 1):
        effect = math.exp(rng.gauss(0, launch_sd))
        rows = cmp.proof_rows(served(rng, levels, truth, 0.02, effect), ref, MARGIN, "ngram",
                              alpha=cmp.look_alpha(k, planned))
        kept.append(cmp.look_record(rows, k, f"t{k}", {"pid": k}, False, planned=planned))
        cmp.apply_looks(rows, kept, MARGIN, plan)
        out.append(" ".join(r["verdict"] for r in rows))
    return out


@pytest.mark.parametrize("planned", [None, 3, 1])
def test_a_tie_re_proved_until_it_passes_claims_a_difference_in_at_most_five_percent_of_sequences(planned):
    rng = random.Random(53)
    n, claims, verified = 400, 0, 0
    for _ in range(n):
        seq = proved_sequence(rng, 1.0, 5, planned=planned)
        claims += any(("worse" in v or "better" in v) for v in seq)
        verified += any(set(v.split()) == {"matches"} for v in seq)
    # 5% with a binomial allowance of 3 sd at n = 400 (1.1%): the bound is the union bound's, not an estimate.
    assert claims / n <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / n), claims
    assert verified / n > 0.5, verified  # and the tie does verify in most sequences


def test_a_clearly_slower_configuration_never_turns_into_a_pass_by_re_running():
    rng = random.Random(7)
    for _ in range(100):
        seq = proved_sequence(rng, 0.85, 5)
        first = next((j for j, v in enumerate(seq) if "worse" in v), None)
        if first is not None:
            assert all("worse" in v for v in seq[first:]), seq


# The looks pooled (proof_rule.pooled_looks): a launch's look at 100 tok/s per stream against a fresh reference, on
# a node whose floor is well measured (3% launch sd on 30 degrees of freedom: a floor of 2 leaves t's tails at the
# later looks' small shares too heavy for pooling to narrow much, decision_coverage.py's serve scenario).
FLOOR = {"launch_sd": 0.03, "df": 30, "df_levels": 200, "launch_sd_data": 0.03, "df_data": 28,
         "prior": {"sd": 0.03, "df": 2}}


def raw_look(k: int, ratio: float, pid: int, fresh: bool = True, floor: dict | None = FLOOR) -> dict:
    """Look ``k``: the served launch ``pid`` at ``ratio`` of its reference at C=1, 4, 16 (windows +-1%), the
    reference measured just before it (``fresh``: its own figure) or the run's one (the same figure every look)."""
    rows = []
    for c in (1, 4, 16):
        ref = 100.0 * c * (1.0 + 0.001 * k if fresh else 1.0)
        thr = ref * ratio
        ratio_, ci = cmp.ratio_ci(thr, [thr * 0.99, thr * 1.01], ref, [ref * 0.99, ref * 1.01])
        rows.append({"concurrency": c, "served_tok_per_s": thr, "served_ci95": [thr * 0.99, thr * 1.01],
                     "best_static_mode": "ngram", "best_static_tok_per_s": ref,
                     "best_static_ci95": [ref * 0.99, ref * 1.01], "reference_launches": 1, "ratio": ratio_,
                     "ratio_ci95": ci})
    cmp.launch_widen_proof(rows, floor, {1: 1, 4: 1, 16: 1})
    cmp.family_proof_verdicts(rows, MARGIN, cmp.open_look_alpha(k))
    return {"look": k, "server": {"pid": pid, "starttime": pid}, "floor": floor, "levels": rows}


def pooled_width(combined: dict, conc: int = 16) -> float:
    lo, hi = combined[conc]["ratio_ci_pooled"]
    return math.log(hi / lo)


def test_each_look_is_pooled_at_the_share_it_stored():
    # Looks 1-3 of a sequence planned for 3: look 3 pooled at its stored 1.125%, narrower than the open rule's 0.34%.
    looks = [raw_look(k, 0.95, pid=k) for k in range(1, 4)]
    open_width = pooled_width(cmp.combine_looks(looks, MARGIN))
    planned = [dict(lo, alpha=cmp.planned_look_alpha(lo["look"], 3)) for lo in looks]
    assert pooled_width(cmp.combine_looks(planned, MARGIN)) < open_width
    again = proof_rule.pooled_looks(looks, MARGIN, cmp.planned_look_alpha(3, 3))[16]["ratio_ci_family"]
    assert cmp.combine_looks(planned, MARGIN)[16]["ratio_ci_pooled"] == again


def test_a_sequence_of_equal_looks_never_claims_and_narrows_towards_matches():
    looks = []
    widths = []
    for k, ratio in enumerate([1.03, 0.97, 1.02, 0.98, 1.01, 0.99, 1.0, 1.0], start=1):
        looks.append(raw_look(k, ratio, pid=k))
        combined = cmp.combine_looks(looks, MARGIN)
        assert {cell["verdict"] for cell in combined.values()} <= {"unclear", "matches"}, (k, combined)
        assert combined[16]["launches"] == k
        widths.append(pooled_width(combined))
    assert widths[-1] < widths[0] / 1.4  # eight launches average their launch effects out (at ever smaller shares)
    assert combined[16]["verdict"] == "matches"


def test_a_sequence_of_slower_looks_accumulates_to_a_claim_no_look_makes_alone():
    looks, verdicts = [], []
    for k in range(1, 6):
        looks.append(raw_look(k, 0.92, pid=k))
        assert {lv["verdict"] for lv in looks[-1]["levels"]} == {"unclear"}  # alone: too wide to tell
        verdicts.append(cmp.combine_looks(looks, MARGIN)[16]["verdict"])
    assert verdicts[0] == "unclear" and verdicts[-1] == "worse", verdicts
    first = verdicts.index("worse")
    assert all(v == "worse" for v in verdicts[first:])  # and once caught it stays caught


def test_looks_in_place_share_their_launch_effect_and_narrow_nothing_of_it():
    looks = [raw_look(k, 0.92, pid=7) for k in range(1, 6)]  # one server, proved five times
    combined = cmp.combine_looks(looks, MARGIN)
    assert combined[16]["launches"] == 1 and combined[16]["looks"] == 5
    assert combined[16]["verdict"] == "unclear"  # five looks of one launch are one launch's evidence
    one = cmp.combine_looks(looks[:1], MARGIN)
    assert pooled_width(combined) > pooled_width(one)  # held at look 5's smaller share: wider, never narrower


def test_launches_held_to_one_reference_measurement_share_its_launch_effect():
    fresh = [raw_look(k, 0.92, pid=k) for k in range(1, 6)]
    shared = [raw_look(k, 0.92, pid=k, fresh=False) for k in range(1, 6)]
    # The run's reference, held to every launch: its launch part stays whole however many launches are pooled.
    assert pooled_width(cmp.combine_looks(shared, MARGIN)) > pooled_width(cmp.combine_looks(fresh, MARGIN))
    assert cmp.combine_looks(shared, MARGIN)[16]["verdict"] == "unclear"


def test_the_proof_holds_the_nodes_own_launch_sd_where_it_exceeds_the_prior_weighted_floor():
    # A 3% prior of 2 degrees of freedom beside 2 of the node's own at 6%: the floor reads 4.7%; the data's own sd,
    # on their own 2 degrees of freedom, is the wider launch part: the proof holds that one.
    floor = {"launch_sd": 0.0474, "df": 4, "df_levels": 20, "launch_sd_data": 0.06, "df_data": 2,
             "prior": {"sd": 0.03, "df": 2}}
    terms = cmp.launch_noise_terms(floor, 2.0, data_bound=True)
    assert len(terms) == 2 and terms[1][1] == [2, 18] and terms[1][0] > terms[0][0]
    assert cmp.launch_noise_terms(floor, 2.0) == terms[:1]  # the comparison's own widening: the floor alone
    row = {"concurrency": 1, "ratio": 1.0, "ratio_ci95": [0.98, 1.02]}
    cmp.launch_widen_proof([row], floor, {1: 1})
    assert row["ci_parts"][1] == terms
    # Two launches that read no launch variation at all: the prior-weighted floor alone holds (the prior's purpose).
    assert cmp.launch_noise_terms(dict(floor, launch_sd=0.0212, launch_sd_data=0.0), 2.0, data_bound=True) == [
        [round(t975(4) * 0.0212 * math.sqrt(2.0), 6), [4, 20]]]


def test_launches_with_references_of_their_own_measure_the_launch_sd_themselves():
    # No floor on the node: one look holds its windows alone; three launches 10% apart, each against references
    # measured for it, say the launches vary, and the pooled interval holds that (on their 2 degrees of freedom).
    spread = [raw_look(k, r, pid=k, floor=None) for k, r in enumerate([0.90, 1.10, 1.00], start=1)]
    steady = [raw_look(k, 1.0, pid=k, floor=None) for k in range(1, 4)]
    wide, narrow = cmp.combine_looks(spread, MARGIN), cmp.combine_looks(steady, MARGIN)
    assert pooled_width(wide) > 5 * pooled_width(narrow)
    assert wide[16]["launches"] == narrow[16]["launches"] == 3
    # One server proved three times (in place): no launch-to-launch spread to read, the windows alone as before.
    in_place = [raw_look(k, r, pid=9, floor=None) for k, r in enumerate([0.99, 1.01, 1.0], start=1)]
    assert cmp.combine_looks(in_place, MARGIN)[16]["launches"] == 1


def test_an_unclear_proof_says_whether_launches_or_longer_windows_would_decide_it():
    # C=1: the floor's launch part is most of the interval (relaunch); C=16: the windows are (measure longer).
    rows = [{"concurrency": 1, "verdict": "unclear", "ratio": 0.97, "ratio_ci95": [0.85, 1.11],
             "ratio_ci95_window": [0.95, 0.99]},
            {"concurrency": 16, "verdict": "unclear", "ratio": 0.97, "ratio_ci95": [0.85, 1.11],
             "ratio_ci95_window": [0.86, 1.10]}]
    assert cmp.launch_dominated(rows[0]) and not cmp.launch_dominated(rows[1])
    text = cmp.proof_verdict(rows)["text"]
    assert "unclear at C=1: launch-to-launch variation is most of the interval" in text
    assert "serve_reprove_unclear=relaunch" in text
    assert "unclear at C=16 (measure longer: bench_window_s" in text
    # No floor held (no window-only interval kept): the windows are all there is.
    assert not cmp.launch_dominated({"ratio_ci95": [0.9, 1.1]})


def test_a_node_that_moved_under_a_proof_in_place_is_not_called_a_mismatch_with_the_runs_own_measurement():
    rows = [{"concurrency": 1, "verdict": "better", "node_changed": False},
            {"concurrency": 4, "verdict": "better", "node_changed": True, "moved_since_look": 1},
            {"concurrency": 16, "verdict": "unclear", "node_changed": True}]
    text = cmp.proof_verdict(rows)["text"]
    assert "the node changed since look 1: the served server's own rate moved clearly at C=4" in text
    assert "clearly other than its own measurement in the run at C=16 " in text
    assert "measurement in the run at C=4" not in text


def test_with_a_clearly_slower_level_the_advice_to_relaunch_names_the_way_that_relaunches():
    rows = [{"concurrency": 1, "verdict": "worse", "ratio": 0.8, "ratio_ci95": [0.7, 0.9]},
            {"concurrency": 4, "verdict": "unclear", "ratio": 0.97, "ratio_ci95": [0.85, 1.11],
             "ratio_ci95_window": [0.95, 0.99]}]
    text = cmp.proof_verdict(rows)["text"]
    assert "serve_state=absent, then serve.yml again" in text and "serve_reprove_unclear" not in text
