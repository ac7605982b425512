"""The P0 response: signals in (Alertmanager, sidecars' fast path, the operator's own watch), pure plans
out, records before actions, and an executor that carries a record out from where it stands.

Layering: `signals`, `plan` and `records` are pure; `receiver` (HTTP), `cluster` (Kubernetes and sidecar
calls) and `executor` are the edges. The controller wires them into the running operator.
"""
