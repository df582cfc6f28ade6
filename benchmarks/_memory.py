"""Process memory readings the benchmarks share (Linux): resident set size now, and its peak."""

from __future__ import annotations

import os
import resource

MIB = 1024 * 1024


def rss_bytes() -> int:
    """Resident set size of this process now."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def reset_peak_rss() -> None:
    """Reset the kernel's peak RSS (VmHWM) to the current RSS (Linux ≥ 4.0), so that what ran before
    (building a model, whose temporaries can exceed what the measured call needs) is not counted."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def peak_rss_bytes() -> int:
    """Peak resident set size of this process so far, or since :func:`reset_peak_rss` (``VmHWM``;
    without it, ``ru_maxrss``, which is KiB on Linux and never reset)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024  # kB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
