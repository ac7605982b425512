"""The e2e remote writer (e2e/remote_write.py): promtool's expanding notation as samples, and the
WriteRequest's and snappy block's bytes. e2e/test_distributed_rules.py shows that Prometheus and Thanos
Receive accept them; this is the notation and the wire format, without a process."""

from __future__ import annotations

import struct

import pytest

from e2e.remote_write import Sample, expand, parse_series, samples, snappy_block, write_request
from tests.render.alert_cases import CASES


def test_expansion_is_promtools() -> None:
    assert expand("0x3 1x2") == [0, 0, 0, 0, 1, 1, 1], "axn is n+1 samples"
    assert expand("1+60x3") == [1, 61, 121, 181]
    assert expand("5-1x2") == [5, 4, 3]
    assert expand("-1x1") == [-1, -1], "a leading minus is a sign"
    assert expand("1e-05x1") == [1e-05, 1e-05], "an exponent's minus is not a step"
    assert expand("0 79 _ _x2 79") == [0, 79, None, None, None, 79]
    with pytest.raises(ValueError, match="stale"):
        expand("1 stale")


def test_every_case_input_of_the_catalogue_plays() -> None:
    """Every must-fire and must-not-fire input parses, so any case can be remote-written."""
    for name, cases in CASES.items():
        for case in cases:
            for s in case.input:
                if "stale" in s["values"].split():
                    continue
                assert parse_series(s["series"])["__name__"], name
                assert expand(s["values"]), f"{name}: {s}"


def test_samples_take_real_timestamps_and_skip_gaps() -> None:
    got = samples('up{job="a",instance="x"}', "1 _ 0", origin_ms=1_000, interval_ms=15_000)
    labels = (("__name__", "up"), ("instance", "x"), ("job", "a"))
    assert got == [Sample(labels, 1_000, 1.0), Sample(labels, 31_000, 0.0)]


def test_write_request_bytes() -> None:
    s = Sample((("__name__", "m"),), 5, 2.0)
    label = b"\x0a\x08__name__\x12\x01m"  # Label{name: "__name__", value: "m"}
    sample = b"\x09" + struct.pack("<d", 2.0) + b"\x10\x05"  # Sample{value: 2, timestamp: 5}
    series = b"\x0a" + bytes([len(label)]) + label + b"\x12" + bytes([len(sample)]) + sample
    assert write_request([s]) == b"\x0a" + bytes([len(series)]) + series


def test_snappy_block_is_literals_with_the_length_first() -> None:
    data = bytes(range(256)) * 300  # 76,800 bytes: two literals
    block = snappy_block(data)
    assert block[:3] == bytes([0x80 | (76_800 & 0x7F), 0x80 | ((76_800 >> 7) & 0x7F), 76_800 >> 14])
    assert block[3] == 61 << 2 and struct.unpack("<H", block[4:6])[0] == 65_535
    rest = block[6 + 65_536 :]
    assert rest[0] == 61 << 2 and struct.unpack("<H", rest[1:3])[0] == 76_800 - 65_536 - 1
    assert block[6 : 6 + 65_536] + rest[3:] == data
