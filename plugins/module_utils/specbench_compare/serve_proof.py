# Copyright: specbench developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The serve proof: the served configuration's confirmatory sweep held against the run, level by level.

At each level of the run the served throughput (its 95% interval from the client) is divided by
its reference's (below), the ratio's own 95% interval from ``intervals.ratio_ci`` (the same delta
method as every speedup). The verdicts read the simultaneous interval over every level of the proof
(``proof_rule.family_proof_verdicts``: the rule every verdict of the comparison follows), so a
proof of eight levels is not eight chances to fail by luck. Per level:

- ``worse``: the interval lies below 1 (clearly slower than the best static mode): the proof fails;
- ``better``: the interval lies above 1;
- ``matches``: the interval straddles 1 and lies inside [1 - margin, 1 / (1 - margin)]
  (``serve_match_margin``): as fast as the best static mode, to that margin;
- ``unclear``: anything else (the interval straddles 1 and is wider than the margin, no interval,
  a side measured nothing): never verified.

``verified`` is true only when every level is ``better`` or ``matches``.

The reference at a level is the one the plan itself uses (``proof_rule.proof_references``): where the served
plan speculates, its static counterpart (``eagle3`` for ``eagle3-adaptive``, static ``ngram`` for
n-gram with a schedule); where it deliberately does not (the adaptive table or the schedule off
there, or the baseline served because speculation paid nowhere), the baseline. A configuration the
user asked for with ``serve_mode`` is held to the best static mode at every level instead: the run
found something at least as fast, and the proof says so.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import statistics

from ..specbench_client.summary import accept_length_is_lifetime
from .common import BASELINE, _rnd, _rnd_pair
from .intervals import family_ci, level_figures, ratio_ci
from .launch_noise import widen_proof, within_interval
from .proof_rule import BETTER, UNCLEAR, WORSE, combine_looks, family_proof_verdicts, proof_references
from .sequential import planned_look_alpha
from .verdict import FAMILY_ALPHA, family_z, level_failure, level_saturation

ON_REGRESSION = ("rollback", "keep", "fail")


def _levels(result: dict | None) -> dict:
    return {lv["concurrency"]: lv for lv in (result or {}).get("levels") or []
            if isinstance(lv, dict) and isinstance(lv.get("concurrency"), int)}


def _rate(level: dict | None):
    """(throughput, ci) of a level that measured a rate and was no-one's bottleneck, else (None, None)."""
    if not level or level_failure(level) or level_saturation(level):
        return None, None
    fig = level_figures(level)
    return fig["throughput"], fig["throughput_ci95"]


def best_static(results: dict[str, dict], conc: int) -> tuple[str | None, float | None, list | None]:
    """(mode, throughput, ci95) of the fastest non-adaptive mode the run measured at ``conc``."""
    best = (None, None, None)
    for mode, result in results.items():
        if mode.endswith("-adaptive"):
            continue
        thr, ci = _rate(_levels(result).get(conc))
        if thr is not None and (best[1] is None or thr > best[1]):
            best = (mode, thr, ci)
    return best


def reference_modes(summary: dict | None, results: dict[str, dict], plan: dict, levels: list[int],
                    asked_for: bool) -> dict[int, str]:
    """``{concurrency: mode}``: what the proof holds the served configuration to at each level, as ``proof_rows``
    reads it - the plan's own reference (``proof_rule.proof_references``), or the best static mode the run
    measured there for a configuration asked for with ``serve_mode`` (or a run without a summary). A level no
    static mode measured is left out. The serve role measures these modes again just before the served launch
    (``serve_measure_references``)."""
    if summary and not asked_for:
        return proof_references(summary, plan, levels)
    out = {}
    for conc in levels:
        mode = best_static(results, conc)[0]
        if mode:
            out[conc] = mode
    return out


