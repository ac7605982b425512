"""Host signals from /proc and /sys (root injectable, so tests read recorded fixtures).

Rates need two polls: the reader keeps the previous counters and reports nothing for a signal
until it has a delta.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from trainguard.exporter.readings import HostReading

log = logging.getLogger("trainguard.exporter.host")

KSWAPD_HIDDEN = "not visible: mount the host's /proc and pass --host-root"
"""collector_up{collector="kswapd"}'s error when the pod's PID namespace hides the host's kswapd."""
MEMINFO_UNREADABLE = "cannot read proc/meminfo under --host-root"

IB_COUNTERS = (
    "port_rcv_errors",
    "port_xmit_discards",
    "symbol_error",
    "link_downed",
    "port_rcv_data",
    "port_xmit_data",
)

SECTOR_BYTES = 512
"""/proc/diskstats counts 512-byte sectors whatever the device's own sector size."""

ROCE_COUNTERS = {
    "np_ecn_marked_roce_packets": "roce_ecn_marked",
    "np_cnp_sent": "roce_cnp_sent",
    "rp_cnp_handled": "roce_cnp_handled",
}
"""RoCE congestion counters in a port's hw_counters (mlx5): file -> HostReading attribute."""


class HostReader:
    def __init__(
        self, root: str | Path = "/", clock: Callable[[], float] = time.monotonic, clk_tck: int | None = None
    ) -> None:
        self.root = Path(root)
        self.clock = clock
        self.clk_tck = clk_tck or os.sysconf("SC_CLK_TCK")
        self.prev: dict[str, tuple[float, ...]] = {}
        self.prev_time: float | None = None
        self._kswapd_logged = False

    def _read(self, rel: str) -> str:
        return (self.root / rel).read_text()

    def read(self) -> HostReading:
        now = self.clock()
        dt = None if self.prev_time is None else max(now - self.prev_time, 1e-6)
        counters: dict[str, tuple[float, ...]] = {}
        h = HostReading(polled_at=now)
        h.memory_used_ratio = self._memory()
        ticks = self._kswapd_ticks()
        if ticks is not None:
            counters["kswapd"] = (ticks,)
        else:
            h.kswapd_visible = False
            if not self._kswapd_logged:
                log.warning(
                    "no kswapd process under %s: this is the pod's own PID namespace, so the host's swap "
                    "activity is invisible and HostSwapPressure cannot fire; mount the host's /proc (e.g. "
                    "hostPath / at /host) and pass --host-root /host",
                    self.root / "proc",
                )
                self._kswapd_logged = True
        counters.update(self._disks())
        counters.update(self._net())
        ib = self._infiniband()
        for (dev, port, name), value in ib.items():
            h.infiniband_counters[(dev, port, name)] = value
            counters[f"ib:{dev}:{port}:{name}"] = (value,)
        for (dev, port, name), value in self._roce().items():
            getattr(h, ROCE_COUNTERS[name])[(dev, port)] = value
        if dt is not None:
            self._rates(h, counters, dt)
        self.prev, self.prev_time = counters, now
        return h

    def _delta(self, key: str, current: tuple[float, ...]) -> tuple[float, ...] | None:
        old = self.prev.get(key)
        if old is None or len(old) != len(current):
            return None
        d = tuple(c - o for c, o in zip(current, old, strict=True))
        return None if any(x < 0 for x in d) else d  # a counter reset: skip one poll

    def _rates(self, h: HostReading, counters: dict[str, tuple[float, ...]], dt: float) -> None:
        for key, current in counters.items():
            d = self._delta(key, current)
            if d is None:
                continue
            kind, _, name = key.partition(":")
            if kind == "kswapd":
                h.kswapd_cpu_ratio = d[0] / self.clk_tck / dt
            elif kind == "disk":
                writes, write_ms, sectors_read = d
                if writes > 0:
                    h.disk_write_latency_s[name] = write_ms / writes / 1000.0
                h.disk_read_bytes_per_s[name] = sectors_read * SECTOR_BYTES / dt
            elif kind == "net":
                packets, lost, rx_bits, tx_bits, speed = d[0], d[1], d[2], d[3], current[4]
                if packets + lost > 0:
                    h.packet_loss_ratio[name] = lost / (packets + lost)
                if speed > 0:
                    # the link speed is per direction (full duplex): the busier direction saturates
                    h.bandwidth_utilization_ratio[name] = max(rx_bits, tx_bits) / dt / (speed * 1e6)
        self._ib_rates(h, counters, dt)

    def _ib_rates(self, h: HostReading, counters: dict[str, tuple[float, ...]], dt: float) -> None:
        ports = {tuple(k.split(":")[1:3]) for k in counters if k.startswith("ib:")}
        for dev, port in ports:
            key = f"{dev}:{port}"

            def delta(name: str, d: str = dev, p: str = port) -> float | None:
                got = self._delta(f"ib:{d}:{p}:{name}", counters.get(f"ib:{d}:{p}:{name}", (0.0,)))
                return None if got is None else got[0]

            errors = sum(
                x for x in (delta("port_rcv_errors"), delta("port_xmit_discards"), delta("symbol_error")) if x
            )
            # port_*_data counts 4-byte words
            rx_words, tx_words = delta("port_rcv_data") or 0.0, delta("port_xmit_data") or 0.0
            packets = (rx_words + tx_words) / 1024.0  # roughly 4 KiB MTU packets: enough for a ratio
            if packets + errors > 0:
                h.packet_loss_ratio[f"ib:{key}"] = errors / (packets + errors)
            rate = self._ib_rate_gbps(dev, port)
            if rate:
                # the rate is per direction, like a NIC's speed: the busier direction saturates
                busiest = max(rx_words, tx_words)
                h.bandwidth_utilization_ratio[f"ib:{key}"] = busiest * 4 * 8 / dt / (rate * 1e9)

    # ---- sources ----

    def _memory(self) -> float | None:
        try:
            fields = {}
            for line in self._read("proc/meminfo").splitlines():
                name, _, rest = line.partition(":")
                fields[name] = float(rest.split()[0])
            return 1.0 - fields["MemAvailable"] / fields["MemTotal"]
        except (OSError, KeyError, ValueError, ZeroDivisionError):
            return None

    def _kswapd_ticks(self) -> float | None:
        total, found = 0.0, False
        proc = self.root / "proc"
        try:
            entries = [p for p in proc.iterdir() if p.name.isdigit()]
        except OSError:
            return None
        for p in entries:
            try:
                if not (p / "comm").read_text().startswith("kswapd"):
                    continue
                stat = (p / "stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            total += float(fields[11]) + float(fields[12])  # utime + stime (fields 14, 15 of stat)
            found = True
        return total if found else None

    def _disks(self) -> dict[str, tuple[float, ...]]:
        out: dict[str, tuple[float, ...]] = {}
        try:
            lines = self._read("proc/diskstats").splitlines()
        except OSError:
            return out
        for line in lines:
            f = line.split()
            if len(f) < 11:
                continue
            name = f[2]
            if not self._whole_disk(name):
                continue
            # writes completed, ms writing, sectors read
            out[f"disk:{name}"] = (float(f[7]), float(f[10]), float(f[5]))
        return out

    def _whole_disk(self, name: str) -> bool:
        """Whole disks are in /sys/block, partitions are not; virtual devices are left out."""
        if name.startswith(("loop", "ram", "sr", "zram")):
            return False
        block = self.root / "sys/block"
        return (block / name).exists() if block.is_dir() else not name.startswith("dm-")

    def _net(self) -> dict[str, tuple[float, ...]]:
        out: dict[str, tuple[float, ...]] = {}
        try:
            lines = self._read("proc/net/dev").splitlines()[2:]
        except OSError:
            return out
        for line in lines:
            name, _, rest = line.partition(":")
            name = name.strip()
            if name == "lo":
                continue
            f = [float(x) for x in rest.split()]
            rx_bytes, rx_packets, rx_errs, rx_drop = f[0], f[1], f[2], f[3]
            tx_bytes, tx_packets, tx_errs, tx_drop = f[8], f[9], f[10], f[11]
            try:
                speed = float(self._read(f"sys/class/net/{name}/speed"))
            except (OSError, ValueError):
                speed = 0.0
            lost = rx_errs + rx_drop + tx_errs + tx_drop
            out[f"net:{name}"] = (rx_packets + tx_packets, lost, rx_bytes * 8, tx_bytes * 8, max(speed, 0.0))
        return out

    def _infiniband(self) -> dict[tuple[str, str, str], float]:
        return self._port_counters("counters", IB_COUNTERS)

    def _roce(self) -> dict[tuple[str, str, str], float]:
        """The RoCE congestion counters each port has; a NIC or kernel without them gives nothing."""
        return self._port_counters("hw_counters", ROCE_COUNTERS)

    def _port_counters(self, folder: str, names: Iterable[str]) -> dict[tuple[str, str, str], float]:
        """(device, port, counter) -> value from /sys/class/infiniband/<dev>/ports/<port>/<folder>/; a
        counter that is missing or unreadable is left out."""
        out: dict[tuple[str, str, str], float] = {}
        base = self.root / "sys/class/infiniband"
        if not base.is_dir():
            return out
        for dev in sorted(base.iterdir()):
            for port in sorted((dev / "ports").glob("*")):
                for name in names:
                    try:
                        out[(dev.name, port.name, name)] = float((port / folder / name).read_text())
                    except (OSError, ValueError):
                        continue
        return out

    def _ib_rate_gbps(self, dev: str, port: str) -> float:
        try:
            text = self._read(f"sys/class/infiniband/{dev}/ports/{port}/rate")  # e.g. "400 Gb/sec (4X NDR)"
            return float(text.split()[0])
        except (OSError, ValueError, IndexError):
            return 0.0
