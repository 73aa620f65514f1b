#!/usr/bin/python
# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_teardown
short_description: Kill what holds the NVIDIA GPUs (only what is this project's) and prove them clean
version_added: "0.1.0"
description:
  - "The seeds' C(pkill) and C(fuser -k /dev/nvidia*), done safely and provably. With
    I(kill_scope=own) (the default) a process is signalled only if it is (a) in the process tree
    this project launched (the recorded server's pid and start time, its process group and
    session), (b) holding memory on a target GPU (the driver's compute processes, verified
    against the GPU's device node it holds), or (c) on a target GPU whose memory the driver
    attributes to no visible process, holding that GPU's node and matching I(kill_patterns);
    and in every case owned by the user the module runs as."
  - "Another user's process holding memory on a target GPU is never killed unless
    I(kill_other_users): the module fails naming its pid, user and command line and the variable
    that allows it. Holders of the device nodes without memory (nvtop, nvidia-smi, exporters,
    the MPS control daemon) are reported in C(left_alone) as left running."
  - "I(kill_scope=node) is the seeds' behaviour for dedicated nodes: every process matching
    I(kill_patterns) and every holder of a target GPU's nodes (and of the shared nodes), whoever
    owns it, except I(never_kill) and except a process that, with its children, uses only GPUs
    outside I(devices): by the driver's memory list where it has one (CUDA opens every visible
    GPU's node), else by the nodes held. Where the nodes cannot be mapped to GPUs (no minor
    number from the driver) and I(devices) names some GPUs only, nothing is killed by node."
  - "Order: the launched tree (SIGTERM, wait); its survivors and the processes found above
    (SIGTERM, wait, SIGKILL, wait); then polling the target GPUs every I(poll_interval_s),
    re-walking the recorded tree and what would be signalled at each poll (a respawned child is
    signalled as it appears), until each is at or under I(idle_mib), lists no process and nothing
    of ours is left, held for I(settle_s). Each process is waited for once per signal; one still
    in state D after its SIGKILL wait is stuck in the driver and not waited for again, and when
    only processes no signal from here removes hold the memory it fails at once. Every wait has a
    deadline; there is no fixed sleep."
  - "Never signals its own process, its children, its ancestors (the Ansible worker,
    ansible-playbook), the rest of the Ansible controller's process tree, Ansible programs, the
    I(never_kill) list, processes it cannot see, or processes in another PID namespace (run
    through C(pct exec) it reaches only its container; run on the Proxmox host it leaves every
    container alone). Signals go through a pidfd after checking the start time."
  - "Every refusal and failure is a result, never a traceback: C(refused) lists another user's
    memory holders, signals the kernel did not permit; on a deadline it fails naming each GPU's
    memory and each survivor with pid, user, state and command line (state D needs a GPU reset
    or a reboot; memory that no visible process explains is held outside this PID namespace)."
  - C(changed) only when it signalled something or retired the server record. In check mode it lists in C(would_kill) what
    it would signal and signals nothing.
author:
  - specbench contributors (!UNKNOWN)