def proof_rows(served: dict, results: dict[str, dict], margin: float, reference: str | None = None,
               references: dict[int, str] | None = None, baseline: str = BASELINE,
               launch_floor: dict | None = None, measured_now: set[str] | None = None,
               judge_plan: bool = True, alpha: float = FAMILY_ALPHA) -> list[dict]:
    """One row per level of the run: the served sweep (a results file) against the best static mode
    there, or against ``reference`` (one mode of the run: a rollback's own check), or against
    ``references[level]`` (``proof_rule.proof_references``: the plan's own reference at each
    level). ``measured_now`` names the modes of ``results`` measured again just before the served launch
    (the serve role's ``serve_measure_references``; each row's ``reference_now``), the others are the run's.
    ``judge_plan`` False: ``references`` are the best static modes chosen from the run (a configuration asked
    for with serve_mode), not the plan's, so whether the plan speculates at a level is not judged.
    The served sweep is one launch and its reference was measured in other launches: with the node's noise
    floor (``launch_floor``, launch_noise.node_floor) each ratio's interval holds that launch-to-launch
    variation (launch_noise.widen_proof); without one it holds the windows alone. Each row's verdict reads
    the simultaneous interval over the rows (``proof_rule.family_proof_verdicts``, which also checks
    ``margin``) at ``alpha``: the share of the error rate this look of the configuration's sequence spends
    (``sequential.planned_look_alpha``; ``apply_looks`` combines the looks)."""
    levels = sorted({c for r in results.values() for c in _levels(r)})
    mine = _levels(served)
    base = baseline
    rows = []
    ref_launches: dict[int, int] = {}
    for conc in levels:
        if reference is None and not references:
            mode, ref, ref_ci = best_static(results, conc)
        else:
            mode = reference or (references or {}).get(conc)
            ref, ref_ci = _rate(_levels(results.get(mode)).get(conc))
        # A reference pooled from the run's launches: its windows' part only, the floor's launch part added once.
        if ref is not None:
            ref_ci = within_interval(_levels(results.get(mode)).get(conc), launch_floor) or ref_ci
        thr, ci = _rate(mine.get(conc))
        ref_launches[conc] = int((_levels(results.get(mode)).get(conc) or {}).get("launches") or 1) if mode else 1
        speculates = None if not references or reference or not judge_plan else (references.get(conc) != base)
        drafts = _drafts(mine.get(conc))
        ratio, ratio_ci95 = ratio_ci(thr, ci, ref, ref_ci) if thr is not None and ref else (None, None)
        rows.append({
            "concurrency": conc,
            "served_tok_per_s": _rnd(thr, 3),
            "served_ci95": _rnd_pair(ci, 3),
            "best_static_mode": mode,
            "best_static_tok_per_s": _rnd(ref, 3),
            # The reference's interval as held here and the launches it was pooled from (the looks' pooling reads
            # them: proof_rule.pooled_looks).
            "best_static_ci95": _rnd_pair(ref_ci, 3) if ref is not None else None,
            "reference_launches": ref_launches[conc],
            # Measured just before the served launch (True), or by the compare run at another time (False).
            "reference_now": bool(mode and mode in (measured_now or ())),
            "ratio": _rnd(ratio),
            "ratio_ci95": _rnd_pair(ratio_ci95),
            # The plan speculates here (None: not judged, a serve_mode override or a rollback's check), and
            # the drafts the server counted over the window (None: the engine counts none).
            "plan_speculates": speculates,
            "drafts_counted": drafts,
            # The output tokens the served sweep counted over the same window (drafts per token: offs_drafting).
            "window_tokens": _window_tokens(mine.get(conc)),
            **_window_accept(mine.get(conc), speculates),
            "why": (level_failure(mine.get(conc)) or "; ".join(level_saturation(mine.get(conc)))
                    or ("not measured by the served sweep" if conc not in mine else None)
                    or ("no static mode measured a rate here" if ref is None else None)),
        })
    widen_proof(rows, launch_floor, ref_launches)
    return family_proof_verdicts(rows, margin, alpha)


# Why a proof row shows no accept length (the row's accept_length_note).
ACCEPT_OFF = "off: the plan does not speculate at this level"
ACCEPT_LIFETIME = ("the server gave only its lifetime accept length (SGLang's /server_info), which describes other "
                   "batch sizes, not this window's")


