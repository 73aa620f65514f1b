"""What run_real_sglang.sh requires of its results. Prints "ok (...)" or "FAILED ...".

* one mode's results file (bench.yml): status complete, the post-launch check passed (the
  speculative settings /server_info reports are the command's), a speculative mode's accept length
  above 1 at every level (from the chat API's per-request sglext.spec_tokens_details where the
  release has them, versions.py's openai_spec_details; 0.5.18 ignores the request field, and the
  accept length then comes from /metrics or /server_info, which the product falls back to), and
  the client's generated tokens agreeing with the server's /metrics counter;
* --compare: compare.yml's summary.json, every comparison with a verdict at every level, and the
  recommendation;
* --serve STEP: serve.yml's serve.json, a proof at every level (serve, again) or the service
  retired (absent).

Usage: check_results.py RESULTS_DIR MODE [VERSION] | --compare RUN_DIR | --serve RUN_DIR STEP"""
from __future__ import annotations

import glob
import importlib.util
import json
import os
import sys

_VERSIONS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "plugins", "module_utils",
                         "engines", "sglang", "versions.py")


def _versions():
    spec = importlib.util.spec_from_file_location("specbench_sglang_versions", _VERSIONS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def per_request_details(version: str | None) -> bool:
    """Whether the release answers sglext.spec_tokens_details on the chat API (unknown: yes)."""
    if not version:
        return True
    return _versions().supports(version, "openai_spec_details") is not False


def verdict(doc: dict, mode: str, version: str | None = None) -> str:
    bad = []
    if doc.get("status") != "complete":
        bad.append(f"status {doc.get('status')}: {doc.get('error')}")
    check = (doc.get("server") or {}).get("post_launch_check") or {}
    if not check.get("ok"):
        bad.append(f"post-launch check {check.get('mismatches') or 'missing'}")
    accepts = []
    for level in doc.get("levels") or []:
        conc = level.get("concurrency")
        if level.get("error"):
            bad.append(f"C={conc}: {level['error']}")
        agree = (level.get("server_count_check") or {}).get("agree")
        if agree is False:
            bad.append(f"C={conc}: client and /metrics token counts disagree ({level['server_count_check']})")
        if mode == "baseline":
            continue
        value, source = level.get("accept_length"), level.get("accept_length_source") or ""
        wanted = source.startswith("chat API per request") if per_request_details(version) else bool(source)
        if not value or value <= 1 or not wanted:
            bad.append(f"C={conc} accept length {value} ({source or 'no source'})")
        accepts.append(f"{value or 0:.2f}")
        where = "sglext" if source.startswith("chat API per request") else source.split(" ", 1)[0]
    if bad:
        return "FAILED " + "; ".join(bad)
    rates = "/".join(f"{lv.get('output_tok_per_s') or 0:.0f}" for lv in doc.get("levels") or [])
    return f"ok ({rates} tok/s at C=1/4" + (f", accept {'/'.join(accepts)} from {where}" if accepts else "") + ")"


def compare_verdict(summary: dict) -> str:
    """Every comparison has a verdict at every level; the verdicts and the recommendation, shortly."""
    bad, parts = [], []
    for mode, comp in (summary.get("comparisons") or {}).items():
        levels = comp.get("levels") or []
        if not levels:
            bad.append(f"{mode}: no levels")
        cells = []
        for level in levels:
            if not level.get("verdict"):
                bad.append(f"{mode} C={level.get('concurrency')}: no verdict")
            ratio = level.get("speedup")
            cells.append(f"C={level.get('concurrency')} {level.get('verdict')}"
                         + (f" {ratio:.2f}x" if isinstance(ratio, (int, float)) else ""))
        parts.append(f"{mode}: {', '.join(cells)}")
    if not parts:
        bad.append("no comparisons in summary.json")
    if not summary.get("recommendation"):
        bad.append("no recommendation")
    if bad:
        return "FAILED " + "; ".join(bad)
    return f"ok ({'; '.join(parts)}; status {summary.get('status')})"


def serve_verdict(doc: dict, step: str) -> str:
    """A proof at every level (serve, again), or the service retired (absent)."""
    if step == "absent":
        return "ok (retired)" if doc.get("state") == "retired" else f"FAILED state {doc.get('state')}, not retired"
    levels = doc.get("levels") or []
    if not levels or any(not lv.get("verdict") for lv in levels):
        return f"FAILED no proof at every level ({levels})"
    cells = ", ".join(f"C={lv['concurrency']} {lv['verdict']}" + (f" {lv['ratio']:.2f}" if lv.get("ratio") else "")
                      for lv in levels)
    return f"ok ({doc.get('mode')} pid {(doc.get('service') or {}).get('pid')}: {cells}; verified {doc.get('verified')})"


def _one(pattern: str) -> dict | None:
    files = sorted(glob.glob(pattern))
    if not files:
        return None
    with open(files[0], encoding="utf-8") as handle:
        return json.load(handle)


def main() -> None:
    args = sys.argv[1:]
    if args[0] == "--compare":
        doc = _one(f"{args[1]}/*/summary.json")
        print("FAILED no summary.json" if doc is None else compare_verdict(doc))
    elif args[0] == "--serve":
        doc = _one(f"{args[1]}/*/serve.json")
        print("FAILED no serve.json" if doc is None else serve_verdict(doc, args[2]))
    else:
        doc = _one(f"{args[0]}/cpu-check/*/{args[1]}.json")
        print("FAILED no results file" if doc is None else verdict(doc, args[1], args[2] if len(args) > 2 else None))


if __name__ == "__main__":
    main()
