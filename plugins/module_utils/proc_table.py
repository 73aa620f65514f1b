# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""The process table as /proc shows it: who holds which device node, who is whose parent.

Standard library only (it runs on the managed node inside Ansible modules). One reader of
/proc for the whole collection: gpu_state, gpu_teardown and the tests use it.

Identity of a process is (pid, starttime), starttime being field 22 of /proc/<pid>/stat:
a pid reused by a new process has another starttime, so a signal is only ever sent to the
process that was looked at (through a pidfd where the kernel has them).
"""
from __future__ import annotations

import glob
import os
import signal
import stat as stat_mod

PROC = "/proc"

STATE_TEXT = {
    "R": "running",
    "S": "sleeping",
    "D": "uninterruptible sleep, stuck in the driver",
    "Z": "zombie (defunct)",
    "T": "stopped",
    "t": "traced",
    "X": "dead",
    "I": "idle",
}


class ProcInfo:
    """One process as read from /proc/<pid>/stat, cmdline and comm."""

    __slots__ = ("cmdline", "comm", "pgid", "pid", "ppid", "sid", "starttime", "state", "threads")

    def __init__(self, pid, *, comm, state, ppid, pgid, sid, threads, starttime, cmdline):
        self.pid = pid
        self.comm = comm
        self.state = state
        self.ppid = ppid
        self.pgid = pgid
        self.sid = sid
        self.threads = threads
        self.starttime = starttime
        self.cmdline = cmdline

    @property
    def command(self) -> str:
        """The command line joined by spaces, or [comm] for a kernel thread or zombie."""
        return " ".join(self.cmdline) if self.cmdline else f"[{self.comm}]"

    @property
    def exe_name(self) -> str:
        """Basename of argv[0] (what `ps -o args` starts with), else comm."""
        if self.cmdline and self.cmdline[0]:
            return os.path.basename(self.cmdline[0])
        return self.comm

    def gone(self) -> bool:
        """True once this process (same starttime) has exited or is a zombie."""
        return not alive(self.pid, self.starttime)

    def as_dict(self) -> dict:
        return {
            "pid": self.pid,
            "ppid": self.ppid,
            "pgid": self.pgid,
            "name": self.comm,
            "state": self.state,
            "cmdline": self.command,
        }


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:
        return None


def parse_stat(text: str) -> tuple:
    """(comm, state, ppid, pgid, sid, threads, starttime) from a /proc/<pid>/stat line.

    comm sits in parentheses and may itself contain spaces and parentheses: split after
    the last ')'.
    """
    open_at = text.index("(")
    close_at = text.rindex(")")
    comm = text[open_at + 1 : close_at]
    rest = text[close_at + 2 :].split()
    # rest[0] is field 3 (state); field N is rest[N - 3]
    return comm, rest[0], int(rest[1]), int(rest[2]), int(rest[3]), int(rest[17]), int(rest[19])


def read_proc(pid: int) -> ProcInfo | None:
    """The process with this pid now, or None when there is none (or it cannot be read)."""
    raw = _read(f"{PROC}/{pid}/stat")
    if raw is None:
        return None
    try:
        comm, state, ppid, pgid, sid, threads, starttime = parse_stat(raw.decode("utf-8", "replace"))
    except (ValueError, IndexError):
        return None
    cmd = _read(f"{PROC}/{pid}/cmdline") or b""
    cmdline = [part.decode("utf-8", "replace") for part in cmd.split(b"\0")]
    while cmdline and cmdline[-1] == "":
        cmdline.pop()
    return ProcInfo(
        pid, comm=comm, state=state, ppid=ppid, pgid=pgid, sid=sid, threads=threads, starttime=starttime,
        cmdline=cmdline,
    )


def pids() -> list[int]:
    """Every pid in this PID namespace, ascending."""
    try:
        return sorted(int(e) for e in os.listdir(PROC) if e.isdigit())
    except OSError:
        return []


def snapshot() -> dict[int, ProcInfo]:
    """Every readable process, by pid."""
    table = {}
    for pid in pids():
        info = read_proc(pid)
        if info is not None:
            table[pid] = info
    return table


def starttime(pid: int) -> int | None:
    info = read_proc(pid)
    return None if info is None else info.starttime


def alive(pid: int, start: int | None = None) -> bool:
    """Alive, not a zombie, and (when start is given) still the same process."""
    info = read_proc(pid)
    if info is None or info.state == "X" or (info.state == "Z" and info.threads <= 1):
        # a defunct leader whose threads still run ("Zl") is alive for our purposes
        return False
    return start is None or info.starttime == start


def ancestors(pid: int, table: dict[int, ProcInfo] | None = None) -> list[int]:
    """pid's parent, grandparent, ... up to (not including) pid 0."""
    chain = []
    seen = {pid}
    current = pid
    while True:
        info = table.get(current) if table is not None else None
        if info is None:
            info = read_proc(current)
        if info is None or info.ppid <= 0 or info.ppid in seen:
            return chain
        chain.append(info.ppid)
        seen.add(info.ppid)
        current = info.ppid


