"""The manual states what the code does now: no issue numbers and no project history in README.md,
docs/ and the roles' READMEs. History belongs in the commits and the changelog (CHANGELOG.md and
changelogs/, which this test leaves alone)."""
from __future__ import annotations

import re

import pytest
from specbench_testkit import ROOT

# What reads as a ticket or a comparison with older code:
#   "issue 36", "issues 21 and 36", "issue #36", "(issue", a bare "#36" (not "vllm#51510", an upstream
#   project's issue, not an anchor such as "#how-long-it-takes", not a colour such as "#1f77b4");
#   "previously", "formerly", and a figure "... before)" set against what the code did earlier.
HISTORY = [
    (re.compile(r"\bissues?\s+#?\d+", re.I), "an issue number"),
    (re.compile(r"\(issue\b", re.I), "an issue reference"),
    (re.compile(r"(?<![\w/#&.-])#\d{1,5}(?![\w-])"), "an issue number (#N)"),
    (re.compile(r"\b(previously|formerly)\b", re.I), "a comparison with older code"),
    (re.compile(r"\d%[^|()]*\bbefore\)"), "a figure from older code ('... before)')"),
    (re.compile(r"\bsimulation in the issue\b", re.I), "a figure only an issue holds"),
]


def manual_pages() -> list[str]:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted(ROOT.glob("roles/*/README.md"))]
    return [str(p.relative_to(ROOT)) for p in pages if p.name != "CHANGELOG.md" and "changelogs" not in p.parts]


def history_lines(text: str) -> list[tuple[int, str, str]]:
    """(line number, what, the line) for each line that reads as history or a ticket."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for pattern, what in HISTORY:
            if pattern.search(line):
                found.append((number, what, line.strip()))
                break
    return found


def test_the_patterns_catch_tickets_and_history_and_spare_anchors_colours_and_upstream_issues():
    caught = ["see issue 36", "issues 21 and 36", "open issue #36", "(issue #36, item 6)", "fixed in #36.",
              "Prompt sets (issue 21): x", "as previously", "71.3% before)", "| simulation in the issue |"]
    spared = ["[how long](#how-long-it-takes)", "color `#1f77b4`", "vllm#51510", "the tissue 3", "C=1 before it",
              "`#!/usr/bin/env python3`", "a 36-level sweep", "[a](docs/x.md#step-2)", "&#8212;", "#123abc"]
    assert [line for line in caught if not history_lines(line)] == []
    assert [line for line in spared if history_lines(line)] == []


@pytest.mark.parametrize("page", manual_pages())
def test_the_page_has_no_issue_numbers_or_history(page):
    found = history_lines((ROOT / page).read_text())
    assert not found, "state the current behaviour instead:\n" + "\n".join(
        f"{page}:{number}: {what}: {line[:200]}" for number, what, line in found)
