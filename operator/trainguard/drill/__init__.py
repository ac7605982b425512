"""`trainguard drill`: fault scenarios played against a live installation, timed from fault to alert,
notification, action and resumed training (scenarios.py decides, run.py acts, command.py is the CLI)."""

SCENARIO_NAMES = (
    "oom",
    "nan",
    "node-down",
    "net-jitter",
    "throughput-drop",
    "stall",
    "multi-node",
    "partition",
    "slow-gpu",
)
"""The scenarios' names, here so that building the CLI's parser imports nothing heavy (a test pins them
to scenarios.SCENARIOS)."""
