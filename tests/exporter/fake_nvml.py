"""A fake of the pynvml calls the NVML backend uses: a stand-in where no GPU exists (CI has none).

Each fake GPU is a dict of field values; a value that is an exception class is raised instead, so a
test can make a field NotSupported, the whole GPU lost, or a call hang. Two keys are not fields:
"handle" makes nvmlDeviceGetHandleByIndex raise for that GPU (the real library answers GPU_IS_LOST
there for a GPU that fell off the bus) and "events" makes nvmlDeviceRegisterEvents raise for it.

The fake keeps pynvml's shapes, which tests/exporter/test_fake_nvml_matches_pynvml.py checks against the
installed pynvml: its names, constants, error classes and call arities, the 4-tuple of
nvmlDeviceGetRemappedRows, and nvmlDeviceGetFieldValues's array of c_nvmlFieldValue_t, where an
unsupported field is an nvmlReturn in the struct, not an exception (the call itself succeeds).
"nvlink" is a list of links ({"active", "crc_flit", "tx_kib", "rx_kib", optionally "tx_bytes",
"rx_bytes"}); a link without a counter answers that field NotSupported, as does a GPU without NVLink.

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


class NVMLError_FunctionNotFound(NVMLError):  # noqa: N801
    pass


class NVMLError_DriverNotLoaded(NVMLError):  # noqa: N801
    def __str__(self) -> str:
        return "Driver Not Loaded"


class NVMLError_LibraryNotFound(NVMLError):  # noqa: N801
    def __str__(self) -> str:
        return "NVML Shared Library Not Found"


NVML_SUCCESS = 0
NVML_MEMORY_V2 = 0x02000028
"""pynvml's nvmlMemory_v2: the version word of c_nvmlMemory_v2_t."""
NVML_ERROR_NOT_SUPPORTED = 3
NVML_VALUE_TYPE_UNSIGNED_INT = 1
NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3
NVML_FI_DEV_MEMORY_TEMP = 82
NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX = 138
NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = 139
NVML_FI_DEV_NVLINK_COUNT_XMIT_BYTES = 202
NVML_FI_DEV_NVLINK_COUNT_RCV_BYTES = 204


class c_nvmlValue_t(ctypes.Union):  # noqa: N801 - pynvml's names
    _fields_ = [
        ("dVal", ctypes.c_double),
        ("uiVal", ctypes.c_uint),
        ("ulVal", ctypes.c_ulong),
        ("ullVal", ctypes.c_ulonglong),
        ("sllVal", ctypes.c_longlong),
        ("siVal", ctypes.c_int),
        ("usVal", ctypes.c_ushort),
    ]


class c_nvmlFieldValue_t(ctypes.Structure):  # noqa: N801
    _fields_ = [
        ("fieldId", ctypes.c_uint32),
        ("scopeId", ctypes.c_uint32),
        ("timestamp", ctypes.c_int64),
        ("latencyUsec", ctypes.c_int64),
        ("valueType", ctypes.c_uint),
        ("nvmlReturn", ctypes.c_uint),
        ("value", c_nvmlValue_t),
    ]


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
        "max_sm_clock": 1980, "pcie_gen": 5, "pcie_width": 16, "pcie_max_gen": 5, "pcie_max_width": 16,
        "throttle": 0, "sbe": 3, "dbe": 0, "replay": 1, "remapped": (0, 0, 0, 0),
        "mem_temp": 71, "power_limit_mw": 700_000, "pcie_kbps": (3_000_000, 1_000_000),
        "nvlink": [link() for _ in range(18)],
        # Ampere and newer remap rows instead of retiring pages: NVML answers NotSupported
        "retired": NVMLError_NotSupported, "retired_pending": NVMLError_NotSupported,
    }  # fmt: skip


def link(active: int = 1, crc_flit: int = 0, tx_kib: int = 0, rx_kib: int = 0) -> dict[str, Any]:
    return {"active": active, "crc_flit": crc_flit, "tx_kib": tx_kib, "rx_kib": rx_kib}