def _window_accept(level: dict | None, speculates: bool | None) -> dict:
    """The accept length of the served sweep's window at one level, only where the plan speculates
    there: ``{"accept_length", "accept_length_source", "accept_length_note"}``. None, with the note
    saying why, where the plan is off (whatever the server reports), where the client had only the
    server's lifetime figure (specbench_client/level.py, accept_length_of's last source: it mixes
    the batch sizes the server served since its flush, speculating ones included), or where the
    client found no speculative step over the window."""
    out = {"accept_length": None, "accept_length_source": None, "accept_length_note": None}
    if not level:
        return out
    if speculates is False:
        out["accept_length_note"] = ACCEPT_OFF
    elif accept_length_is_lifetime(level):
        out["accept_length_note"] = ACCEPT_LIFETIME
    elif level.get("accept_length") is not None:
        out["accept_length"] = level["accept_length"]
        out["accept_length_source"] = level.get("accept_length_source")
    else:
        out["accept_length_note"] = level.get("accept_length_note")
    return out


def _drafts(level: dict | None):
    """The drafts the server counted over the level's window: vLLM's spec_decode_num_drafts, else
    SGLang's spec_verify_calls (specbench_client/summary.py); None where the engine counts neither."""
    if not level:
        return None
    for key in ("server_spec_drafts", "server_spec_verify_calls"):
        if level.get(key) is not None:
            return level[key]
    return None


def _window_tokens(level: dict | None) -> float | None:
    """Output tokens over the level's window, as the client counted them (its wall-clock rate times the
    window's length); None where the level has neither."""
    if not level or not level.get("window_s"):
        return None
    rate = level.get("wall_clock_output_tok_per_s", level.get("output_tok_per_s"))
    return round(rate * level["window_s"], 1) if isinstance(rate, (int, float)) and rate > 0 else None


def _drafts_per_token(row: dict) -> float | None:
    if row.get("drafts_counted") is None or not row.get("window_tokens"):
        return None
    return row["drafts_counted"] / row["window_tokens"]


# A level where the plan says off is judged "drafting" when its drafts per output token reach this
# share of the rate where the plan speculates: the two outcomes to tell apart are about 0 (the
# schedule honoured: drafts only while the running batch dips into the speculating range at the
# window's edges) and about 1 (the schedule ignored: drafts at the speculating rate); half is the
# boundary between them.
OFF_DRAFTING_SHARE = 0.5


def offs_drafting(rows: list[dict]) -> list[int]:
    """Levels where the plan says off but the server drafted over the window about as often per output
    token as where the plan speculates (OFF_DRAFTING_SHARE of their median): the schedule is ignored
    there. Not judged without counters, without a level that speculates and drafted, or where the plan
    is not judged (plan_speculates None)."""
    on = [x for x in (_drafts_per_token(r) for r in rows if r.get("plan_speculates")) if x]
    if not on:
        return []
    median = statistics.median(on)
    out = []
    for row in rows:
        rate = _drafts_per_token(row) if row.get("plan_speculates") is False else None
        if rate is not None and rate >= OFF_DRAFTING_SHARE * median:
            out.append(row["concurrency"])
    return out


def ignored_schedule(rows: list[dict]) -> list[int]:
    """Levels where the configuration ignores its schedule: the plan speculates but the server counted
    no draft at all over the window (vLLM's model runner v2 ignores the per-batch k, vllm#51510), or
    the plan says off but the server drafted at the speculating rate there (``offs_drafting``). A level
    without counters is not judged."""
    silent = [r["concurrency"] for r in rows if r.get("plan_speculates") and r.get("drafts_counted") == 0]
    return sorted(set(silent) | set(offs_drafting(rows)))


