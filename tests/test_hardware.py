"""The hardware catalogue loads, converts units once, and rejects bad entries clearly."""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from labkit import hardware as hw
from labkit.errors import LabkitError

GPUS = ["V100-32GB", "A100-40GB", "A100-80GB", "H100-SXM", "H100-HBM2e-96GB", "H200", "RTX-4090", "B200", "GB200",
        "MI300X", "L40S"]
TIERS = ["DDR4-3200", "DDR5-4800", "NVMe-PCIe4", "NVMe-PCIe5", "HDD-7200rpm"]
LINKS = ["pcie3-x16", "pcie4-x16", "pcie5-x16", "nvlink2", "nvlink3", "nvlink4", "ib-hdr", "ib-ndr", "roce-400",
         "ethernet-100", "omnipath-100", "nvlink5", "infinity-fabric-mi300x"]

MINIMAL = """
[[link]]
name = "pcie4-x16"
kind = "pcie"
bandwidth_gbps = 32
latency_us = 1.0
source = "PCI-SIG PCIe 4.0 (2017)"

[[gpu]]
name = "MyGPU"
aliases = ["mine"]
memory_gb = 16
memory_type = "GDDR6"
memory_bandwidth_gbps = 500
peak_tflops_bf16 = 100
peak_tflops_fp32 = 20
nvlink = "none"
pcie = "pcie4-x16"
tdp_w = 250
price_usd = 1000
price_date = "2024"
price_source = "estimate"
source = "my datasheet (2024)"

[[memory]]
name = "DDR5-4800"
kind = "dram"
capacity_gb = 256
read_gbps = 300
write_gbps = 300
latency_ns = 100
price_usd_per_gb = 4
price_date = "2024"
price_source = "estimate"
power_w = 40
source = "JEDEC JESD79-5 (2020)"

[[storage]]
name = "nvme"
kind = "ssd"
capacity_gb = 2000
read_gbps = 7
write_gbps = 6
latency_us = 80
price_usd_per_gb = 0.08
price_date = "2024"
price_source = "estimate"
power_w = 7
endurance_tbw = 1200
source = "a data sheet (2022)"
"""


@pytest.fixture(scope="module")
def cat() -> hw.Catalogue:
    return hw.load_catalogue()


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "hardware.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_every_required_entry_loads(cat: hw.Catalogue) -> None:
    assert cat.gpu_names() == GPUS
    assert set(TIERS) <= set(cat.tier_names())  # other drives may be added beside these
    assert cat.link_names() == LINKS
    assert cat.tier_names("dram") == ["DDR4-3200", "DDR5-4800"]
    assert {"NVMe-PCIe4", "NVMe-PCIe5"} <= set(cat.tier_names("ssd"))
    assert cat.tier_names("hdd") == ["HDD-7200rpm"]


def test_every_entry_has_a_source(cat: hw.Catalogue) -> None:
    for item in (*cat.gpus, *cat.tiers, *cat.links):
        assert item.source.strip(), item.name


def test_default_catalogue_is_cached() -> None:
    assert hw.load_catalogue() is hw.load_catalogue()


def test_units_are_converted_on_load(cat: hw.Catalogue) -> None:
    assert cat.gpu("A100-80GB").memory_bytes == 80 * 2**30  # true capacity: "80 GB" is 80 GiB
    assert cat.gpu("A100-80GB").memory_nominal_bytes == 80e9  # the marketed figure, as ZeRO's tables read it
    assert cat.gpu("A100-80GB").nvlink_domain_gpus == 8 and cat.gpu("RTX-4090").nvlink_domain_gpus == 1
    assert cat.gpu("H200").memory_bytes == 143771 * 2**20 and cat.gpu("H200").memory_nominal_bytes == 141e9
    assert cat.gpu("A100-40GB").memory_bandwidth == pytest.approx(1.555e12)
    assert cat.gpu("H100-SXM").memory_bandwidth == pytest.approx(3.35e12)
    assert cat.gpu("H100-SXM").peak_flops["bf16"] == pytest.approx(989.4e12)
    assert cat.gpu("V100-32GB").peak_flops["bf16"] == pytest.approx(125e12)
    assert cat.gpu("H100-SXM").tdp_watts == 700
    assert cat.link("ib-hdr").bandwidth == pytest.approx(25e9)
    assert cat.link("nvlink3").bandwidth == pytest.approx(300e9)  # 600 GB/s is both directions
    assert cat.link("pcie4-x16").latency_s == pytest.approx(1e-6)
    assert cat.tier("DDR4-3200").latency_s == pytest.approx(90e-9)
    assert cat.tier("HDD-7200rpm").read_bandwidth == pytest.approx(0.25e9)
    assert cat.tier("NVMe-PCIe4").endurance_bytes == 1200 * 10**12
    assert cat.tier("HDD-7200rpm").endurance_bytes is None
    assert isinstance(cat.gpu("H200").memory_bytes, int)


