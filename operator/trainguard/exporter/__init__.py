"""The exporter sidecar: GPU (NVML or simulated), host and training metrics of the metric contract,
served from a snapshot rendered on the polling thread, plus the fast path for P0 signals."""
