# Copyright: specbench developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Outputs unchanged by speculation: each mode's greedy outputs held against the baseline's.

Speculative decoding with greedy verification must not change what the model says. The
client (``specbench_client/output_match.py``) sends the same fixed prompts at C = 1, temperature
0, fixed max tokens and ``ignore_eos`` to every mode, outside the measured window, and files
their output token ids (or their text where the API returns no ids) in the mode's results file
as ``output_match``. Here: per mode, the share of prompts whose output matches the baseline's
exactly, and the first differing position of those that do not. A share below the minimum is a
confounder, named first in the report (``confounders.py``).
"""

from __future__ import annotations

from .common import _num

OUTPUT_MATCH_MIN = 0.95
OUTPUT_MATCH_METHOD = (
    "the same fixed prompts sent to every mode at C=1, temperature 0, fixed max tokens, ignore_eos, outside the "
    "measured window; a prompt matches when its output tokens equal the baseline's exactly (text where the API "
    "returned no token ids); share = matching / compared"
)


def _outputs(result: dict | None) -> dict | None:
    block = (result or {}).get("output_match")
    return block if isinstance(block, dict) and isinstance(block.get("outputs"), list) else None


def _value(entry: dict, source: str):
    """The output one prompt gave, as the thing compared (token ids or text), or None."""
    if not isinstance(entry, dict) or entry.get("error"):
        return None
    value = entry.get("token_ids") if source == "token_ids" else entry.get("text")
    if source == "token_ids" and isinstance(value, list):
        return value
    if source == "text" and isinstance(value, str):
        return value
    return None


def first_difference(a, b) -> int | None:
    """The first position (0-based, in tokens or characters) where ``a`` and ``b`` differ; the
    shorter one's length when one is a prefix of the other; None when they are equal."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def compare_outputs(base: dict | None, mine: dict | None, minimum: float = OUTPUT_MATCH_MIN) -> dict:
    """One mode's ``output_match`` block held against the baseline's.

    ``status``: ``ok`` (share >= minimum), ``below_min``, ``not_measured`` (the mode has no
    outputs), ``no_baseline`` (the baseline has none), ``not_comparable`` (different prompts,
    lengths or kinds of output, or no prompt answered on both sides). ``share`` is None unless
    something was compared.
    """
    out = {"status": "not_measured", "share": None, "matched": 0, "compared": 0, "prompts": 0, "source": None,
           "min": minimum, "mismatches": [], "errors": 0, "text": ""}
    if mine is None:
        out["text"] = "no output match recorded (compare_output_match_prompts is 0, or the mode failed before it)"
        return out
    out["prompts"] = len(mine["outputs"])
    out["source"] = mine.get("source")
    if mine.get("error"):
        out["text"] = f"the output match failed on this mode's server: {mine['error']}"
        return out
    if base is None:
        out.update(status="no_baseline", text="the baseline recorded no outputs to hold these against")
        return out
    same = all(mine.get(k) == base.get(k) for k in ("source", "max_tokens", "prompt_sha256", "api"))
    if not same or len(base["outputs"]) != len(mine["outputs"]):
        diff = [k for k in ("source", "max_tokens", "prompt_sha256", "api") if mine.get(k) != base.get(k)]
        out.update(status="not_comparable",
                   text="not the same request set as the baseline's (" + (", ".join(diff) or "prompt count")
                   + " differs): compare runs with the same settings")
        return out
    source = mine.get("source")
    for i, (b, m) in enumerate(zip(base["outputs"], mine["outputs"], strict=True)):
        bv, mv = _value(b, source), _value(m, source)
        if bv is None or mv is None:
            out["errors"] += 1
            continue
        out["compared"] += 1
        pos = first_difference(bv, mv)
        if pos is None:
            out["matched"] += 1
        else:
            out["mismatches"].append({"index": i, "first_difference": pos, "baseline_len": len(bv), "len": len(mv)})
    if not out["compared"]:
        out.update(status="not_comparable", text="no prompt was answered by both this mode and the baseline")
        return out
    share = out["matched"] / out["compared"]
    out["share"] = round(share, 4)
    unit = "token" if source == "token_ids" else "character"
    first = ", ".join(f"#{m['index']} at {unit} {m['first_difference']}" for m in out["mismatches"][:5])
    out["text"] = (f"{out['matched']}/{out['compared']} outputs match the baseline's exactly"
                   + (f" (first difference: {first})" if first else "")
                   + (f"; {out['errors']} prompt(s) without an answer on one side" if out["errors"] else ""))
    out["status"] = "ok" if share >= minimum else "below_min"
    return out


def output_match(results: dict[str, dict], baseline: str, minimum: float = OUTPUT_MATCH_MIN) -> dict:
    """mode -> ``compare_outputs`` for every mode but the baseline; {} when no mode recorded any."""
    if not any(_outputs(r) for r in results.values()):
        return {}
    base = _outputs(results.get(baseline))
    return {mode: compare_outputs(base, _outputs(result), minimum)
            for mode, result in results.items() if mode != baseline}


def check_minimum(value) -> float:
    """compare_output_match_min as a number in [0, 1]; ValueError naming the fix."""
    num = _num(value)
    if num is None or not 0 <= num <= 1:
        raise ValueError(f"compare_output_match_min must be a share between 0 and 1, e.g. 0.95 (got {value!r})")
    return num