def test_gpu_links_follow_the_datasheets(cat: hw.Catalogue) -> None:
    assert cat.gpu("RTX-4090").nvlink is None
    assert cat.gpu("RTX-4090").cloud_usd_per_hour is None
    expected = {
        "V100-32GB": ("nvlink2", "pcie3-x16"),
        "A100-40GB": ("nvlink3", "pcie4-x16"),
        "A100-80GB": ("nvlink3", "pcie4-x16"),
        "H100-SXM": ("nvlink4", "pcie5-x16"),
        "H200": ("nvlink4", "pcie5-x16"),
        "RTX-4090": (None, "pcie4-x16"),
    }
    for name, (nvlink, pcie) in expected.items():
        assert (cat.gpu(name).nvlink, cat.gpu(name).pcie) == (nvlink, pcie)


@pytest.mark.parametrize(
    ("query", "name"),
    [
        ("a100-80gb", "A100-80GB"),
        ("A100", "A100-80GB"),
        ("h100", "H100-SXM"),
        ("RTX 4090", "RTX-4090"),
        ("  rtx4090 ", "RTX-4090"),
        ("V100_SXM2", "V100-32GB"),
    ],
)
def test_gpu_lookup_ignores_case_and_uses_aliases(query: str, name: str) -> None:
    assert hw.gpu(query).name == name


def test_tier_and_link_lookup(cat: hw.Catalogue) -> None:
    assert hw.tier("nvme").name == "NVMe-PCIe4"
    assert hw.tier("HDD").kind == "hdd"
    assert hw.tier("ddr5").kind == "dram"
    assert hw.link("NVLINK4") is cat.link("nvlink4")
    assert hw.link("ndr").name == "ib-ndr"


def test_unknown_gpu_names_the_field_and_the_choices() -> None:
    with pytest.raises(LabkitError) as info:
        hw.gpu("A200")
    message = str(info.value)
    assert message.startswith("gpu must be one of ")
    assert "'A200'" in message
    for name in GPUS:
        assert name in message
    assert "\n" not in message


@pytest.mark.parametrize(("lookup", "field"), [(hw.tier, "tier"), (hw.link, "link")])
def test_unknown_tier_or_link(lookup, field: str) -> None:
    with pytest.raises(LabkitError, match=f"^{field} must be one of "):
        lookup("floppy")


def test_minimal_user_catalogue_loads(tmp_path: Path) -> None:
    cat = hw.load_catalogue(write(tmp_path, MINIMAL))
    mine = cat.gpu("MINE")
    assert mine.memory_bytes == 16e9 and mine.nvlink is None
    assert mine.peak_flops == {"bf16": 100e12, "fp32": 20e12}
    assert cat.tier("nvme").capacity_bytes == 2000e9


@pytest.mark.parametrize(
    ("old", "new", "words"),
    [
        ("bandwidth_gbps = 32", "bandwidth_gbps = -32", ["link 'pcie4-x16'", "bandwidth_gbps", "positive"]),
        (
            "memory_bandwidth_gbps = 500",
            "memory_bandwidth_gbps = 0",
            ["gpu 'MyGPU'", "memory_bandwidth_gbps"],
        ),
        ("capacity_gb = 2000", "capacity_gb = -1", ["storage 'nvme'", "capacity_gb"]),
        ('source = "my datasheet (2024)"', "", ["gpu 'MyGPU'", "source"]),
        ('source = "JEDEC JESD79-5 (2020)"', 'source = ""', ["memory 'DDR5-4800'", "source"]),
        ("memory_gb = 16", "", ["gpu 'MyGPU'", "memory_gb", "missing"]),
        ("memory_gb = 16", "memroy_gb = 16", ["gpu 'MyGPU'", "memroy_gb", "not a known field"]),
        ("memory_gb = 16", 'memory_gb = "16"', ["gpu 'MyGPU'", "memory_gb"]),
        ('price_date = "2024"\nprice_source = "estimate"\nsource = "my', 'source = "my', ["price_date"]),
        ('pcie = "pcie4-x16"', 'pcie = "pcie9"', ["gpu 'MyGPU'", "pcie must be one of pcie4-x16"]),
        ('nvlink = "none"', 'nvlink = "nvlink9"', ["gpu 'MyGPU'", "nvlink must be one of pcie4-x16, none"]),
        ('kind = "ssd"', 'kind = "tape"', ["storage 'nvme'", "kind", "ssd, hdd"]),
        ("latency_ns = 100", "", ["memory 'DDR5-4800'", "latency_ns"]),
    ],
)
def test_malformed_catalogue_names_entry_and_field(
    tmp_path: Path, old: str, new: str, words: list[str]
) -> None:
    assert old in MINIMAL
    with pytest.raises(LabkitError) as info:
        hw.load_catalogue(write(tmp_path, MINIMAL.replace(old, new, 1)))
    for word in words:
        assert word in str(info.value)