options:
  backend:
    description: Where to read GPU memory from (see M(specbench.core.gpu_state)).
    type: str
    choices: [auto, nvml, nvidia-smi, emulated]
    default: auto
  device_glob:
    description: The device nodes considered (the fuser step's list); never a broader path.
    type: str
    default: /dev/nvidia*
  devices:
    description:
      - The target GPUs, as indexes or UUIDs; empty for every GPU. The clean check covers exactly
        these, and a process holding only other GPUs is never signalled.
    type: list
    elements: raw
    default: []
  nvidia_smi:
    description: The nvidia-smi binary for the C(nvidia-smi) backend.
    type: str
    default: nvidia-smi
  idle_mib:
    description: A GPU at or under this many MiB used, with no compute process, is clean.
    type: int
    default: 64
  kill_scope:
    description:
      - C(own) kills only what this project launched and what holds memory on the target GPUs, of
        this user; C(node) kills everything matching on the node except I(never_kill) (a node
        dedicated to the benchmark).
    type: str
    choices: [own, node]
    default: own
  kill_other_users:
    description: Also kill other users' processes holding memory on a target GPU (needs root).
    type: bool
    default: false
  never_kill:
    description:
      - Process names never signalled (matched against the kernel's 15-character comm and the
        basename of argv[0]).
    type: list
    elements: str
    default: [nvidia-persistenced, nv-hostengine, dcgm-exporter, nv-fabricmanager, nvidia-cuda-mps-control, Xorg]
  kill_patterns:
    description:
      - What the engine's processes are. Each item is a regular expression searched in the
        process title (argv[0], and the kernel's comm), program, Python module (C(-m)) and
        script, or a mapping naming fields C(title), C(comm), C(program), C(module), C(script)
        (at least one) and the qualifiers C(subcommand) (the argument after the script) and
        C(args) (searched in the whole command line); every field given must match.
      - Never a word anywhere in the arguments alone, so C(tail -f sglang.launch_server.log)
        is not SGLang.
    type: list
    elements: raw
    default:
      - {title: "^sglang::"}
      - {module: "^sglang\\.launch_server$"}
      - {script: "(^|/)sglang$", subcommand: "^serve$"}
  server:
    description:
      - "The launched server's record (C(specbench_server)): C(pid), C(pgid), C(starttime) and,
        if known, C(sid) and C(boot_id). Every member is verified before any signal: the leader by
        its pid and start time, its descendants, and members of the recorded group or session that
        started after it and (the leader gone) match I(kill_patterns). A record of another boot is void."
    type: dict
  server_pgid:
    description:
      - The server's recorded process group alone, when I(server) is not given. Without a start
        time a member is only signalled while it matches I(kill_patterns) or holds a device node,
        so a stale record cannot hit a reused group.
    type: int
  server_state_dir:
    description:
      - "The node's folder of launch records, one JSON file per launch (C(<port>.json): pid, pgid, sid,
        starttime, boot_id, gpus), as the launch roles write them. Every record in it is read, each trusted
        only as this user's regular file (opened without following links or blocking): besides I(server),
        each launch it names (on the target GPUs, when I(devices) names some) is torn down too, so two
        launches on one node never share, or overwrite, one record."
      - "Each record is retired once the tree it names is proven gone, or when it is void (another boot's,
        or its pid now another process's): rewritten with C(torn_down), so that a later run reads that it
        names nothing. A record of a server outside I(devices) is left as it is."
    type: path
  server_state_file:
    description:
      - "A single JSON launch record, read like those in I(server_state_dir): the one shared file
        (C(state/server.json)) of releases before one record per launch, still read so that a server
        an earlier release launched is torn down."
    type: path
  term_timeout_s:
    description: Seconds to wait after SIGTERM before SIGKILL.
    type: float
    default: 15
  kill_timeout_s:
    description: Seconds to wait after SIGKILL for the processes to be gone.
    type: float
    default: 10
  clean_timeout_s:
    description: Seconds, after the last kill, to wait for every GPU to read clean.
    type: float
    default: 60
  poll_interval_s:
    description: Seconds between two reads of the processes or of GPU memory.
    type: float
    default: 0.05
  settle_s:
    description:
      - Seconds a clean reading must hold before it counts. Each poll re-walks the recorded tree (a
        server that respawns on SIGTERM leaves a child in its session) and what would be signalled,
        and signals what is new. Clean is reported after two clean polls at least (a child forked
        by a process of the tree just after one snapshot shows in the next) and this long.
    type: float
    default: 0.1
  respawn_watch_s:
    description:
      - While a killed process's parent lives on (a supervisor that may start it again) or it ran in a
        systemd service, or something came back during the teardown, clean must hold this long
        instead of I(settle_s). A holder that started after the teardown began got SIGKILL at once;
        after three such comebacks the teardown stops a unit on I(specbench_units) through systemd,
        or fails naming what starts them (the unit from C(/proc/<pid>/cgroup), the supervisor) and
        the fix (C(systemctl stop UNIT)). Every wait ends at the I(clean_timeout_s) deadline.
    type: float
    default: 3
  specbench_units:
    description:
      - "Systemd units specbench itself writes (serve.yml's service; names or globs, with or without
        C(.service)): holders that keep coming back from one of them are stopped through
        C(systemctl stop) rather than reported."
    type: list
    elements: str
    default: []
