"""The NVML backend against fakes of pynvml that raise nvidia-ml-py's own exception classes."""
from __future__ import annotations

import types

import pynvml
import pytest

from ansible_collections.specbench.core.plugins.module_utils.teardown import gpu_state

MIB = 1024 * 1024


class FakeNvml:
    """What the backend calls of pynvml; errors are pynvml's real NVMLError subclasses."""

    NVMLError = pynvml.NVMLError
    nvmlMemory_v2 = pynvml.nvmlMemory_v2
    NVML_ERROR_LIBRARY_NOT_FOUND = pynvml.NVML_ERROR_LIBRARY_NOT_FOUND
    NVML_ERROR_DRIVER_NOT_LOADED = pynvml.NVML_ERROR_DRIVER_NOT_LOADED
    NVML_ERROR_LIB_RM_VERSION_MISMATCH = pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH
    NVML_ERROR_NO_PERMISSION = pynvml.NVML_ERROR_NO_PERMISSION
    NVML_ERROR_NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED

    def __init__(self, init_error=None, count=2, procs=None, memory_error=None, graphics=None):
        self.init_error = init_error
        self.count = count
        self.procs = procs or {}
        self.graphics = graphics or {}
        self.memory_error = memory_error
        self.inits = 0
        self.shutdowns = 0
        self.memory_versions = []

    def nvmlInit(self):
        if self.init_error is not None:
            raise pynvml.NVMLError(self.init_error)
        self.inits += 1

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlSystemGetDriverVersion(self):
        return b"590.48.01"

    def nvmlDeviceGetCount(self):
        return self.count

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetMemoryInfo(self, handle, version=None):
        self.memory_versions.append(version)
        if self.memory_error is not None:
            raise pynvml.NVMLError(self.memory_error)
        used = sum(m or 0 for _unused, m in self.procs.get(handle, []) + self.graphics.get(handle, [])) + 4 * MIB
        if version != pynvml.nvmlMemory_v2:
            # v1: used includes the driver-reserved memory (hundreds of MiB on an idle GPU)
            return types.SimpleNamespace(total=143771 * MIB, free=0, used=used + 600 * MIB)
        return types.SimpleNamespace(version=version, total=143771 * MIB, reserved=512 * MIB, free=0, used=used)

    def nvmlDeviceGetMinorNumber(self, handle):
        return handle

    def nvmlDeviceGetUUID(self, handle):
        return f"GPU-fake-{handle}"

    def nvmlDeviceGetName(self, handle):
        return "NVIDIA H200"

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        return [types.SimpleNamespace(pid=pid, usedGpuMemory=mem) for pid, mem in self.procs.get(handle, [])]

    def nvmlDeviceGetMPSComputeRunningProcesses(self, handle):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle):
        return [types.SimpleNamespace(pid=pid, usedGpuMemory=mem) for pid, mem in self.graphics.get(handle, [])]


def test_reads_v2_memory_and_processes():
    fake = FakeNvml(procs={1: [(4242, 20000 * MIB), (4243, None)]})
    backend = gpu_state.open_backend("nvml", "/dev/nvidia*", nvml=fake)
    gpus = backend.read_gpus()
    assert set(fake.memory_versions) == {pynvml.nvmlMemory_v2}
    assert backend.driver_version == "590.48.01"
    assert gpus[0]["memory_used_mib"] == 4 and gpus[0]["processes"] == []
    assert gpus[0]["memory_reserved_mib"] == 512 and gpus[0]["node"] == "/dev/nvidia0"
    assert gpus[1]["memory_used_mib"] == 20004
    assert gpus[1]["processes"] == [
        {"pid": 4242, "used_memory_mib": 20000, "type": "compute"},
        {"pid": 4243, "used_memory_mib": None, "type": "compute"},  # usedGpuMemory None (not available)
    ]
    assert gpus[1]["uuid"] == "GPU-fake-1" and gpus[1]["name"] == "NVIDIA H200"
    assert not gpu_state.is_dirty(gpus[0], 64) and gpu_state.is_dirty(gpus[1], 64)
    backend.close()
    assert fake.inits == 1 and fake.shutdowns == 1