def launch_dominated(row: dict) -> bool:
    """Whether the launch part of this look's interval (the node's floor, ``launch_noise.widen_proof``) is wider
    than its windows' (``ratio_ci95_window``): then only more launches can narrow it, not longer windows."""
    ci, window = row.get("ratio_ci95"), row.get("ratio_ci95_window")
    if not ci or not window or min(ci[0], window[0]) <= 0:
        return False
    total, windows = math.log(ci[1] / ci[0]) / 2.0, math.log(window[1] / window[0]) / 2.0
    return total * total - windows * windows > windows * windows


def moved_levels(rows: list[dict]) -> dict[int, int]:
    """``{concurrency: look}``: the levels where a proof in place found the served server's own rate moved clearly
    since that earlier look (``check_unmoved``): the node changed under it, which is not the configuration reading
    other than the run's own measurement of it (``self_referenced``)."""
    return {r["concurrency"]: r["moved_since_look"] for r in rows if r.get("moved_since_look")}


def proof_verdict(rows: list[dict]) -> dict:
    """``{verified, worse, unclear, ignored, changed, disagree, text}`` from the rows (their ``verdict``: the
    combined one, ``apply_looks``): verified only when no level is worse or unclear and the configuration drafts
    wherever its plan speculates. ``changed``: levels where the configuration read clearly other than its own
    measurement at another time (the node changed, ``apply_looks``); ``disagree``: levels whose looks' intervals
    lie apart (the node changed between looks). Both read unclear, neither is a regression."""
    worse = [r["concurrency"] for r in rows if r["verdict"] == WORSE]
    changed = [r["concurrency"] for r in rows if r.get("node_changed")]
    disagree = [r["concurrency"] for r in rows if r.get("looks_disagree")]
    unclear = [r["concurrency"] for r in rows if r["verdict"] == UNCLEAR and r["concurrency"] not in changed
               and r["concurrency"] not in disagree]
    ignored = ignored_schedule(rows)
    verified = bool(rows) and not worse and not unclear and not ignored and not changed and not disagree
    looks = max((int(r.get("looks") or 1) for r in rows), default=1)
    over = f" over {looks} looks" if looks > 1 else ""
    if not rows:
        text = "not verified: no level to hold the served configuration against"
    elif verified:
        text = ("verified: at every level as fast as its reference or faster (simultaneous intervals over its levels"
                f"{', combined' + over if over else ''})")
    else:
        parts = []
        if worse:
            parts.append(f"clearly slower than its reference at C={', '.join(map(str, worse))}{over}")
        moved = moved_levels(rows)
        own = [c for c in changed if c not in moved]
        if own:
            parts.append(f"the node changed: the configuration reads clearly other than its own measurement in the "
                         f"run at C={', '.join(map(str, own))} (the run's figures are not comparable now: compare "
                         "again; not a regression, nothing rolled back)")
        if moved:
            since = sorted(set(moved.values()))
            parts.append(f"the node changed since look {', '.join(map(str, since))}: the served server's own rate "
                         f"moved clearly at C={', '.join(map(str, moved))}, so the references measured at its launch "
                         "are not comparable there now and this look adds nothing there (relaunch it, its references "
                         "measured again, or compare again; not a regression)")
        if disagree:
            parts.append(f"the node changed between looks: their intervals lie apart at C={', '.join(map(str, disagree))}"
                         " (compare again; not a regression)")
        launch_bound = [c for c in unclear if launch_dominated(next(r for r in rows if r["concurrency"] == c))]
        windows_bound = [c for c in unclear if c not in launch_bound]
        if launch_bound:
            # A proof with a clearly slower level is proved again in place whatever serve_reprove_unclear says.
            how = ("serve_state=absent, then serve.yml again" if worse
                   else "serve_reprove_unclear=relaunch")
            parts.append(f"unclear at C={', '.join(map(str, launch_bound))}{over}: launch-to-launch variation is most "
                         f"of the interval there, which only more launches average out (relaunch it, references "
                         f"measured again: {how}; a proof in place cannot narrow it, and measuring longer narrows "
                         "only the windows)")
        if windows_bound:
            parts.append(f"unclear at C={', '.join(map(str, windows_bound))}{over} (measure longer: bench_window_s, "
                         "bench_warmup_s)")
        drafting = offs_drafting(rows)
        silent = [c for c in ignored if c not in drafting]
        if silent:
            parts.append(f"ignores its schedule: no draft counted at C={', '.join(map(str, silent))}, where the plan "
                         "speculates")
        if drafting:
            parts.append(f"ignores its schedule: drafts counted at C={', '.join(map(str, drafting))}, where the plan "
                         "says off, at the rate per token where it speculates")
        text = "not verified: " + "; ".join(parts)
    return {"verified": verified, "worse": worse, "unclear": unclear, "ignored": ignored, "changed": changed,
            "disagree": disagree, "text": text}


