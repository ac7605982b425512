"""A fake of the pynvml calls the NVML backend uses: a stand-in where no GPU exists (CI has none).

Each fake GPU is a dict of field values; a value that is an exception class is raised instead, so a
test can make a field NotSupported, the whole GPU lost, or a call hang.
"""

from __future__ import annotations

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


def healthy_gpu(i: int) -> dict[str, Any]:
    return {
        "uuid": f"GPU-fake-{i}", "name": "NVIDIA H100 80GB HBM3", "util": (97, 41),
        "memory": (60 * 2**30, 20 * 2**30), "temp": 66, "power_mw": 612_000, "sm_clock": 1980,
        "throttle": 0, "sbe": 3, "dbe": 0, "replay": 1, "remapped": (0, 0, False, False),
    }  # fmt: skip


def make(gpus: list[dict[str, Any]], driver: str = "550.54.15", hang_s: float = 0.0) -> types.SimpleNamespace:
    """A module-like object with pynvml's API over `gpus`."""
    events: deque[Any] = deque()
    handles = [types.SimpleNamespace(index=i) for i in range(len(gpus))]

    def value(h: Any, key: str) -> Any:
        v = gpus[h.index].get(key)
        if isinstance(v, type) and issubclass(v, Exception):
            raise v()
        if hang_s:
            time.sleep(hang_s)
        return v

    def wait(event_set: Any, timeout_ms: int) -> Any:
        if not events:
            raise NVMLError_Timeout()
        return events.popleft()

    def memory(h: Any) -> Any:
        used, free = value(h, "memory")
        return types.SimpleNamespace(used=used, free=free, total=used + free)

    def util(h: Any) -> Any:
        gpu, mem = value(h, "util")
        return types.SimpleNamespace(gpu=gpu, memory=mem)

    m = types.SimpleNamespace(
        NVMLError=NVMLError, NVMLError_NotSupported=NVMLError_NotSupported,
        NVMLError_GpuIsLost=NVMLError_GpuIsLost, NVMLError_Timeout=NVMLError_Timeout,
        NVML_TEMPERATURE_GPU=0, NVML_CLOCK_SM=1, NVML_SINGLE_BIT_ECC=0, NVML_DOUBLE_BIT_ECC=1,
        NVML_VOLATILE_ECC=0, nvmlEventTypeXidCriticalError=8,
        nvmlInit=lambda: None, nvmlShutdown=lambda: None,
        nvmlSystemGetDriverVersion=lambda: driver, nvmlSystemGetNVMLVersion=lambda: "12." + driver,
        nvmlSystemGetCudaDriverVersion=lambda: 12040,
        nvmlDeviceGetCount=lambda: len(gpus), nvmlDeviceGetHandleByIndex=lambda i: handles[i],
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
        nvmlDeviceRegisterEvents=lambda h, types_, s: None, nvmlEventSetWait_v2=wait,
    )  # fmt: skip
    m.xid = lambda gpu, code: events.append(types.SimpleNamespace(device=handles[gpu], eventData=code))
    return m
