"""Energy counters read around each decoded turn (or batch) by the run, never inside the engine: NVML's total energy
of the GPU on CUDA (pynvml, where importable), the RAPL package counters under /sys/class/powercap on a CPU. Both
count the whole device (a package or a GPU), so anything else running on it is counted too. Where none is readable,
open_counter says why, and the report prints "n/a" with that reason.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch

POWERCAP = Path("/sys/class/powercap")


class EnergyCounter(Protocol):
    name: str

    def read(self) -> list[int]:
        """The counter's raw values now (one per zone)."""

    def joules(self, start: list[int], end: list[int]) -> float:
        """Joules between two reads."""


@dataclass(frozen=True)
class RaplZone:
    path: Path
    max_range: int  # microjoules at which energy_uj wraps to 0


class RaplCounter:
    """The RAPL package zones (intel-rapl:N, not their subzones, which the package already counts) under root."""

    def __init__(self, zones: list[RaplZone]) -> None:
        self.zones = zones
        self.name = f"RAPL ({', '.join(z.path.name for z in zones)})"

    @staticmethod
    def find(root: Path = POWERCAP) -> "RaplCounter | str":
        """The counter, or why there is none."""
        if not root.is_dir():
            return f"no readable RAPL counter: {root} absent"
        zones = []
        for folder in sorted(root.glob("intel-rapl:*")):
            if folder.name.count(":") != 1:
                continue
            try:
                int((folder / "energy_uj").read_text())
                zones.append(RaplZone(folder, int((folder / "max_energy_range_uj").read_text())))
            except (OSError, ValueError):
                continue
        return RaplCounter(zones) if zones else f"no readable RAPL counter under {root} (absent or root-only)"

    def read(self) -> list[int]:
        return [int((z.path / "energy_uj").read_text()) for z in self.zones]

    def joules(self, start: list[int], end: list[int]) -> float:
        """Summed over the zones; a zone whose counter wrapped once in between counts its range."""
        total = 0
        for zone, a, b in zip(self.zones, start, end):
            total += b - a if b >= a else b + zone.max_range - a
        return total / 1e6


class NvmlCounter:
    """NVML's total energy of one GPU, in millijoules since the driver loaded (Volta and later)."""

    def __init__(self, index: int) -> None:
        import pynvml

        pynvml.nvmlInit()
        try:  # by UUID: NVML numbers every GPU, CUDA only the visible ones (CUDA_VISIBLE_DEVICES)
            handle = pynvml.nvmlDeviceGetHandleByUUID(f"GPU-{torch.cuda.get_device_properties(index).uuid}")
        except Exception:  # a torch without the UUID, or NVML spelling it otherwise: NVML's own numbering
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        self.nvml, self.handle = pynvml, handle
        self.name = f"NVML (GPU {index})"
        self.read()  # refuses here on a GPU without the counter

    def read(self) -> list[int]:
        return [int(self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle))]

    def joules(self, start: list[int], end: list[int]) -> float:
        return (end[0] - start[0]) / 1e3


def open_counter(device: torch.device, powercap: Path = POWERCAP) -> EnergyCounter | str:
    """The energy counter of the device the run decodes on, or why there is none."""
    if device.type == "cuda":
        try:
            return NvmlCounter(device.index if device.index is not None else torch.cuda.current_device())
        except ImportError:
            return "no NVML: pynvml not installed (pip install specbench[energy], i.e. nvidia-ml-py)"
        except Exception as exc:  # pynvml's NVMLError: no driver, or a GPU without the energy counter
            return f"no NVML energy counter ({type(exc).__name__}: {exc})"
    if device.type == "cpu":
        return RaplCounter.find(powercap)
    return f"no energy counter for {device.type} devices"