# The proof's sequence: every proof of one configuration on one node (of one run) is one look.
LOOKS_SCHEMA = "specbench.serve-looks/1"
LOOKS_METHOD = (
    "every proof of one configuration on one node is a look of one sequence (the first, re-runs, relaunches, a "
    "scheduled re-proof); after look k the looks are pooled: one log ratio per served launch (looks in place share "
    "their server's launch), the launches' mean, its interval from the windows and the node's launch sd (the wider of "
    "the prior-weighted floor's and the node's own data's, the launches' own spread added where each had references "
    "of its own) times sqrt(1/m + the reference's share), simultaneous over the levels at look k's share of the "
    "family-wise rate, planned at the first look for serve_planned_looks looks (3: 2.25%, 1.125%, 1.125%; every look "
    "beyond the plan 0.5% x 6/(pi^2 j^2): the shares sum to 5% over every look there could be); the combined "
    "interval at a level is the intersection of the pooled intervals after each look: with 95% probability all of "
    "them hold the truth at once, whatever their correlation, so relaunches add evidence, a level once clearly slower "
    "stays so and re-running cannot manufacture a pass"
)


def sequence_key(plan: dict, reference: str | None, asked_for: bool) -> str:
    """The sequence a proof belongs to: the configuration (mode, schedule, adaptive table: serve_guard's
    same_configuration) and what it is held to (one mode, the plan's own references, or the best static mode)."""
    what = {"mode": plan.get("mode"), "schedule": plan.get("schedule") or None,
            "adaptive_config": plan.get("adaptive_config") or None,
            "reference": reference or ("best static mode" if asked_for else "plan")}
    return hashlib.sha1(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]


def next_look(sequence: dict | None) -> int:
    """The number of the look about to be taken in ``sequence`` (a stored one, or None: 1)."""
    return len((sequence or {}).get("looks") or []) + 1


def look_alpha(look: int, planned: int | None = None) -> float:
    """The family-wise error rate look ``look`` of a proof's sequence spends, the sequence planned for ``planned``
    looks (sequential.planned_look_alpha; None: a sequence stored without a plan, the open rule)."""
    return planned_look_alpha(look, planned)


def sequence_plan(sequence: dict, wanted: int, warnings: list[str]) -> int | None:
    """The number of looks ``sequence`` was planned for: fixed at its first look from ``wanted`` (serve_planned_looks)
    and kept to its end, since a plan changed between looks could spend more than the error rate. A sequence stored
    without one keeps the open rule (None). A ``wanted`` that differs from the stored plan is named in ``warnings``."""
    if not sequence.get("looks"):
        sequence["planned_looks"] = int(wanted)
    planned = sequence.get("planned_looks")
    if planned is None:
        warnings.append("this configuration's proofs on this node began before sequences kept a plan: its looks "
                        "spend the open rule (5% x 6/(pi^2 k^2)), serve_planned_looks applies to new sequences")
    elif int(planned) != int(wanted):
        warnings.append(f"serve_planned_looks={wanted}, but this configuration's sequence on this node was planned for "
                        f"{planned} looks at its first proof: the plan stays (changing it between looks could spend "
                        "more than the 5% error rate); a new plan applies to a new sequence (another configuration, or "
                        "serve-looks.json moved aside)")
    return int(planned) if planned is not None else None


