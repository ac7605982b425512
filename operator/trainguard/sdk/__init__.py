"""trainguard's training-side SDK: standard library only, and it never harms training.

    from trainguard.sdk import Reporter
    tg = Reporter()                      # finds the sidecar from TRAINGUARD_ENDPOINT
    for step in range(start, steps):
        ...
        tg.log_step(step, loss=loss, grad_norm=gn, tokens=batch_tokens, step_time_s=dt)
        if kind := tg.should_checkpoint(step):
            save(kind); tg.checkpoint_saved(step, kind, path)
        while tg.should_pause():
            time.sleep(5)

log_step does not block: reports go through a bounded queue (the oldest is dropped when it is full,
and counted) to a background thread. A missing, slow or restarted sidecar costs one warning.
"""

from trainguard.sdk.reporter import Reporter

__all__ = ["Reporter"]
