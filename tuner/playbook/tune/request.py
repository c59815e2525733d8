"""What one ``tune`` run is asked to do: the study, the budget, the switches, where it runs."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tuner.playbook.budget import Budget
from tuner.playbook.tune_plan import Switches


@dataclass
class TuneRequest:
    """The command line, parsed. Not frozen: the run settles some of it as it goes (round 1 at
    full length adds its ``--set`` values to ``sets``, or turns ``switches.full_length_round1``
    off; ``--search-seed`` adds the fresh search's), and what it settled is what later steps and
    a re-run must see."""

    path: Path
    budget: Budget
    sets: list[str] = field(default_factory=list)
    output_dir: Path = Path("runs")
    storage: str | None = None
    workers: int | None = None
    devices: str | None = None
    switches: Switches = field(default_factory=Switches)
    dry_run: bool = False  # the plan within the budget (``Projected``), nothing run
    search_seed: int | None = None  # --search-seed: a fresh search, studied under its own name
    max_failed: int | None = None  # --max-failed: every phase's failure budget (else its own)
