"""One source for every name and figure the manual quotes.

Fast and offline. In README.md, docs/**/*.md and roles/*/README.md:

- every role variable named in backticks (`compare_launches`, `sglang_server_tp_size: 1`) is one
  the collection defines or reads (roles, playbooks, plugins, inventory examples, awx);
- every repository path named (`playbooks/serve.yml`, `benchmarks/decision_coverage.py`, a bare
  playbooks/<name>.yml in prose) exists, relative to the repository or, in a role's README, to the role;
- every row of docs/benchmarks.md names the command or test that regenerates its figure, and that
  command's script or test exists; no page cites a figure to anything outside the repository;
- a row whose figure is computed by a benchmarks/ script has the script's stored output
  (benchmarks/record.py), every percentage the row quotes is in it, and the script has not changed
  since it was stored.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_docs import ROOT, docs_files, prose_lines  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
import record  # noqa: E402

ROLE_PREFIXES = ("compare", "sglang_server", "vllm_server", "bench", "serve", "gpu", "specbench", "proxmox_lxc",
                 "run_context")
VARIABLE = re.compile(r"`((?:" + "|".join(ROLE_PREFIXES) + r")_[a-z0-9_]+)(?:\s*[:=][^`]*)?`")
TOP = ("playbooks", "roles", "docs", "benchmarks", "tests", "files", "plugins", "inventory", "awx", "meta", "changelogs")
PATH = re.compile(r"`((?:" + "|".join(TOP) + r")/[^`\s]*)`")
BARE_PLAYBOOK = re.compile(r"(?<![\w/.`-])(playbooks/[a-z_]+\.yml)")
# Paths that are examples by design, each with the page that says so.
EXAMPLES = {
    "plugins/module_utils/engines/foo/", "plugins/module_utils/specbench_client/engines/foo.py",
    "plugins/modules/foo_command.py", "roles/foo_server/",  # ARCHITECTURE.md: adding an engine named foo
    "changelogs/fragments/compare-fail-on-saturated.yml",  # CONTRIBUTING.md: "the option is made up"
    "changelogs/fragments/X.Y.Z.yml",  # CONTRIBUTING.md: a release's file
    "inventory/my-node.yml",  # the user's own copy of an example inventory
}
PLACEHOLDER = ("<", "*", "{", "$", "...", ".tmp/")
NOT_IN_REPO = re.compile(r"simulation in the issue|in the issue\b|issue's simulation", re.IGNORECASE)
BENCHMARKS = ROOT / "docs" / "benchmarks.md"
SOURCES = [p for p in (*ROOT.glob("roles/**/*.yml"), *ROOT.glob("playbooks/*.yml"), *ROOT.glob("plugins/**/*.py"),
                       *ROOT.glob("inventory/*"), ROOT / "bench.yml", *ROOT.glob("awx/**/*"))
           if p.is_file()]


def defined_words() -> set[str]:
    words: set[str] = set()
    for path in SOURCES:
        words |= set(re.findall(r"[a-z][a-z0-9_]+", path.read_text(encoding="utf-8", errors="ignore")))
    return words


def names_in_docs(pattern: re.Pattern, keep_code: bool = True):
    for path in docs_files():
        for number, line in prose_lines(path.read_text(encoding="utf-8"), keep_code=keep_code):
            for match in pattern.finditer(line):
                yield path, number, match.group(1)


def path_problem(page: Path, target: str) -> str | None:
    """Why ``target`` (a repository path named on ``page``) does not resolve, or None."""
    if target in EXAMPLES or any(mark in target for mark in PLACEHOLDER):
        return None
    target = target.rstrip(".,:;)").split("::")[0].split("#")[0]
    bases = [ROOT, page.parent]
    if target.startswith(("meta/", "defaults/", "tasks/", "vars/")):
        bases += sorted(ROOT.glob("roles/*"))  # a role's own file, named from a page about roles
    return None if any((base / target).exists() for base in bases) else "no such file or folder"


def test_every_role_variable_the_docs_name_is_defined():
    words = defined_words()
    missing = [f"{p.relative_to(ROOT)}:{n}: {name}" for p, n, name in names_in_docs(VARIABLE) if name not in words]
    assert not missing, "variables the docs name that no role, playbook or plugin defines or reads:\n" + "\n".join(missing)


def test_every_path_the_docs_name_exists():
    found = list(names_in_docs(PATH)) + list(names_in_docs(BARE_PLAYBOOK, keep_code=False))
    missing = [f"{p.relative_to(ROOT)}:{n}: {t}: {why}" for p, n, t in found if (why := path_problem(p, t))]
    assert not missing, "paths the docs name that do not exist:\n" + "\n".join(missing)


def test_the_path_check_names_a_missing_playbook_and_keeps_examples(tmp_path):
    page = ROOT / "docs" / "README.md"
    assert path_problem(page, "playbooks/nosuch.yml") == "no such file or folder"
    assert path_problem(page, "playbooks/serve.yml") is None
    assert path_problem(page, "inventory/my-node.yml") is None and path_problem(page, "results/<run>/x") is None
    assert VARIABLE.search("set `compare_launches: 2`").group(1) == "compare_launches"
    assert BARE_PLAYBOOK.search("runs playbooks/compare.yml then").group(1) == "playbooks/compare.yml"


# ---------------------------------------------------------------------------------------------
# docs/benchmarks.md: each figure with the command that regenerates it
# ---------------------------------------------------------------------------------------------
def benchmark_rows() -> list[dict]:
    """Every data row of docs/benchmarks.md's tables: {line, cells by header, command}; a row whose
    command cell says "the same ..." takes the command of the row above."""
    rows, header, last = [], None, ""
    for number, line in enumerate(BENCHMARKS.read_text(encoding="utf-8").splitlines(), 1):
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = [c.lower() for c in cells]
            continue
        if set(line) <= set("|-: "):
            continue
        row = dict(zip(header, cells, strict=False))
        command = next((v for k, v in row.items() if "command" in k), "")
        if command.startswith("the same"):
            command = f"{last} {command}"
        last = command
        rows.append({"line": number, "cells": row, "command": command})
    return rows


def _test_files() -> dict[str, list[Path]]:
    found: dict[str, list[Path]] = {}
    for path in ROOT.glob("tests/**/test_*.py"):
        found.setdefault(path.name, []).append(path)
    return found


def command_problem(command: str, tests: dict[str, list[Path]]) -> str | None:
    """Why a row's command names nothing that exists in the repository, or None."""
    paths = [p for p in re.findall(r"(?<![\w/.-])((?:benchmarks|tests|playbooks|files|docs)/[\w./*<>-]*[\w*>]|bench\.yml)",
                                   command) if not any(mark in p for mark in PLACEHOLDER)]
    selected = re.findall(r"tests/run -k (\w+)", command)
    bare = re.findall(r"`(test_\w+\.py)`", command)
    if not (paths or selected or bare):
        return "names no script, test or playbook that regenerates it"
    for path in paths:
        if not (ROOT / path).exists():
            return f"{path} does not exist"
    for name in selected:
        if f"{name}.py" not in tests and not any(f"def {name}" in p.read_text() for ps in tests.values() for p in ps):
            return f"tests/run -k {name}: no test file or test of that name"
    for name in bare:
        if name not in tests:
            return f"{name}: no test file of that name"
    return None


