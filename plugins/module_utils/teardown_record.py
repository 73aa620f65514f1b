# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""The recorded tree: what the launch role recorded of the server (state/server.json or the
specbench_server fact), and the processes that are still, verifiably, that server's."""
from __future__ import annotations

import json
import os

from ansible_collections.specbench.core.plugins.module_utils import proc_table
from ansible_collections.specbench.core.plugins.module_utils.teardown_holders import defunct
from ansible_collections.specbench.core.plugins.module_utils.teardown_settings import TeardownInputError


def _int_field(record: dict, key: str, source: str):
    value = record.get(key)
    if value in (None, ""):
        return None
    try:
        return int(value)
    except (TypeError, ValueError) as exc:
        raise TeardownInputError(
            f"the server record's {key} is {value!r} ({source}): it must be an integer; delete the record "
            "or relaunch the server."
        ) from exc


def recorded_server(record, server_pgid, state_file: str | None, warnings: list[str]) -> tuple[dict, str]:
    """The launched server's pid, pgid, sid and starttime (each may be None), and their source.

    From ``record`` (the specbench_server fact) when it names a pid or pgid, else
    ``server_pgid``, else the launch role's state file.
    """
    empty = {"pid": None, "pgid": None, "sid": None, "starttime": None}
    source = "none recorded"
    data = None
    if isinstance(record, dict) and any(record.get(k) not in (None, "") for k in ("pid", "pgid")):
        data, source = record, "specbench_server"
    elif server_pgid not in (None, ""):
        try:
            pgid = int(server_pgid)
        except (TypeError, ValueError) as exc:
            raise TeardownInputError(
                f"server_pgid {server_pgid!r} is not a process group id: pass specbench_server.pgid (an integer)."
            ) from exc
        data, source = {"pgid": pgid}, "specbench_server.pgid"
    elif state_file and os.path.exists(state_file):
        try:
            with open(state_file, encoding="utf-8") as fh:
                data = json.load(fh)
            if not isinstance(data, dict) or data.get("pgid") in (None, ""):
                raise KeyError("pgid")
            int(data["pgid"])
        except (OSError, ValueError, TypeError, KeyError) as exc:
            warnings.append(
                f"{state_file} has no readable pgid ({exc.__class__.__name__}: {exc}); the recorded-tree "
                "step is skipped (the GPU memory step still runs). Delete or fix the file."
            )
            return empty, state_file
        source = state_file
    if data is None:
        return empty, source
    server = {key: _int_field(data, key, source) for key in empty}
    for key in ("pid", "pgid", "sid"):
        if server[key] is not None and server[key] <= 1:
            warnings.append(f"recorded {key} {server[key]} (from {source}) is not a server's; ignored.")
            server[key] = None
    return server, source


def recorded_pgid(server_pgid, state_file: str | None, warnings: list[str]) -> tuple[int | None, str]:
    """The recorded process group alone (kept for callers of the first version)."""
    server, source = recorded_server(None, server_pgid, state_file, warnings)
    return server["pgid"], source



class RecordedTree:
    """Step (a) of gpu_teardown.Teardown: the recorded server's tree."""

    def launched_tree(self, table) -> list:
        """(a): the recorded server's descendants, group and session, if the record is not stale."""
        server = self.server
        pid, start = server["pid"], server["starttime"]
        leader = table.get(pid) if pid else None
        genuine = leader is not None and start is not None and leader.starttime == start
        if pid and start is not None and leader is not None and not genuine:
            self.warnings.append(
                f"the recorded server pid {pid} ({self.server_source}) now belongs to another process (its start "
                "time differs): a stale record; its group and session are left alone."
            )
            return []
        members = set()
        if genuine:
            members.add(pid)
            members |= proc_table.descendants(pid, table)
        groups = {("pgid", server["pgid"]), ("sid", server["sid"])}
        for field, value in groups:
            if value is None:
                continue
            if value != pid and value in table and start is not None:
                # a pid still in use as a group or session id is never reused: a live process with
                # that pid and another group is not the server's
                holder = table[value]
                if getattr(holder, field) != value:
                    continue
            members |= {p for p, i in table.items() if getattr(i, field) == value}
        infos = [table[p] for p in sorted(members) if not defunct(table[p])]
        if infos and not genuine and start is None:
            # an old record without a start time: only a group that still looks like the server
            nodes = set(proc_table.expand_nodes(self.device_glob))
            if not any(self.matches(i) or proc_table.open_nodes(i.pid, nodes, i.state, i.threads) for i in infos):
                self.warnings.append(
                    f"recorded process group {self.pgid} ({self.server_source}) no longer looks like the server: "
                    "no member matches gpu_kill_patterns or holds a device node (a stale record whose group id "
                    "was reused?); it is left alone."
                )
                return []
        chosen = []
        for info in infos:
            if self._exempt(info, "launched"):
                continue
            if not self._user_allowed(info):
                self._skip(info, "launched", f"in the recorded tree but another user's ({info.user})")
                continue
            chosen.append(info)
        return chosen