extends_documentation_fragment: [specbench.core.attributes]
attributes:
  check_mode:
    support: full
    details: Lists what it would signal in C(would_kill) and signals nothing.
  diff_mode:
    support: none
  facts:
    support: none
seealso:
  - module: specbench.core.gpu_state
"""

EXAMPLES = r"""
- name: Tear the server down and verify every GPU is clean
  specbench.core.gpu_teardown:
    server_state_dir: "{{ specbench_node_dir }}/state/servers"
  register: teardown

- name: A dedicated node, GPUs 0 and 1 only (the seeds' thoroughness on those)
  specbench.core.gpu_teardown:
    kill_scope: node
    devices: [0, 1]

- name: The emulator's GPUs, with a short deadline
  specbench.core.gpu_teardown:
    backend: emulated
    device_glob: "{{ specbench_emulator_device_dir }}/nvidia*"
    clean_timeout_s: 10
"""

RETURN = r"""
clean:
  description: Every GPU read clean before the deadline (in check mode, whether it is clean now).
  returned: always
  type: bool
scope:
  description: The kill scope used (C(own) or C(node)).
  returned: always
  type: str
targets:
  description: The indexes of the target GPUs (the clean check covers exactly these).
  returned: always
  type: list
  elements: int
refused:
  description:
    - Processes the teardown would not or could not kill, each with C(kind) (C(other_user),
      C(not_permitted)), C(reason), C(fix) (the variable or step that allows it) and C(gpus).
  returned: always
  type: list
  elements: dict
  sample:
    - pid: 4711
      user: alice
      cmdline: "sglang::scheduler_TP0"
      kind: other_user
      reason: "another user's process (alice) holds 20000 MiB on target GPU 0; it is never killed by default"
      fix: "stop it as its owner, or set gpu_kill_other_users: true to let the teardown kill it"
      gpus: [0]
problems:
  description:
    - When the target GPUs are not clean, one entry per reason, each with C(kind) (C(d_state),
      C(zombie), C(alive), C(other_user), C(not_permitted), C(unattributed),
      C(outside_namespace), C(not_visible), C(protected) (this teardown's own process tree or an
      Ansible program), C(never_kill), C(display_server) (a graphics process)), C(message) and
      where known C(gpu), C(pid), C(mib).
      Empty when clean.
  returned: always
  type: list
  elements: dict
  sample:
    - kind: d_state
      gpu: 0
      pid: 31337
      mib: 30000
      message: "pid 31337 (user root) stuck in the driver (state D): ..."
killed:
  description:
    - Each process signalled, with the step that found it (launched, memory, pattern, holder)
      and the signals sent in order.
  returned: always
  type: list
  elements: dict
  sample:
    - pid: 31337
      ppid: 1
      pgid: 31330
      name: sglang::schedul
      state: S
      cmdline: "sglang::scheduler_TP1"
      user: root
      step: memory
      signals: [SIGTERM, SIGKILL]
      signal: SIGKILL
      exited: true
would_kill:
  description: In check mode, what would be signalled (pid, name, cmdline, step); empty otherwise.
  returned: always
  type: list
  elements: dict
left_alone:
  description:
    - "Processes found but left alone, each with the reason (own process tree, never-kill list,
      C(holding a device node, no memory: left running), another user's, another PID namespace, ...)."
  returned: always
  type: list
  elements: dict
time_to_clean_s:
  description: Seconds from the end of the kill steps to the first clean read of every GPU; null if never clean.
  returned: always
  type: float
  sample: 0.0012
elapsed_s:
  description: Seconds the whole teardown took.
  returned: always
  type: float
before:
  description: The gpu_state facts before anything was signalled.
  returned: always
  type: dict
after:
  description: The gpu_state facts at the end.
  returned: always
  type: dict
recorded_pgid:
  description: The first recorded server's process group (see I(recorded_servers) for every one), or null.
  returned: always
  type: int
recorded_pgid_source:
  description: Where the recorded server came from (specbench_server, specbench_server.pgid, the state file, or none recorded).
  returned: always
  type: str
recorded_server:
  description: The first recorded server's pid, pgid, sid, starttime and boot_id (each null when unknown).
  returned: always
  type: dict
recorded_servers:
  description:
    - Every launch the first step took down, each once (I(server), then each record file naming another
      launch), with C(source) and C(record_files), the files that name it.
  returned: always
  type: list
  elements: dict
recorded_server_retired:
  description:
    - A record file was retired (rewritten with C(torn_down), when and why) because its tree is proven
      gone or the record is void; a later run reads that it names nothing.
  returned: always
  type: bool
records_retired:
  description: The record files retired by this run.
  returned: always
  type: list
  elements: str
log:
  description: One line per signal sent.
  returned: always
  type: list
  elements: str
msg:
  description: A summary, or on failure every GPU not clean and every surviving holder.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.specbench.core.plugins.module_utils.teardown.gpu_state import (
    BACKENDS,
    GpuStateError,
    open_backend,
)
from ansible_collections.specbench.core.plugins.module_utils.teardown.sequence import (
    DEFAULT_KILL_PATTERNS,
    DEFAULT_NEVER_KILL,
    SCOPES,
    Teardown,
    TeardownInputError,
)


def main():
    module = AnsibleModule(
        argument_spec={
            "backend": {"type": "str", "default": "auto", "choices": list(BACKENDS)},
            "device_glob": {"type": "str", "default": "/dev/nvidia*"},
            "devices": {"type": "list", "elements": "raw", "default": []},
            "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
            "idle_mib": {"type": "int", "default": 64},
            "kill_scope": {"type": "str", "default": "own", "choices": list(SCOPES)},
            "kill_other_users": {"type": "bool", "default": False},
            "never_kill": {"type": "list", "elements": "str", "default": list(DEFAULT_NEVER_KILL)},
            "kill_patterns": {"type": "list", "elements": "raw", "default": [dict(p) for p in DEFAULT_KILL_PATTERNS]},
            "server": {"type": "dict"},
            "server_pgid": {"type": "int"},
            "server_state_file": {"type": "path"},
            "server_state_dir": {"type": "path"},
            "term_timeout_s": {"type": "float", "default": 15},
            "kill_timeout_s": {"type": "float", "default": 10},
            "clean_timeout_s": {"type": "float", "default": 60},
            "poll_interval_s": {"type": "float", "default": 0.05},
            "settle_s": {"type": "float", "default": 0.1},
            "respawn_watch_s": {"type": "float", "default": 3},
            "specbench_units": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    p = module.params
    backend = None
    try:
        backend = open_backend(p["backend"], p["device_glob"], p["nvidia_smi"])
        teardown = Teardown(
            backend,
            p["device_glob"],
            idle_mib=p["idle_mib"],
            never_kill=p["never_kill"],
            kill_patterns=p["kill_patterns"],
            kill_scope=p["kill_scope"],
            kill_other_users=p["kill_other_users"],
            devices=p["devices"],
            server_record=p["server"],
            server_pgid=p["server_pgid"],
            server_state_file=p["server_state_file"],
            server_state_dir=p["server_state_dir"],
            term_timeout_s=p["term_timeout_s"],
            kill_timeout_s=p["kill_timeout_s"],
            clean_timeout_s=p["clean_timeout_s"],
            poll_interval_s=p["poll_interval_s"],
            settle_s=p["settle_s"],
            respawn_watch_s=p["respawn_watch_s"],
            specbench_units=p["specbench_units"],
            check_mode=module.check_mode,
        )
        result = teardown.run()
    except TeardownInputError as exc:
        module.fail_json(msg=str(exc), error="bad_input")
    except GpuStateError as exc:
        module.fail_json(msg=str(exc), error=exc.kind)
    except OSError as exc:
        module.fail_json(msg=f"The teardown could not read or signal processes: {exc}", error="os_error")
    finally:
        if backend is not None:
            backend.close()
    for warning in result.pop("warnings"):
        module.warn(warning)
    changed = bool(result["killed"] or result["would_kill"] or result.get("recorded_server_retired"))
    if not result["clean"] and not module.check_mode:
        module.fail_json(changed=changed, error="not_clean", **result)
    module.exit_json(changed=changed, **result)


if __name__ == "__main__":
    main()
