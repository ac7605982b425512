"""The seam between the NVML backend and real pynvml. No GPU is needed: the installed pynvml module is
imported (it loads libnvidia-ml only in nvmlInit) and compared with the fake the backend tests use, so
the fake cannot drift into an API the real library does not have."""

from __future__ import annotations

import ctypes
import inspect
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.exporter import fake_nvml
from trainguard.exporter import nvml as backend
from trainguard.exporter.nvml import NVLINK_BYTE_FIELDS, VALUE_MEMBERS, field_value

pynvml: ModuleType = pytest.importorskip("pynvml")

FAKE = fake_nvml.make([fake_nvml.healthy_gpu(0)])
FAKE_NAMES = sorted(n for n in vars(FAKE) if n.startswith(("nvml", "NVML")))
OPTIONAL = {"NVML_TEMPERATURE_MEM"}
"""Read with getattr and a fallback: not in pynvml so far."""


def arity(fn: Any) -> tuple[int, int]:
    """(required, all) positional parameters."""
    params = inspect.signature(fn).parameters.values()
    return sum(p.default is inspect.Parameter.empty for p in params), len(params)


def test_every_function_of_the_fake_is_pynvmls_with_the_same_arity() -> None:
    """The fake takes the arguments pynvml requires, and no more than pynvml accepts."""
    functions = [n for n in FAKE_NAMES if n.startswith("nvml") and callable(getattr(FAKE, n))]
    assert "nvmlDeviceGetFieldValues" in functions and "nvmlDeviceGetRemappedRows" in functions
    for name in functions:
        assert hasattr(pynvml, name), f"pynvml has no {name}"
        required, accepted = arity(getattr(pynvml, name))
        assert required <= arity(getattr(FAKE, name))[1] <= accepted, name


def test_every_constant_of_the_fake_has_pynvmls_value() -> None:
    constants = [n for n in FAKE_NAMES if not callable(getattr(FAKE, n))]
    assert len(constants) > 20
    for name in constants:
        assert getattr(FAKE, name) == getattr(pynvml, name), name


def test_every_error_of_the_fake_is_a_pynvml_error() -> None:
    errors = [n for n in vars(FAKE) if n.startswith("NVMLError_")]
    assert "NVMLError_NotSupported" in errors
    for name in errors:
        assert issubclass(getattr(pynvml, name), pynvml.NVMLError), name
    # pynvml raises the subclass for a return code: what the backend catches is what it gets
    assert isinstance(pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED), pynvml.NVMLError_NotSupported)


def test_the_backend_calls_only_what_pynvml_has() -> None:
    source = Path(backend.__file__).read_text()
    used = set(re.findall(r"\b(?:n|self\.nvml)\.((?:nvml|NVML)\w*)", source))
    used |= {name for pair in NVLINK_BYTE_FIELDS for name in pair[:2]}
    assert {"nvmlDeviceGetFieldValues", "nvmlDeviceGetNvLinkErrorCounter", "NVML_FI_DEV_MEMORY_TEMP"} <= used
    assert not {u for u in used if not hasattr(pynvml, u)} - OPTIONAL
    assert not {u for u in used if not hasattr(FAKE, u)} - OPTIONAL, "the fake lacks what the backend calls"


def layout(struct: type[ctypes.Structure] | type[ctypes.Union]) -> list[tuple[str, int, int]]:
    return [(name, getattr(struct, name).offset, getattr(struct, name).size) for name, *_ in struct._fields_]


def test_field_value_structs_have_pynvmls_layout() -> None:
    assert layout(fake_nvml.c_nvmlFieldValue_t) == layout(pynvml.c_nvmlFieldValue_t)
    assert layout(fake_nvml.c_nvmlValue_t) == layout(pynvml.c_nvmlValue_t)
    assert ctypes.sizeof(fake_nvml.c_nvmlFieldValue_t) == ctypes.sizeof(pynvml.c_nvmlFieldValue_t)


def test_value_members_follow_pynvmls_value_types() -> None:
    types = {
        n: getattr(pynvml, n)
        for n in dir(pynvml)
        if n.startswith("NVML_VALUE_TYPE_") and n != "NVML_VALUE_TYPE_COUNT"
    }
    assert sorted(types.values()) == list(range(len(VALUE_MEMBERS)))
    assert [name for name, *_ in pynvml.c_nvmlValue_t._fields_] == list(VALUE_MEMBERS)


def real_field(value_type: int, member: str, value: float, ret: int = 0) -> Any:
    fv = pynvml.c_nvmlFieldValue_t()
    fv.fieldId, fv.valueType, fv.nvmlReturn = pynvml.NVML_FI_DEV_MEMORY_TEMP, value_type, ret
    setattr(fv.value, member, value)
    return fv


def test_field_value_reads_a_real_pynvml_struct() -> None:
    assert field_value(real_field(pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, "uiVal", 84)) == 84
    assert field_value(real_field(pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, "ullVal", 2**40)) == 2**40
    assert field_value(real_field(pynvml.NVML_VALUE_TYPE_DOUBLE, "dVal", 1.5)) == 1.5
    unsupported = real_field(pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, "uiVal", 0, pynvml.NVML_ERROR_NOT_SUPPORTED)
    assert field_value(unsupported) is None, "an error per field is an absent value, not 0"


def test_the_fakes_shapes_are_pynvmls() -> None:
    """What pynvml's wrappers return: plain ints, a 4-tuple of ints, a list of page addresses, an array
    of c_nvmlFieldValue_t (pynvml.nvmlDeviceGetRemappedRows returns (corr, unc, pending, failure))."""
    v100 = fake_nvml.make([fake_nvml.volta_gpu(0) | {"retired": {"sbe": [0x1000], "dbe": []}}])
    FAKE.nvmlInit()
    v100.nvmlInit()
    h, hv = FAKE.nvmlDeviceGetHandleByIndex(0), v100.nvmlDeviceGetHandleByIndex(0)
    rows = FAKE.nvmlDeviceGetRemappedRows(h)
    assert isinstance(rows, tuple) and len(rows) == 4 and all(isinstance(x, int) for x in rows)
    assert inspect.getsource(pynvml.nvmlDeviceGetRemappedRows).count("c_uint()") == 4
    assert v100.nvmlDeviceGetRetiredPages(
        hv, pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
    ) == [0x1000]
    with pytest.raises(fake_nvml.NVMLError_NotSupported):  # an H100 remaps rows instead
        FAKE.nvmlDeviceGetRetiredPagesPendingStatus(h)
    values = FAKE.nvmlDeviceGetFieldValues(
        h, [pynvml.NVML_FI_DEV_MEMORY_TEMP, (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 40)]
    )
    assert isinstance(values[0], fake_nvml.c_nvmlFieldValue_t)
    assert (values[0].nvmlReturn, values[0].value.uiVal) == (pynvml.NVML_SUCCESS, 71)
    assert values[1].nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED, (
        "link 40 does not exist: an error in the struct"
    )
    with pytest.raises(fake_nvml.NVMLError_InvalidArgument):
        FAKE.nvmlDeviceGetNvLinkState(h, 18)  # an H100 has links 0-17
