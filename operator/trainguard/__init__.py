"""trainguard: monitoring, alerting and automatic P0 response for large-model training on Kubernetes."""

__version__ = "0.1.0"
