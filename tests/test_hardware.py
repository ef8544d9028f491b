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
    # accelerators people buy now (dense peaks: NVIDIA's "with sparsity" figures halved)
    "b200": (7.7e12, 2250e12, 4500e12, 180e9),  # HGX B200 datasheet: BF16 4.5 PF*, FP8 9 PF*, 180GB | 7.7TB/s
    "gb200": (8.0e12, 2500e12, 5000e12, 186e9),  # GB200 NVL72 datasheet: BF16 5 PF*, FP8 10 PF*, 186GB | 8TB/s
    "h20": (4.0e12, 148e12, 296e12, 96e9),  # HGX H20: 96GB HBM3, 4.0TB/s, 148 / 296 TFLOPS dense
    "l40s": (864e9, 362.05e12, 733e12, 48e9),  # L40S datasheet: 362.05 | 733*, FP8 733 | 1,466*
    "mi300x": (5.3e12, 1307.4e12, 2614.9e12, 192e9),  # MI300X data sheet: 1,307.4 (2,614.9 sparse); FP8 2,614.9
    "mi325x": (6.0e12, 1307.4e12, 2614.9e12, 256e9),  # MI325X data sheet: 256 GB HBM3E, 6 TB/s
}

#: Interconnects: key -> (scale-up link name or None, per GPU per direction [B/s], generation, GPUs it spans,
#: PCIe generation or None, PCIe per direction [B/s]). Vendors print bidirectional totals: NVLink 4 900 GB/s,
#: NVLink 3 600 GB/s, NVLink 5 1.8 TB/s, the H100 PCIe bridge 600 GB/s, Infinity Fabric 7 x 128 GB/s = 896 GB/s,
#: PCIe Gen5 x16 128 GB/s, Gen4 x16 64 GB/s; per direction is half.
LINKS = {
    "h100-sxm": ("NVLink 4 (NVSwitch)", 450e9, 4, 8, 5, 64e9),
    "h100-pcie": ("NVLink 4 (bridge)", 300e9, 4, 2, 5, 64e9),
    "h200-sxm": ("NVLink 4 (NVSwitch)", 450e9, 4, 8, 5, 64e9),
    "a100-40gb": ("NVLink 3 (NVSwitch)", 300e9, 3, 8, 4, 32e9),
    "a100-80gb": ("NVLink 3 (NVSwitch)", 300e9, 3, 8, 4, 32e9),
    "b200": ("NVLink 5 (NVSwitch)", 900e9, 5, 8, 5, 64e9),
    "gb200": ("NVLink 5 (NVL72)", 900e9, 5, 72, None, None),
    "h20": ("NVLink 4 (NVSwitch)", 450e9, 4, 8, 5, 64e9),
    "l40s": (None, None, None, None, 4, 32e9),
    "mi300x": ("Infinity Fabric (xGMI)", 448e9, None, 8, 5, 64e9),
    "mi325x": ("Infinity Fabric (xGMI)", 448e9, None, 8, 5, 64e9),
}

#: Memory as software sees it (nvidia-smi MiB, rocm-smi bytes), from public logs; MI325X derived (see its Source).
USABLE = {
    "b200": 183_359 * MiB,
    "gb200": 189_471 * MiB,
    "h20": 97_871 * MiB,
    "l40s": 46_068 * MiB,
    "mi300x": 205_822_885_888,
    "mi325x": 274_542_362_624,
}


def test_presets():
    """The five first presets and the six accelerators people buy now ship as presets."""
    assert accelerator_names() == sorted(EXPECTED)
    assert len(EXPECTED) == 11


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
    """FlashMLA #75: the H100 SXM ridge point is 989.4e12 / 3.35e12 = 295.3 FLOP/byte, exact."""
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
        get_accelerator("tpu-v5e")


