"""CPU package energy from RAPL (collectors/rapl.py) on a fake /sys/class/powercap tree."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from agentscope.collectors import Sampler, SourceUnavailable, default_sources
from agentscope.collectors.rapl import RaplEnergy
from agentscope.formats import samplefile
from agentscope.metric_names import HW_CPU_ENERGY, SOURCE_HOST_ENERGY, UNITS

S = 1_000_000_000
RANGE = 262_143_328_850  # max_energy_range_uj of a real package zone


def _zone(sys_root: Path, entry: str, name: str, energy_uj: "int | None",
          max_range: "int | None" = RANGE) -> Path:
    z = sys_root / "class" / "powercap" / entry
    z.mkdir(parents=True, exist_ok=True)
    (z / "name").write_text(name + "\n")
    if energy_uj is not None:
        (z / "energy_uj").write_text(f"{energy_uj}\n")
    if max_range is not None:
        (z / "max_energy_range_uj").write_text(f"{max_range}\n")
    return z


def _energy(readings) -> dict:
    assert all(r.metric == HW_CPU_ENERGY for r in readings)
    return {r.device: r.value for r in readings}


def test_package_energy_is_cumulative_joules_across_the_wraparound(tmp_path):
    z = _zone(tmp_path, "intel-rapl:0", "package-0", 1_000_000)
    _zone(tmp_path, "intel-rapl:0:0", "core", 500_000)  # a subzone: part of its package
    _zone(tmp_path, "intel-rapl:0:2", "dram", 200_000)
    (tmp_path / "class" / "powercap" / "intel-rapl").mkdir()  # the control type itself
    src = RaplEnergy(str(tmp_path))
    assert [d for d, _, _ in src.zones] == ["package-0"]
    assert src.min_interval_s == 1.0

    assert _energy(src.sample(1 * S)) == {"package-0": 1.0}  # the kernel's counter, in J
    (z / "energy_uj").write_text("51000000\n")  # +50 J
    assert _energy(src.sample(2 * S)) == {"package-0": 51.0}
    (z / "energy_uj").write_text(f"{RANGE - 1_000_000}\n")
    assert _energy(src.sample(3 * S))["package-0"] == pytest.approx(
        (RANGE - 1_000_000) / 1e6)
    # wrapped: 1 J up to the range, then 29 J from zero
    (z / "energy_uj").write_text("29000000\n")
    assert _energy(src.sample(4 * S))["package-0"] == pytest.approx(
        (RANGE - 1_000_000) / 1e6 + 30.0)
    (z / "energy_uj").write_text("39000000\n")
    assert _energy(src.sample(5 * S))["package-0"] == pytest.approx(
        (RANGE - 1_000_000) / 1e6 + 40.0)
    src.close()


def test_snapshot_then_parse_gives_the_same_values(tmp_path):
    z = _zone(tmp_path, "intel-rapl:0", "package-0", 2_000_000)
    src = RaplEnergy(str(tmp_path))
    first = src.snapshot(1 * S)
    (z / "energy_uj").write_text("5000000\n")
    second = src.snapshot(2 * S)
    assert _energy(src.parse(1 * S, first)) == {"package-0": 2.0}
    assert _energy(src.parse(2 * S, second)) == {"package-0": 5.0}


def test_two_packages_and_an_mmio_twin_read_once(tmp_path):
    a = _zone(tmp_path, "intel-rapl:0", "package-0", 10_000_000)
    _zone(tmp_path, "intel-rapl:1", "package-1", 20_000_000)
    _zone(tmp_path, "intel-rapl-mmio:0", "package-0", 99_000_000)  # the same package again
    src = RaplEnergy(str(tmp_path))
    assert [d for d, _, _ in src.zones] == ["package-0", "package-1"]
    assert _energy(src.sample(1 * S)) == {"package-0": 10.0, "package-1": 20.0}
    (a / "energy_uj").write_text("12500000\n")
    assert _energy(src.sample(2 * S)) == {"package-0": 12.5, "package-1": 20.0}


def test_a_wrap_without_a_known_range_loses_only_that_interval(tmp_path):
    z = _zone(tmp_path, "intel-rapl:0", "package-0", 9_000_000, max_range=None)
    src = RaplEnergy(str(tmp_path))
    assert _energy(src.sample(1 * S)) == {"package-0": 9.0}
    (z / "energy_uj").write_text("1000000\n")
    assert _energy(src.sample(2 * S)) == {"package-0": 9.0}  # never backwards
    (z / "energy_uj").write_text("3000000\n")
    assert _energy(src.sample(3 * S)) == {"package-0": 11.0}


def test_missing_zone_files_make_the_source_absent(tmp_path):
    with pytest.raises(SourceUnavailable, match="RAPL"):  # no powercap at all
        RaplEnergy(str(tmp_path))
    _zone(tmp_path, "intel-rapl:0", "package-0", None)  # a zone without energy_uj
    with pytest.raises(SourceUnavailable, match="energy_uj"):
        RaplEnergy(str(tmp_path))
    sources, absent = default_sources(None, root=str(tmp_path / "proc"), gpus=False,
                                      sys_root=str(tmp_path))
    assert SOURCE_HOST_ENERGY in [name for name, _ in absent]
    assert SOURCE_HOST_ENERGY not in [s.name for s in sources]


def test_an_unreadable_zone_is_left_out_after_one_check(tmp_path, caplog):
    z = _zone(tmp_path, "intel-rapl:0", "package-0", 1_000_000)
    (z / "energy_uj").chmod(0)
    try:
        if os.geteuid() == 0:  # root reads anything: the check cannot be made here
            src = RaplEnergy(str(tmp_path))
            assert [d for d, _, _ in src.zones] == ["package-0"]
        else:
            with pytest.raises(SourceUnavailable, match="energy_uj"):
                RaplEnergy(str(tmp_path))
            # a readable package beside it is read; the other is left out with a debug line
            _readable_beside(tmp_path, caplog)
    finally:
        (z / "energy_uj").chmod(0o644)


def test_a_zone_whose_read_fails_is_left_out_even_as_root(tmp_path, caplog):
    # energy_uj opens but cannot be read (a directory: EISDIR), whoever runs the test
    bad = tmp_path / "class" / "powercap" / "intel-rapl:0"
    (bad / "energy_uj").mkdir(parents=True)
    (bad / "name").write_text("package-0\n")
    with pytest.raises(SourceUnavailable, match="energy_uj"):
        RaplEnergy(str(tmp_path))
    _readable_beside(tmp_path, caplog)
    assert [r.levelno for r in caplog.records] == [logging.DEBUG]


def _readable_beside(tmp_path, caplog) -> None:
    """A readable package beside the bad one is read; the bad one is left out, below a
    warning."""
    _zone(tmp_path, "intel-rapl:1", "package-1", 4_000_000)
    with caplog.at_level(logging.DEBUG, logger="agentscope"):
        src = RaplEnergy(str(tmp_path))
    assert [d for d, _, _ in src.zones] == ["package-1"]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert _energy(src.sample(1 * S)) == {"package-1": 4.0}


def test_in_the_sampler_absent_zone_writes_no_energy(tmp_path):
    out = tmp_path / "out"
    # no powercap at all: nothing to say
    _, absent = default_sources(None, root=str(tmp_path / "proc"), gpus=False,
                                sys_root=str(tmp_path))
    assert SOURCE_HOST_ENERGY not in [name for name, _ in absent]
    _zone(tmp_path, "intel-rapl:0", "package-0", None)  # a zone that cannot be read
    sources, absent = default_sources(None, root=str(tmp_path / "proc"), gpus=False,
                                      sys_root=str(tmp_path))
    s = Sampler(out, sources, absent, interval_s=0.1, host="h")
    s.tick(1 * S, final=True)
    rows = list(samplefile.read(s.path)) if s.path.exists() else []
    up = {r.source: r.value for r in rows if r.metric == "agentscope.collector.up"}
    assert up[SOURCE_HOST_ENERGY] == 0.0
    assert not [r for r in rows if r.metric == HW_CPU_ENERGY]


def test_in_the_sampler_energy_is_written_once_a_second(tmp_path):
    z = _zone(tmp_path, "intel-rapl:0", "package-0", 1_000_000)
    s = Sampler(tmp_path / "out", [RaplEnergy(str(tmp_path))], interval_s=0.1, host="h")
    for k in range(10):
        if k == 5:
            (z / "energy_uj").write_text("3000000\n")
        s.tick(S + k * S // 10)
    (z / "energy_uj").write_text("7000000\n")
    s.tick(2 * S, final=True)
    rows = [r for r in samplefile.read(s.path) if r.metric == HW_CPU_ENERGY]
    assert [(r.ts_ns, r.device, r.value) for r in rows] == [(1 * S, "package-0", 1.0),
                                                            (2 * S, "package-0", 7.0)]
    assert UNITS[HW_CPU_ENERGY] == "J"
