"""Seeded, realistic fake GPUs for demos and tests: an H100 under training load, with noise.

Every GPU series has a healthy baseline here, so rules see normal data until a fault is injected. An
H100 really answers NotSupported for page retirement (it remaps rows); the simulation exports the
retired-page series at zero anyway, so the rules over them can be exercised without a V100.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Collection

from trainguard.exporter.readings import DriverInfo, GPUDevice, GPUReading

TOTAL_MIB = 81559.0
MODEL = "NVIDIA H100 80GB HBM3"
POWER_LIMIT_W = 700.0
MAX_SM_CLOCK_MHZ = 1980.0


def _uuid(i: int) -> str:
    return f"GPU-5e1f0000-0000-4000-8000-{i:012d}"


class SimulatedBackend:
    def __init__(self, gpus: int = 8, seed: int = 0, clock: Callable[[], float] = time.monotonic) -> None:
        self.rng = random.Random(seed)
        self.clock = clock
        self.info = DriverInfo(driver_version="550.54.15", nvml_version="12.550.54.15", cuda_version="12.4")
        self.gpus = gpus
        self.sbe = [0.0] * gpus
        self.dbe = [0.0] * gpus
        self.replay = [0.0] * gpus
        self.base_used = [TOTAL_MIB * self.rng.uniform(0.55, 0.68) for _ in range(gpus)]
        self.error = ""

    def devices(self) -> list[GPUDevice]:
        return [GPUDevice(i, _uuid(i), MODEL) for i in range(self.gpus)]

    def read(self, only: Collection[int] | None = None) -> list[GPUReading]:
        g = self.rng.gauss
        now = self.clock()
        out = []
        for i in range(self.gpus):
            if only is not None and i not in only:
                continue
            if self.rng.random() < 0.002:
                self.sbe[i] += 1  # the odd corrected error of healthy HBM
            used = min(TOTAL_MIB, max(0.0, self.base_used[i] + g(0, 150)))
            temp = round(g(64, 1.5))
            out.append(
                GPUReading(
                    index=i,
                    uuid=_uuid(i),
                    model=MODEL,
                    util=min(100.0, max(0.0, round(g(94, 3)))),
                    fb_used_mib=round(used),
                    fb_free_mib=round(TOTAL_MIB - used),
                    mem_copy_util=min(100.0, max(0.0, round(g(38, 4)))),
                    temp_c=temp,
                    power_w=round(g(560, 25), 1),
                    sm_clock_mhz=MAX_SM_CLOCK_MHZ,
                    sm_clock_max_mhz=MAX_SM_CLOCK_MHZ,
                    pcie_link_gen=5.0,  # a busy H100 SXM holds its Gen5 x16 link
                    pcie_link_width=16.0,
                    pcie_max_link_gen=5.0,
                    pcie_max_link_width=16.0,
                    throttle_reasons=0.0,
                    last_xid=0.0,
                    ecc_sbe_total=self.sbe[i],
                    ecc_dbe_total=self.dbe[i],
                    pcie_replay_total=self.replay[i],
                    remapped_rows_total=0.0,
                    mem_temp_c=temp + 5 + round(g(0, 1)),  # HBM runs a few degrees above the die
                    power_limit_w=POWER_LIMIT_W,
                    # all-reduce traffic: NVLink busy, PCIe carrying input batches and checkpoints
                    pcie_tx_bytes_per_s=round(max(0.0, g(2.5e9, 3e8))),
                    pcie_rx_bytes_per_s=round(max(0.0, g(4e9, 4e8))),
                    nvlink_tx_bytes_per_s=round(max(0.0, g(1.5e11, 1e10))),
                    nvlink_rx_bytes_per_s=round(max(0.0, g(1.5e11, 1e10))),
                    nvlink_crc_flit_total=0.0,
                    retired_sbe_pages=0.0,
                    retired_dbe_pages=0.0,
                    retired_pending=0.0,
                    remapped_rows_correctable=0.0,
                    remapped_rows_uncorrectable=0.0,
                    row_remap_pending=0.0,
                    row_remap_failure=0.0,
                    polled_at=now,
                )
            )
        return out

    def close(self) -> None:
        pass