def volta_gpu(i: int) -> dict[str, Any]:
    """A V100: pages are retired (no row remapping), six NVLink links."""
    return healthy_gpu(i) | {
        "name": "Tesla V100-SXM2-32GB", "power_limit_mw": 300_000, "nvlink": [link() for _ in range(6)],
        "remapped": NVMLError_NotSupported, "retired": {"sbe": [], "dbe": []}, "retired_pending": 0,
    }  # fmt: skip


def pcie_gpu(i: int) -> dict[str, Any]:
    """A PCIe card without NVLink (an L4): NVML answers NotSupported for every NVLink call."""
    return healthy_gpu(i) | {"name": "NVIDIA L4", "power_limit_mw": 72_000, "nvlink": NVMLError_NotSupported}


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

    def memory(h: Any, version: int | None = None) -> Any:
        """Version 2 (`used` without the driver's reservation) where the GPU has `memory_v2` unset or
        a value; version 1 counts the reservation as used."""
        used, free = value(h, "memory")
        reserved = gpus[gpu_of(h)].get("reserved", 0)
        total = used + reserved + free
        if version:
            raise_if_error(gpus[gpu_of(h)].get("memory_v2"))
            if version != NVML_MEMORY_V2:
                raise NVMLError_InvalidArgument()
            return types.SimpleNamespace(
                version=version, total=total, reserved=reserved, free=free, used=used
            )
        return types.SimpleNamespace(used=used + reserved, free=free, total=total)

    def util(h: Any) -> Any:
        gpu, mem = value(h, "util")
        return types.SimpleNamespace(gpu=gpu, memory=mem)

    def nvlinks(h: Any) -> list[dict[str, Any]]:
        links: list[dict[str, Any]] = value(h, "nvlink")
        return links

    def nvlink_of(h: Any, link_id: int) -> dict[str, Any]:
        links = nvlinks(h)
        if not 0 <= link_id < len(links):
            raise NVMLError_InvalidArgument()  # past the GPU's last link
        return links[link_id]

    def field(h: Any, field_id: int, scope: int) -> tuple[int, Any]:
        """(valueType, value) of one field; NotSupported raised (the caller turns it into nvmlReturn)."""
        if field_id == NVML_FI_DEV_MEMORY_TEMP:
            return NVML_VALUE_TYPE_UNSIGNED_INT, value(h, "mem_temp")
        keys = {NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: "tx_kib", NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: "rx_kib",
                NVML_FI_DEV_NVLINK_COUNT_XMIT_BYTES: "tx_bytes", NVML_FI_DEV_NVLINK_COUNT_RCV_BYTES: "rx_bytes"}  # fmt: skip
        if field_id in keys:
            try:
                counters = nvlink_of(h, scope)
            except NVMLError_InvalidArgument:
                raise NVMLError_NotSupported() from None
            if keys[field_id] not in counters:
                raise NVMLError_NotSupported()
            return NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, counters[keys[field_id]]
        raise NVMLError_NotSupported()

    def field_values(h: Any, field_ids: list[Any]) -> Any:
        """As pynvml: ids are ints or (fieldId, scopeId); errors per field land in nvmlReturn, while a
        lost GPU fails the whole call."""
        gpu_of(h)
        values = (c_nvmlFieldValue_t * len(field_ids))()
        for fv, fid in zip(values, field_ids, strict=True):
            fv.fieldId, fv.scopeId = fid if isinstance(fid, tuple) else (fid, 0)
            try:
                kind, v = field(h, fv.fieldId, fv.scopeId)
            except NVMLError_NotSupported:
                fv.nvmlReturn = NVML_ERROR_NOT_SUPPORTED
                continue
            fv.valueType, fv.nvmlReturn = kind, NVML_SUCCESS
            setattr(fv.value, "uiVal" if kind == NVML_VALUE_TYPE_UNSIGNED_INT else "ullVal", v)
        return values

    def retired_pages(h: Any, cause: int) -> list[int]:
        pages: dict[str, list[int]] = value(h, "retired")
        return list(pages["sbe" if cause == 0 else "dbe"])

    def pcie(h: Any, counter: int) -> int:
        tx, rx = value(h, "pcie_kbps")
        return int(tx if counter == 0 else rx)

    def event_set_create() -> object:
        return object()

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
        NVMLError_InvalidArgument=NVMLError_InvalidArgument, NVMLError_FunctionNotFound=NVMLError_FunctionNotFound,
        nvmlMemory_v2=NVML_MEMORY_V2, NVML_TEMPERATURE_GPU=0, NVML_CLOCK_SM=1, NVML_SINGLE_BIT_ECC=0, NVML_DOUBLE_BIT_ECC=1,
        NVML_VOLATILE_ECC=0, nvmlEventTypeXidCriticalError=8,
        NVML_SUCCESS=NVML_SUCCESS, NVML_ERROR_NOT_SUPPORTED=NVML_ERROR_NOT_SUPPORTED,
        NVML_VALUE_TYPE_UNSIGNED_INT=NVML_VALUE_TYPE_UNSIGNED_INT,
        NVML_VALUE_TYPE_UNSIGNED_LONG_LONG=NVML_VALUE_TYPE_UNSIGNED_LONG_LONG,
        NVML_FI_DEV_MEMORY_TEMP=NVML_FI_DEV_MEMORY_TEMP,
        NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX=NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
        NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX=NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
        NVML_FI_DEV_NVLINK_COUNT_XMIT_BYTES=NVML_FI_DEV_NVLINK_COUNT_XMIT_BYTES,
        NVML_FI_DEV_NVLINK_COUNT_RCV_BYTES=NVML_FI_DEV_NVLINK_COUNT_RCV_BYTES,
        NVML_PCIE_UTIL_TX_BYTES=0, NVML_PCIE_UTIL_RX_BYTES=1, NVML_NVLINK_MAX_LINKS=36,
        NVML_NVLINK_ERROR_DL_CRC_FLIT=2, NVML_FEATURE_DISABLED=0, NVML_FEATURE_ENABLED=1,
        NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS=0,
        NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR=1,
        c_nvmlFieldValue_t=c_nvmlFieldValue_t, c_nvmlValue_t=c_nvmlValue_t,
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
        nvmlDeviceGetMaxClockInfo=lambda h, kind: value(h, "max_sm_clock"),
        nvmlDeviceGetCurrPcieLinkGeneration=lambda h: value(h, "pcie_gen"),
        nvmlDeviceGetCurrPcieLinkWidth=lambda h: value(h, "pcie_width"),
        nvmlDeviceGetMaxPcieLinkGeneration=lambda h: value(h, "pcie_max_gen"),
        nvmlDeviceGetMaxPcieLinkWidth=lambda h: value(h, "pcie_max_width"),
        nvmlDeviceGetTotalEccErrors=lambda h, bit, counter: value(h, "sbe" if bit == 0 else "dbe"),
        nvmlDeviceGetPcieReplayCounter=lambda h: value(h, "replay"),
        nvmlDeviceGetRemappedRows=lambda h: value(h, "remapped"),
        nvmlDeviceGetEnforcedPowerLimit=lambda h: value(h, "power_limit_mw"),
        nvmlDeviceGetPcieThroughput=pcie, nvmlDeviceGetFieldValues=field_values,
        nvmlDeviceGetNvLinkState=lambda h, link_id: nvlink_of(h, link_id)["active"],
        nvmlDeviceGetNvLinkErrorCounter=lambda h, link_id, counter: (
            nvlink_of(h, link_id)["crc_flit"] if counter == 2 else 0),
        nvmlDeviceGetRetiredPages=retired_pages,
        nvmlDeviceGetRetiredPagesPendingStatus=lambda h: value(h, "retired_pending"),
        nvmlEventSetCreate=event_set_create, nvmlEventSetFree=lambda s: None,
        nvmlDeviceRegisterEvents=register, nvmlEventSetWait_v2=wait,
        init_error=init_error, hang_s=hang_s, xid=xid, registered=set(),
    )  # fmt: skip
    return m
