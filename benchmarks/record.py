"""Run a benchmarks/ script and store what it prints, for the pages that quote its figures.

    .venv/bin/python benchmarks/record.py benchmarks/decision_coverage.py --only tie --runs 500

runs the script with those arguments (this Python) and writes its output to
``benchmarks/output/<script>_<arguments>.txt`` under a two-line header: the command, and the
SHA-256 of the script's source when it ran. docs/benchmarks.md quotes figures from these files;
tests/layout/test_docs_sources.py fails when a quoted figure is not in the stored output of the
command its row names, or when the script changed since the output was stored (run this again,
then copy the new figures to the page). The file is written only when the script succeeds.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "benchmarks" / "output"


def output_path(script: str, args: list[str]) -> Path:
    """Where the output of ``script args`` is stored: one file per script and arguments."""
    words = [Path(script).stem] + [re.sub(r"[^A-Za-z0-9.]+", "-", a).strip("-") for a in args]
    return OUTPUT / ("_".join(w for w in words if w) + ".txt")


def source_hash(script: str) -> str:
    return hashlib.sha256((ROOT / script).read_bytes()).hexdigest()


def header(script: str, args: list[str]) -> str:
    command = " ".join([".venv/bin/python", script, *args])
    return f"# command: {command}\n# script sha256: {source_hash(script)}\n"


def main(argv: list[str]) -> int:
    if not argv or not argv[0].startswith("benchmarks/") or not (ROOT / argv[0]).is_file():
        print("usage: benchmarks/record.py benchmarks/<script>.py [arguments...] (run from the repository root)",
              file=sys.stderr)
        return 2
    script, args = argv[0], argv[1:]
    done = subprocess.run([sys.executable, str(ROOT / script), *args], cwd=ROOT, capture_output=True, text=True,
                          check=False)
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr)
    if done.returncode != 0:
        print(f"{script} failed (exit {done.returncode}): nothing stored", file=sys.stderr)
        return done.returncode
    path = output_path(script, args)
    path.parent.mkdir(exist_ok=True)
    tmp = path.with_suffix(f".tmp.{os.getpid()}")
    tmp.write_text(header(script, args) + done.stdout, encoding="utf-8")
    os.replace(tmp, path)
    print(f"stored: {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
