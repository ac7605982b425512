"""Seeded, realistic fake GPUs for demos and tests: an H100 under training load, with noise."""

from __future__ import annotations

import random
from collections.abc import Collection

from trainguard.exporter.readings import DriverInfo, GPUDevice, GPUReading

TOTAL_MIB = 81559.0
MODEL = "NVIDIA H100 80GB HBM3"


def _uuid(i: int) -> str:
    return f"GPU-5e1f0000-0000-4000-8000-{i:012d}"


class SimulatedBackend:
    def __init__(self, gpus: int = 8, seed: int = 0) -> None:
        self.rng = random.Random(seed)
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
        out = []
        for i in range(self.gpus):
            if only is not None and i not in only:
                continue
            if self.rng.random() < 0.002:
                self.sbe[i] += 1  # the odd corrected error of healthy HBM
            used = min(TOTAL_MIB, max(0.0, self.base_used[i] + g(0, 150)))
            out.append(
                GPUReading(
                    index=i,
                    uuid=_uuid(i),
                    model=MODEL,
                    util=min(100.0, max(0.0, round(g(94, 3)))),
                    fb_used_mib=round(used),
                    fb_free_mib=round(TOTAL_MIB - used),
                    mem_copy_util=min(100.0, max(0.0, round(g(38, 4)))),
                    temp_c=round(g(64, 1.5)),
                    power_w=round(g(560, 25), 1),
                    sm_clock_mhz=1980.0,
                    throttle_reasons=0.0,
                    last_xid=0.0,
                    ecc_sbe_total=self.sbe[i],
                    ecc_dbe_total=self.dbe[i],
                    pcie_replay_total=self.replay[i],
                    remapped_rows_total=0.0,
                )
            )
        return out

    def close(self) -> None:
        pass
