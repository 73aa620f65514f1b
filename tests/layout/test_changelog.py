"""CHANGELOG.md is antsibull-changelog's output, and every fragment waiting for a release lints.

Release notes are written as fragments (changelogs/fragments/*.yml, docs/CONTRIBUTING.md) and
`antsibull-changelog release` turns them into changelogs/changelog.yaml and CHANGELOG.md. A hand
edit of CHANGELOG.md would be lost at the next release, and a fragment the tool refuses would stop
that release (and fails `ansible-test sanity`'s changelog test), so both are caught here.
"""
from __future__ import annotations

import difflib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOL = Path(sys.executable).parent / "antsibull-changelog"
FIX = "write release notes as fragments in changelogs/fragments/ (docs/CONTRIBUTING.md)"


def tool(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    assert TOOL.exists(), f"{TOOL} is missing: install requirements-dev.txt into this venv"
    return subprocess.run([str(TOOL), *argv], cwd=cwd, check=False, capture_output=True, text=True,
                          timeout=60)


def project_copy(tmp_path: Path) -> Path:
    """What the tool reads (galaxy.yml for the collection's name and version, the config, the
    release history, the pending fragments), and nothing it could write back into the checkout."""
    copy = tmp_path / "project"
    (copy / "changelogs").mkdir(parents=True)
    shutil.copy2(ROOT / "galaxy.yml", copy / "galaxy.yml")
    for name in ("config.yaml", "changelog.yaml"):
        shutil.copy2(ROOT / "changelogs" / name, copy / "changelogs" / name)
    shutil.copytree(ROOT / "changelogs" / "fragments", copy / "changelogs" / "fragments")
    return copy


def lint_problems(project: Path) -> str:
    """`antsibull-changelog lint` prints one line per problem and exits non-zero; '' when clean."""
    result = tool("lint", cwd=project)
    problems = result.stdout.strip()
    if result.returncode != 0 and not problems:
        problems = f"antsibull-changelog lint exited {result.returncode}: {result.stderr.strip()}"
    return problems


def changelog_drift(project: Path, committed: str) -> str:
    """The diff between the committed CHANGELOG.md and what `antsibull-changelog generate` writes
    from the same changelog.yaml, in a copy ('' when they agree)."""
    result = tool("generate", cwd=project)
    assert result.returncode == 0, f"antsibull-changelog generate failed:\n{result.stdout}{result.stderr}"
    generated = (project / "CHANGELOG.md").read_text()
    return "".join(difflib.unified_diff(committed.splitlines(keepends=True), generated.splitlines(keepends=True),
                                        "CHANGELOG.md (committed)", "CHANGELOG.md (generated)"))


def test_pending_fragments_pass_antsibull_changelog_lint(tmp_path):
    problems = lint_problems(project_copy(tmp_path))
    assert not problems, f"changelog fragments the tool refuses:\n{problems}\nFix each named line; {FIX}."


@pytest.mark.parametrize(("text", "expected"), [
    ("bugfix:\n  - Fixed the thing.\n", "invalid section: bugfix"),
    ("minor_changes: one string, not a list\n", 'section "minor_changes" must be type list'),
    ("minor_changes:\n  - [not closed\n", "yaml parsing error"),
    ("minor_changes:\n  - An ``unclosed literal.\n", "Inline literal start-string without end-string"),
], ids=["unknown-section", "not-a-list", "bad-yaml", "bad-rst"])
def test_lint_names_a_broken_fragment(tmp_path, text, expected):
    """The check above can fail: the same lint, given a fragment the tool refuses, names it."""
    project = project_copy(tmp_path)
    (project / "changelogs" / "fragments" / "broken.yml").write_text(text)
    problems = lint_problems(project)
    assert "changelogs/fragments/broken.yml" in problems and expected in problems, problems


def test_changelog_yaml_passes_strict_lint():
    result = tool("lint-changelog-yaml", "--strict", "changelogs/changelog.yaml", cwd=ROOT)
    assert result.returncode == 0, (f"changelogs/changelog.yaml:\n{result.stdout}{result.stderr}\n"
                                    "It is written by `antsibull-changelog release`; do not edit it by hand.")


def test_changelog_md_is_what_antsibull_changelog_generates(tmp_path):
    drift = changelog_drift(project_copy(tmp_path), (ROOT / "CHANGELOG.md").read_text())
    assert not drift, (f"CHANGELOG.md differs from what antsibull-changelog generates:\n{drift}\n"
                       f"Do not edit CHANGELOG.md by hand: {FIX}, or run `antsibull-changelog generate` "
                       "after changing changelogs/config.yaml.")


def test_a_hand_edit_of_changelog_md_is_caught(tmp_path):
    """The check above can fail: a bullet added by hand, as CHANGELOG.md was once kept, is a drift."""
    edited = (ROOT / "CHANGELOG.md").read_text() + "\n- Tests: a timing tuned by hand.\n"
    drift = changelog_drift(project_copy(tmp_path), edited)
    assert "-- Tests: a timing tuned by hand." in drift, drift
