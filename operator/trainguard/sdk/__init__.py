"""trainguard's training-side SDK: standard library only, and it never harms training.

    from trainguard.sdk import Reporter
    tg = Reporter()                      # TRAINGUARD_ENDPOINT, else the injected sidecar's socket
    for step in range(start, steps):
        ...
        tg.log_step(step, loss=loss, grad_norm=gn, tokens=batch_tokens, step_time_s=dt)
        if kind := tg.should_checkpoint(step):
            with tg.saving(step, kind, path):    # or save(...); tg.checkpoint_saved(..., seconds=took)
                save(kind)
        while tg.should_pause():
            time.sleep(5)

log_step does not block: reports go through a bounded queue (the oldest is dropped when it is full,
and counted: every report is sent, still queued or counted in `dropped`) to a background thread. A
missing, slow or restarted sidecar costs one warning; a value that is not a number costs its report.
A sidecar that refuses the SDK (401/403: its TCP port without --sdk-tcp) costs one warning naming the
fix; its refused reports are dropped and counted, not retried.

The first event is a hello (start time, pid, NVIDIA_VISIBLE_DEVICES, the newest step, the newest
checkpoint recorded per kind). It is sent again when the sidecar's control answer carries a new
`instance` id (a restarted sidecar lost that state) or when the full queue pushed it out. The last is
a bye, from close() or, for a script that never closes, at interpreter exit: a sidecar run as a
regular container (--exit-after-bye) stops once every trainer said it. resume_from() asks the sidecar itself
(briefly) when called before the background thread has: it is usually the first thing a script asks.
It answers {step, kind, path, ts}: for a trainer `trainguard launch` restarted on the operator's
word, the checkpoint in TRAINGUARD_RESUME_FROM (the newest every rank has); else the checkpoint the
operator pinned when the sidecar holds a pin (after a NaN loss, the newest saved before it; after a
gang restart, the pod's resume-from pointer), else the newest good one; a pin is not moved by this
process's own later saves.

trainguard.sdk.huggingface and .lightning also report the fp16 loss scale every step and, where CUDA
exists, the allocator's fragmentation every 50 steps (trainguard.sdk.torch_state reads both).
"""

from trainguard.sdk.reporter import Reporter

__all__ = ["Reporter"]
