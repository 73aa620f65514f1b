# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""What every engine's controller-side adapter shares, written once; standard library only.

* flag handling: :func:`flag_name`, :func:`flags_in`, :func:`matches` (argparse abbreviations),
  :func:`render_value`;
* the fairness rules: :func:`capacity_setting_of`, :func:`check_number` (a capacity setting's
  value against its kind) and :func:`check_extra` (extra arguments that must not set a capacity
  setting or a flag the role renders), with an engine hook for the engine's own refusals;
* the parser probe: :data:`PARSE_ARGV` (the argparse harness a probe script runs in the engine's
  own interpreter) and :func:`run_probe` (runs it and reads its marked JSON line);
* where a client connects: :func:`connect_host`, :func:`base_url`.

An engine's folder (``engines/<name>/``) holds what only that engine knows: its command
rendering, its probe script and flag check, its preflight. The node-side client has its own
adapters in ``specbench_client/engines/`` (it ships as a self-contained zipapp).
"""
from __future__ import annotations

import json
import os
import subprocess

KINDS = ("fraction", "count", "count_or_off")


class CommandError(Exception):
    """A launch the role refuses to render; the text names the problem and the fix."""


class FlagError(Exception):
    """The node's engine cannot take the command; the text names the flag and the fix."""


class ProbeError(Exception):
    """A parser probe gave no answer. ``kind``: ``missing`` (no such interpreter), ``timeout`` or
    ``broken`` (no marked line; ``returncode`` and ``tail`` say why). Engines turn it into a
    :class:`FlagError` naming their own variables."""

    def __init__(self, kind: str, returncode: int | None = None, tail: str = ""):
        super().__init__(kind)
        self.kind, self.returncode, self.tail = kind, returncode, tail


def flag_name(token: str) -> str | None:
    """``--flag`` for a token that is a long option (``--flag`` or ``--flag=value``), else None."""
    if not isinstance(token, str) or not token.startswith("--") or token == "--":
        return None
    return token.split("=", 1)[0]


def flags_in(args: list) -> list[str]:
    """The long options among ``args``, in order."""
    return [f for f in (flag_name(a) for a in args) if f]


def matches(token_flag: str, flag: str) -> bool:
    """True when argparse would read ``token_flag`` as ``flag`` (exact, or an abbreviation)."""
    return token_flag == flag or (len(token_flag) > 3 and flag.startswith(token_flag))


def capacity_setting_of(flag: str, settings: list[dict]) -> dict | None:
    """The capacity setting a flag (or its argparse abbreviation) sets, if any."""
    for setting in settings:
        for known in [setting["flag"], *setting.get("aliases", [])]:
            if matches(flag, known):
                return setting
    return None


def render_value(flag: str, value) -> list[str]:
    """Argv items for one flag: bare for True, nothing for None/False/'', repeated for lists.

    A value starting with ``~`` is expanded on the node, as a shell would.
    """
    if value is None or value is False or value == "":
        return []
    if value is True:
        return [flag]
    if isinstance(value, (list, tuple)):
        return [flag, *[_text(v) for v in value]] if value else []
    return [flag, _text(value)]


def _text(value) -> str:
    text = str(value)
    return os.path.expanduser(text) if text.startswith("~") else text


def check_number(setting: dict, value):
    """The setting's value checked against its kind; CommandError naming the variable.

    ``setting``: ``{"name", "flag", "variable", "kind", "why"}``; ``kind`` is ``fraction``
    (0 < x < 1), ``count`` (an integer >= 1) or ``count_or_off`` (>= 1, or -1).
    """
    name, var, kind = setting["name"], setting["variable"], setting.get("kind", "count")
    if kind not in KINDS:
        raise CommandError(f"capacity setting {name} has kind {kind!r}; use one of {', '.join(KINDS)}.")
    if value is None or value == "":
        why = f" {setting['why']}" if setting.get("why") else ""
        raise CommandError(
            f"{var} is not set: {setting['flag']} ({name}) changes capacity, so every mode renders it "
            f"explicitly with the same value.{why} Set {var} (for example in group_vars or with -e)."
        )
    if isinstance(value, bool):
        raise CommandError(f"{var} must be a number, not {value!r}.")
    try:
        number = float(value) if kind == "fraction" else int(str(value))
    except (TypeError, ValueError):
        expected = "a fraction between 0 and 1" if kind == "fraction" else "an integer"
        raise CommandError(f"{var} must be {expected}, got {value!r}.") from None
    if kind == "fraction" and not 0 < number < 1:
        raise CommandError(f"{var} must be between 0 and 1 (exclusive), got {value!r}.")
    if kind == "count" and number < 1:
        raise CommandError(f"{var} must be a positive integer, got {value!r}.")
    if kind == "count_or_off" and number < 1 and number != -1:
        raise CommandError(f"{var} must be a positive integer, or -1 to turn it off, got {value!r}.")
    return number