def read_looks(path: str, warnings: list[str]) -> dict:
    """The host's sequences of proofs (``{"schema", "sequences": {key: {mode, plan, reference, looks}}}``); an
    empty store where there is none. A file that cannot be read raises ValueError naming it and the fix: the
    earlier looks are evidence, and a proof that silently started again would be a fresh coin toss."""
    if not os.path.isfile(path):
        return {"schema": LOOKS_SCHEMA, "sequences": {}}
    try:
        with open(path, encoding="utf-8") as fh:
            store = json.load(fh)
        if not isinstance(store, dict) or not isinstance(store.get("sequences"), dict):
            raise ValueError("no sequences in it")
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: the earlier proofs of this run on this node are not readable ({exc}); restore it, "
                         "or move it aside to start every configuration's sequence again (its looks are then lost "
                         "as evidence)") from exc
    return store


def look_record(rows: list[dict], look: int, at: str, server: dict, in_place: bool,
                floor: dict | None = None, planned: int | None = None) -> dict:
    """What the sequence keeps of one look: when, on which server launch, at which share of the error rate, the
    node's floor it held, and each level's figures, own verdict and simultaneous interval (``proof_rows`` at
    ``look_alpha(look, planned)``): the looks are pooled from these (proof_rule.pooled_looks, at the last look's
    ``alpha``)."""
    keep = ("concurrency", "served_tok_per_s", "served_ci95", "best_static_mode", "best_static_tok_per_s",
            "best_static_ci95", "reference_launches", "reference_now", "ratio", "ratio_ci95", "ratio_ci_family",
            "verdict", "moved_since_look")
    kept_floor = ({k: floor.get(k) for k in ("launch_sd", "df", "df_levels", "launch_sd_data", "df_data", "prior")}
                  if floor else None)
    return {"look": look, "at": at, "alpha": round(look_alpha(look, planned), 8), "in_place": bool(in_place),
            "server": {"pid": server.get("pid"), "starttime": server.get("starttime")}, "floor": kept_floor,
            "levels": [{k: row.get(k) for k in keep} for row in rows]}


def same_server_look(sequence: dict | None, server: dict) -> dict | None:
    """The first look of ``sequence`` taken on ``server`` (the same process: pid and start time), None when none
    was: a proof in place is compared with it before it is combined (``check_unmoved``)."""
    for look in (sequence or {}).get("looks") or []:
        then = look.get("server") or {}
        if then.get("pid") and then.get("pid") == server.get("pid") and then.get("starttime") == server.get("starttime"):
            return look
    return None


def check_unmoved(rows: list[dict], earlier: dict | None, alpha: float) -> list[int]:
    """A proof in place (the server of an earlier look, nothing relaunched) is held to references measured when
    that server was launched, at another time: first check the node is as it was then. The same process serving
    the same configuration at the same level is its own yardstick: its rate now over its rate at ``earlier``
    (``ratio_ci``, simultaneous over the levels at this look's ``alpha``). A level where it moved clearly says
    the node changed since the references were measured: that level of this look makes no claim (verdict
    unclear, no interval: the sequence does not combine it) and carries ``moved_since_look``. Returns those
    levels."""
    if not earlier:
        return []
    then = {lv["concurrency"]: lv for lv in earlier.get("levels") or []}
    pairs = []
    for row in rows:
        old = then.get(row["concurrency"]) or {}
        ratio, ci = ratio_ci(row.get("served_tok_per_s"), row.get("served_ci95"), old.get("served_tok_per_s"),
                             old.get("served_ci95"))
        if ratio and ci:
            pairs.append((row, ratio, ci))
    z = family_z(len(pairs), alpha)
    moved = []
    for row, ratio, ci in pairs:
        lo, hi = family_ci(ratio, ci, z)
        if hi < 1.0 or lo > 1.0:
            row["moved_since_look"] = earlier.get("look")
            row["moved_ratio_ci_family"] = _rnd_pair([lo, hi])
            row["ratio_ci_family"], row["verdict"] = None, UNCLEAR
            moved.append(row["concurrency"])
    return moved


