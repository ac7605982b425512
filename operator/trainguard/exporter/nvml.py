"""GPU readings through pynvml. The module is injected, so tests drive this code with a fake NVML.

Unsupported fields are left out (None), a lost GPU is reported as lost, and XIDs come from an NVML
event set; the last one seen is exported as its value, as dcgm-exporter does.
"""

from __future__ import annotations

import logging
from types import ModuleType
from typing import Any

from trainguard.exporter.readings import DriverInfo, GPUReading

log = logging.getLogger("trainguard.exporter.nvml")

MIN_DRIVER_MAJOR = 470
"""Remapped rows, the volatile ECC totals and the XID event set as read here need R470 or newer."""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NVMLBackend:
    def __init__(self, nvml: ModuleType | None = None) -> None:
        if nvml is None:
            import pynvml  # noqa: PLC0415 - only where the NVML backend is used

            nvml = pynvml
        self.nvml = nvml
        self.nvml.nvmlInit()
        self.info = self._driver_info()
        count = self.nvml.nvmlDeviceGetCount() if self.info.supported else 0
        self.handles = [self.nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        self.last_xid: dict[int, int] = {}
        self.events: Any = None
        if self.handles:
            self._register_xid_events()

    def _driver_info(self) -> DriverInfo:
        n = self.nvml
        info = DriverInfo(driver_version=_text(n.nvmlSystemGetDriverVersion()))
        try:
            info.nvml_version = _text(n.nvmlSystemGetNVMLVersion())
            cuda = int(n.nvmlSystemGetCudaDriverVersion())
            info.cuda_version = f"{cuda // 1000}.{cuda % 1000 // 10}"
        except n.NVMLError:
            pass
        try:
            major = int(info.driver_version.split(".")[0])
        except ValueError:
            major = 0
        if major < MIN_DRIVER_MAJOR:
            info.supported = False
            info.problem = (
                f"NVIDIA driver {info.driver_version} is older than {MIN_DRIVER_MAJOR}: GPU metrics are not collected; "
                "upgrade the driver or use gpuBackend: dcgm"
            )
            log.error(info.problem)
        return info

    def _register_xid_events(self) -> None:
        n = self.nvml
        try:
            self.events = n.nvmlEventSetCreate()
            for h in self.handles:
                n.nvmlDeviceRegisterEvents(h, n.nvmlEventTypeXidCriticalError, self.events)
        except n.NVMLError as exc:
            log.warning("XID events unavailable: %s", exc)
            self.events = None

    def _drain_xids(self) -> None:
        if self.events is None:
            return
        n = self.nvml
        for _ in range(64):
            try:
                event = n.nvmlEventSetWait_v2(self.events, 0)
            except n.NVMLError_Timeout:
                return
            except n.NVMLError as exc:
                log.warning("reading XID events failed: %s", exc)
                return
            index = self.handles.index(event.device) if event.device in self.handles else -1
            if index >= 0:
                self.last_xid[index] = int(event.eventData)

    def _field(self, fn: Any, *args: Any) -> Any:
        """One NVML call: NotSupported -> None; GpuIsLost propagates."""
        n = self.nvml
        try:
            return fn(*args)
        except n.NVMLError_NotSupported:
            return None

    def read(self) -> list[GPUReading]:
        n = self.nvml
        self._drain_xids()
        out = []
        for i, h in enumerate(self.handles):
            try:
                r = GPUReading(
                    index=i, uuid=_text(n.nvmlDeviceGetUUID(h)), model=_text(n.nvmlDeviceGetName(h))
                )
            except n.NVMLError_GpuIsLost:
                out.append(GPUReading(index=i, uuid=f"GPU-{i}", model="", lost=True))
                continue
            try:
                self._fill(r, h)
            except n.NVMLError_GpuIsLost:
                r = GPUReading(index=i, uuid=r.uuid, model=r.model, lost=True)
            r.last_xid = float(self.last_xid.get(i, 0))
            out.append(r)
        return out

    def _fill(self, r: GPUReading, h: Any) -> None:
        n, f = self.nvml, self._field
        util = f(n.nvmlDeviceGetUtilizationRates, h)
        if util is not None:
            r.util, r.mem_copy_util = float(util.gpu), float(util.memory)
        mem = f(n.nvmlDeviceGetMemoryInfo, h)
        if mem is not None:
            r.fb_used_mib, r.fb_free_mib = mem.used / 2**20, mem.free / 2**20
        temp = f(n.nvmlDeviceGetTemperature, h, n.NVML_TEMPERATURE_GPU)
        r.temp_c = None if temp is None else float(temp)
        power = f(n.nvmlDeviceGetPowerUsage, h)
        r.power_w = None if power is None else power / 1000.0
        clock = f(n.nvmlDeviceGetClockInfo, h, n.NVML_CLOCK_SM)
        r.sm_clock_mhz = None if clock is None else float(clock)
        throttle = f(n.nvmlDeviceGetCurrentClocksThrottleReasons, h)
        r.throttle_reasons = None if throttle is None else float(throttle)
        for attr, bit in (("ecc_sbe_total", n.NVML_SINGLE_BIT_ECC), ("ecc_dbe_total", n.NVML_DOUBLE_BIT_ECC)):
            value = f(n.nvmlDeviceGetTotalEccErrors, h, bit, n.NVML_VOLATILE_ECC)
            setattr(r, attr, None if value is None else float(value))
        replay = f(n.nvmlDeviceGetPcieReplayCounter, h)
        r.pcie_replay_total = None if replay is None else float(replay)
        rows = f(n.nvmlDeviceGetRemappedRows, h)
        if rows is not None:
            r.remapped_rows_total = float(rows[0] + rows[1])

    def close(self) -> None:
        try:
            if self.events is not None:
                self.nvml.nvmlEventSetFree(self.events)
            self.nvml.nvmlShutdown()
        except Exception:
            pass
