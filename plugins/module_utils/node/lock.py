# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""The node lock: one playbook at a time launches, benchmarks, serves or tears down on a node.

The lock is an ``flock`` on ``<node folder>/node.lock``, held by a small daemon the module forks
(the lock belongs to the open file description, which the daemon keeps after the module exits).
The kernel drops the lock when that daemon dies, and the daemon dies with its holder: it watches
the process that stands for the playbook run on this node (ansible-playbook itself under a local
connection; the SSH connection's sshd otherwise) and exits when that process is gone, when it is
released (SIGTERM from ``release``) or, with nothing to watch, after ``max_hold_s``. So no lock
outlives its holder. Beside the lock, ``node.lock.json`` says who holds it (run id, playbook, user,
since when, AWX job id, the daemon's pid): the words of a refusal, never the lock itself.

Standard library only (it runs on the managed node).
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
import signal
import stat
import time

PROC = "/proc"
CONTROLLERS = ("ansible-playbook", "ansible-runner", "awx-manage")
INFO_SUFFIX = ".json"


class LockError(Exception):
    """The lock cannot be taken: the message names the holder (or the problem) and the fix."""

    def __init__(self, message: str, holder: dict | None = None):
        super().__init__(message)
        self.holder = holder or {}


# --------------------------------------------------------------------------- /proc


def _stat(pid: int) -> tuple[int, int] | None:
    """(ppid, starttime) of pid, or None."""
    try:
        with open(f"{PROC}/{pid}/stat", "rb") as fh:
            text = fh.read().decode("utf-8", "replace")
        rest = text[text.rindex(")") + 2:].split()
        if rest[0] in ("Z", "X"):
            return None
        return int(rest[1]), int(rest[19])
    except (OSError, ValueError, IndexError):
        return None


def _argv(pid: int) -> list[str]:
    try:
        with open(f"{PROC}/{pid}/cmdline", "rb") as fh:
            return [a.decode("utf-8", "replace") for a in fh.read().split(b"\0") if a]
    except OSError:
        return []


def _comm(pid: int) -> str:
    try:
        with open(f"{PROC}/{pid}/comm", encoding="utf-8", errors="replace") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def alive(pid, start) -> bool:
    """The process (pid, start time) still runs (not a zombie)."""
    if not pid:
        return False
    found = _stat(int(pid))
    return found is not None and (start is None or found[1] == int(start))


def starttime(pid: int) -> int | None:
    found = _stat(pid)
    return None if found is None else found[1]


def holder_process(pid: int | None = None) -> dict:
    """What stands for the playbook run on this node, seen from pid (this module): the topmost
    ansible-playbook/ansible-runner ancestor (a local connection), else the nearest sshd (the
    SSH connection, which ends with the run or ControlPersist seconds after it), else nothing."""
    pid = os.getpid() if pid is None else pid
    chain, seen = [], {pid}
    current = pid
    while True:
        found = _stat(current)
        if found is None or found[0] <= 1 or found[0] in seen:
            break
        current = found[0]
        seen.add(current)
        chain.append(current)
    controller = None
    for anc in chain:
        argv = _argv(anc)
        if any(os.path.basename(a).startswith(CONTROLLERS) for a in argv[:2]):
            controller = anc  # keep climbing: the topmost one is the run itself
    if controller is not None:
        return {"pid": controller, "starttime": starttime(controller), "what": "ansible-playbook (local connection)"}
    for anc in chain:
        if _comm(anc).startswith("sshd"):
            return {"pid": anc, "starttime": starttime(anc), "what": "the SSH connection (sshd)"}
    return {"pid": None, "starttime": None, "what": "nothing to watch (held until released or max_hold_s)"}


# --------------------------------------------------------------------------- the files


def open_lock_file(path: str) -> int:
    """The lock file, opened without following a symlink and without blocking; refused unless it
    is a regular file of this user."""
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, mode=0o755, exist_ok=True)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise LockError(f"the node lock {path} is a symbolic link: remove it (rm {path}); specbench "
                            "never follows a link there.") from exc
        raise LockError(f"cannot open the node lock {path} ({exc.strerror}): make the node folder writable "
                        "by the user the tasks run as, or set specbench_node_dir.") from exc
    info = os.fstat(fd)
    problem = None
    if not stat.S_ISREG(info.st_mode):
        problem = "is not a regular file"
    elif info.st_uid != os.geteuid():
        problem = f"belongs to uid {info.st_uid}, not to this user (uid {os.geteuid()})"
    if problem:
        os.close(fd)
        raise LockError(f"the node lock {path} {problem}: remove it (rm {path}) and run again.")
    return fd


def read_holder(path: str) -> dict:
    """Who holds the lock, as the holder wrote it (empty when unknown)."""
    try:
        fd = os.open(path + INFO_SUFFIX, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return {}
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return {}
        with os.fdopen(fd, "rb") as fh:
            fd = None
            data = json.loads(fh.read(65536).decode("utf-8", "replace"))
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}
    finally:
        if fd is not None:
            os.close(fd)


def _write_holder(path: str, data: dict) -> None:
    tmp = f"{path}{INFO_SUFFIX}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=2, sort_keys=True)
        fh.write("\n")
    os.replace(tmp, path + INFO_SUFFIX)


def watched(holder: dict) -> str:
    watching = holder.get("watching") or {}
    if watching.get("pid"):
        return f"it watches pid {watching['pid']}, {watching.get('what', '?')}"
    return f"it has nothing to watch and is released by the run or after {holder.get('max_hold_s', '?')}s"


def describe(holder: dict) -> str:
    """The holder in words: run id, playbook, user, since when, AWX job id."""
    if not holder:
        return "an unknown holder (no readable node.lock.json beside the lock)"
    text = (f"run {holder.get('run_id') or '?'} (playbook {holder.get('playbook') or '?'}, user "
            f"{holder.get('user') or '?'}, since {holder.get('since') or '?'}")
    if holder.get("awx_job_id") not in (None, ""):
        text += f", AWX job {holder['awx_job_id']}"
    return text + f", lock daemon pid {holder.get('pid', '?')})"


# --------------------------------------------------------------------------- acquire / release


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return False
        raise


def held_by(path: str, token: str) -> dict | None:
    """The holder record when this run (token) holds the lock already, its daemon alive."""
    holder = read_holder(path)
    if holder.get("token") == token and alive(holder.get("pid"), holder.get("starttime")):
        return holder
    return None


def acquire(path: str, token: str, who: dict, wait_s: float, poll_s: float = 0.2, max_hold_s: float = 86400.0,
            watch: dict | None = None, clock=time.monotonic, sleep=time.sleep, on_holder_gone=None) -> dict:
    """Take the lock for this run (``token``), waiting up to wait_s; the holder record.
    ``who``: run_id, playbook, user, awx_job_id; ``watch``: the holder process the keeper outlives
    never (default: holder_process()). ``on_holder_gone(since)``: called by the keeper, the lock still
    held, when the watched process ends without the run having released the lock (``since``: unix
    seconds when the lock was taken); never after a release or ``max_hold_s``. Raises LockError naming
    the holder."""
    mine = held_by(path, token)
    if mine is not None:
        return {**mine, "already": True}
    fd = open_lock_file(path)
    try:
        deadline = clock() + wait_s
        waited_from = clock()
        while not _try_lock(fd):
            mine = held_by(path, token)
            if mine is not None:  # another host of this run, on the same node folder, took it meanwhile
                return {**mine, "already": True}
            if clock() >= deadline:
                holder = read_holder(path)
                raise LockError(
                    f"another job holds the node lock {path}: {describe(holder)}. Waited {clock() - waited_from:.1f}s "
                    f"(run_context_lock_wait_s {wait_s:g}). Let it finish and run again, or raise run_context_lock_wait_s to "
                    f"queue behind it. The lock goes with its keeper, which exits with that run ({watched(holder)}); if "
                    f"that run is over, release it now: kill {holder.get('pid', '<keeper pid>')}.",
                    holder)
            sleep(poll_s)
        waited = clock() - waited_from
        watch = holder_process() if watch is None else watch
        record = {
            "token": token, "run_id": who.get("run_id"), "playbook": who.get("playbook"), "user": who.get("user"),
            "awx_job_id": who.get("awx_job_id"), "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "watching": watch, "waited_s": round(waited, 3), "max_hold_s": max_hold_s,
        }
        record["since_unix"] = round(time.time(), 3)
        record.update(_spawn_keeper(fd, path, record, watch, max_hold_s, poll_s, on_holder_gone))
        return {**record, "already": False}
    finally:
        os.close(fd)


def _spawn_keeper(fd: int, path: str, record: dict, watch: dict, max_hold_s: float, poll_s: float,
                  on_holder_gone=None) -> dict:
    """Fork the daemon that keeps the lock; its pid and start time once it wrote the record."""
    rfd, wfd = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover (runs in the daemon)
        try:
            os.close(rfd)
            os.setsid()
            if os.fork() != 0:
                os._exit(0)
            _keeper(fd, wfd, path, record, watch, max_hold_s, poll_s, on_holder_gone)
        finally:
            os._exit(0)
    os.close(wfd)
    os.waitpid(child, 0)
    with os.fdopen(rfd, "rb") as fh:
        answer = fh.read()
    try:
        return json.loads(answer.decode())
    except ValueError as exc:
        raise LockError(f"the node lock's keeper did not start ({answer[:200]!r}).") from exc


def _keeper(fd, wfd, path, record, watch, max_hold_s, poll_s, on_holder_gone=None):  # pragma: no cover (daemon)
    null = os.open(os.devnull, os.O_RDWR)
    for target in (0, 1, 2):
        os.dup2(null, target)
    keep = {fd, wfd, 0, 1, 2}
    for other in range(3, 1024):
        if other not in keep:
            try:
                os.close(other)
            except OSError:
                pass
    os.set_inheritable(fd, False)
    me = os.getpid()
    mine = {"pid": me, "starttime": starttime(me)}
    try:
        _write_holder(path, {**record, **mine})
        os.write(wfd, json.dumps(mine).encode())
    finally:
        os.close(wfd)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    _title("specbench-lock")
    began = time.monotonic()
    holder_gone = False
    while not stop:
        if watch.get("pid") and not alive(watch["pid"], watch.get("starttime")):
            holder_gone = True
            break
        if not watch.get("pid") and time.monotonic() - began >= max_hold_s:
            break
        time.sleep(poll_s)
    if holder_gone and not stop and on_holder_gone is not None:
        # The run is gone without releasing the lock (killed, cancelled, its connection lost): what it left
        # is cleaned up while the lock is still held, so a job waiting for it finds the node as a run leaves it.
        try:
            on_holder_gone(record["since_unix"])
        except Exception:  # noqa: BLE001 - the keeper must still drop the lock
            pass
    if read_holder(path).get("token") == record["token"]:
        try:
            os.unlink(path + INFO_SUFFIX)
        except OSError:
            pass
    os._exit(0)


def _title(text: str) -> None:
    """Name the keeper in ps (comm), so that an operator sees what holds the lock."""
    try:
        with open(f"{PROC}/self/comm", "w", encoding="utf-8") as fh:
            fh.write(text[:15])
    except OSError:
        pass


def release(path: str, token: str, wait_s: float = 5.0, clock=time.monotonic, sleep=time.sleep) -> bool:
    """Release this run's lock: stop its keeper (verified by pid and start time) and wait until the
    lock is free. False when this run does not hold it."""
    holder = held_by(path, token)
    if holder is None:
        return False
    pid, start = int(holder["pid"]), holder.get("starttime")
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return False
    try:
        if starttime(pid) != start:
            return False
        signal.pidfd_send_signal(pidfd, signal.SIGTERM)
    finally:
        os.close(pidfd)
    deadline = clock() + wait_s
    while alive(pid, start) and clock() < deadline:
        sleep(0.02)
    return True
