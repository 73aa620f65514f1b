"""Write docs/reference/variables.md from the roles' argument specs and defaults.

Every option of every entry point of roles/*/meta/argument_specs.yml, with the default taken
from the spec or, where the spec gives none, from roles/*/defaults/main.yml; variables a role's
defaults/main.yml sets that no spec names are listed too, with the comment above them. The
playbook-level variables come first: from the argument specs where one holds them, else from
PLAYBOOK_ONLY below, which says why no spec can.

    .venv/bin/python docs/reference/generate_variables.py           # rewrite the page
    .venv/bin/python docs/reference/generate_variables.py --check   # exit 1 when the page is stale

Standard library and PyYAML only.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
OUTPUT = ROOT / "docs" / "reference" / "variables.md"

# Playbook-level variables and the role entry point whose argument spec describes each.
PLAYBOOK_FROM_SPECS = [
    ("mode", "bench_mode", "main"),
    ("engine", "bench_sweep", "main"),
    ("run_id", "run_context", "main"),
    ("results_dir", "run_context", "main"),
    ("base_url", "bench_sweep", "main"),
    ("specbench_node_dir", "run_context", "main"),
]

# Variables the playbooks read that no role's argument spec can hold, and why.
PLAYBOOK_ONLY = [
    {
        "name": "bench_hosts",
        "type": "str",
        "default": "specbench_nodes if the inventory has that group, else all",
        "playbooks": "bench, compare, serve, teardown",
        "description": "The host pattern the plays target (for example a group of your inventory). Every host "
        "targeted must be in group `specbench_nodes` or set `engine`: any other host stops the run before "
        "anything runs, naming itself.",
        "why": "read by the plays' `hosts:` line before any role runs; role run_context's "
        "`run_context_hosts` defaults to it and fails at once when it matches no host",
    },
    {
        "name": "node_proxmox_hosts",
        "type": "str",
        "default": "proxmox_hosts",
        "playbooks": "node",
        "description": "The Proxmox VE hosts whose LXC containers are made GPU-ready.",
        "why": "read by the play's `hosts:` line before any role runs",
    },
    {
        "name": "node_containers",
        "type": "str",
        "default": "gpu_containers",
        "playbooks": "node",
        "description": "The containers prepared after their hosts (the group role proxmox_lxc adds them to).",
        "why": "read by the play's `hosts:` line before any role runs",
    },
    {
        "name": "node_connection_timeout",
        "type": "int",
        "default": 120,
        "playbooks": "node",
        "description": "Seconds to wait for each container to answer before preparing it.",
        "why": "a task of playbooks/node.yml itself (wait_for_connection), not of a role",
    },
]

MARKUP = [
    (re.compile(r"\b[CVO]\(([^()]*)\)"), r"`\1`"),
    (re.compile(r"\bI\(([^()]*)\)"), r"*\1*"),
    (re.compile(r"\bB\(([^()]*)\)"), r"**\1**"),
    (re.compile(r"\b[UM]\(([^()]*)\)"), r"`\1`"),
    (re.compile(r"\bL\(([^(),]*),\s*([^()]*)\)"), r"[\1](\2)"),
]


def cell(text: str) -> str:
    """One table cell: one line, pipes escaped."""
    return re.sub(r"\s+", " ", text).strip().replace("|", "\\|")


def code(text: str) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    fence = "``" if "`" in text else "`"
    pad = " " if fence == "``" else ""
    return f"{fence}{pad}{text}{pad}{fence}".replace("|", "\\|")


def describe(desc) -> str:
    if desc is None:
        return ""
    if isinstance(desc, list):
        desc = " ".join(str(d) for d in desc)
    text = str(desc)
    for pattern, repl in MARKUP:
        text = pattern.sub(repl, text)
    return cell(text)


def value_text(value) -> str:
    """A value as YAML would show it inline (an empty string as "")."""
    if isinstance(value, str):
        return value if value else '""'
    return yaml.safe_dump(value, default_flow_style=True, width=10**6, sort_keys=False).strip().removesuffix("...").strip()


def default_cell(name: str, spec: dict, defaults: dict) -> str:
    if "default" in spec:
        return code(value_text(spec["default"]))
    if name in defaults:
        value = defaults[name]
        text = code(value_text(value))
        if "{{" in value_text(value):
            return text + " (template)"
        return text
    return ""


def type_cell(spec: dict) -> str:
    kind = spec.get("type", "str")
    if spec.get("elements"):
        kind = f"{kind} of {spec['elements']}"
    if spec.get("no_log"):
        kind += " (secret)"
    return kind


def option_row(name: str, spec: dict, defaults: dict) -> str:
    choices = ", ".join(code(value_text(c)) for c in spec.get("choices", []) or [])
    required = "yes" if spec.get("required") else ""
    return (
        f"| `{name}` | {type_cell(spec)} | {required} | {default_cell(name, spec, defaults)} "
        f"| {choices} | {describe(spec.get('description'))} |"
    )


HEADER = "| name | type | required | default | choices | description |\n|---|---|---|---|---|---|"


def defaults_comments(path: Path) -> dict:
    """The comment block right above each top-level key of a defaults file."""
    comments, block = {}, []
    if not path.exists():
        return comments
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            block.append(line.lstrip("#").strip())
            continue
        match = re.match(r"^([A-Za-z_][A-Za-z0-9_]*):", line)
        if match:
            comments[match.group(1)] = " ".join(block)
        if not line.startswith((" ", "\t")) or match:
            block = []
    return comments


def load_roles() -> list:
    roles = []
    for spec_file in sorted(ROOT.glob("roles/*/meta/argument_specs.yml")):
        role_dir = spec_file.parents[1]
        specs = (yaml.safe_load(spec_file.read_text(encoding="utf-8")) or {}).get("argument_specs", {})
        defaults_file = role_dir / "defaults" / "main.yml"
        defaults = (yaml.safe_load(defaults_file.read_text(encoding="utf-8")) or {}) if defaults_file.exists() else {}
        roles.append(
            {
                "name": role_dir.name,
                "specs": specs,
                "defaults": defaults,
                "comments": defaults_comments(defaults_file),
                "has_defaults": defaults_file.exists(),
            }
        )
    return roles


def entry_order(specs: dict) -> list:
    return sorted(specs, key=lambda e: (e != "main", list(specs).index(e)))


def render_role(role: dict) -> list:
    name, specs, defaults = role["name"], role["specs"], role["defaults"]
    out = [f"## {name}", ""]
    readme = ROOT / "roles" / name / "README.md"
    main_desc = (specs.get("main") or {}).get("short_description", "")
    if main_desc:
        out.append(cell(main_desc) + ".")
    sources = [f"`roles/{name}/meta/argument_specs.yml`"]
    if role["has_defaults"]:
        sources.append(f"`roles/{name}/defaults/main.yml`")
    more = f" More in [roles/{name}/README.md](../../roles/{name}/README.md)." if readme.exists() else ""
    out += ["", "From " + " and ".join(sources) + "." + more, ""]
    seen: list = []  # (entry point, options) already rendered
    for entry in entry_order(specs):
        spec = specs[entry] or {}
        options = spec.get("options") or {}
        title = f"### {name}: entry point `{entry}`"
        out.append(title)
        out.append("")
        if spec.get("short_description") and entry != "main":
            out += [cell(spec["short_description"]) + ".", ""]
        same = next((e for e, o in seen if o == options), None)
        if not options:
            out += ["No options.", ""]
        elif same is not None:
            out += [f"The same options as `{same}` above.", ""]
        else:
            earlier = {}
            for _, opts in seen:
                earlier.update(opts)
            shared = [o for o in options if o in earlier and earlier[o] == options[o]]
            own = [o for o in options if o not in shared]
            if shared and len(shared) == len(options):
                listed = ", ".join(f"`{o}`" for o in shared)
                out += [f"These options, described above: {listed}.", ""]
            else:
                out.append(HEADER)
                out += [option_row(o, options[o], defaults) for o in own]
                out.append("")
                if shared:
                    listed = ", ".join(f"`{o}`" for o in shared)
                    out += [f"Also these options, described above: {listed}.", ""]
        seen.append((entry, options))
    in_specs = set()
    for spec in specs.values():
        in_specs.update((spec or {}).get("options") or {})
    extra = [k for k in defaults if k not in in_specs]
    if extra:
        out += [
            f"### {name}: set in defaults/main.yml, not in the argument specs",
            "",
            "Internal settings the role's tasks read (the argument specs do not validate them).",
            "",
            "| name | default | description (the comment above it) |",
            "|---|---|---|",
        ]
        for key in extra:
            text = code(value_text(defaults[key]))
            if "{{" in value_text(defaults[key]):
                text += " (template)"
            out.append(f"| `{key}` | {text} | {cell(role['comments'].get(key, ''))} |")
        out.append("")
    return out


def render_playbook_level(roles: list) -> list:
    by_name = {r["name"]: r for r in roles}
    out = [
        "## Playbook-level variables",
        "",
        "Set these with `-e` on any playbook (or in the inventory). The first table's rows come from the",
        "argument spec named in the last column; the second table holds what no role's spec can check.",
        "",
        "| name | type | required | default | description | spec |",
        "|---|---|---|---|---|---|",
    ]
    for var, role_name, entry in PLAYBOOK_FROM_SPECS:
        role = by_name[role_name]
        spec = ((role["specs"].get(entry) or {}).get("options") or {})[var]
        required = "yes" if spec.get("required") else ""
        out.append(
            f"| `{var}` | {type_cell(spec)} | {required} | {default_cell(var, spec, role['defaults'])} "
            f"| {describe(spec.get('description'))} | [{role_name}: `{entry}`](#{role_name}) |"
        )
    out += [
        "",
        "| name | type | default | playbooks | description | why no argument spec holds it |",
        "|---|---|---|---|---|---|",
    ]
    for var in PLAYBOOK_ONLY:
        out.append(
            f"| `{var['name']}` | {var['type']} | {code(value_text(var['default']))} | {var['playbooks']} "
            f"| {cell(var['description'])} | {cell(var['why'])} |"
        )
    compare = by_name.get("compare")
    if compare:
        out += [
            "",
            "The `compare_*` variables are the [compare](#compare) role's; `bench_*` are",
            "[bench_sweep](#bench_sweep)'s, `sglang_server_*` [sglang_server](#sglang_server)'s,",
            "`vllm_server_*` [vllm_server](#vllm_server)'s, `gpu_*` [gpu_teardown](#gpu_teardown)'s and",
            "`serve_*` [serve](#serve)'s.",
        ]
    out.append("")
    return out


def render() -> str:
    roles = load_roles()
    out = [
        "# Variables",
        "",
        "<!-- GENERATED by docs/reference/generate_variables.py from roles/*/meta/argument_specs.yml and",
        "     roles/*/defaults/main.yml: do not edit by hand; run the script. tests/layout/test_docs.py",
        "     fails when this page is stale. -->",
        "",
        "Every variable the playbooks and roles take. A default comes from the role's argument spec,",
        "else from its `defaults/main.yml`; one marked *(template)* is a Jinja expression evaluated at",
        "run time (for example from `engine`). A role's argument spec is checked before its tasks run,",
        "so a wrong type or choice fails at once, naming the option.",
        "",
        "Roles: " + ", ".join(f"[{r['name']}](#{r['name']})" for r in roles) + ".",
        "",
    ]
    out += render_playbook_level(roles)
    for role in roles:
        out += render_role(role)
    while out and out[-1] == "":
        out.pop()
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the committed page differs from a fresh render")
    parser.add_argument("--output", type=Path, default=OUTPUT, help="the page to write or check")
    args = parser.parse_args(argv)
    fresh = render()
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.exists() else ""
        if current == fresh:
            return 0
        diff = difflib.unified_diff(
            current.splitlines(), fresh.splitlines(), str(args.output) + " (committed)", "generated now", lineterm="", n=1
        )
        print(
            f"{args.output} is stale: run .venv/bin/python docs/reference/generate_variables.py\n" + "\n".join(list(diff)[:60]),
            file=sys.stderr,
        )
        return 1
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(fresh, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
