"""A clock a test sets, for code that takes its clock (and its sleep) as a callable."""

from __future__ import annotations

T0 = 1_700_000_000.0
"""2023-11-14T22:13:20Z: where a test's time starts unless it says otherwise."""


class Clock:
    """Calling it says the time; sleep() moves it on without waiting, as does setting `now`."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
