"""Prometheus remote write from a test: promtool's expanding notation (the unit-test inputs of
tests/render/alert_cases.py) turned into samples with real timestamps, and the protobuf WriteRequest that
Prometheus's remote-write receiver and Thanos Receive accept, encoded by hand (the wire format is four
small messages; no generated code or snappy library is needed for it)."""

from __future__ import annotations

import re
import struct
import urllib.request
from dataclasses import dataclass

_STEP = re.compile(r"(?<=[0-9.])[+-]")
"""The `+` or `-` of `a+bxn`: after a digit or a point (`1e-05` is an exponent, `-1` a sign)."""


def expand(values: str) -> list[float | None]:
    """promtool's expanding notation, one value per interval: `a`, `axn` (n+1 times a), `a+bxn` and
    `a-bxn` (n+1 values from a), `_` and `_xn` (no sample). `stale` is not supported (no case uses it)."""
    out: list[float | None] = []
    for term in values.split():
        if term == "_":
            out.append(None)
        elif term.startswith("_x"):
            out.extend([None] * int(term[2:]))
        elif term == "stale":
            raise ValueError("expand: `stale` is not supported")
        elif "x" in term:
            head, n = term.rsplit("x", 1)
            op = _STEP.search(head)
            start, step = (head, "0") if op is None else (head[: op.start()], head[op.start() :])
            out.extend(float(start) + i * float(step) for i in range(int(n) + 1))
        else:
            out.append(float(term))
    return out


_SERIES = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)\{(?P<labels>.*)\}$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_series(text: str) -> dict[str, str]:
    """`name{k="v",...}` (promtool's input_series) as a label set with __name__."""
    m = _SERIES.match(text)
    if m is None:
        raise ValueError(f"not a series selector: {text!r}")
    return {"__name__": m["name"], **dict(_LABEL.findall(m["labels"]))}


@dataclass(frozen=True)
class Sample:
    labels: tuple[tuple[str, str], ...]
    """Sorted by name, as remote write requires."""
    timestamp_ms: int
    value: float


def samples(series: str, values: str, origin_ms: int, interval_ms: int) -> list[Sample]:
    """One promtool input series as samples: the i-th value at origin + i * interval."""
    labels = tuple(sorted(parse_series(series).items()))
    return [
        Sample(labels, origin_ms + i * interval_ms, v) for i, v in enumerate(expand(values)) if v is not None
    ]


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # int64 timestamps before 1970 would be two's complement
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def write_request(batch: list[Sample]) -> bytes:
    """prometheus.WriteRequest{timeseries: [{labels, samples}]}, one TimeSeries per label set, its samples
    in time order."""
    by_series: dict[tuple[tuple[str, str], ...], list[Sample]] = {}
    for s in sorted(batch, key=lambda s: s.timestamp_ms):
        by_series.setdefault(s.labels, []).append(s)
    out = bytearray()
    for labels, group in by_series.items():
        ts = b"".join(_field(1, _field(1, k.encode()) + _field(2, v.encode())) for k, v in labels)
        for s in group:  # Sample{double value = 1; int64 timestamp = 2}
            ts += _field(2, b"\x09" + struct.pack("<d", s.value) + b"\x10" + _varint(s.timestamp_ms))
        out += _field(1, ts)
    return bytes(out)


def snappy_block(data: bytes) -> bytes:
    """Snappy's block format with literals only: valid snappy that any decoder reads, uncompressed."""
    out = bytearray(_varint(len(data)))
    for i in range(0, len(data), 65536):
        chunk = data[i : i + 65536]
        out += bytes([61 << 2]) + struct.pack("<H", len(chunk) - 1) + chunk  # literal, 2-byte length
    return bytes(out)


def post(url: str, batch: list[Sample], timeout: float = 10) -> None:
    """One remote-write request; raises on anything but a 2xx (urllib's HTTPError, or a connection error)."""
    req = urllib.request.Request(
        url,
        data=snappy_block(write_request(batch)),
        method="POST",
        headers={
            "Content-Encoding": "snappy",
            "Content-Type": "application/x-protobuf",
            "X-Prometheus-Remote-Write-Version": "0.1.0",
        },
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        resp.read()
