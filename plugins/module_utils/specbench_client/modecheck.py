# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""Is the mode a run is filed under the one the server runs?

Against a server specbench did not launch (engine=external), the mode is only a name the user
gives: ``-e mode=eagle3`` against a plain server would file plain decoding as EAGLE-3, and the
comparison would read a tie. The probe reads what the server runs (``server["speculation"]``,
read by the engine modules: SGLang's resolved ``/server_info`` fields, vLLM's speculative config or
its spec-decode counters), and :func:`check` holds it against what the mode's name means. A
launched server has the stricter post-launch check of its command (engines/*/postlaunch.py).
"""
from __future__ import annotations

# What each built-in mode name means on each engine: the algorithms it accepts (None: plain
# decoding) and, on SGLang, whether the step count is adaptive. SGLang's names are the resolved
# ones /server_info reports: NEXTN is EAGLE there, and Gemma4 drafts become FROZEN_KV_MTP
# (srt/arg_groups/speculative_hook.py). vLLM's are SpeculativeConfig.method after its own
# resolution (vllm/config/speculative.py: every *_mtp model type is "mtp", a draft model "draft_model").
_EAGLE = ("EAGLE", "FROZEN_KV_MTP")
EXPECTED = {
    "sglang": {
        "baseline": {"algorithms": None},
        "eagle3": {"algorithms": ("EAGLE3",), "adaptive": False},
        "eagle3-adaptive": {"algorithms": ("EAGLE3",), "adaptive": True},
        "eagle": {"algorithms": _EAGLE},
        "nextn": {"algorithms": _EAGLE},
        "mtp": {"algorithms": _EAGLE},
        "ngram": {"algorithms": ("NGRAM",)},
        "standalone": {"algorithms": ("STANDALONE",)},
        "draft": {"algorithms": ("STANDALONE",)},
    },
    "vllm": {
        "baseline": {"algorithms": None},
        "eagle3": {"algorithms": ("eagle3",)},
        "eagle3-adaptive": {"algorithms": ("eagle3",)},
        "eagle": {"algorithms": ("eagle",)},
        "nextn": {"algorithms": ("mtp",)},
        "mtp": {"algorithms": ("mtp",)},
        "ngram": {"algorithms": ("ngram",)},
        "standalone": {"algorithms": ("draft_model",)},
        "draft": {"algorithms": ("draft_model",)},
    },
}
# vLLM without VLLM_SERVER_DEV_MODE: it drafts, but the method is not served (engines/vllm.py).
METHOD_NOT_SERVED = "speculative (method not served)"


def describe_running(spec: dict) -> str:
    """'plain decoding' or 'EAGLE3 (steps 3, top-k 1, draft tokens 4, adaptive)', as the server says."""
    algo = spec.get("algorithm")
    if not algo:
        return "plain decoding"
    labels = (("num_steps", "steps"), ("eagle_topk", "top-k"), ("num_draft_tokens", "draft tokens"))
    parts = [f"{label} {spec[key]}" for key, label in labels if spec.get(key) is not None]
    if spec.get("adaptive"):
        parts.append("adaptive steps")
    return f"{algo}" + (f" ({', '.join(parts)})" if parts else "")


def _describe_expected(want: dict) -> str:
    if want["algorithms"] is None:
        return "plain decoding"
    text = " or ".join(want["algorithms"])
    if "adaptive" in want:
        text += " with adaptive steps" if want["adaptive"] else " with a fixed step count"
    return text


def _matches(want: dict, spec: dict) -> bool:
    algo = spec.get("algorithm")
    if want["algorithms"] is None:
        return not algo
    if algo == METHOD_NOT_SERVED:
        return True
    if algo not in want["algorithms"]:
        return False
    return "adaptive" not in want or bool(spec.get("adaptive")) == want["adaptive"]


def modes_for(engine: str, spec: dict) -> list[str]:
    """The built-in mode names that fit what the server runs."""
    return [name for name, want in EXPECTED.get(engine, {}).items() if _matches(want, spec)]


def check(mode: str, server: dict) -> dict:
    """{"mode", "engine", "checked", "ok", "expected", "running", "message"}: ``ok`` False only for
    a known mismatch (refuse the run); ``checked`` False (with ``message``) when the mode's name is
    not one specbench knows or the server does not say what it runs (warn, file as asked)."""
    engine = server.get("engine") or "sglang"
    spec = server.get("speculation") or {"algorithm": "unknown", "source": None}
    url = server.get("base_url") or "the server"
    out = {"mode": mode, "engine": engine, "checked": False, "ok": True, "expected": None, "running": spec,
           "message": None}
    table = EXPECTED.get(engine, {})
    want = table.get(mode)
    running = describe_running(spec)
    if want is None:
        out["message"] = (f"mode {mode!r} is not a mode specbench knows for {engine} ({', '.join(table)}), so it "
                          f"cannot be checked against what {url} runs ({running}, from {spec.get('source')}); the "
                          "results are filed under it as asked")
        return out
    out["expected"] = _describe_expected(want)
    if spec.get("algorithm") == "unknown":
        out["message"] = (f"{url} does not say what it runs (no {engine} description answered): mode {mode} "
                          f"({out['expected']}) is not checked; the results are filed under it as asked")
        return out
    out["checked"] = True
    if spec.get("algorithm") == METHOD_NOT_SERVED and want["algorithms"]:
        out["message"] = (f"{url} drafts, as mode {mode} asks, but serves no speculative method to check it is "
                          f"{out['expected']} (start vLLM with VLLM_SERVER_DEV_MODE=1 to serve /server_info)")
    if _matches(want, spec):
        return out
    fits = modes_for(engine, spec)
    fix = (f"benchmark it as -e mode={fits[0]}" if fits else "name the mode after what it runs")
    out["ok"] = False
    out["message"] = (f"mode {mode} asks for {out['expected']}, but {url} runs {running} (from "
                      f"{spec.get('source')}): its results would be filed under the wrong mode. {fix[0].upper()}"
                      f"{fix[1:]}, or point base_url at a server that runs {out['expected']}")
    return out