def self_referenced(row: dict, plan: dict) -> bool:
    """The row holds the configuration against its own measurement at another time: the plan is a static mode (no
    schedule, no adaptive table), the row's reference is that mode, measured by the compare run (not just now)."""
    return (row.get("best_static_mode") == plan.get("mode") and not plan.get("schedule")
            and not plan.get("adaptive_config") and not row.get("reference_now"))


def apply_looks(rows: list[dict], looks: list[dict], margin: float, plan: dict) -> list[dict]:
    """This look's rows (the last of ``looks``) read with every look of the sequence (proof_rule.combine_looks):
    ``verdict`` becomes the combined one (``verdict_look`` keeps this look's own), with ``ratio_ci_combined``,
    ``looks`` (the looks with an interval there), ``look_verdicts`` and ``looks_disagree``.

    A level held against the configuration's own measurement at another time (``self_referenced``) that reads
    clearly slower or faster says the node is not what it was when the run measured it, not that the
    configuration regressed: ``node_changed``, the verdict unclear (never a rollback). A level where a proof in
    place found the node moved (``check_unmoved``) is ``node_changed`` too; its verdict is the earlier looks'."""
    combined = combine_looks(looks, margin)
    for row in rows:
        cell = combined.get(row["concurrency"]) or {}
        row["verdict_look"] = row["verdict"]
        row["verdict"] = cell.get("verdict", row["verdict"])
        row["ratio_ci_combined"] = _rnd_pair(cell.get("ratio_ci_combined"))
        row["ratio_ci_pooled"] = _rnd_pair(cell.get("ratio_ci_pooled"))
        row["looks"] = cell.get("looks", 0)
        row["launches_pooled"] = cell.get("launches", 0)
        row["look_verdicts"] = cell.get("verdicts", [])
        row["looks_disagree"] = bool(cell.get("disagree"))
        own = row["verdict"] in (WORSE, BETTER) and self_referenced(row, plan)
        row["node_changed"] = own or bool(row.get("moved_since_look"))
        if own:
            row["verdict"] = UNCLEAR
            row["why"] = ("the node changed: clearly " + ("slower" if cell.get("verdict") == WORSE else "faster")
                          + " than the run's own measurement of this configuration")
        elif row.get("moved_since_look"):
            # This look makes no claim here (check_unmoved); the earlier looks' combined verdict stands.
            row["why"] = (f"the node changed since look {row['moved_since_look']}: the served server's own rate moved "
                          "clearly, so the references measured at its launch are not comparable now")
        elif row["looks_disagree"]:
            row["why"] = "the looks' intervals lie apart: the node changed between them"
    return rows


def regression_action(rows: list[dict], on_regression: str) -> str | None:
    """None when no level is clearly worse and the schedule is not ignored anywhere, else what
    serve_on_regression says to do."""
    if on_regression not in ON_REGRESSION:
        raise ValueError(f"serve_on_regression={on_regression!r}: use one of {', '.join(ON_REGRESSION)}")
    return on_regression if any(r["verdict"] == WORSE for r in rows) or ignored_schedule(rows) else None


def rollback_mode(results: dict[str, dict]) -> str | None:
    """The static mode to fall back to: the one fastest at the most levels of the run (the levels
    that matter most are those where a mode wins); ties: the highest geometric mean of its
    throughput over the best's at every level; then the name. None when no level has a rate."""
    levels = sorted({c for r in results.values() for c in _levels(r)})
    wins: dict[str, int] = {}
    logs: dict[str, float] = {}
    for conc in levels:
        mode, best, _ci = best_static(results, conc)
        if mode is None:
            continue
        wins[mode] = wins.get(mode, 0) + 1
        for other, result in results.items():
            thr, _unused = _rate(_levels(result).get(conc))
            if not other.endswith("-adaptive") and thr:
                logs[other] = logs.get(other, 0.0) + math.log(thr / best)
    if not wins:
        return None
    return sorted(logs, key=lambda m: (-wins.get(m, 0), -logs[m], m))[0]