def descendants(root: int, table: dict[int, ProcInfo]) -> set[int]:
    """Every process below root in the parent tree (root excluded)."""
    children: dict[int, list[int]] = {}
    for info in table.values():
        children.setdefault(info.ppid, []).append(info.pid)
    found = set()
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def expand_nodes(device_glob: str) -> list[str]:
    """The device nodes a glob names, as real paths; folders (nvidia-caps) give their files."""
    nodes = []
    for path in sorted(glob.glob(device_glob)):
        if os.path.isdir(path):
            nodes.extend(sorted(os.path.realpath(p) for p in glob.glob(os.path.join(path, "*"))))
        else:
            nodes.append(os.path.realpath(path))
    # keep order, drop duplicates
    return list(dict.fromkeys(nodes))


def _fd_dirs(pid: int, state: str | None, threads: int) -> list[str]:
    dirs = [f"{PROC}/{pid}/fd"]
    if state == "Z" and threads > 1:
        # A defunct thread-group leader ("Zl") has dropped its own file table; its live
        # threads still share theirs.
        dirs = [f"{PROC}/{pid}/task/{tid}/fd" for tid in _list(f"{PROC}/{pid}/task") if tid != str(pid)]
    return dirs


def _list(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def open_nodes(pid: int, nodes: set[str], state: str | None = None, threads: int = 1) -> set[str]:
    """Which of nodes (real paths) pid holds open, through any of its descriptors."""
    held = set()
    for fd_dir in _fd_dirs(pid, state, threads):
        for fd in _list(fd_dir):
            try:
                target = os.readlink(f"{fd_dir}/{fd}")
            except OSError:
                continue
            if target in nodes:
                held.add(target)
    return held


def holders(nodes: list[str], table: dict[int, ProcInfo] | None = None) -> dict[int, list[str]]:
    """{pid: [node, ...]} for every process holding one of nodes open (like fuser -v)."""
    wanted = set(nodes)
    if not wanted:
        return {}
    table = snapshot() if table is None else table
    found = {}
    for pid, info in table.items():
        held = open_nodes(pid, wanted, info.state, info.threads)
        if held:
            found[pid] = sorted(held)
    return found


def is_char_device(path: str) -> bool:
    try:
        return stat_mod.S_ISCHR(os.stat(path).st_mode)
    except OSError:
        return False


SIGNALS = {"SIGTERM": signal.SIGTERM, "SIGKILL": signal.SIGKILL}


def send_signal(pid: int, start: int, sig: int) -> bool:
    """Signal the process (pid, start) and nobody else; False when it is already gone.

    A pidfd pins the process, so the starttime check and the signal concern one and the
    same process even if the pid is reused in between.
    """
    pidfd = None
    if hasattr(os, "pidfd_open"):
        try:
            pidfd = os.pidfd_open(pid)
        except ProcessLookupError:
            return False
        except OSError:
            pidfd = None
    try:
        if starttime(pid) != start:
            return False
        if pidfd is not None:
            signal.pidfd_send_signal(pidfd, sig)
        else:
            os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False
    finally:
        if pidfd is not None:
            os.close(pidfd)
