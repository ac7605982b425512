"""The HTTP edges to the monitoring stack: Alertmanager's API v2 (`alertmanager`) and Prometheus's
query API (`prometheus`). Like `kube/` for Kubernetes, the one place each is spoken to."""
