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
import re
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

    __slots__ = ("cmdline", "comm", "pgid", "pid", "ppid", "sid", "starttime", "state", "threads", "uid")

    def __init__(self, pid, *, comm, state, ppid, pgid, sid, threads, starttime, cmdline, uid=None):
        self.pid = pid
        self.uid = uid
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

    @property
    def user(self) -> str:
        """The owner's user name (real uid), or the uid as text when it has no name."""
        return user_name(self.uid)

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
            "user": self.user,
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
        cmdline=cmdline, uid=read_uid(pid),
    )


def read_uid(pid) -> int | None:
    """The real uid of pid (first field of the Uid: line of /proc/<pid>/status)."""
    raw = _read(f"{PROC}/{pid}/status")
    if raw is None:
        return None
    for line in raw.decode("utf-8", "replace").splitlines():
        if line.startswith("Uid:"):
            try:
                return int(line.split()[1])
            except (IndexError, ValueError):
                return None
    return None


def user_name(uid: int | None) -> str:
    if uid is None:
        return "unknown"
    try:
        import pwd  # noqa: PLC0415 (POSIX only; imported where used)

        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return str(uid)


def boot_id() -> str | None:
    """This boot's id: a record made under another boot is void."""
    return (_read(f"{PROC}/sys/kernel/random/boot_id") or b"").decode("ascii", "replace").strip() or None


def environ_value(pid, name: str) -> str | None:
    """One variable of /proc/<pid>/environ (the environment it started with), or None when unset or
    unreadable (another user's process, not root)."""
    raw = _read(f"{PROC}/{pid}/environ")
    if not raw:
        return None
    prefix = name.encode() + b"="
    for item in raw.split(b"\0"):
        if item.startswith(prefix):
            return item[len(prefix):].decode("utf-8", "replace")
    return None


def pid_namespace(pid) -> str | None:
    """The PID namespace of pid ('pid:[4026531836]'), or None when it cannot be read."""
    try:
        return os.readlink(f"{PROC}/{pid}/ns/pid")
    except OSError:
        return None


def exe_path(pid) -> str | None:
    """/proc/<pid>/exe (readable for one's own processes, or as root), or None."""
    try:
        return os.readlink(f"{PROC}/{pid}/exe")
    except OSError:
        return None


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


def fds_readable(pid: int) -> bool:
    """False when /proc/<pid>/fd exists but may not be read (another user's process, not root)."""
    try:
        os.listdir(f"{PROC}/{pid}/fd")
    except PermissionError:
        return False
    except OSError:
        return True
    return True


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


SENT, GONE, NOT_PERMITTED = "sent", "gone", "not permitted"


def send_signal(pid: int, start: int, sig: int) -> str:
    """Signal the process (pid, start) and nobody else: SENT, GONE or NOT_PERMITTED.

    A pidfd pins the process, so the starttime check and the signal concern one and the
    same process even if the pid is reused in between. A process of another user that this
    one may not signal gives NOT_PERMITTED (EPERM), never an exception.
    """
    pidfd = None
    if hasattr(os, "pidfd_open"):
        try:
            pidfd = os.pidfd_open(pid)
        except ProcessLookupError:
            return GONE
        except OSError:
            pidfd = None
    try:
        if starttime(pid) != start:
            return GONE
        if pidfd is not None:
            signal.pidfd_send_signal(pidfd, sig)
        else:
            os.kill(pid, sig)
        return SENT
    except ProcessLookupError:
        return GONE
    except PermissionError:
        return NOT_PERMITTED
    finally:
        if pidfd is not None:
            os.close(pidfd)


# --------------------------------------------------------------------------- what a process is

PYTHON = re.compile(r"^(python|pypy)[0-9.]*$")
INTERPRETERS = re.compile(r"^((python|pypy|perl|ruby|node)[0-9.]*|bash|sh|dash|zsh|ksh)$")
# interpreter options that take a value (python -W x, -X y; perl -I dir; bash -o opt)
OPTIONS_WITH_VALUE = {"-W", "-X", "-Q", "-I", "-o", "-O", "--rcfile", "--init-file"}


def identity(info: ProcInfo, exe: str | None = None) -> dict:
    """What a process is, from its command line, never its free-form arguments.

    ``title``: the process title (argv[0], or its first word where a title set over the whole
    argv area reads as one string: ``sglang::scheduler_TP0``, ``VLLM::EngineCore``);
    ``comm``: the kernel's 15-character name; ``program``: the basename of argv[0];
    ``module``: what ``python -m`` runs; ``script``: the script an interpreter runs (not a
    ``-c`` string); ``subcommand``: the first argument after that script (``sglang serve``).
    """
    argv = list(info.cmdline)
    if len(argv) == 1 and " " in argv[0]:
        argv = argv[0].split()
    title = argv[0] if argv else ""
    program = os.path.basename(title) if argv else info.comm
    exe_base = os.path.basename(exe) if exe else ""
    is_python = bool(PYTHON.match(program) or PYTHON.match(exe_base))
    module = script = subcommand = None
    if is_python or INTERPRETERS.match(program):
        i = 1
        while i < len(argv):
            arg = argv[i]
            if is_python and arg == "-m":
                module = argv[i + 1] if i + 1 < len(argv) else None
                break
            if is_python and arg.startswith("-m") and not arg.startswith("--"):
                module = arg[2:]
                break
            if arg == "-c" or (arg.startswith("-") and not arg.startswith("--") and arg.endswith("c") and
                               not is_python and len(arg) > 1):
                break  # a command string (python -c, bash -c, sh -ec): neither a script nor a module
            if arg in OPTIONS_WITH_VALUE:
                i += 2
                continue
            if arg.startswith("-"):
                i += 1
                continue
            script = arg
            after = argv[i + 1 : i + 2]
            subcommand = after[0] if after and not after[0].startswith("-") else None
            break
    elif len(argv) > 1 and not argv[1].startswith("-"):
        subcommand = argv[1]
    return {
        "title": title,
        "comm": info.comm,
        "program": program,
        "module": module,
        "script": script,
        "subcommand": subcommand,
    }
