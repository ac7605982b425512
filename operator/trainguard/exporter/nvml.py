"""GPU readings through pynvml. The module is injected, so tests drive this code with a fake NVML.

Unsupported fields are left out (None), a lost GPU is reported as lost, and XIDs come from an NVML
event set; the last one seen is exported as its value, as dcgm-exporter does. Handles are fetched
one GPU at a time: a GPU that fell off the bus before the exporter started (NVML answers GPU_IS_LOST
for its handle) is a lost GPU, not a reason to read none of the node's GPUs.

NVML that cannot start (no driver, no library, a runtime that hides the devices) is not fatal: the
backend reports why in `error`, logs it once, reads no GPU and tries again now and then, while the
exporter keeps serving host and training metrics.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import time
from collections.abc import Callable, Collection
from types import ModuleType
from typing import Any

from trainguard.exporter.readings import DriverInfo, GPUDevice, GPUReading

log = logging.getLogger("trainguard.exporter.nvml")

MIN_DRIVER_MAJOR = 470
"""Remapped rows, the volatile ECC totals and the XID event set as read here need R470 or newer."""

RETRY_S = 60.0
"""How often NVML that failed to start is tried again (a driver container may come up late)."""

VALUE_MEMBERS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")
"""c_nvmlValue_t's member for each NVML_VALUE_TYPE_* (DOUBLE = 0 ... UNSIGNED_SHORT = 6)."""

NVLINK_BYTE_FIELDS = (
    ("NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX", 1024.0),
    ("NVML_FI_DEV_NVLINK_COUNT_XMIT_BYTES", "NVML_FI_DEV_NVLINK_COUNT_RCV_BYTES", 1.0),
)
"""NVLink data counters per link (scopeId = link), with their unit in bytes: the KiB throughput
counters first; the byte counters of newer drivers where those answer NotSupported."""

PCIE_SAMPLE_S = 10.0
"""How old a GPU's PCIe traffic sample may grow. nvmlDeviceGetPcieThroughput measures 20 ms per direction
inside the call: 42 of a poll's 45 ms on a real H200, so one poll of 8 GPUs would spend a third of a
second on it. A scrape every 15 s sees one such 20 ms window whichever way it is taken, so each GPU is
sampled every 10 s, at most one GPU per poll. NVML's PCIe byte counters (field values 197 and 198) cost
nothing to read but wrap at 2**32 bytes: over 15 s of copies at 3 GB/s on that H200, the received count
went down."""

PCIE_KB = 1024.0
"""nvmlDeviceGetPcieThroughput answers in KB/s (NVML's KB: 1024 bytes)."""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def handle_address(handle: Any) -> int | None:
    """The address a pynvml handle points to. Handles are ctypes pointers, which compare by identity,
    and NVML hands out a new pointer object for the same GPU on every call (each event's `device`
    included): only the address identifies the GPU, and reading it calls nothing of NVML."""
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value
    except (ctypes.ArgumentError, TypeError):
        return None


def field_value(fv: Any) -> float | None:
    """One c_nvmlFieldValue_t of nvmlDeviceGetFieldValues: the union member its valueType names, or
    None where NVML answered an error for that field (the call itself succeeds: the error is per field)."""
    if int(fv.nvmlReturn) != 0:  # NVML_SUCCESS
        return None
    kind = int(fv.valueType)
    if not 0 <= kind < len(VALUE_MEMBERS):
        return None
    return float(getattr(fv.value, VALUE_MEMBERS[kind]))


def short_reason(exc: BaseException) -> str:
    """A short, stable text for a metric label: NVML's messages are fixed strings."""
    text = str(exc).strip() or type(exc).__name__
    return text[:100]


