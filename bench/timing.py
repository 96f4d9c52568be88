"""Timing for the benchmarks, in one place: medians of wall and CPU seconds, and the machine line every
result is recorded with (CPU model and the flags that decide which precisions are fast)."""

from __future__ import annotations

import resource
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from zh_bert.core.hardware import machine_line


@dataclass
class Timing:
    wall: float                      # median wall seconds of one call
    cpu: float                       # median CPU seconds (this process and reaped children) of one call
    walls: list[float] = field(default_factory=list)
    result: Any = None               # what the last call returned


def cpu_seconds() -> float:
    """CPU seconds of this process and its reaped children (pool workers)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def timed(fn: Callable[[], Any], repeat: int = 1, warmup: int = 0) -> Timing:
    """Call `fn` `warmup` times untimed, then `repeat` times timed; medians of wall and CPU seconds."""
    for _ in range(warmup):
        fn()
    walls, cpus, result = [], [], None
    for _ in range(max(1, repeat)):
        c0, t0 = cpu_seconds(), time.perf_counter()
        result = fn()
        walls.append(time.perf_counter() - t0)
        cpus.append(cpu_seconds() - c0)
    return Timing(statistics.median(walls), statistics.median(cpus), walls, result)


def machine() -> str:
    """'CPU model, N cores, flags: ...' for the record that goes beside each figure."""
    return machine_line()
