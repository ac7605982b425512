#!/usr/bin/env python3
"""A real, tiny trainer that reports through the trainguard SDK: a two-layer network learning a
noisy sine wave with minibatch SGD, in pure Python (no numpy or torch needed).

What a data-parallel job reports, with a world of one: each step's "all-reduce" (a copy of a
parameter-sized vector after the time a fast fabric takes, about 1 ms) is timed through
Reporter.collective; each checkpoint report carries its size and its filesystem's usage (measured by
the SDK); a resume loads the checkpoint's weights through Reporter.restore.

    trainguard exporter --backend simulated --gpus 8 --enable-fault-injection --sdk-tcp --listen 127.0.0.1:9400 &
    TRAINGUARD_ENDPOINT=http://127.0.0.1:9400 python examples/train_tiny.py --steps 2000
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "operator"))

from trainguard.sdk import Reporter


class TinyNet:
    def __init__(self, hidden: int, rng: random.Random) -> None:
        self.w1 = [rng.gauss(0, 1) for _ in range(hidden)]
        self.b1 = [0.0] * hidden
        self.w2 = [rng.gauss(0, 1 / math.sqrt(hidden)) for _ in range(hidden)]
        self.b2 = 0.0

    def step(
        self, batch: list[tuple[float, float]], lr: float, clip: float | None = None
    ) -> tuple[float, float]:
        """One SGD step, the gradient clipped to norm `clip` when given; returns (loss, unclipped norm)."""
        n, h = len(batch), len(self.w1)
        g1, gb1, g2, gb2, loss = [0.0] * h, [0.0] * h, [0.0] * h, 0.0, 0.0
        for x, y in batch:
            z = [self.w1[j] * x + self.b1[j] for j in range(h)]
            a = [math.tanh(v) for v in z]
            out = sum(self.w2[j] * a[j] for j in range(h)) + self.b2
            err = out - y
            loss += err * err / n
            d = 2 * err / n
            gb2 += d
            for j in range(h):
                g2[j] += d * a[j]
                dz = d * self.w2[j] * (1 - a[j] * a[j])
                g1[j] += dz * x
                gb1[j] += dz
        norm = math.sqrt(sum(v * v for v in g1 + gb1 + g2) + gb2 * gb2)
        if clip is not None and norm > clip:
            lr *= clip / norm
        for j in range(h):
            self.w1[j] -= lr * g1[j]
            self.b1[j] -= lr * gb1[j]
            self.w2[j] -= lr * g2[j]
        self.b2 -= lr * gb2
        return loss, norm

    def state(self) -> dict[str, object]:
        return {"w1": self.w1, "b1": self.b1, "w2": self.w2, "b2": self.b2}

    def load(self, state: dict[str, object]) -> bool:
        """Take the weights of a checkpoint of the same shape; False (nothing changed) otherwise."""
        h = len(self.w1)
        vectors = [state.get(k) for k in ("w1", "b1", "w2")]
        b2 = state.get("b2")
        if not isinstance(b2, int | float) or not all(isinstance(v, list) and len(v) == h for v in vectors):
            return False
        self.w1, self.b1, self.w2 = ([float(x) for x in v] for v in vectors if isinstance(v, list))
        self.b2 = float(b2)
        return True


ALL_REDUCE_S = 0.001
"""The simulated all-reduce's network time: a few MB of gradients over a fast fabric."""


def all_reduce(values: list[float]) -> list[float]:
    """Values averaged over a world of one: a copy, after the time the network would take."""
    time.sleep(ALL_REDUCE_S)
    return list(values)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--hidden", type=int, default=16)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--step-delay", type=float, default=0.0, help="sleep per step, to make a short run last")
    p.add_argument("--checkpoint-dir", default="out/checkpoints")
    p.add_argument(
        "--endpoint",
        help="default: TRAINGUARD_ENDPOINT, else the injected sidecar's unix:///var/run/trainguard/sdk.sock",
    )
    args = p.parse_args()

    rng = random.Random(args.seed)
    net = TinyNet(args.hidden, rng)
    ckpt_dir = Path(args.checkpoint_dir)
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    with Reporter(args.endpoint) as tg:
        start = 0
        if (resume := tg.resume_from()) is not None:
            start = int(resume["step"]) + 1
            saved = resume.get("path")
            loaded = False
            if isinstance(saved, str) and Path(saved).is_file():
                try:
                    with tg.restore(saved):  # the sidecar shows restoring, and the read throughput
                        loaded = net.load(json.loads(Path(saved).read_text()))
                except (OSError, ValueError) as exc:
                    print(f"could not load {saved}: {exc}; starting from fresh weights", flush=True)
            print(f"resuming after the checkpoint of step {resume['step']} ({saved}; "
                  f"{'weights loaded' if loaded else 'fresh weights'})", flush=True)  # fmt: skip
        clip: float | None = None
        seen: set[str] = set()
        for step in range(start, args.steps):
            for advice in tg.advisories():  # the operator's training advice (monitor opted in)
                name = str(advice.get("advice", advice.get("kind", "")))
                if name and name not in seen:
                    seen.add(name)
                    if name == "clip_gradients":
                        clip = 1.0
                    print(f"advice at step {step}: {name} ({json.dumps(advice, sort_keys=True)})", flush=True)
            while tg.should_pause():
                time.sleep(1)  # the operator pinned a good checkpoint and will restart the job
            t0 = time.monotonic()
            batch = [
                (x, math.sin(3 * x) + rng.gauss(0, 0.05))
                for x in (rng.uniform(-1, 1) for _ in range(args.batch))
            ]
            load = time.monotonic() - t0
            loss, grad_norm = net.step(batch, args.lr, clip)
            with tg.collective("all_reduce") as comm:
                all_reduce(net.w1 + net.b1 + net.w2)
            if args.step_delay:
                time.sleep(args.step_delay)
            tg.log_step(step, loss=loss, grad_norm=grad_norm, tokens=args.batch, dataloader_wait_s=load,
                        allreduce_s=comm.seconds, step_time_s=time.monotonic() - t0)  # fmt: skip
            if kind := tg.should_checkpoint(step):
                path = ckpt_dir / f"{kind}-{step:08d}.json"
                path.write_text(json.dumps({"step": step, **net.state()}))
                tg.checkpoint_saved(step, kind, str(path))
            if step % 200 == 0:
                print(f"step {step:6d}  loss {loss:.4f}  grad_norm {grad_norm:.4f}", flush=True)
    print(
        f"done: {args.steps} steps, final loss {loss:.4f}; sidecar got {tg.sent} reports, dropped {tg.dropped}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
