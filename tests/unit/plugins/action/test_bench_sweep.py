"""The action plugin bench_sweep's own logic, on the controller (its module runs the client on the
node: tests/unit/plugins/module_utils/specbench_client). Under ansible-test units this file is a
controller test (it imports ansible.plugins), the module_utils tests run without the controller."""
from __future__ import annotations

import os
import signal

from ansible_collections.specbench.core.plugins.action.bench_sweep import Interrupted, SignalLatch, no_level_reason


def test_a_level_the_module_gave_nothing_for_says_what_it_returned():
    """The action plugin's reason for a level its module run returned no level for: the module's
    message, else the result's keys, exit status and the ends of its output (a CI run once read
    only "the module returned no result", which nothing could be traced from)."""
    assert no_level_reason({"msg": "C=4: connection refused", "levels": []}) == "C=4: connection refused"
    why = no_level_reason({"changed": False, "rc": 0, "module_stdout": "x" * 500 + "END", "levels": []})
    assert why.startswith("the module returned no level (keys ['changed', 'levels', 'module_stdout', 'rc']")
    assert "rc 0" in why and "END" in why and "x" * 301 not in why


def test_ctrl_c_then_the_cleanups_sigterm_raise_once_and_the_handling_runs_to_its_end():
    """Ctrl-C reaches a sweep's worker as SIGINT and, milliseconds later, SIGTERM (ansible-playbook's
    cleanup). Both pending at once (blocked, sent, unblocked): the first raises Interrupted, the
    second is delivered inside the handling and must not raise again (a CI run once left the results
    file "running" that way); the handlers in place before are back afterwards."""
    before = {sig: signal.getsignal(sig) for sig in SignalLatch.SIGNALS}
    latch = SignalLatch()
    latch.install()
    handled = []
    try:
        signal.pthread_sigmask(signal.SIG_BLOCK, SignalLatch.SIGNALS)
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGTERM)
        try:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, SignalLatch.SIGNALS)
            for _ in range(100_000):  # the first handler raises here, at the latest
                pass
        except Interrupted as exc:
            for _ in range(100_000):  # the second signal's handler runs here: it must not raise
                pass
            handled.append(str(exc))
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, SignalLatch.SIGNALS)
        latch.restore()
    assert handled == ["SIGINT"] and latch.caught == "SIGINT"
    assert {sig: signal.getsignal(sig) for sig in SignalLatch.SIGNALS} == before


def test_the_playbook_gone_ends_the_sweep_once():
    latch = SignalLatch()
    try:
        latch.trip("ansible-playbook gone")
    except Interrupted as exc:
        latch(signal.SIGTERM, None)  # a signal after it: ignored
        assert str(exc) == "ansible-playbook gone"
    assert latch.caught == "ansible-playbook gone"