def check_extra(args, source: str, settings: list[dict], base_flags: dict, *, example: str, capacity_fix,
                flag_rule=None) -> None:
    """Refuse extra arguments that set a capacity setting or a flag the role renders (fairness).

    ``base_flags``: ``{flag: variable}`` the role renders itself; ``example``: argv items shown
    when ``args`` is not a list of strings; ``capacity_fix(setting)``: the end of the sentence
    refusing a capacity flag (how to set it instead); ``flag_rule(flag, source)``: the engine's
    own refusals, raising CommandError (SGLang: speculative flags outside a mode).
    """
    if not isinstance(args, list) or not all(isinstance(a, (str, int, float)) for a in args):
        raise CommandError(f"{source} must be a list of strings (argv items such as {example}).")
    for flag in flags_in(args):
        setting = capacity_setting_of(flag, settings)
        if setting:
            raise CommandError(
                f"{source} sets {flag}, the capacity setting {setting['name']} that every mode shares "
                f"(fairness){capacity_fix(setting)}"
            )
        for base, var in base_flags.items():
            if matches(flag, base):
                raise CommandError(f"{source} sets {flag}, which the role renders itself: set {var} instead.")
        if flag_rule is not None:
            flag_rule(flag, source)


# The argparse harness of every parser probe, run by the engine's own interpreter after its
# script built ``parser`` (and imported json and sys): reads argv (JSON) from stdin and parses it
# with argparse's exit turned into a message, leaving ``error`` (None when the parser takes it).
PARSE_ARGV = r"""
argv = json.loads(sys.stdin.read() or "[]")
error = None
class _Refused(Exception):
    pass
def _error(message):
    raise _Refused(message)
parser.error = _error
try:
    parser.parse_args(argv)
except _Refused as exc:
    error = str(exc)
except SystemExit as exc:
    error = "argparse exited %s" % exc.code
"""


def run_probe(python: str, script: str, marker: str, args: list, timeout: float, argv: tuple = (),
              env: dict | None = None) -> dict:
    """Run ``python -c script *argv`` with ``args`` (JSON) on stdin; the JSON after ``marker`` on
    its last marked stdout line. :class:`ProbeError` when the probe gives no answer."""
    try:
        proc = subprocess.run([python, "-c", script, *argv], input=json.dumps(args), capture_output=True, text=True,
                              timeout=timeout, check=False, env=env)
    except FileNotFoundError:
        raise ProbeError("missing") from None
    except subprocess.TimeoutExpired:
        raise ProbeError("timeout") from None
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(marker):
            return json.loads(line[len(marker):])
    tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
    raise ProbeError("broken", proc.returncode, tail)


def connect_host(host: str) -> str:
    """Where a client on the node connects for a server bound to ``host`` (loopback for wildcards)."""
    if host in ("", "0.0.0.0", "*"):
        return "127.0.0.1"
    if host in ("::", "[::]"):
        return "::1"
    return host


def base_url(host: str, port: int) -> str:
    target = connect_host(host)
    if ":" in target and not target.startswith("["):
        target = f"[{target}]"
    return f"http://{target}:{port}"


def postlaunch_failure(mode: str, check: dict) -> str:
    """The error that fails the mode when its engine's post-launch check (engines/<engine>/postlaunch.py)
    found a mismatch."""
    return (f"mode {mode} is not running as asked, so it is not measured: {'; '.join(check['mismatches'])}. "
            "Fix the mode's flags (or the server's settings that made the engine change them) and launch again.")
