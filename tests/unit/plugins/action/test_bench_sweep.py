"""The action plugin bench_sweep's own logic, on the controller (its module runs the client on the
node: tests/unit/plugins/module_utils/specbench_client). Under ansible-test units this file is a
controller test (it imports ansible.plugins), the module_utils tests run without the controller."""
from __future__ import annotations

from ansible_collections.specbench.core.plugins.action.bench_sweep import no_level_reason


def test_a_level_the_module_gave_nothing_for_says_what_it_returned():
    """The action plugin's reason for a level its module run returned no level for: the module's
    message, else the result's keys, exit status and the ends of its output (a CI run once read
    only "the module returned no result", which nothing could be traced from)."""
    assert no_level_reason({"msg": "C=4: connection refused", "levels": []}) == "C=4: connection refused"
    why = no_level_reason({"changed": False, "rc": 0, "module_stdout": "x" * 500 + "END", "levels": []})
    assert why.startswith("the module returned no level (keys ['changed', 'levels', 'module_stdout', 'rc']")
    assert "rc 0" in why and "END" in why and "x" * 301 not in why
