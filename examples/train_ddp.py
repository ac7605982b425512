#!/usr/bin/env python3
"""A real torch.distributed trainer, meant to run under `trainguard launch`: DDP over gloo on CPU, a small
network learning a noisy sine wave, each rank on its own data, every step's gradients all-reduced by DDP,
reported through the trainguard SDK.

    # in every pod of the gang, RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set as for torchrun
    # (or, in a Kubeflow TrainJob with numProcPerNode 1, the PET_* variables its torch runtime sets)
    trainguard launch -- python examples/train_ddp.py --checkpoint-dir /shared/ckpt

What an in-place restart needs from a trainer, and what this one does:
- resume from Reporter.resume_from(): after an in-place restart, the checkpoint every rank has
  (TRAINGUARD_RESUME_FROM, set by the launcher); load this rank's shard of it and go on at the next step;
- a new rendezvous per generation: the store listens on MASTER_PORT + TRAINGUARD_GENERATION, so a
  restarted gang never meets a store of the generation before (a rank of it may still be dying);
- checkpoint into one directory per step, each rank its own file (`step-00001200/rank-0.pt`), and report
  the directory: every rank names the same checkpoint, the operator's choice of the newest one every rank
  has is a directory each rank can load its own shard from.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "operator"))

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from trainguard.sdk import Reporter
from trainguard.sdk.torch import reporting_oom

RENDEZVOUS_TIMEOUT = dt.timedelta(seconds=120)


def rendezvous(env: Mapping[str, str]) -> tuple[int, int, str, int]:
    """This process's rank and world size and the rendezvous address and port: torch.distributed's
    variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, as torchrun sets them for its workers), each
    else the one Kubeflow Trainer's torch runtime sets for torchrun (PET_NODE_RANK, PET_NNODES,
    PET_MASTER_ADDR, PET_MASTER_PORT): run without torchrun, one process per node, the node is the rank."""
    if "RANK" not in env and "PET_NODE_RANK" in env and env.get("PET_NPROC_PER_NODE", "1") != "1":
        raise SystemExit(
            f"PET_NPROC_PER_NODE={env['PET_NPROC_PER_NODE']}: this trainer is one process per node; "
            "set the TrainJob's spec.trainer.numProcPerNode to 1, or run it under torchrun"
        )

    def value(name: str, trainer: str, default: str) -> str:
        return env.get(name) or env.get(trainer) or default

    return (
        int(value("RANK", "PET_NODE_RANK", "0")),
        int(value("WORLD_SIZE", "PET_NNODES", "1")),
        value("MASTER_ADDR", "PET_MASTER_ADDR", "127.0.0.1"),
        int(value("MASTER_PORT", "PET_MASTER_PORT", "29500")),
    )


CONNECT_TRY = dt.timedelta(seconds=0.5)


def store(addr: str, port: int, rank: int, world: int) -> dist.TCPStore:
    """The generation's rendezvous store: rank 0 serves it, the others connect. A client retries on its
    own with a growing back-off (5 s late for a server that came up after 14 s, with torch 2.x), and
    after an in-place restart the healthy ranks wait for a replacement rank 0 that is still starting:
    so each try is short and the next follows at once, up to RENDEZVOUS_TIMEOUT."""
    if rank == 0:
        return dist.TCPStore(addr, port, world, True, timeout=RENDEZVOUS_TIMEOUT, wait_for_workers=False)
    deadline = time.monotonic() + RENDEZVOUS_TIMEOUT.total_seconds()
    while True:
        try:
            client = dist.TCPStore(addr, port, world, False, timeout=CONNECT_TRY)
        except (RuntimeError, TimeoutError):  # torch's DistNetworkError is a RuntimeError
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.1)
            continue
        client.set_timeout(RENDEZVOUS_TIMEOUT)
        return client


def shard(path: str | Path, rank: int) -> Path:
    return Path(path) / f"rank-{rank}.pt"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=100_000)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--step-delay", type=float, default=0.0, help="sleep per step, to make a short run last")
    p.add_argument("--checkpoint-dir", default="out/ddp-checkpoints", help="shared by the ranks")
    p.add_argument("--endpoint", help="default: TRAINGUARD_ENDPOINT, else the injected sidecar's socket")
    args = p.parse_args()

    rank, world, addr, master_port = rendezvous(os.environ)
    generation = int(os.environ.get("TRAINGUARD_GENERATION", "0"))
    port = master_port + generation
    print(
        f"rank {rank}/{world} generation {generation} pid {os.getpid()}: rendezvous at {addr}:{port}",
        flush=True,
    )
    dist.init_process_group("gloo", store=store(addr, port, rank, world), rank=rank, world_size=world,
                            timeout=RENDEZVOUS_TIMEOUT)  # fmt: skip
    torch.manual_seed(args.seed)  # the same initial weights on every rank
    model = torch.nn.Sequential(
        torch.nn.Linear(1, args.hidden), torch.nn.Tanh(), torch.nn.Linear(args.hidden, 1)
    )
    ddp = DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr)
    data = torch.Generator().manual_seed(args.seed * 1000 + rank)
    root = Path(args.checkpoint_dir)
    with Reporter(args.endpoint) as tg, reporting_oom(tg):
        start = 0
        if (resume := tg.resume_from()) is not None:
            start = int(resume["step"]) + 1
            saved = Path(str(resume.get("path") or root / f"step-{int(resume['step']):08d}"))
            loaded = shard(saved, rank).is_file()
            if loaded:
                with tg.restore(str(shard(saved, rank))):
                    state = torch.load(shard(saved, rank), weights_only=True)
                model.load_state_dict(state["model"])
                opt.load_state_dict(state["optimizer"])
            print(f"resuming after the checkpoint of step {resume['step']} ({saved}; "
                  f"{'weights loaded' if loaded else 'fresh weights'})", flush=True)  # fmt: skip
        loss = math.nan
        for step in range(start, args.steps):
            while tg.should_pause():
                time.sleep(0.2)  # the operator pinned a good checkpoint; a word restarts us from it
            t0 = time.monotonic()
            x = torch.rand(args.batch, 1, generator=data) * 2 - 1
            y = torch.sin(3 * x) + 0.05 * torch.randn(args.batch, 1, generator=data)
            opt.zero_grad()
            out = torch.nn.functional.mse_loss(ddp(x), y)
            out.backward()  # DDP all-reduces the gradients here
            opt.step()
            loss = out.item()
            if args.step_delay:
                time.sleep(args.step_delay)
            if step == start:
                print(f"generation {generation} rank {rank} first step {step}", flush=True)
            tg.log_step(step, loss=loss, tokens=args.batch, step_time_s=time.monotonic() - t0)
            if kind := tg.should_checkpoint(step):
                where = root / f"step-{step:08d}"
                where.mkdir(parents=True, exist_ok=True)
                torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step},
                           shard(where, rank))  # fmt: skip
                tg.checkpoint_saved(step, kind, str(where))
            if step % 500 == 0:
                print(f"rank {rank} step {step:6d}  loss {loss:.4f}", flush=True)
    dist.destroy_process_group()
    print(f"done: {args.steps} steps, final loss {loss:.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
