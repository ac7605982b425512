"""trainguard: monitoring, alerting and automatic P0 response for large-model training on Kubernetes."""

__version__ = "0.1.0"

IMAGE = f"ghcr.io/trainguard/trainguard:{__version__}"
"""The image this version is published as (the top-level Dockerfile): the operator and the exporter
sidecar it injects, unless --sidecar-image or a monitor's spec.exporter.image names another."""
