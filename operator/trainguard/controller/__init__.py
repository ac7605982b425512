"""The operator: kopf handlers that reconcile monitors and policies, and the admission webhook.

Decisions live in `trainguard.render` and in pure functions here (status); this package only reads
and writes the Kubernetes API.
"""
