"""How durations and counts read, shared by every command that shows one (the live view, tuner list,
the lines of tune's decision log)."""

from __future__ import annotations

import math


def duration(seconds: float) -> str:
    """``42s``, ``3m 05s``, ``2h 07m``, ``3d 04h``: as precise as a person reads an ETA."""
    seconds = max(0, round(seconds)) if math.isfinite(seconds) else 0
    if seconds < 60:
        return f"{seconds}s"
    minutes, secs = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m {secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h {minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d {hours:02d}h"


def plural(count: int, noun: str, plural_form: str | None = None) -> str:
    """``1 trial``, ``2 trials``, ``0 trials``."""
    return f"{count} {noun if count == 1 else (plural_form or noun + 's')}"
