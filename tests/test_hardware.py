"""Accelerator presets: datasheet values, dense peaks, measured values, every one with its Source."""

from __future__ import annotations

from fractions import Fraction

import pytest

from roofline import InvalidValueError, UnknownPresetError, accelerator_names, get_accelerator
from roofline.hardware import Source, Sourced
from roofline.units import GiB, MiB

EXPECTED = {
    # key: (bandwidth B/s, dense BF16 FLOP/s, dense FP8 or None, label bytes)
    "h100-sxm": (3.35e12, 989.4e12, 1978.9e12, 80e9),
    "h100-pcie": (2.0e12, 756e12, 1513e12, 80e9),
    "h200-sxm": (4.8e12, 989.4e12, 1978.9e12, 141e9),
    "a100-40gb": (1.555e12, 312e12, None, 40e9),
    "a100-80gb": (2.039e12, 312e12, None, 80e9),
}


def test_presets():
    """The five accelerators of the issue ship as presets."""
    assert accelerator_names() == sorted(EXPECTED)


@pytest.mark.parametrize("key", sorted(EXPECTED))
def test_datasheet_values_and_dense_peaks(key):
    """Bandwidth, dense (not 2:4 sparse) BF16 and FP8 peaks and labelled memory match the datasheets."""
    a = get_accelerator(key)
    bw, bf16, fp8, label = EXPECTED[key]
    assert float(a.bandwidth) == bw and float(a.peak_flops) == bf16
    assert float(a.memory_label.value) == label
    if fp8 is None:
        assert a.peak_fp8 is None
        with pytest.raises(InvalidValueError, match="fp8"):
            a.peak("fp8")
    else:
        assert float(a.peak("fp8")) == fp8


@pytest.mark.parametrize("key", sorted(EXPECTED))
def test_every_value_has_a_source(key):
    """Every stored value carries a Source with kind, citation and date (no reference, no constant)."""
    sources = get_accelerator(key).sources()
    assert {"memory_label", "memory_usable", "hbm_bandwidth", "peak_bf16"} <= set(sources)
    for value in sources.values():
        assert value.source.kind in ("datasheet", "measured", "derived")
        assert value.source.citation and value.source.date


def test_ridge_point_is_derived():
    """S1: the H100 SXM ridge point is 989.4e12 / 3.35e12 = 295.3 FLOP/byte, exact."""
    a = get_accelerator("h100")
    assert a.ridge_point == Fraction(989_400, 3_350)
    assert round(float(a.ridge_point), 1) == 295.3


def test_usable_memory_as_seen_by_software():
    """Usable memory is what software sees: 79.2 GiB for H100 80GB, 143,771 MiB for H200."""
    assert get_accelerator("h100-sxm").usable_memory == Fraction(792, 10) * GiB
    assert get_accelerator("h200-sxm").usable_memory == 143_771 * MiB


def test_measured_copy():
    """measured() swaps in achieved bandwidth and GEMM FLOP/s, with Sources of kind measured."""
    m = get_accelerator("h100-sxm").measured()
    assert m.bandwidth == 3_000_000_000_000 and m.peak_flops == 794_500_000_000_000
    assert m.hbm_bandwidth.source.kind == m.peak_bf16.source.kind == "measured"
    a40 = get_accelerator("a100-40gb").measured()
    assert a40.hbm_bandwidth.source.kind == "datasheet"  # no public measurement: datasheet kept, and says so


def test_bad_values():
    """Non-positive values and unknown source kinds are rejected naming the field."""
    src = Source("datasheet", "x", "2024")
    with pytest.raises(InvalidValueError, match="value=0"):
        Sourced(0, "bytes", src)
    with pytest.raises(InvalidValueError, match="kind"):
        Source("guess", "x", "2024")
    with pytest.raises(UnknownPresetError, match="h100-sxm"):
        get_accelerator("b200")