@pytest.mark.parametrize("key", sorted(LINKS))
def test_interconnect_values_match_their_sources(key):
    """NVLink / Infinity Fabric / PCIe: name, bandwidth per direction, generation and reach match the datasheets."""
    a = get_accelerator(key)
    name, bw, gen, max_gpus, pcie_gen, pcie_bw = LINKS[key]
    if name is None:
        assert a.scale_up is None
    else:
        assert a.scale_up.name == name and float(a.scale_up.bandwidth.value) == bw
        assert (a.scale_up.generation is None) if gen is None else a.scale_up.generation.value == gen
        assert a.scale_up.max_gpus.value == max_gpus
    if pcie_gen is None:
        assert a.pcie is None
    else:
        assert a.pcie.generation.value == pcie_gen and float(a.pcie.bandwidth.value) == pcie_bw
        assert a.pcie.max_gpus is None


@pytest.mark.parametrize("key", sorted(LINKS))
def test_link_values_are_sourced_with_kind(key):
    """Every link value carries its Source: bandwidths and generations from datasheets, latencies measured."""
    sources = get_accelerator(key).sources()
    links = {name: v for name, v in sources.items() if "." in name}
    assert links, "no interconnect facts"
    for name, value in links.items():
        kind = value.source.kind
        assert kind == ("measured" if name.endswith(".latency") else "datasheet"), (name, kind)
        assert value.source.citation and value.source.date


def test_link_latencies_are_the_collective_libraries_ring_step():
    """Latency of one ring step: NCCL's 0.6 us on NVLink and 1.0 us on PCIe; RCCL's 2.3 us on xGMI, 1.3 us on PCIe."""
    us = Fraction(1, 10**6)
    assert get_accelerator("h100-sxm").scale_up.latency.value == Fraction(6, 10) * us
    assert get_accelerator("b200").scale_up.latency.value == Fraction(6, 10) * us
    assert get_accelerator("l40s").pcie.latency.value == us
    assert get_accelerator("mi300x").scale_up.latency.value == Fraction(23, 10) * us
    assert get_accelerator("mi325x").pcie.latency.value == Fraction(13, 10) * us
    assert "tuning.cc" in get_accelerator("h100-sxm").scale_up.latency.source.citation


def test_nccl_ring_latency_brackets_a_published_small_message_all_reduce():
    """NCCL's model brackets a measured 8-GPU all-reduce of 8 B on H20 (all_reduce_perf: 12.49 us).

    deepseek-ai/DeepEP#303 (8x H20, NVLink, nccl-tests all_reduce_perf, 8 B out of place): 12.49 us. The ring
    term 2 (8 - 1) x 0.6 us = 8.4 us is below it; with NCCL's per-call base latency (6.6 us) it is above (15.0 us).
    """
    step = get_accelerator("h20").link(8).latency.value
    ring = 2 * (8 - 1) * step
    measured = Fraction(1249, 100) / 10**6
    assert ring == Fraction(84, 10) / 10**6
    assert ring < measured < ring + Fraction(66, 10) / 10**6


@pytest.mark.parametrize("key", sorted(USABLE))
def test_usable_memory_of_the_new_parts(key):
    """Memory as software sees it: nvidia-smi totals in MiB, rocm-smi bytes; MI325X = 256 GiB less 320 MiB."""
    a = get_accelerator(key)
    assert a.usable_memory == USABLE[key]
    assert a.memory_usable.source.kind == ("derived" if key == "mi325x" else "measured")


def test_mi325x_rule_is_the_mi300x_reservation():
    """The MI325X figure is derived: MI300X shows 192 GiB - 320 MiB, so 256 GiB - 320 MiB on MI325X."""
    assert 192 * GiB - get_accelerator("mi300x").usable_memory == 320 * MiB
    assert get_accelerator("mi325x").usable_memory == 256 * GiB - 320 * MiB


