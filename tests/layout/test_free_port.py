"""The tests' loopback ports (specbench_testkit.free_port): never handed out twice in one process,
even when the kernel's bind(0) repeats itself."""
from __future__ import annotations

import types

import specbench_testkit as kit


class RepeatingSocket:
    """socket.socket whose bind(0) the kernel answered with ``ports`` in turn."""

    ports: list[int] = []

    def __init__(self, *args):
        del args
        self.port = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def bind(self, address):
        assert address == ("127.0.0.1", 0)
        self.port = type(self).ports.pop(0)

    def getsockname(self):
        return ("127.0.0.1", self.port)


def test_a_port_the_kernel_gives_twice_is_handed_out_once(monkeypatch):
    first = kit.free_port()
    other = max(kit._HANDED_OUT) + 1  # not handed out yet
    monkeypatch.setattr(RepeatingSocket, "ports", [first, first, other])
    monkeypatch.setattr(kit, "socket", types.SimpleNamespace(socket=RepeatingSocket))  # the kit's name only
    assert kit.free_port() == other  # the repeat of ``first`` was passed over
    assert RepeatingSocket.ports == []


def test_many_ports_in_a_row_are_distinct():
    ports = [kit.free_port() for _unused in range(200)]
    assert len(set(ports)) == len(ports)
