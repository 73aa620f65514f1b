# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""The teardown's settings: defaults, kill patterns on what a process is, checked numbers and
names. Every bad value raises TeardownInputError naming the setting and its fix."""
from __future__ import annotations

import re
import signal

DEFAULT_NEVER_KILL = [
    "nvidia-persistenced",
    "nv-hostengine",
    "dcgm-exporter",
    "nv-fabricmanager",
    "nvidia-cuda-mps-control",
    "Xorg",
]
# Display servers: X servers, Xwayland and the Wayland compositors (what holds a desktop's
# framebuffers). Never signalled in any scope, whatever gpu_never_kill says, like every process
# the driver lists as a graphics process; a teardown whose target GPU they hold fails naming them.
DISPLAY_SERVERS = (
    "Xorg", "X", "Xwayland", "gnome-shell", "mutter", "kwin_wayland", "kwin_x11", "weston", "sway", "Hyprland",
    "wayfire", "labwc", "river", "cage", "gamescope", "cosmic-comp", "niri", "enlightenment", "gdm-wayland-session",
)
# What the engines' processes are (fields: see proc_table.identity). Data, also in the role's
# defaults (gpu_engine_kill_patterns), where the emulator's are scoped to its device folder.
ENGINE_KILL_PATTERNS = {
    "sglang": [
        {"title": "^sglang::"},
        {"module": r"^sglang\.launch_server$"},
        {"script": "(^|/)sglang$", "subcommand": "^serve$"},
    ],
    "vllm": [
        {"title": "^VLLM::"},
        {"module": r"^vllm\.entrypoints\."},
        {"script": "(^|/)vllm$", "subcommand": "^serve$"},
    ],
}
DEFAULT_KILL_PATTERNS = ENGINE_KILL_PATTERNS["sglang"]
IDENTITY_FIELDS = ("title", "comm", "program", "module", "script")
QUALIFIER_FIELDS = ("subcommand", "args")
SCOPES = ("own", "node")
SIGNAL_NAMES = {signal.SIGTERM: "SIGTERM", signal.SIGKILL: "SIGKILL"}
CONTROLLER_PREFIXES = ("ansible", "ansible-playbook", "ansible-runner", "ansible-pull", "awx")
GPU_NODE = re.compile(r"^nvidia[0-9]+$")


class TeardownInputError(ValueError):
    """A bad setting: the message names it and says how to fix it."""


# --------------------------------------------------------------------------- settings


class Pattern:
    """One kill pattern: regular expressions on what a process is (proc_table.identity).

    A string searches the title, kernel name, program, module and script; a mapping names the
    fields (title, comm, program, module, script; qualifiers subcommand and args, the latter
    searched in the whole command line) and every field given must match. A qualifier alone
    is refused: an argument never makes a process what it is.
    """

    def __init__(self, index: int, spec):
        self.spec = spec
        where = f"gpu_kill_patterns[{index}]"
        if isinstance(spec, str):
            fields = {"any": spec}
        elif isinstance(spec, dict):
            fields = dict(spec)
            unknown = sorted(set(fields) - set(IDENTITY_FIELDS) - set(QUALIFIER_FIELDS))
            if unknown:
                raise TeardownInputError(
                    f"{where} {spec!r} has unknown field(s) {', '.join(map(str, unknown))}: use "
                    f"{', '.join(IDENTITY_FIELDS)} (what the process is) and optionally subcommand or args."
                )
            if not any(f in fields for f in IDENTITY_FIELDS):
                raise TeardownInputError(
                    f"{where} {spec!r} names no field of what the process is: give title, comm, program, module "
                    "or script (subcommand and args only narrow a match), e.g. {title: '^sglang::'}."
                )
        else:
            raise TeardownInputError(
                f"{where} is {spec!r}: each pattern is a regular expression (matched against the process title, "
                "name, program, module and script) or a mapping such as {module: '^sglang\\.launch_server$'}."
            )
        self.fields = {}
        for name, value in fields.items():
            label = where if name == "any" else f"{where}.{name}"
            if not isinstance(value, str) or not value.strip():
                raise TeardownInputError(f"{label} is {value!r}: it must be a non-empty regular expression.")
            try:
                rx = re.compile(value)
            except re.error as exc:
                raise TeardownInputError(
                    f"{label} {value!r} is not a valid regular expression ({exc}): escape special characters "
                    "with a backslash, e.g. 'sglang\\.launch_server'."
                ) from exc
            if rx.search("") is not None:
                raise TeardownInputError(
                    f"{label} {value!r} matches an empty string, so it would match every process: use a pattern "
                    "that names the server, e.g. '^sglang::'."
                )
            self.fields[name] = rx

    def matches(self, ident: dict, command: str) -> bool:
        for name, rx in self.fields.items():
            if name == "any":
                if not any(ident.get(f) and rx.search(ident[f]) for f in IDENTITY_FIELDS):
                    return False
            elif name == "args":
                if not rx.search(command):
                    return False
            elif name == "title":
                # the title set by setproctitle shows in argv[0] and, cut to 15 characters, in comm
                if not (rx.search(ident["title"] or "") or rx.search(ident["comm"] or "")):
                    return False
            elif not (ident.get(name) and rx.search(ident[name])):
                return False
        return True


def compile_patterns(patterns) -> list[Pattern]:
    if not isinstance(patterns, list):
        raise TeardownInputError(
            "gpu_kill_patterns must be a list of patterns, e.g. [{title: '^sglang::'}, "
            "{module: '^sglang\\.launch_server$'}]."
        )
    return [Pattern(i, spec) for i, spec in enumerate(patterns)]


def check_names(names, setting: str = "gpu_never_kill", example: str = "['nvidia-persistenced', 'Xorg']") -> list[str]:
    if not isinstance(names, list) or not all(isinstance(n, str) and n.strip() for n in names):
        what = "process names" if setting == "gpu_never_kill" else "names"
        raise TeardownInputError(f"{setting} must be a list of non-empty {what}, e.g. {example}.")
    return list(names)


def check_number(name: str, value, minimum: float, strict: bool = True) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = None
    if number is None or number < minimum or (strict and number == minimum):
        bound = f"greater than {minimum:g}" if strict else f"at least {minimum:g}"
        raise TeardownInputError(f"{name} is {value!r}: it must be a number {bound}.")
    return number


def check_scope(scope) -> str:
    if scope not in SCOPES:
        raise TeardownInputError(
            f"gpu_kill_scope is {scope!r}: use 'own' (the default: only what this project launched and what "
            "holds memory on the target GPUs, of this user) or 'node' (a dedicated node: everything matching "
            "the engine's patterns and every holder of the target GPUs' nodes, except gpu_never_kill)."
        )
    return scope