class NVMLBackend:
    def __init__(
        self,
        nvml: ModuleType | Any = None,
        clock: Callable[[], float] = time.monotonic,
        retry_s: float = RETRY_S,
    ) -> None:
        self.nvml: Any = nvml
        self.clock = clock
        self.retry_s = retry_s
        self.info = DriverInfo(supported=False)
        self.error = ""
        """Why no GPU is read ("" when NVML works); exported as collector_up's error label."""
        self.started = False
        self.handles: list[Any] = []
        """One per NVML index; None for a GPU whose handle NVML would not give (lost, typically)."""
        self.lost_at_start: set[int] = set()
        """Indices whose handle NVML refused with GPU_IS_LOST: exported as lost until one is given."""
        self.inventory: list[GPUDevice] = []
        self.index_by_address: dict[int, int] = {}
        self.last_xid: dict[int, int] = {}
        self.nvlinks: dict[int, tuple[int, ...]] = {}
        """GPU index -> the NVLink link ids NVML knows for it (found once; () without NVLink)."""
        self.nvlink_prev: dict[int, tuple[float, tuple[int, ...], str, float, float]] = {}
        """GPU index -> (time, active links, counter pair, tx bytes, rx bytes) of the last poll."""
        self.events: Any = None
        self.pcie_last: dict[int, tuple[float, float | None, float | None]] = {}
        """GPU index -> (time, tx, rx bytes per second) of its last PCIe traffic sample."""
        self.pcie_turn = True
        """Whether this poll may still take a PCIe sample (one GPU per poll)."""
        self.memory_v2 = True
        """False once the driver refused version 2 of nvmlDeviceGetMemoryInfo (drivers before R510)."""
        self._next_try = 0.0
        self._start()

    # ---- starting ----

    def _start(self) -> None:
        self._next_try = self.clock() + self.retry_s
        try:
            if self.nvml is None:
                import pynvml  # noqa: PLC0415 - only where the NVML backend is used

                self.nvml = pynvml
            self.nvml.nvmlInit()
        except ImportError as exc:
            self._failed(f"pynvml is not installed: {exc.name}")
            return
        except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, NoPermission, ...
            self._failed(f"NVML init failed: {short_reason(exc)}")
            return
        n = self.nvml
        try:
            self.info = self._driver_info()
            if not self.info.supported:
                self.started = True
                self._set_error(self.info.problem, log.error)
                return
            self.lost_at_start = set()
            self.handles = [self._handle(i) for i in range(n.nvmlDeviceGetCount())]
            self.inventory = [GPUDevice(i, "", "") if h is None else self._device(i, h)
                              for i, h in enumerate(self.handles)]  # fmt: skip
        except Exception as exc:
            self.handles, self.inventory, self.lost_at_start = [], [], set()
            self.info = DriverInfo(supported=False)
            self._failed(f"NVML device enumeration failed: {short_reason(exc)}")
            with contextlib.suppress(Exception):
                n.nvmlShutdown()
            return
        self.index_by_address = {}
        for i, h in enumerate(self.handles):
            self._remember(i, h)
        self.started = True
        if self.error:
            log.warning(
                "NVML started after all: %d GPUs, driver %s", len(self.handles), self.info.driver_version
            )
        self.error = ""
        if self.handles:
            self._register_xid_events()

    def _handle(self, i: int, quiet: bool = False) -> Any:
        """GPU i's handle, or None: NVML refuses the handle of a GPU that fell off the bus (GPU_IS_LOST),
        which must cost that GPU alone, reported as lost."""
        n = self.nvml
        try:
            handle = n.nvmlDeviceGetHandleByIndex(i)
        except n.NVMLError_GpuIsLost as exc:
            if not quiet:
                log.error("GPU %d is lost (NVML: %s): exported as trainguard_gpu_lost 1", i, exc)
            self.lost_at_start.add(i)
            return None
        except n.NVMLError as exc:
            if not quiet:
                log.warning("GPU %d gives no NVML handle (%s): it is not read", i, exc)
            return None
        self.lost_at_start.discard(i)
        return handle

    def _remember(self, i: int, h: Any) -> None:
        address = None if h is None else handle_address(h)
        if address is not None:
            self.index_by_address[address] = i

    def _failed(self, reason: str) -> None:
        self.started = False
        self._set_error(reason, log.error, f"; GPU metrics are not collected (host and training metrics are "
                                           f"still served), retrying every {self.retry_s:.0f}s")  # fmt: skip

    def _set_error(self, reason: str, emit: Callable[..., None], suffix: str = "") -> None:
        """Log a cause once, not on every retry."""
        if reason != self.error:
            emit("%s%s", reason, suffix)
        self.error = reason

    def _device(self, i: int, h: Any, quiet: bool = False) -> GPUDevice:
        n = self.nvml
        try:
            return GPUDevice(i, _text(n.nvmlDeviceGetUUID(h)), _text(n.nvmlDeviceGetName(h)))
        except n.NVMLError as exc:  # a GPU already lost: identified by its index alone
            if not quiet:
                log.warning("GPU %d does not answer at start: %s", i, exc)
            return GPUDevice(i, "", "")

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
                f"NVIDIA driver {info.driver_version} is older than {MIN_DRIVER_MAJOR}: GPU metrics are not "
                "collected; upgrade the driver or use gpuBackend: dcgm"
            )
        return info

    def _register_xid_events(self) -> None:
        n = self.nvml
        try:
            self.events = n.nvmlEventSetCreate()
        except n.NVMLError as exc:
            log.warning("XID events unavailable: %s", exc)
            self.events = None
            return
        for i, h in enumerate(self.handles):
            if h is not None:
                self._register_xid(i, h)

    def _register_xid(self, i: int, h: Any) -> None:
        """One GPU's XIDs; a GPU that refuses (lost, not supported) costs its own XIDs only."""
        if self.events is None:
            return
        n = self.nvml
        try:
            n.nvmlDeviceRegisterEvents(h, n.nvmlEventTypeXidCriticalError, self.events)
        except n.NVMLError as exc:
            log.warning("XID events unavailable for GPU %d: %s", i, exc)

    def devices(self) -> list[GPUDevice]:
        return list(self.inventory)

    # ---- reading ----

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
            address = handle_address(event.device)
            index = None if address is None else self.index_by_address.get(address)
            if index is None:
                log.warning("XID %s from a GPU this exporter did not enumerate", event.eventData)
                continue
            self.last_xid[index] = int(event.eventData)

    def _field(self, fn: Any, *args: Any) -> Any:
        """One NVML call: NotSupported -> None; GpuIsLost propagates."""
        n = self.nvml
        try:
            return fn(*args)
        except n.NVMLError_NotSupported:
            return None

    def read(self, only: Collection[int] | None = None) -> list[GPUReading]:
        """The GPUs in `only` (all when None). XIDs are drained for every GPU, so one seen before the
        pod's GPUs were known is not lost; only the GPUs read are ever exported."""
        if not self.started:
            if self.clock() >= self._next_try:
                self._start()
            if not self.started:
                return []
        n = self.nvml
        self._drain_xids()
        self.pcie_turn = True
        out = []
        for i in range(len(self.handles)):
            if only is not None and i not in only:
                continue
            h = self.handles[i]
            if h is None:  # no handle at start: ask again, it may have come back
                h = self._handle(i, quiet=True)
                if h is not None:
                    self.handles[i] = h
                    self._remember(i, h)
                    self._register_xid(i, h)
            if h is not None and not self.inventory[i].uuid:  # lost at start: ask again
                self.inventory[i] = self._device(i, h, quiet=True)
            dev = self.inventory[i]
            r = GPUReading(index=dev.index, uuid=dev.uuid, model=dev.model, polled_at=self.clock())
            if h is None:
                if i not in self.lost_at_start:
                    continue  # no handle for another reason: nothing to say about this GPU
                r.lost = True
            else:
                try:
                    self._fill(r, h)
                except n.NVMLError_GpuIsLost:
                    r = GPUReading(index=dev.index, uuid=dev.uuid, model=dev.model, lost=True,
                                   polled_at=r.polled_at)  # fmt: skip
                    self.nvlinks.pop(i, None)  # asked again if it comes back
                    self.nvlink_prev.pop(i, None)
                    self.pcie_last.pop(i, None)
            xid = self.last_xid.get(dev.index)
            # a lost GPU shows the XID that took it down (79, typically) but no made-up zero
            r.last_xid = float(xid) if xid is not None else (None if r.lost else 0.0)
            out.append(r)
        return out

    def _fill(self, r: GPUReading, h: Any) -> None:
        n, f = self.nvml, self._field
        util = f(n.nvmlDeviceGetUtilizationRates, h)
        if util is not None:
            r.util, r.mem_copy_util = float(util.gpu), float(util.memory)
        mem = self._memory(h)
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
        self._fill_speed(r, h)
        for attr, bit in (("ecc_sbe_total", n.NVML_SINGLE_BIT_ECC), ("ecc_dbe_total", n.NVML_DOUBLE_BIT_ECC)):
            value = f(n.nvmlDeviceGetTotalEccErrors, h, bit, n.NVML_VOLATILE_ECC)
            setattr(r, attr, None if value is None else float(value))
        replay = f(n.nvmlDeviceGetPcieReplayCounter, h)
        r.pcie_replay_total = None if replay is None else float(replay)
        rows = f(n.nvmlDeviceGetRemappedRows, h)
        if rows is not None:  # (corrRows, uncRows, isPending, failureOccurred); Ampere and newer
            corr, unc, pending, failure = rows
            r.remapped_rows_total = float(corr + unc)
            r.remapped_rows_correctable, r.remapped_rows_uncorrectable = float(corr), float(unc)
            r.row_remap_pending, r.row_remap_failure = float(bool(pending)), float(bool(failure))
        self._fill_health(r, h)

    def _memory(self, h: Any) -> Any:
        """Framebuffer use as nvidia-smi and DCGM report it: version 2 of the call, whose `used` leaves
        out what the driver reserves (615 MiB on an idle H200, which version 1 counts as used). A driver
        without version 2 is asked version 1 from then on."""
        n = self.nvml
        version = getattr(n, "nvmlMemory_v2", None)
        if version is not None and self.memory_v2:
            try:
                return n.nvmlDeviceGetMemoryInfo(h, version)
            except n.NVMLError_GpuIsLost:
                raise
            except n.NVMLError as exc:
                log.info(
                    "framebuffer memory from version 1 of nvmlDeviceGetMemoryInfo: version 2 says %s", exc
                )
                self.memory_v2 = False
        return self._field(n.nvmlDeviceGetMemoryInfo, h)

    def _fill_speed(self, r: GPUReading, h: Any) -> None:
        """What a slow-not-dead GPU shows (issue 25): the SM clock's maximum and the PCIe link's current
        and maximum generation and width. The maximum generation is nvmlDeviceGetMaxPcieLinkGeneration,
        the most the GPU and its system support together, not the GPU's own (GetGpuMaxPcieLinkGeneration):
        a Gen5 GPU in a Gen4 slot runs at its best at 4."""
        n, f = self.nvml, self._field
        max_clock = f(n.nvmlDeviceGetMaxClockInfo, h, n.NVML_CLOCK_SM)
        r.sm_clock_max_mhz = None if max_clock is None else float(max_clock)
        for attr, fn in (
            ("pcie_link_gen", n.nvmlDeviceGetCurrPcieLinkGeneration),
            ("pcie_link_width", n.nvmlDeviceGetCurrPcieLinkWidth),
            ("pcie_max_link_gen", n.nvmlDeviceGetMaxPcieLinkGeneration),
            ("pcie_max_link_width", n.nvmlDeviceGetMaxPcieLinkWidth),
        ):
            value = f(fn, h)
            setattr(r, attr, None if value is None else float(value))

    def _fill_health(self, r: GPUReading, h: Any) -> None:
        """HBM temperature, power limit, PCIe and NVLink traffic, NVLink CRC and page retirement."""
        n, f = self.nvml, self._field
        sensor = getattr(n, "NVML_TEMPERATURE_MEM", None)  # not in pynvml so far: the field value then
        if sensor is not None:
            mem_temp = f(n.nvmlDeviceGetTemperature, h, sensor)
        else:
            mem_temp = (self._field_values(h, [n.NVML_FI_DEV_MEMORY_TEMP]) or [None])[0]
        r.mem_temp_c = float(mem_temp) if mem_temp else None  # 0: a GPU without an HBM sensor
        limit = f(n.nvmlDeviceGetEnforcedPowerLimit, h)
        r.power_limit_w = None if limit is None else limit / 1000.0
        self._pcie_rates(r, h)
        links = self._active_links(r.index, h)
        if links:
            crc = [f(n.nvmlDeviceGetNvLinkErrorCounter, h, link, n.NVML_NVLINK_ERROR_DL_CRC_FLIT)
                   for link in links]  # fmt: skip
            answered = [c for c in crc if c is not None]
            r.nvlink_crc_flit_total = float(sum(answered)) if answered else None
            self._nvlink_rates(r, h, links)
        else:
            self.nvlink_prev.pop(r.index, None)
        # page retirement: Volta and Turing; Ampere and newer answer NotSupported (they remap rows)
        sbe = f(n.nvmlDeviceGetRetiredPages, h, n.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)
        dbe = f(n.nvmlDeviceGetRetiredPages, h, n.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
        r.retired_sbe_pages = None if sbe is None else float(len(sbe))
        r.retired_dbe_pages = None if dbe is None else float(len(dbe))
        pending = f(n.nvmlDeviceGetRetiredPagesPendingStatus, h)
        r.retired_pending = None if pending is None else float(pending == n.NVML_FEATURE_ENABLED)

    def _pcie_rates(self, r: GPUReading, h: Any) -> None:
        """Bytes per second each way over PCIe: the GPU's last sample, taken anew once it is PCIE_SAMPLE_S
        old and no other GPU was sampled in this poll."""
        last = self.pcie_last.get(r.index)
        if self.pcie_turn and (last is None or self.clock() - last[0] >= PCIE_SAMPLE_S):
            self.pcie_turn = False
            n, f = self.nvml, self._field
            tx = f(n.nvmlDeviceGetPcieThroughput, h, n.NVML_PCIE_UTIL_TX_BYTES)
            rx = f(n.nvmlDeviceGetPcieThroughput, h, n.NVML_PCIE_UTIL_RX_BYTES)
            last = (self.clock(), None if tx is None else tx * PCIE_KB, None if rx is None else rx * PCIE_KB)
            self.pcie_last[r.index] = last
        if last is not None:
            r.pcie_tx_bytes_per_s, r.pcie_rx_bytes_per_s = last[1], last[2]

    def _field_values(self, h: Any, ids: list[Any]) -> list[float | None] | None:
        """nvmlDeviceGetFieldValues: each field's value, None for a field NVML answered an error for;
        None for all when the call itself is not supported."""
        values = self._field(self.nvml.nvmlDeviceGetFieldValues, h, ids)
        return None if values is None else [field_value(v) for v in values]

    def _active_links(self, i: int, h: Any) -> tuple[int, ...]:
        """The NVLink links up now. Which links exist is asked once per GPU: NVML answers NotSupported
        for every link of a GPU without NVLink and InvalidArgument past its last link."""
        n = self.nvml
        if i not in self.nvlinks:
            known = []
            for link in range(n.NVML_NVLINK_MAX_LINKS):
                try:
                    n.nvmlDeviceGetNvLinkState(h, link)
                except (n.NVMLError_NotSupported, n.NVMLError_InvalidArgument):
                    continue
                known.append(link)
            self.nvlinks[i] = tuple(known)
        active = []
        for link in self.nvlinks[i]:
            try:
                if n.nvmlDeviceGetNvLinkState(h, link) == n.NVML_FEATURE_ENABLED:
                    active.append(link)
            except (n.NVMLError_NotSupported, n.NVMLError_InvalidArgument):
                continue
        return tuple(active)

    def _nvlink_rates(self, r: GPUReading, h: Any, links: tuple[int, ...]) -> None:
        """Bytes per second each way over the active links, from the change of NVML's data counters
        since the last poll: nothing on the first poll, when the links changed, or on a counter reset."""
        n = self.nvml
        now = self.clock()
        for tx_name, rx_name, unit in NVLINK_BYTE_FIELDS:
            tx_id, rx_id = getattr(n, tx_name, None), getattr(n, rx_name, None)
            if tx_id is None or rx_id is None:
                continue
            values = self._field_values(h, [(fid, link) for link in links for fid in (tx_id, rx_id)])
            if values is None:
                return
            if any(v is None for v in values):
                continue  # this pair of counters is not supported here: the next one
            tx = sum(v for v in values[0::2] if v is not None) * unit
            rx = sum(v for v in values[1::2] if v is not None) * unit
            prev = self.nvlink_prev.get(r.index)
            self.nvlink_prev[r.index] = (now, links, tx_name, tx, rx)
            if prev is None or prev[1:3] != (links, tx_name) or now <= prev[0]:
                return
            dt, d_tx, d_rx = now - prev[0], tx - prev[3], rx - prev[4]
            if d_tx >= 0 and d_rx >= 0:
                r.nvlink_tx_bytes_per_s, r.nvlink_rx_bytes_per_s = d_tx / dt, d_rx / dt
            return

    def close(self) -> None:
        if not self.started:
            return
        try:
            if self.events is not None:
                self.nvml.nvmlEventSetFree(self.events)
            self.nvml.nvmlShutdown()
        except Exception:
            pass