def test_every_benchmarks_row_names_the_command_that_regenerates_it():
    tests = _test_files()
    problems = [f"docs/benchmarks.md:{r['line']}: {why}" for r in benchmark_rows()
                if (why := command_problem(r["command"], tests))]
    assert not problems, "\n".join(problems)


def test_no_page_cites_a_figure_to_something_outside_the_repository():
    found = [f"{p.relative_to(ROOT)}:{n}" for p in docs_files()
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if NOT_IN_REPO.search(line)]
    assert not found, "figures cited to something outside the repository (regenerable from benchmarks/ only):\n" + \
        "\n".join(found)


# Computed rows whose command runs too long to store on the shared 2-core machine yet (every scenario at 1000 runs:
# well over half an hour there): each is still checked to name its command; store its output with record.py when it
# is next regenerated, then take it off this list.
NOT_STORED_YET = {("benchmarks/decision_coverage.py", ()), ("benchmarks/window_drift_limits.py", ())}
SCRIPT_COMMAND = re.compile(r"`\.venv/bin/python (benchmarks/\w+\.py)((?: [^`]*)?)`")
PERCENT = re.compile(r"(\d+(?:\.\d+)?)(?:-(\d+(?:\.\d+)?))?%")


def stored_rows() -> list[tuple[dict, str, list[str], Path]]:
    out = []
    for row in benchmark_rows():
        match = SCRIPT_COMMAND.search(row["command"])
        if match:
            script, args = match.group(1), match.group(2).split()
            out.append((row, script, args, record.output_path(script, args)))
    return out


