"""`trainguard launch -- <command>`: runs the trainer as a child and restarts it in place, as a new
generation, when the operator says so through the pod's sidecar, so that a NaN, an OOM or a stall costs
a process restart rather than new pods. `word.py` reads the operator's word and builds the trainer's
environment, `decide.py` decides what to do (pure), `supervisor.py` does it (processes, signals, the
sidecar), `command.py` is the verb. Standard library and the SDK's transport only: it runs in the
training image, where the bare `pip install trainguard` brings nothing else.
"""
