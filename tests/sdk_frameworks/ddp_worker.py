"""One rank of a 2-rank data-parallel run on CPU (gloo), started by torchrun from
test_torch_distributed.py (with the repository on PYTHONPATH): each rank reports to its own pod's
sidecar (TG_ENDPOINTS, by RANK), with the time its all-reduces took, per step and each one.
TG_SLOW_RANK sleeps TG_SLOW_S in its compute each step: a straggler. TG_DDP=1 trains through
DistributedDataParallel, its gradient all-reduces timed by trainguard's comm hook, instead of
all-reducing each gradient by hand under a CollectiveTimer."""

from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist

from tests.sdk_frameworks.tiny import TinyLM, Tokens
from trainguard.sdk import Reporter
from trainguard.sdk.torch import CollectiveTimer, timed_comm_hook


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    tg = Reporter(os.environ["TG_ENDPOINTS"].split(",")[rank], flush_interval_s=0.05)
    slow = int(os.environ.get("TG_SLOW_RANK", "-1")) == rank
    steps = int(os.environ.get("TG_STEPS", "30"))
    ddp = os.environ.get("TG_DDP") == "1"
    lm = TinyLM()
    model: torch.nn.Module = lm
    if ddp:
        model = torch.nn.parallel.DistributedDataParallel(lm)
        model.register_comm_hook(state=None, hook=timed_comm_hook(tg))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = Tokens()
    comm = CollectiveTimer(tg)
    for step in range(1, steps + 1):
        t0 = time.perf_counter()
        ids = torch.stack([data[step * world + rank + i]["input_ids"] for i in range(4)])
        if slow:
            time.sleep(float(os.environ.get("TG_SLOW_S", "0.05")))
        loss = model(ids)
        loss.backward()  # under DDP, the gradients are all-reduced here, in its comm hook
        if not ddp:
            for p in model.parameters():
                with comm:
                    dist.all_reduce(p.grad)
                p.grad /= world
        opt.step()
        opt.zero_grad()
        tg.log_step(step, loss=float(loss), tokens=ids.numel(), allreduce_s=comm.take(),
                    step_time_s=time.perf_counter() - t0)  # fmt: skip
    tg.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