def quoted_percentages(value: str) -> list[str]:
    """The figures a row quotes as percentages with a decimal (4.4%, the 5.0 of 0-5.0%): the scripts print
    their results to one decimal; whole percentages on a row are its inputs (launch sd 3%, windows of +-2%)."""
    return [n for match in PERCENT.finditer(value) for n in match.groups() if n and "." in n]


def missing_figures(value: str, output: str) -> list[str]:
    """The percentages ``value`` quotes that ``output`` does not print: as a percentage (N.0 for N, a range's
    first end as N-M%), or as a share after '=' to three places (86.3% as pays=0.863)."""
    return [n for n in quoted_percentages(value)
            if not re.search(rf"(?<![\d.]){re.escape(n)}(?:\.0)?(?:%|-\d+(?:\.\d+)?%)", output)
            and not re.search(rf"=\s*{float(n) / 100:.3f}(?!\d)", output)]


def test_computed_figures_are_in_their_scripts_stored_output_and_it_is_fresh():
    problems = []
    for row, script, args, path in stored_rows():
        computed = (row["cells"].get("provenance") or "").startswith("computed")
        if not path.is_file():
            if computed and (script, tuple(args)) not in NOT_STORED_YET:
                problems.append(f"docs/benchmarks.md:{row['line']}: no stored output {path.relative_to(ROOT)}: run "
                                f".venv/bin/python benchmarks/record.py {script} {' '.join(args)}")
            continue
        text = path.read_text(encoding="utf-8")
        if record.header(script, args) not in text:
            problems.append(f"{path.relative_to(ROOT)}: {script} changed since its output was stored: run "
                            f".venv/bin/python benchmarks/record.py {script} {' '.join(args)} and copy the figures again")
        value = next((v for k, v in row["cells"].items() if k in ("value", "figure") and "command" not in k
                      and v != row["cells"].get(next(iter(row["cells"])))), "")
        lost = missing_figures(value, text)
        if lost:
            problems.append(f"docs/benchmarks.md:{row['line']}: {', '.join(f'{n}%' for n in lost)} not in "
                            f"{path.relative_to(ROOT)}")
    assert not problems, "\n".join(problems)


def test_the_rows_not_stored_yet_are_still_rows_without_a_stored_output():
    rows = {(script, tuple(args)): path for unused, script, args, path in stored_rows()}
    for key in NOT_STORED_YET:
        assert key in rows, f"{key} is no longer a row of docs/benchmarks.md: take it off NOT_STORED_YET"
        assert not rows[key].is_file(), f"{rows[key]} is stored now: take {key} off NOT_STORED_YET"


@pytest.mark.parametrize("value, output, lost", [
    ("4.4% at +-2%, 3.2% at +-25%", "  +-2%: 4.4% (22/500)\n  +-25%: 3.2% (16/500)", []),
    ("0-5.0% in every cell", "claims 0.0% ... 5.0%", []),
    ("4.5% at +-2%", "4.4% (22/500)", ["4.5"]),
    ("86.3% of first runs (fixed 19.3%)", "pays=0.863 runs=400\npays=0.193 runs=400", []),
    ("86.4% of first runs", "pays=0.863 runs=400", ["86.4"]),
])
def test_the_figure_check_finds_a_figure_the_output_does_not_print(value, output, lost):
    assert missing_figures(value, output) == lost


def test_the_readmes_statistics_quote_figures_the_pages_with_their_commands_hold():
    """README's statistics section quotes figures of docs/benchmarks.md and docs/explanation/decisions.md, whose
    rows name the command that prints each one: a figure there must be one of theirs, never its own."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Statistics", 1)[1].split("\n## ", 1)[0]
    sources = BENCHMARKS.read_text(encoding="utf-8") + (ROOT / "docs/explanation/decisions.md").read_text(encoding="utf-8")
    figures = quoted_percentages(section)
    assert figures, "README's statistics section quotes no figure: the check reads the wrong section"
    lost = missing_figures(section, sources)
    assert not lost, f"README quotes {', '.join(f'{n}%' for n in lost)}, which neither docs/benchmarks.md nor decisions.md holds"
