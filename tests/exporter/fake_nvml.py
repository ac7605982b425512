"""A fake of the pynvml calls the NVML backend uses: a stand-in where no GPU exists (CI has none).

Each fake GPU is a dict of field values; a value that is an exception class is raised instead, so a
test can make a field NotSupported, the whole GPU lost, or a call hang. Two keys are not fields:
"handle" makes nvmlDeviceGetHandleByIndex raise for that GPU (the real library answers GPU_IS_LOST
there for a GPU that fell off the bus) and "events" makes nvmlDeviceRegisterEvents raise for it.

Like the real library, handles are ctypes pointers (`POINTER(struct_c_nvmlDevice_t)`), which compare
by identity: every nvmlDeviceGetHandleByIndex call returns a new pointer object, and so does every
read of an event's `.device` (a pointer field of a ctypes Structure). The fake's functions find the
GPU a handle stands for by the address it points to, as the driver does.
"""

from __future__ import annotations

import ctypes
import time
import types
from collections import deque
from typing import Any


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):  # noqa: N801 - pynvml's names
    pass


class NVMLError_GpuIsLost(NVMLError):  # noqa: N801
    pass


class NVMLError_Timeout(NVMLError):  # noqa: N801
    pass


class NVMLError_InvalidArgument(NVMLError):  # noqa: N801
    pass


class NVMLError_DriverNotLoaded(NVMLError):  # noqa: N801
    def __str__(self) -> str:
        return "Driver Not Loaded"


class NVMLError_LibraryNotFound(NVMLError):  # noqa: N801
    def __str__(self) -> str:
        return "NVML Shared Library Not Found"


class struct_c_nvmlDevice_t(ctypes.Structure):  # noqa: N801 - pynvml's names
    _fields_ = [("opaque", ctypes.c_int)]  # opaque in NVML; here it only gives the GPU an address


c_nvmlDevice_t = ctypes.POINTER(struct_c_nvmlDevice_t)  # noqa: N816 - pynvml's name


class c_nvmlEventData_t(ctypes.Structure):  # noqa: N801
    _fields_ = [
        ("device", c_nvmlDevice_t),
        ("eventType", ctypes.c_ulonglong),
        ("eventData", ctypes.c_ulonglong),
        ("gpuInstanceId", ctypes.c_uint),
        ("computeInstanceId", ctypes.c_uint),
    ]


def healthy_gpu(i: int) -> dict[str, Any]:
    return {
        "uuid": f"GPU-fake-{i}", "name": "NVIDIA H100 80GB HBM3", "util": (97, 41),
        "memory": (60 * 2**30, 20 * 2**30), "temp": 66, "power_mw": 612_000, "sm_clock": 1980,
        "throttle": 0, "sbe": 3, "dbe": 0, "replay": 1, "remapped": (0, 0, False, False),
    }  # fmt: skip


