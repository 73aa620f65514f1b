"""The node lock (module_utils/node/lock.py) with real processes and a real flock: a second job
fails naming the first, or waits and gets the lock once the first's holder dies; the lock never
outlives its holder; the lock file is trusted only as this user's regular file (a symlink, a FIFO
or another user's file is refused at once, never followed or waited on)."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from nodekit import ROOT, flock_free

from ansible_collections.specbench.core.plugins.module_utils.node import lock

WHO_A = {"run_id": "20261205T000000Z", "playbook": "specbench.core.bench", "user": "alice", "awx_job_id": "417"}
WHO_B = {"run_id": "20261205T000001Z", "playbook": "specbench.core.teardown", "user": "bob", "awx_job_id": None}


def _holder():
    """A process standing for job A's ansible-playbook: the lock must die with it."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    return proc, {"pid": proc.pid, "starttime": lock.starttime(proc.pid), "what": "a test holder"}


def test_the_second_job_fails_naming_the_first_then_gets_the_lock_once_the_first_dies(tmp_path):
    path = str(tmp_path / "node" / "node.lock")
    proc, watch = _holder()
    try:
        first = lock.acquire(path, "token-a", WHO_A, wait_s=0, poll_s=0.02, watch=watch)
        assert not first["already"] and lock.alive(first["pid"], first["starttime"])
        # the same run asks again (another play of the same playbook): it holds it already
        assert lock.acquire(path, "token-a", WHO_A, wait_s=0, watch=watch)["already"]
        with pytest.raises(lock.LockError) as refused:
            lock.acquire(path, "token-b", WHO_B, wait_s=0.3, poll_s=0.05)
        text = str(refused.value)
        for word in ("run 20261205T000000Z", "playbook specbench.core.bench", "user alice", "AWX job 417",
                     "since 20", f"lock daemon pid {first['pid']}", "Waited 0.", "run_context_lock_wait_s"):
            assert word in text, (word, text)
        proc.kill()
        proc.wait()
        # the keeper sees its holder gone within a poll and exits; the kernel drops the flock
        deadline = time.monotonic() + 10
        while lock.alive(first["pid"], first["starttime"]) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not lock.alive(first["pid"], first["starttime"])
        assert flock_free(path)
        assert lock.read_holder(path) == {}
        # a waiting job gets it: B waits while A's successor holds it, and takes it once released
        proc2, watch2 = _holder()
        lock.acquire(path, "token-c", WHO_A, wait_s=0, poll_s=0.02, watch=watch2)
        waiter = subprocess.Popen([sys.executable, "-c", (
            "import sys, json; sys.path[:0] = sys.argv[1:2]\n"
            "from ansible_collections.specbench.core.plugins.module_utils.node import lock\n"
            "print('asking', flush=True)\n"
            f"got = lock.acquire({path!r}, 'token-b', {{}}, wait_s=30, poll_s=0.02, watch={{'pid': None}}, max_hold_s=1)\n"
            "print(got['waited_s'])"), str(ROOT / "collections")], stdout=subprocess.PIPE, text=True)
        # Once it asks (its interpreter and imports took over 0.3 s on a loaded CI machine once: it then found
        # the lock free and had waited 0 s), it waits while the lock is held.
        assert waiter.stdout.readline().strip() == "asking"
        time.sleep(0.3)
        assert waiter.poll() is None  # still waiting
        assert lock.release(path, "token-c")
        assert not lock.release(path, "token-c")  # released once; another run's lock is never touched
        out, unused_err = waiter.communicate(timeout=30)
        assert waiter.returncode == 0 and float(out) > 0  # it waited, then got it
        proc2.kill()
        proc2.wait()
    finally:
        proc.kill()
        proc.wait()
    # B's keeper had nothing to watch: it let go after max_hold_s (1 s)
    deadline = time.monotonic() + 10
    while not flock_free(path) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert flock_free(path)


def test_a_host_of_the_same_run_waiting_on_the_flock_joins_the_run_holding_it(tmp_path):
    """Hosts of one run share its token (run_context's lock.yml sets it once per run): a host that
    finds the flock taken while another host of the run is still writing the holder record joins
    the run's lock at the next poll, never waits out run_context_lock_wait_s for its own run."""
    path = str(tmp_path / "node" / "node.lock")
    proc, watch = _holder()
    try:
        first = lock.acquire(path, "token-a", WHO_A, wait_s=0, poll_s=0.02, watch=watch)
        record = lock.read_holder(path)
        os.unlink(path + lock.INFO_SUFFIX)  # the other host's keeper holds the flock, its record not yet there
        polls = []

        def sleep(seconds):  # the record appears while this host polls
            polls.append(seconds)
            if len(polls) == 2:
                lock._write_holder(path, record)  # noqa: SLF001

        got = lock.acquire(path, "token-a", WHO_A, wait_s=30, poll_s=0.01, watch=watch, sleep=sleep)
        assert got["already"] and got["pid"] == first["pid"] and len(polls) == 2, (got, polls)
        with pytest.raises(lock.LockError):  # another run still waits, then fails naming it
            lock.acquire(path, "token-b", WHO_B, wait_s=0.1, poll_s=0.02)
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("kind", ["symlink", "fifo", "other_user"])
def test_a_lock_file_that_is_not_this_users_regular_file_is_refused_at_once(tmp_path, kind):
    folder = tmp_path / "node"
    folder.mkdir()
    path = folder / "node.lock"
    if kind == "symlink":
        victim = tmp_path / "victim"
        victim.write_text("keep")
        path.symlink_to(victim)
        expected = "is a symbolic link"
    elif kind == "fifo":
        os.mkfifo(path)
        expected = "is not a regular file"
    else:
        if os.geteuid() != 0:
            pytest.skip("giving a file to another user needs root")
        path.write_text("")
        os.chown(path, 65534, 65534)
        expected = "belongs to uid 65534"
    started = time.monotonic()
    with pytest.raises(lock.LockError) as refused:
        lock.acquire(str(path), "t", WHO_A, wait_s=5, watch={"pid": None})
    assert time.monotonic() - started < 2  # refused, not waited on
    assert expected in str(refused.value) and f"rm {path}" in str(refused.value)
    if kind == "symlink":
        assert (tmp_path / "victim").read_text() == "keep"
