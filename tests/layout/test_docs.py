"""The manual holds together: links resolve, the README stays short, the variables page is fresh.

Fast and offline. Every relative link in README.md, docs/**/*.md and roles/*/README.md must name
a file (or folder) that exists, and a `#anchor` a heading of the target as GitHub slugs it
(lowercase, spaces to '-', punctuation dropped except '-' and '_'; a repeated heading gets -1, -2).
External http(s) links are checked for syntax only. docs/reference/variables.md must be what
docs/reference/generate_variables.py writes now.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

ROOT = Path(__file__).resolve().parents[2]
README_MAX_LINES = 210
README_MUST_HOLD = ("ansible-playbook bench.yml -e mode=baseline", "bash .ci/run")

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
# [text](target "title") and ![alt](target); the text may hold one level of brackets (an image in a link).
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)")
REFERENCE_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"", re.IGNORECASE)


def docs_files() -> list[Path]:
    files = [ROOT / "README.md"]
    files += sorted((ROOT / "docs").rglob("*.md"))
    files += sorted(ROOT.glob("roles/*/README.md"))
    return [f for f in files if f.exists()]


def prose_lines(text: str, keep_code: bool = False):
    """(line number, line) outside fenced code blocks, inline code removed unless keep_code."""
    fence = None
    for number, line in enumerate(text.splitlines(), 1):
        match = FENCE.match(line)
        if match:
            if fence is None:
                fence = match.group(1)[0] * len(match.group(1))
            elif match.group(1).startswith(fence):
                fence = None
            continue
        if fence is None:
            yield number, line if keep_code else INLINE_CODE.sub("", line)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = re.sub(r"<[^>]+>", "", text)  # HTML tags
    text = text.replace("`", "").replace("*", "")
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    counts: dict[str, int] = {}
    for _number, line in prose_lines(path.read_text(encoding="utf-8")):
        found.update(HTML_ANCHOR.findall(line))
    # headings are read with their inline code kept (it is part of the text GitHub slugs)
    for _number, line in prose_lines(path.read_text(encoding="utf-8"), keep_code=True):
        heading = HEADING.match(line)
        if heading:
            base = slug(heading.group(2))
            n = counts.get(base, 0)
            counts[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(path: Path):
    for number, line in prose_lines(path.read_text(encoding="utf-8")):
        for match in INLINE_LINK.finditer(line):
            yield number, match.group(1).strip("<>")
        match = REFERENCE_DEF.match(line)
        if match:
            yield number, match.group(1).strip("<>")


def check_links(path: Path, root: Path = ROOT) -> list[str]:
    """Every problem of the links in one Markdown file, as 'file:line: target: why'."""
    problems = []
    where = path.relative_to(root) if path.is_relative_to(root) else path
    for number, target in links(path):
        scheme = urlsplit(target).scheme.lower()
        if scheme in ("http", "https"):
            parts = urlsplit(target)
            if not parts.netloc or " " in target or "." not in parts.netloc.split(":")[0]:
                problems.append(f"{where}:{number}: {target}: not a well-formed URL")
            continue
        if scheme:  # mailto:, ftp: ... not ours to check
            continue
        file_part, _hash, anchor = target.partition("#")
        dest = path if not file_part else (path.parent / unquote(file_part)).resolve()
        if file_part and not dest.exists():
            shown = dest.relative_to(root) if dest.is_relative_to(root) else dest
            problems.append(f"{where}:{number}: {target}: no such file {shown}")
            continue
        if anchor and dest.is_file() and dest.suffix == ".md":
            if unquote(anchor) not in anchors(dest):
                problems.append(f"{where}:{number}: {target}: no heading with anchor #{anchor} in {dest.name}")
    return problems


def test_every_relative_link_and_anchor_resolves():
    problems = [p for f in docs_files() for p in check_links(f)]
    assert not problems, "broken links:\n" + "\n".join(problems)


def test_the_link_checker_reports_a_broken_link_and_a_broken_anchor(tmp_path):
    (tmp_path / "other.md").write_text("# Other page\n\n## How `compare.yml` decides: the verdict\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n"
        "[fine](other.md#how-compareyml-decides-the-verdict) and [self](#page)\n"
        "[gone](missing.md) and [bad anchor](other.md#no-such-heading)\n"
        "`[in code](also-missing.md)`\n\n"
        "```\n[in a fence](fenced-missing.md)\n```\n"
        "[web](https://example.org/x#y) [broken web](https:/example.org/x)\n"
    )
    problems = check_links(page, root=tmp_path)
    assert len(problems) == 3, problems
    assert any("missing.md" in p and "no such file" in p for p in problems)
    assert any("#no-such-heading" in p for p in problems)
    assert any("not a well-formed URL" in p for p in problems)


def test_slugs_follow_github():
    assert slug("The A/B workflow: where does speculation stop paying?") == "the-ab-workflow-where-does-speculation-stop-paying"
    assert slug("bench_sweep: entry point `main`") == "bench_sweep-entry-point-main"
    assert slug("From Galaxy, in AWX") == "from-galaxy-in-awx"


def test_readme_is_short_and_holds_the_two_commands():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = len(text.splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines, at most {README_MAX_LINES}: move detail into docs/"
    for command in README_MUST_HOLD:
        assert command in text, f"README.md must show `{command}`"


def test_variables_page_is_generated_and_fresh():
    script = ROOT / "docs" / "reference" / "generate_variables.py"
    result = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr + "\nrun: .venv/bin/python docs/reference/generate_variables.py"


def test_variables_check_names_a_stale_page(tmp_path):
    script = ROOT / "docs" / "reference" / "generate_variables.py"
    stale = tmp_path / "variables.md"
    page = (ROOT / "docs" / "reference" / "variables.md").read_text()
    stale.write_text(page.replace("| `gpu_idle_mib` |", "| `gpu_idle_mb` |"))
    result = subprocess.run(
        [sys.executable, str(script), "--check", "--output", str(stale)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 1
    assert "stale" in result.stderr and "gpu_idle_mb" in result.stderr and "gpu_idle_mib" in result.stderr
