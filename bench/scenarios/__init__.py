"""Synthetic metric targets and the real Prometheus and Alertmanager processes the benchmarks feed."""
