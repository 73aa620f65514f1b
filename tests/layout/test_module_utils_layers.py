"""plugins/module_utils is one package per concern, and imports only go down the layers
(docs/ARCHITECTURE.md draws them):

    report                     (top: the controller's files about a run)
    launch, specbench_compare  (launch uses the teardown's readers; the comparison the client's labels)
    specbench_client, engines, teardown, node   (bottom: nothing of the others)

The plugins (modules, action plugins) are thin wrappers above all of them.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODULE_UTILS = ROOT / "plugins" / "module_utils"
PREFIX = "ansible_collections.specbench.core.plugins.module_utils"
ALLOWED = {
    "specbench_client": set(),  # shipped alone to the node as a zipapp: nothing else may come with it
    "engines": set(),
    "teardown": set(),
    "node": set(),
    "launch": {"teardown", "engines"},
    "specbench_compare": {"specbench_client"},
    "report": {"specbench_compare", "specbench_client"},
}


def imports_of(package: Path) -> dict[str, set[str]]:
    """{other package of module_utils: the names of the files of ``package`` importing it}."""
    found: dict[str, set[str]] = {}
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith(PREFIX):
                rest = node.module[len(PREFIX):].lstrip(".")
                names = [rest] if rest else [alias.name for alias in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name[len(PREFIX) + 1:] for a in node.names if a.name.startswith(PREFIX + ".")]
            for name in names:
                top = name.split(".")[0]
                if top != package.name:
                    found.setdefault(top, set()).add(path.name)
    return found


def test_module_utils_holds_packages_only():
    loose = sorted(p.name for p in MODULE_UTILS.glob("*.py"))
    assert not loose, f"module_utils holds loose files {loose}: put each in the package of its concern"
    assert {p.name for p in MODULE_UTILS.iterdir() if p.is_dir() and p.name != "__pycache__"} == set(ALLOWED)


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_each_package_says_what_lives_there_and_imports_only_down(package):
    init = MODULE_UTILS / package / "__init__.py"
    assert ast.get_docstring(ast.parse(init.read_text())), f"{init} needs a docstring: what lives there, what it may import"
    wrong = {other: files for other, files in imports_of(MODULE_UTILS / package).items() if other not in ALLOWED[package]}
    assert not wrong, f"{package} may import only {sorted(ALLOWED[package]) or 'nothing else'}; it imports {wrong}"


def test_the_layer_check_can_fail(tmp_path):
    fake = tmp_path / "teardown"
    fake.mkdir()
    (fake / "__init__.py").write_text('"""x"""\n')
    (fake / "bad.py").write_text(f"from {PREFIX}.report import render\nfrom {PREFIX} import specbench_compare\n")
    assert set(imports_of(fake)) == {"report", "specbench_compare"}