def test_dense_peaks_are_half_the_printed_sparse_figures():
    """NVIDIA prints 2:4 sparse figures with an asterisk: the dense BF16 and FP8 stored are exactly half."""
    assert get_accelerator("b200").peak("bf16") * 2 == 4_500 * 10**12
    assert get_accelerator("b200").peak("fp8") * 2 == 9_000 * 10**12
    assert get_accelerator("gb200").peak("fp8") * 2 == 10_000 * 10**12
    assert get_accelerator("l40s").peak("bf16") * 2 == 724_100 * 10**9  # printed 733* (rounded up by NVIDIA)
    assert get_accelerator("mi300x").peak("fp8") * 2 == 5_229_800 * 10**9


def test_link_for_a_group():
    """The group all-reduces over the scale-up fabric when it fits, else over PCIe; beyond both, refused by name."""
    assert get_accelerator("h100-sxm").link(8).name == "NVLink 4 (NVSwitch)"
    assert get_accelerator("h100-pcie").link(2).name == "NVLink 4 (bridge)"
    assert get_accelerator("h100-pcie").link(4).name == "PCIe Gen5 x16"
    assert get_accelerator("l40s").link(4).name == "PCIe Gen4 x16"
    assert get_accelerator("gb200").link(72).name == "NVLink 5 (NVL72)"
    with pytest.raises(InvalidValueError, match="tensor_parallel_size=16.*reaches 8 GPUs.*no sourced network"):
        get_accelerator("a100-80gb").link(16)  # two servers and no sourced NIC: refused
    assert get_accelerator("h100-sxm").link(16).name == "NVLink 4 (NVSwitch)"  # the link inside each node
    with pytest.raises(InvalidValueError, match="tensor_parallel_size=12.*whole nodes"):
        get_accelerator("h100-sxm").link(12)
    with pytest.raises(InvalidValueError, match="tensor_parallel_size=16.*one server of 8"):
        get_accelerator("l40s").link(16)
    assert get_accelerator("gb200").link(144).name == "NVLink 5 (NVL72)"  # two racks: NVL72 inside each
    with pytest.raises(InvalidValueError, match="tensor_parallel_size=100.*one node of 72 GPUs"):
        get_accelerator("gb200").link(100)
    with pytest.raises(InvalidValueError, match="tensor_parallel_size=1"):
        get_accelerator("h100-sxm").link(1)
    with pytest.raises(InvalidValueError, match="tensor_parallel_size"):
        get_accelerator("h100-sxm").link(2.0)


def test_measured_copy_keeps_the_links():
    """measured() swaps bandwidth and peak only; the interconnect facts are kept."""
    a = get_accelerator("h100-sxm")
    assert a.measured().scale_up is a.scale_up and a.measured().pcie is a.pcie


def test_network_links_are_sourced_facts():
    """DGX H100/H200/B200 and GB200 NVL72: one 400 Gb/s ConnectX-7 per GPU = 50e9 bytes/s per direction, NCCL's
    NET ring latency (2.7 us); parts without a sourced NIC have none. A node is the scale-up domain."""
    for key in ("h100-sxm", "h200-sxm", "b200", "gb200"):
        net = get_accelerator(key).network
        assert net is not None and net.name == "InfiniBand NDR (ConnectX-7)"
        assert net.bandwidth.value == 50_000_000_000 and net.bandwidth.unit == "bytes/s"
        assert net.latency.value == Fraction(27, 10**7) and "NET" in net.latency.source.citation
        assert "ConnectX-7" in net.bandwidth.source.citation and net.max_gpus is None
        assert "network.bandwidth" in get_accelerator(key).sources()
    for key in ("h100-pcie", "a100-80gb", "a100-40gb", "h20", "l40s", "mi300x", "mi325x"):
        assert get_accelerator(key).network is None
    assert [get_accelerator(k).node_gpus for k in ("h100-sxm", "gb200", "h100-pcie", "l40s")] == [8, 72, 8, 8]
    assert [get_accelerator("h100-sxm").nodes(g) for g in (1, 8, 9, 16, 64)] == [1, 1, 2, 2, 8]
    with pytest.raises(InvalidValueError, match="gpus"):
        get_accelerator("h100-sxm").nodes(0)
