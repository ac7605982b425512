"""Host signals from recorded /proc and /sys snapshots (two polls, ten seconds apart): a node with one
NVMe disk, an Ethernet NIC and a RoCE NIC (mlx5_0 port 1, its hw_counters as the mlx5 driver lays them out)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.exporter.running import Running, running_exporter
from trainguard.exporter.host import KSWAPD_HIDDEN, MEMINFO_UNREADABLE, HostReader

MEMINFO = "MemTotal:       2113404928 kB\nMemFree:         10240000 kB\nMemAvailable:   422680985 kB\nSwapTotal: 0 kB\n"
DISKSTATS = """\
 259       0 nvme0n1 {r} 0 {rs} 1200 {w} 0 {ws} {wt} 0 9000 40000 0 0 0 0
 259       1 nvme0n1p1 10 0 80 1 5 0 40 30 0 20 31 0 0 0 0
   7       0 loop0 5 0 10 1 0 0 0 0 0 1 1 0 0 0 0
"""
NETDEV = """\
Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo: 1000 10 0 0 0 0 0 0 1000 10 0 0 0 0 0 0
  eth0: {rb} {rp} 0 {rd} 0 0 0 0 {tb} {tp} 0 0 0 0 0 0
"""


def write(root: Path, t: int) -> None:
    """State at poll t (0 or 1): counters advance between polls as on a busy training node."""
    (root / "proc/42").mkdir(parents=True, exist_ok=True)
    (root / "proc/meminfo").write_text(MEMINFO)
    (root / "proc/42/comm").write_text("kswapd0\n")
    ticks = 1000 + t * 60  # 60 ticks in 10 s at 100 Hz: 6% of a core
    (root / "proc/42/stat").write_text(f"42 (kswapd0) S 2 0 0 0 -1 2 0 0 0 0 {ticks} 0 0 0 20 0 1 0\n")
    (root / "proc/7").mkdir(exist_ok=True)
    (root / "proc/7/comm").write_text("python\n")
    (root / "proc/7/stat").write_text("7 (python) R 1 1 1 0 -1 0 0 0 0 0 99999 99999 0 0 20 0 1 0\n")
    # 500 writes taking 125000 ms in total: 250 ms each; 4096000 sectors read: 2097152000 bytes in 10 s
    (root / "proc/diskstats").write_text(
        DISKSTATS.format(
            r=100 + t * 16000, rs=800 + t * 4_096_000, w=1000 + t * 500, ws=8000, wt=20000 + t * 125000
        )
    )
    for dev in ("nvme0n1", "loop0"):
        (root / "sys/block" / dev).mkdir(parents=True, exist_ok=True)
    (root / "proc/net").mkdir(exist_ok=True)
    # 100000 packets, 300 of them dropped; 12.5 GB in 10 s on a 100 Gb/s link: 10% utilisation
    (root / "proc/net/dev").write_text(
        NETDEV.format(rb=10**9 + t * 12_500_000_000, rp=10**6 + t * 99_700, rd=t * 300, tb=0, tp=10**6)
    )
    (root / "sys/class/net/eth0").mkdir(parents=True, exist_ok=True)
    (root / "sys/class/net/eth0/speed").write_text("100000\n")
    write_roce(root, t)


ROCE_AT = {  # hw_counters of a busy RoCE port: a little congestion on the path, no drops
    "np_ecn_marked_roce_packets": (120_400, 1_500),
    "np_cnp_sent": (118_900, 1_480),
    "rp_cnp_handled": (57_012, 700),
    "rp_cnp_ignored": (0, 0),
    "out_of_buffer": (0, 0),
    "rx_icrc_encapsulated": (0, 0),
}
"""counter -> (value at poll 0, increase per poll)."""


def write_roce(root: Path, t: int) -> None:
    hw = root / "sys/class/infiniband/mlx5_0/ports/1/hw_counters"
    hw.mkdir(parents=True, exist_ok=True)
    for name, (start, step) in ROCE_AT.items():
        (hw / name).write_text(f"{start + t * step}\n")


@pytest.fixture
def reader(tmp_path: Path) -> HostReader:
    times = iter([0.0, 10.0])
    return HostReader(tmp_path, clock=lambda: next(times), clk_tck=100)


def test_first_poll_has_levels_but_no_rates(tmp_path: Path, reader: HostReader) -> None:
    write(tmp_path, 0)
    h = reader.read()
    assert h.memory_used_ratio == pytest.approx(0.8, abs=1e-6)
    assert h.kswapd_cpu_ratio is None and not h.disk_write_latency_s and not h.packet_loss_ratio


def test_second_poll_computes_rates(tmp_path: Path, reader: HostReader) -> None:
    write(tmp_path, 0)
    reader.read()
    write(tmp_path, 1)
    h = reader.read()
    assert h.kswapd_cpu_ratio == pytest.approx(0.06)
    assert h.disk_write_latency_s == {"nvme0n1": pytest.approx(0.25)}, (
        "partitions and loop devices are left out"
    )
    assert h.packet_loss_ratio == {"eth0": pytest.approx(300 / 100_000)}
    assert h.bandwidth_utilization_ratio == {"eth0": pytest.approx(0.1)}


def test_infiniband_ports_when_present(tmp_path: Path, reader: HostReader) -> None:
    port = tmp_path / "sys/class/infiniband/mlx5_0/ports/1"
    (port / "counters").mkdir(parents=True)
    (port / "rate").write_text("400 Gb/sec (4X NDR)\n")
    for t in (0, 1):
        write(tmp_path, t)
        for name, value in (("port_rcv_errors", 5 + t * 10), ("port_xmit_discards", 0), ("symbol_error", 0),
                            ("port_rcv_data", t * 10_240_000), ("port_xmit_data", 0)):  # fmt: skip
            (port / "counters" / name).write_text(f"{value}\n")
        h = reader.read()
    assert h.infiniband_counters[("mlx5_0", "1", "port_rcv_errors")] == 15
    assert h.packet_loss_ratio["ib:mlx5_0:1"] == pytest.approx(10 / (10_000 + 10))


def test_missing_files_give_nothing_not_errors(tmp_path: Path, reader: HostReader) -> None:
    h = reader.read()
    assert h.memory_used_ratio is None and h.kswapd_cpu_ratio is None and not h.packet_loss_ratio
    assert not h.roce_ecn_marked and not h.disk_read_bytes_per_s


def test_disk_read_throughput_is_sectors_read_times_512_over_the_interval(
    tmp_path: Path, reader: HostReader
) -> None:
    write(tmp_path, 0)
    assert not reader.read().disk_read_bytes_per_s, "a rate needs two polls"
    write(tmp_path, 1)
    h = reader.read()
    assert h.disk_read_bytes_per_s == {"nvme0n1": pytest.approx(4_096_000 * 512 / 10)}, (
        "whole disks only, like the write latency"
    )


def test_an_idle_disk_reads_zero_bytes_per_second_not_nothing(tmp_path: Path, reader: HostReader) -> None:
    """A resume that reads nothing is what the read-throughput floor is for: 0 must be exported."""
    write(tmp_path, 0)
    reader.read()
    h = reader.read()
    assert h.disk_read_bytes_per_s == {"nvme0n1": 0.0}


def test_roce_congestion_counters_are_read_raw_per_port(tmp_path: Path, reader: HostReader) -> None:
    write(tmp_path, 0)
    h = reader.read()
    port = ("mlx5_0", "1")
    assert (h.roce_ecn_marked, h.roce_cnp_sent, h.roce_cnp_handled) == (
        {port: 120_400},
        {port: 118_900},
        {port: 57_012},
    ), "counters, on the first poll already: rate() is Prometheus's job"
    write(tmp_path, 1)
    assert reader.read().roce_ecn_marked == {port: 121_900}


def test_a_port_without_a_counter_leaves_that_counter_out(tmp_path: Path, reader: HostReader) -> None:
    """An InfiniBand port, or an older kernel, has no np_cnp_sent: nothing, not a made-up zero."""
    write(tmp_path, 0)
    (tmp_path / "sys/class/infiniband/mlx5_0/ports/1/hw_counters/np_cnp_sent").unlink()
    ib = tmp_path / "sys/class/infiniband/mlx5_1/ports/1/counters"
    ib.mkdir(parents=True)
    (ib / "port_rcv_errors").write_text("0\n")
    h = reader.read()
    assert h.roce_cnp_sent == {}
    assert set(h.roce_ecn_marked) == set(h.roce_cnp_handled) == {("mlx5_0", "1")}


def test_link_utilisation_is_the_busier_direction_over_the_per_direction_speed(
    tmp_path: Path, reader: HostReader
) -> None:
    """A 100 Gb/s NIC moving 10 Gb/s each way is 10% used, not 20%: its speed is per direction."""
    write(tmp_path, 0)
    reader.read()
    write(tmp_path, 1)
    netdev = (tmp_path / "proc/net/dev").read_text().split("\n")
    netdev[3] = netdev[3].replace(" 0 1000000 0 0 0 0 0 0", f" {12_500_000_000} 1000000 0 0 0 0 0 0")
    (tmp_path / "proc/net/dev").write_text("\n".join(netdev))
    h = reader.read()
    assert h.bandwidth_utilization_ratio == {"eth0": pytest.approx(0.1)}


def test_infiniband_utilisation_is_the_busier_direction_too(tmp_path: Path, reader: HostReader) -> None:
    port = tmp_path / "sys/class/infiniband/mlx5_0/ports/1"
    (port / "counters").mkdir(parents=True)
    (port / "rate").write_text("400 Gb/sec (4X NDR)\n")
    for t in (0, 1):
        write(tmp_path, t)
        # 100 GB received in 10 s on a 400 Gb/s port (80 Gb/s: 20%), 25 GB sent (5%)
        for name, value in (("port_rcv_data", t * 25_000_000_000), ("port_xmit_data", t * 6_250_000_000)):
            (port / "counters" / name).write_text(f"{value}\n")
        h = reader.read()
    assert h.bandwidth_utilization_ratio["ib:mlx5_0:1"] == pytest.approx(0.2)


def collector_up(exp: Running) -> dict[str, tuple[float, str]]:
    return {
        lbl["collector"]: (v, lbl["error"]) for lbl, v in exp.scrape()["trainguard_exporter_collector_up"]
    }


def test_kswapd_hidden_by_the_pods_pid_namespace_is_said_once_and_visible(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="trainguard.exporter.host")
    write(tmp_path, 0)
    (tmp_path / "proc/42/comm").write_text("sleep\n")  # the pod's processes only
    with running_exporter("--backend", "none", "--host-root", str(tmp_path)) as exp:
        exp.exporter.poll_hardware()
        up = collector_up(exp)
    assert up["kswapd"] == (0, KSWAPD_HIDDEN)
    assert "--host-root" in KSWAPD_HIDDEN
    assert len([r for r in caplog.records if "kswapd" in r.getMessage()]) == 1, "once, not every poll"


def test_a_hidden_kswapd_leaves_the_host_collector_up_as_it_still_delivers(tmp_path: Path) -> None:
    """The default sidecar's case: memory, disks and network are read, only kswapd is out of sight."""
    write(tmp_path, 0)
    (tmp_path / "proc/42/comm").write_text("sleep\n")
    with running_exporter("--backend", "none", "--host-root", str(tmp_path)) as exp:
        write(tmp_path, 1)  # a second poll, so the rates exist
        (tmp_path / "proc/42/comm").write_text("sleep\n")
        exp.exporter.poll_hardware()
        up = collector_up(exp)
        delivered = exp.scrape()
    assert up["host"] == (1, ""), "the host collector delivers"
    assert up["kswapd"][0] == 0
    assert (
        delivered["trainguard_host_memory_used_ratio"]
        and delivered["trainguard_host_disk_write_latency_seconds"]
    )
    assert "trainguard_host_kswapd_cpu_ratio" not in delivered


def test_a_host_root_without_meminfo_is_a_host_collector_down(tmp_path: Path) -> None:
    with running_exporter("--backend", "none", "--host-root", str(tmp_path / "nothing")) as exp:
        up = collector_up(exp)
    assert up["host"] == (0, MEMINFO_UNREADABLE)


def test_kswapd_visible_means_the_host_collector_is_up(tmp_path: Path) -> None:
    write(tmp_path, 0)
    with running_exporter("--backend", "none", "--host-root", str(tmp_path)) as exp:
        up = collector_up(exp)
    assert up == {"host": (1, ""), "kswapd": (1, ""), "training": (1, "")}, "no GPU backend: no gpu collector"