def test_duplicate_names_are_rejected(tmp_path: Path) -> None:
    gpu_block = MINIMAL[MINIMAL.index("[[gpu]]") : MINIMAL.index("[[memory]]")]
    copied = MINIMAL + gpu_block.replace('name = "MyGPU"', 'name = "Other"')
    with pytest.raises(LabkitError, match="alias 'mine' is already used by gpu 'MyGPU'"):
        hw.load_catalogue(write(tmp_path, copied))


def test_bad_files(tmp_path: Path) -> None:
    with pytest.raises(LabkitError, match="cannot be read"):
        hw.load_catalogue(tmp_path / "missing.toml")
    with pytest.raises(LabkitError, match="not valid TOML"):
        hw.load_catalogue(write(tmp_path, "[[gpu]\n"))
    with pytest.raises(LabkitError, match="section must be one of gpu, link, memory, storage"):
        hw.load_catalogue(write(tmp_path, MINIMAL + "\n[[gpus]]\nname = 'x'\n"))


def test_transfer_time_simple_numbers() -> None:
    link = hw.link("ib-hdr")  # 25 GB/s, 1 us
    assert hw.transfer_time(0, link) == 0.0
    assert hw.transfer_time(25e9, link) == pytest.approx(1.0 + 1e-6)
    assert hw.transfer_time(1, link) == pytest.approx(1e-6 + 1 / 25e9)
    for bad in (-1, float("nan"), "10", None):
        with pytest.raises(LabkitError, match="nbytes"):
            hw.transfer_time(bad, link)  # type: ignore[arg-type]


def test_roofline_time_simple_numbers() -> None:
    a100 = hw.gpu("A100-80GB")  # 312 TFLOP/s bf16, 2.039 TB/s
    assert hw.roofline_time(312e12, 0, a100) == pytest.approx(1.0)
    assert hw.roofline_time(0, 2.039e12, a100) == pytest.approx(1.0)
    assert hw.roofline_time(312e12, 2.039e12 / 2, a100) == pytest.approx(1.0)  # compute bound
    assert hw.roofline_time(19.5e12, 0, a100, dtype="fp32") == pytest.approx(1.0)
    with pytest.raises(LabkitError, match=r"^dtype must be one of bf16, fp16, fp32, tf32 \(got 'int4'\)"):
        hw.roofline_time(1, 1, a100, dtype="int4")
    with pytest.raises(LabkitError, match="flops"):
        hw.roofline_time(-1, 1, a100)


def test_cluster_picks_links() -> None:
    dgx = hw.cluster("A100-80GB", nodes=2)
    assert dgx.n_gpus == 16
    assert dgx.intra_node.name == "nvlink3" and dgx.inter_node.name == "ib-hdr"
    box = hw.cluster("rtx 4090", gpus_per_node=4, inter_node="ib-ndr")
    assert box.intra_node.name == "pcie4-x16" and box.inter_node.name == "ib-ndr"
    assert box.n_gpus == 4
    with pytest.raises(LabkitError, match="gpus_per_node must be a positive integer"):
        hw.cluster("H100", gpus_per_node=0)
    with pytest.raises(LabkitError, match="nodes"):
        hw.cluster("H100", nodes=1.5)  # type: ignore[arg-type]
    with pytest.raises(LabkitError, match="^link must be one of"):
        hw.cluster("H100", inter_node="carrier-pigeon")


def test_format_bytes_says_which_unit() -> None:
    assert hw.format_bytes(80e9) == "80.0 GB"
    assert hw.format_bytes(2**30, "GiB") == "1.0 GiB"
    assert hw.format_bytes(80e9, "GiB", digits=2) == "74.51 GiB"
    assert hw.format_bytes(1.88e9, digits=2) == "1.88 GB"
    with pytest.raises(LabkitError, match="^unit must be one of"):
        hw.format_bytes(1, "gb")


def test_records_are_frozen(cat: hw.Catalogue) -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        cat.gpu("H200").memory_bytes = 1  # type: ignore[misc]
    assert hash(cat.gpu("H200")) == hash(cat.gpu("h200"))


sizes = st.floats(min_value=0, max_value=1e15, allow_nan=False)


@given(a=sizes, b=sizes, name=st.sampled_from(LINKS))
def test_transfer_time_is_monotone_and_at_least_latency(a: float, b: float, name: str) -> None:
    link = hw.link(name)
    small, large = sorted((a, b))
    assert hw.transfer_time(small, link) <= hw.transfer_time(large, link)
    if large > 0:
        assert hw.transfer_time(large, link) >= link.latency_s