def make(
    gpus: list[dict[str, Any]],
    driver: str = "550.54.15",
    hang_s: float = 0.0,
    init_error: type[Exception] | None = None,
) -> types.SimpleNamespace:
    """A module-like object with pynvml's API over `gpus`. With `init_error`, nvmlInit raises it until
    `m.init_error` is set to None (a driver that comes up late); `m.hang_s` makes every GPU call hang."""
    events: deque[c_nvmlEventData_t] = deque()
    devices = [struct_c_nvmlDevice_t(i) for i in range(len(gpus))]  # kept alive: their addresses are the GPUs
    by_address = {ctypes.addressof(d): i for i, d in enumerate(devices)}
    state = {"initialized": False}

    def gpu_of(h: Any) -> int:
        if not state["initialized"]:
            raise NVMLError("Uninitialized")
        if not isinstance(h, c_nvmlDevice_t):
            raise NVMLError_InvalidArgument()
        address = ctypes.cast(h, ctypes.c_void_p).value
        if address not in by_address:
            raise NVMLError_InvalidArgument()
        return by_address[address]

    def raise_if_error(v: Any) -> None:
        if isinstance(v, type) and issubclass(v, Exception):
            raise v()

    def value(h: Any, key: str) -> Any:
        v = gpus[gpu_of(h)].get(key)
        if isinstance(v, type) and issubclass(v, Exception):
            raise v()
        if m.hang_s:
            time.sleep(m.hang_s)
        return v

    def init() -> None:
        if m.init_error is not None:
            raise m.init_error()
        state["initialized"] = True

    def handle_by_index(i: int) -> Any:
        if not state["initialized"]:
            raise NVMLError("Uninitialized")
        if not 0 <= i < len(gpus):
            raise NVMLError_InvalidArgument()
        raise_if_error(gpus[i].get("handle"))
        return ctypes.pointer(devices[i])  # a new pointer object on every call, as in pynvml

    def wait(event_set: Any, timeout_ms: int) -> c_nvmlEventData_t:
        if not events:
            raise NVMLError_Timeout()
        return events.popleft()

    def memory(h: Any) -> Any:
        used, free = value(h, "memory")
        return types.SimpleNamespace(used=used, free=free, total=used + free)

    def util(h: Any) -> Any:
        gpu, mem = value(h, "util")
        return types.SimpleNamespace(gpu=gpu, memory=mem)

    def register(h: Any, types_: int, event_set: Any) -> None:
        raise_if_error(gpus[gpu_of(h)].get("events"))
        m.registered.add(gpu_of(h))

    def xid(gpu: int, code: int) -> None:
        """The driver reports XID `code` on `gpu`: an event only where that GPU's events were registered."""
        if gpu not in m.registered:
            return
        data = c_nvmlEventData_t()
        data.device = ctypes.pointer(devices[gpu])
        data.eventType, data.eventData = 8, code
        events.append(data)

    m = types.SimpleNamespace(
        NVMLError=NVMLError, NVMLError_NotSupported=NVMLError_NotSupported,
        NVMLError_GpuIsLost=NVMLError_GpuIsLost, NVMLError_Timeout=NVMLError_Timeout,
        NVMLError_InvalidArgument=NVMLError_InvalidArgument,
        NVML_TEMPERATURE_GPU=0, NVML_CLOCK_SM=1, NVML_SINGLE_BIT_ECC=0, NVML_DOUBLE_BIT_ECC=1,
        NVML_VOLATILE_ECC=0, nvmlEventTypeXidCriticalError=8,
        nvmlInit=init, nvmlShutdown=lambda: state.update(initialized=False),
        nvmlSystemGetDriverVersion=lambda: driver, nvmlSystemGetNVMLVersion=lambda: "12." + driver,
        nvmlSystemGetCudaDriverVersion=lambda: 12040,
        nvmlDeviceGetCount=lambda: len(gpus), nvmlDeviceGetHandleByIndex=handle_by_index,
        nvmlDeviceGetUUID=lambda h: value(h, "uuid"), nvmlDeviceGetName=lambda h: value(h, "name"),
        nvmlDeviceGetUtilizationRates=util, nvmlDeviceGetMemoryInfo=memory,
        nvmlDeviceGetTemperature=lambda h, kind: value(h, "temp"),
        nvmlDeviceGetPowerUsage=lambda h: value(h, "power_mw"),
        nvmlDeviceGetClockInfo=lambda h, kind: value(h, "sm_clock"),
        nvmlDeviceGetCurrentClocksThrottleReasons=lambda h: value(h, "throttle"),
        nvmlDeviceGetTotalEccErrors=lambda h, bit, counter: value(h, "sbe" if bit == 0 else "dbe"),
        nvmlDeviceGetPcieReplayCounter=lambda h: value(h, "replay"),
        nvmlDeviceGetRemappedRows=lambda h: value(h, "remapped"),
        nvmlEventSetCreate=object, nvmlEventSetFree=lambda s: None,
        nvmlDeviceRegisterEvents=register, nvmlEventSetWait_v2=wait,
        init_error=init_error, hang_s=hang_s, xid=xid, registered=set(),
    )  # fmt: skip
    return m
