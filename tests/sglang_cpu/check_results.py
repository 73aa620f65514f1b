"""What run_real_sglang.sh requires of one mode's results file: status complete, the post-launch
check passed (the speculative settings /server_info reports are the command's), and a speculative
mode's accept length above 1 at every level, from the chat API's per-request
sglext.spec_tokens_details, and the client's generated tokens agreeing with the server's
/metrics counter. Prints "ok (...)" or "FAILED ...". Usage: check_results.py RESULTS_DIR MODE"""
from __future__ import annotations

import glob
import json
import sys


def verdict(doc: dict, mode: str) -> str:
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
        if not value or value <= 1 or not source.startswith("chat API per request"):
            bad.append(f"C={conc} accept length {value} ({source or 'no source'})")
        accepts.append(f"{value or 0:.2f}")
    if bad:
        return "FAILED " + "; ".join(bad)
    rates = "/".join(f"{lv.get('output_tok_per_s') or 0:.0f}" for lv in doc.get("levels") or [])
    return f"ok ({rates} tok/s at C=1/4" + (f", accept {'/'.join(accepts)} from sglext" if accepts else "") + ")"


def main() -> None:
    folder, mode = sys.argv[1:3]
    files = glob.glob(f"{folder}/cpu-check/*/{mode}.json")
    if not files:
        print("FAILED no results file")
        return
    with open(files[0], encoding="utf-8") as handle:
        print(verdict(json.load(handle), mode))


if __name__ == "__main__":
    main()
