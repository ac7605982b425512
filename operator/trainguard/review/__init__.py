"""`trainguard review`: the two-weekly rule review, read from Prometheus's own `ALERTS` history.

Pure analysis (history.py: episodes from raw samples; findings.py: never fired, co-firing, flapping,
by receiver; routes.py: Alertmanager's route walk; markdown.py: the text) and two edges: fetch.py
(prometheus-api-client) and command.py (the CLI's flags, files and errors).
"""
