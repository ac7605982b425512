#!/usr/bin/env python3
"""The SDK's cost inside a real training loop: transformers' Trainer on a tiny GPT-2 built from a
config (CPU, nothing downloaded), run with and without TrainguardCallback reporting to a real
`trainguard exporter` process over its unix socket, rounds interleaved so that drift hits both alike.
Prints the per-step overhead in milliseconds and as a share of the tiny model's step and of a
realistic step time, and writes the figures as JSON.

    python bench/sdk_overhead.py [--rounds 6] [--steps 200]

Checkpointing is off on both sides (the SDK's cadence is set beyond the run): a save costs the same
with and without trainguard, and would drown the difference. The trainguard side also times
COLLECTIVES_PER_STEP empty blocks a step through Reporter.collective, as a DDP run with that many
gradient buckets would (nothing to all-reduce on one CPU process): the histogram's cost is in the figure.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "operator")]

from tests.processes import free_port  # noqa: E402
from trainguard.sdk import Reporter  # noqa: E402

try:
    import torch
    import transformers

    from trainguard.sdk.huggingface import TrainguardCallback
except ImportError:  # the frameworks-test extra is not installed
    torch = transformers = None

COLLECTIVES_PER_STEP = 4
REALISTIC_STEP_S = (0.3, 1.0)
"""Step times of real pretraining on GPUs (a fraction of a second to seconds): where the target applies."""
VOCAB, SEQ, BATCH = 64, 16, 4


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=6, help="interleaved pairs of runs")
    p.add_argument("--steps", type=int, default=200, help="optimizer steps per run")
    p.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "sdk_overhead.json")
    args = p.parse_args()
    if torch is None:
        print(
            "needs the frameworks: pip install -e '.[frameworks-test]' (scripts/bootstrap.sh installs them)"
        )
        return 2

    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()

    class Tokens(torch.utils.data.Dataset):  # type: ignore[misc]
        def __len__(self) -> int:
            return 1 << 20

        def __getitem__(self, i: int) -> dict[str, Any]:
            ids = torch.randint(0, VOCAB, (SEQ,), generator=torch.Generator().manual_seed(i))
            return {"input_ids": ids, "labels": ids}

    class Collectives(transformers.TrainerCallback):  # type: ignore[misc]
        """Times COLLECTIVES_PER_STEP (empty) collectives a step into the SDK's histogram."""

        def __init__(self, tg: Reporter) -> None:
            self.tg = tg

        def on_step_end(self, *args: Any, **kwargs: Any) -> None:
            for _ in range(COLLECTIVES_PER_STEP):
                with self.tg.collective():
                    pass

    def run(out: Path, callbacks: list[Any]) -> float:
        torch.manual_seed(0)
        config = transformers.GPT2Config(vocab_size=VOCAB, n_positions=SEQ, n_embd=32, n_layer=2, n_head=2)
        targs = transformers.TrainingArguments(
            output_dir=str(out), per_device_train_batch_size=BATCH, max_steps=args.steps, report_to="none",
            disable_tqdm=True, save_strategy="no", logging_steps=50, learning_rate=1e-3,
        )  # fmt: skip
        trainer = transformers.Trainer(
            model=transformers.GPT2LMHeadModel(config),
            args=targs,
            train_dataset=Tokens(),
            callbacks=callbacks,
        )
        t0 = time.perf_counter()
        trainer.train()
        return (time.perf_counter() - t0) / args.steps

    work = Path(tempfile.mkdtemp(prefix="trainguard-sdk-bench-"))
    sock, port = work / "sdk.sock", free_port()
    exporter = subprocess.Popen(
        [sys.executable, "-m", "trainguard.cli", "exporter", "--backend", "simulated", "--gpus", "1",
         "--listen", f"127.0.0.1:{port}", "--sdk-socket", str(sock), "--no-host"],
        stdout=(work / "exporter.log").open("wb"), stderr=subprocess.STDOUT, cwd=ROOT,
        env=os.environ | {"PYTHONPATH": str(ROOT / "operator")},
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        run(work / "warmup", [])  # imports, allocator, first-touch: not part of either side
        plain: list[float] = []
        guarded: list[float] = []
        delivered: list[tuple[int, int]] = []  # (reports the exporter took, reports dropped) per run
        for i in range(args.rounds):
            plain.append(run(work / f"plain-{i}", []))
            tg = Reporter(f"unix://{sock}", incremental_every=10**9, full_every=10**9)
            guarded.append(run(work / f"tg-{i}", [TrainguardCallback(tg), Collectives(tg)]))
            tg.close()
            delivered.append((tg.sent, tg.dropped))
            print(f"round {i + 1}/{args.rounds}: plain {plain[-1] * 1e3:.2f} ms/step, with trainguard "
                  f"{guarded[-1] * 1e3:.2f} ms/step", flush=True)  # fmt: skip
    finally:
        exporter.terminate()
        exporter.wait(timeout=10)
    base, with_tg = statistics.median(plain), statistics.median(guarded)
    overhead = with_tg - base
    summary = {
        "conditions": {
            "model": "GPT-2, 2 layers, 32 wide, vocab 64, sequence 16, batch 4, CPU, 1 thread",
            "collectives_timed_per_step": COLLECTIVES_PER_STEP,
            "steps_per_run": args.steps,
            "rounds": args.rounds,
            "cpus": os.cpu_count(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "python": platform.python_version(),
            "reports_sent_dropped_per_run": delivered,
        },
        "plain_ms_per_step": base * 1e3,
        "trainguard_ms_per_step": with_tg * 1e3,
        "overhead_ms_per_step": overhead * 1e3,
        "overhead_share_of_tiny_step": overhead / base,
        "overhead_share_at_realistic_step": {f"{s:g}s": overhead / s for s in REALISTIC_STEP_S},
    }
    print(f"\nmedian per step: plain {base * 1e3:.2f} ms, with trainguard {with_tg * 1e3:.2f} ms, "
          f"overhead {overhead * 1e3:.3f} ms ({overhead / base:.1%} of this tiny model's step)")  # fmt: skip
    for s in REALISTIC_STEP_S:
        print(f"at a realistic {s:g} s step: {overhead / s:.3%} (target: under 1%)")
    print(f"conditions: {json.dumps(summary['conditions'])}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
