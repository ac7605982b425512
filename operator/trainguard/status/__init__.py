"""`trainguard status`: each monitored job's health, alerts, throughput, checkpoint, last remediation and
training time lost, in one screen. `model` and `render` are pure; `fetch` reads the cluster, Prometheus
and Alertmanager; `command` is the verb."""
