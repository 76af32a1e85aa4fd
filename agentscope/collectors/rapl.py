"""CPU package energy from RAPL, through the kernel's powercap interface
(``/sys/class/powercap``).

``hw.cpu.energy`` (J), per top-level package zone (``device`` = the zone's ``name``:
``package-0``, ``package-1``; a platform's ``psys`` zone, which includes the packages, is left
out so that the devices add up): a cumulative counter, as
``hw.gpu.energy`` is. The first value is the kernel's counter (``energy_uj``, µJ since an
arbitrary point) at the first sample; each later one adds the increase since the previous
sample, across the counter's wraparound (at ``max_energy_range_uj``, every few minutes to
hours depending on the load), so the series never goes backwards and the energy a task used
is the difference of the values at its ends. Read at most once a second (``min_interval_s``),
as NVML's energy counter is.

The zones' subzones (``intel-rapl:0:0``: ``core``, ``uncore``, ``dram``) are left out: core
and uncore are parts of their package, and summing the devices must not count them twice.
The same package seen twice (``intel-rapl-mmio:0`` beside ``intel-rapl:0``, both
``package-0``) is read once. AMD processors appear under the same ``intel-rapl`` names (the
kernel's ``intel_rapl`` driver serves them).

Since Linux 5.10 (CVE-2020-8694, "Platypus") ``energy_uj`` is readable by root only on most
distributions: each zone is checked once, when the source is made, and a zone that cannot be
read is left out (a debug line in the log); with none readable the source is absent (the
sampler writes ``agentscope.collector.up`` = 0 for ``host.energy`` and logs the reason once):
CPU energy is then "not measured", never zero. ``sys_root`` can be injected (tests use a
fake tree).
"""

from __future__ import annotations

import os
import re
from typing import Optional

from .._log import log
from ..metric_names import HW_CPU_ENERGY, SOURCE_HOST_ENERGY
from .base import ProcFile, Reading, SourceUnavailable, SplitSource

# a top-level zone: "<control type>:<n>" (a subzone has a second ":<m>")
_TOP_ZONE = re.compile(r"^([a-z0-9-]*rapl[a-z0-9-]*):(\d+)$")


def _order(entry: str) -> tuple:
    """MSR zones before their MMIO twins, then by number."""
    m = _TOP_ZONE.match(entry)
    kind, n = (m.group(1), int(m.group(2))) if m else (entry, 0)
    return ("mmio" in kind, kind, n)


def _read_int(path: str) -> Optional[int]:
    try:
        with open(path, "rb") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def _read_name(path: str) -> Optional[str]:
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace").strip() or None
    except OSError:
        return None


class RaplEnergy(SplitSource):
    """``hw.cpu.energy`` per RAPL package zone (see the module's text)."""

    name = SOURCE_HOST_ENERGY
    min_interval_s = 1.0  # as NVML's energy counter: the total is exact, a second is plenty

    def __init__(self, sys_root: str = "/sys") -> None:
        base = f"{sys_root}/class/powercap"
        try:
            entries = os.listdir(base)
        except OSError as e:
            raise SourceUnavailable(f"CPU energy (RAPL): cannot list {base} "
                                    f"({e.strerror or e})") from None
        # (device, kept-open energy_uj, max_energy_range_uj or None)
        self.zones: list = []
        skipped: list = []
        seen: set = set()
        for entry in sorted((e for e in entries if _TOP_ZONE.match(e)), key=_order):
            zone = f"{base}/{entry}"
            device = _read_name(f"{zone}/name") or entry
            if device in seen:  # the same package through another interface
                continue
            if device.startswith("psys"):  # the whole platform, packages included: summed
                continue                   # with them it would count them twice
            path = f"{zone}/energy_uj"
            try:
                f = ProcFile(path)
            except OSError as e:
                skipped.append(f"{path} ({e.strerror or e})")
                continue
            try:
                int(f.read())
            except (OSError, ValueError) as e:
                f.close()
                skipped.append(f"{path} ({getattr(e, 'strerror', None) or e})")
                continue
            seen.add(device)
            rng = _read_int(f"{zone}/max_energy_range_uj")
            self.zones.append((device, f, rng if rng and rng > 0 else None))
        if not self.zones:
            if skipped:
                raise SourceUnavailable("CPU energy (RAPL): cannot read " + ", ".join(skipped)
                                        + " (root only since Linux 5.10)")
            raise SourceUnavailable(f"CPU energy (RAPL): no RAPL zone in {base}")
        if skipped:
            log.debug("agentscope collector: RAPL zones left out: %s", ", ".join(skipped))
        self._last: dict = {}  # device -> energy_uj at the previous sample
        self._total: dict = {}  # device -> the cumulative total written (µJ, an int: exact)

    def snapshot(self, now_ns: int) -> list:
        """The raw ``energy_uj`` of each zone, in the order of ``zones``."""
        return [f.read() for _, f, _ in self.zones]

    def parse(self, now_ns: int, snap: list) -> list:
        out = []
        last, total = self._last, self._total
        for (device, _, rng), raw in zip(self.zones, snap):
            try:
                uj = int(raw)
            except ValueError:
                continue
            prev = last.get(device)
            last[device] = uj
            if prev is None:
                total[device] = uj
            else:
                d = uj - prev
                if d < 0:  # wrapped past max_energy_range_uj (unknown range: lose the interval)
                    d = d + rng if rng is not None and d + rng >= 0 else 0
                total[device] += d
            out.append(Reading(HW_CPU_ENERGY, total[device] / 1e6, device))
        return out

    def close(self) -> None:
        for _, f, _ in self.zones:
            f.close()