@given(flops=sizes, nbytes=sizes, name=st.sampled_from(GPUS), dtype=st.sampled_from(["bf16", "fp32"]))
def test_roofline_time_is_at_least_each_bound(flops: float, nbytes: float, name: str, dtype: str) -> None:
    device = hw.gpu(name)
    t = hw.roofline_time(flops, nbytes, device, dtype)
    assert t >= flops / device.peak_flops[dtype]
    assert t >= nbytes / device.memory_bandwidth
    assert math.isclose(t, max(flops / device.peak_flops[dtype], nbytes / device.memory_bandwidth))


HOST = """
[[host]]
name = "box"
cpu = "Some CPU"
sockets = 1
cores = 16
tdp_w = 170
source = "a spec page (2024)"
gpus = ["MyGPU"]
gpu_slots = 1
dram_gb = 128
dram = "DDR5-4800"
dram_channels = 2
dram_source = "the board's manual"
nvme = "nvme"
nvme_drives = 1
nvme_source = "one drive"
"""


def test_every_gpu_has_a_host_with_sourced_dram_and_drives(cat: hw.Catalogue) -> None:
    for g in cat.gpus:
        hosts = cat.hosts_for(g.name)
        assert hosts, g.name
        h = hosts[0]
        assert h.dram_bytes > 0 and h.nvme_drives > 0 and cat.tier(h.nvme).kind == "ssd" and h.source.strip()
    dgx = cat.host("dgx-a100-host")
    assert (dgx.dram_bytes, dgx.nvme_drives, dgx.network, dgx.network_ports) == (2048e9, 8, "ib-hdr", 8)
    ws = cat.hosts_for("RTX-4090")[0]
    assert ws.kind == "workstation" and ws.gpu_slots == 1 and ws.network == "" and ws.nvme_drives == 1
    assert ws.dram_bandwidth(cat.tier(ws.dram)) == pytest.approx(2 * 38.4e9)  # two DDR5-4800 channels


def test_grand_teton_holds_the_torchtitan_sources_facts(cat: hw.Catalogue) -> None:
    # pytorch/torchtitan, benchmarks/llama3_h100_202412_torchtitan.md: 8 H100 per host on NVLink, 96 GB HBM2e at
    # 2.4 TB/s, 400 Gb/s RDMA per GPU, 500 W; its peak between the H100 NVL's (835.5 bf16 dense) and the SXM's
    part, host = cat.gpu("H100-HBM2e-96GB"), cat.host("grand-teton")
    assert cat.hosts_for(part.name) == [host] and host.gpu_slots == host.nvlink_domain_gpus == 8
    assert (part.memory_bytes, part.memory_bandwidth, part.tdp_watts) == (96e9, 2.4e12, 500)
    sxm = cat.gpu("H100-SXM")
    assert part.peak_flops["bf16"] == 835.5e12 < sxm.peak_flops["bf16"]
    assert host.network_ports == 8 and cat.link(host.network).bandwidth * 8 == 400e9


def test_a_users_host_loads(tmp_path: Path) -> None:
    cat = hw.load_catalogue(write(tmp_path, MINIMAL + HOST))
    box = cat.host("box")
    assert box.gpus == ("MyGPU",) and box.dram_bytes == 128e9 and box.nvme == "nvme" and box.network == ""
    assert cat.hosts_for("mine") == [box]


@pytest.mark.parametrize(("old", "new", "message"), [
    ('gpus = ["MyGPU"]', 'gpus = ["B300"]', "host 'box': gpus must be one of MyGPU (got 'B300')"),
    ('dram = "DDR5-4800"', 'dram = "HBM9"', "host 'box': dram must be one of DDR5-4800 (got 'HBM9')"),
    ('nvme_source = "one drive"\n', "", "host 'box': nvme_source must be a non-empty string (missing)"),
    ("nvme_drives = 1", "nvme_drives = 1.5", "host 'box': nvme_drives must be a whole number"),
    ('cpu = "Some CPU"', 'cpu = "Some CPU"\nkind = "mainframe"', "host 'box': kind must be one of server"),
])
def test_bad_hosts_name_the_field(tmp_path: Path, old: str, new: str, message: str) -> None:
    with pytest.raises(LabkitError, match=re.escape(message)):
        hw.load_catalogue(write(tmp_path, MINIMAL + HOST.replace(old, new)))


def test_split_modules_keep_the_old_imports() -> None:
    from labkit.hardware import GB, Cluster, Device, Host, Link, Tier, gpu, link, tier, transfer_time  # noqa: F401

    assert hw.Device is Device and hw.GB == 1e9
