"""How many CPU cores this process may use: what sizes the default workers and their threads.

``os.cpu_count()`` counts the machine's cores, but a process confined to some of them (``taskset``,
a Slurm job's or a container's cpuset) shares those: one worker per machine core would put
several workers, each with its threads, on one core. The affinity mask says what is usable.
"""

from __future__ import annotations

import os


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity), else the machine's count."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1