def test_graphics_processes_are_listed_as_such():
    """Issue 19, item 6: nvmlDeviceGetGraphicsRunningProcesses is asked too (Xorg's 200 MiB)."""
    fake = FakeNvml(procs={0: [(4242, 1000 * MIB)]}, graphics={0: [(1234, 200 * MIB)]})
    gpus = gpu_state.open_backend("nvml", "/dev/nvidia*", nvml=fake).read_gpus()
    assert gpus[0]["memory_used_mib"] == 1204
    assert gpus[0]["processes"] == [{"pid": 1234, "used_memory_mib": 200, "type": "graphics"},
                                    {"pid": 4242, "used_memory_mib": 1000, "type": "compute"}]


@pytest.mark.parametrize(
    ("error", "kind", "text"),
    [
        (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, "no_library", "libnvidia-ml.so.1 was not found"),
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "driver_not_loaded", "kernel driver is not loaded"),
        (pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH, "version_mismatch",
         "user-space library and kernel module versions differ"),
        (pynvml.NVML_ERROR_NO_PERMISSION, "no_permission", "run as root"),
        (pynvml.NVML_ERROR_UNKNOWN, "nvml_error", "NVML failed"),
    ],
)
def test_init_errors_are_told_apart(error, kind, text):
    with pytest.raises(gpu_state.GpuStateError) as err:
        gpu_state.open_backend("nvml", "/dev/nvidia*", nvml=FakeNvml(init_error=error))
    assert err.value.kind == kind
    assert text in str(err.value)


def test_version_mismatch_names_the_lxc_fix():
    with pytest.raises(gpu_state.GpuStateError) as err:
        gpu_state.open_backend("nvml", "/dev/nvidia*", nvml=FakeNvml(init_error=pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH))
    assert "LXC container" in str(err.value) and "host's version" in str(err.value)
    assert "kernel module" in str(err.value)


def test_no_gpu_at_all_shuts_nvml_down():
    fake = FakeNvml(count=0)
    with pytest.raises(gpu_state.GpuStateError) as err:
        gpu_state.open_backend("nvml", "/dev/nvidia*", nvml=fake)
    assert err.value.kind == "no_gpu" and "No NVIDIA GPU found" in str(err.value)
    assert fake.shutdowns == fake.inits == 1


def test_errors_while_reading_are_translated():
    backend = gpu_state.open_backend("nvml", "/dev/nvidia*", nvml=FakeNvml(memory_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED))
    with pytest.raises(gpu_state.GpuStateError) as err:
        backend.read_gpus()
    assert err.value.kind == "driver_not_loaded"


def test_auto_falls_back_to_nvidia_smi_only_when_the_library_is_missing(tmp_path):
    # library missing and no nvidia-smi either: one no_library error naming both
    with pytest.raises(gpu_state.GpuStateError) as err:
        gpu_state.open_backend("auto", "/dev/nvidia*", str(tmp_path / "nvidia-smi"),
                               nvml=FakeNvml(init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))
    assert err.value.kind == "no_library" and "No nvidia-smi either" in str(err.value)
    # driver not loaded: no fallback (nvidia-smi would say the same), the NVML reason stands
    with pytest.raises(gpu_state.GpuStateError) as err:
        gpu_state.open_backend("auto", "/dev/nvidia*", str(tmp_path / "nvidia-smi"),
                               nvml=FakeNvml(init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED))
    assert err.value.kind == "driver_not_loaded"
    assert gpu_state.open_backend("auto", "/dev/nvidia*", nvml=FakeNvml()).name == "nvml"


def test_unknown_backend_is_refused():
    with pytest.raises(gpu_state.GpuStateError) as err:
        gpu_state.open_backend("cuda", "/dev/nvidia*")
    assert "not one of auto, nvml, nvidia-smi, emulated" in str(err.value)
