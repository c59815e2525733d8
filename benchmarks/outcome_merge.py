"""Several ``results.json`` files as one table: the baselines' run beside a tuner-only run after a
change (an ablation), on one machine.

A contender is repeatable on one machine, but its floating-point path (torch picks kernels by the
CPU's instruction set), and with it which checkpoint each run's selection lands on, changes with
the CPU: files of two machines, or of a file that does not say which machine ran it, are merged
only when asked (``--across-machines``), and the output then says so. Files of different commits
merge freely (that is what an ablation is); the output says which commit ran which contender.
"""

from __future__ import annotations

from pathlib import Path

from benchmarks.outcome_runs import ResultsFile, RunRecord, machine_text


class MachinesDiffer(Exception):
    """Results files of two machines (or of a file that does not say) asked to merge."""


def merged_results(paths: list[Path], across_machines: bool = False) -> tuple[list[RunRecord], list[str]]:
    """The runs of several ``results.json`` files (a later file's run of the same workload,
    contender and seed replaces an earlier one's), and the lines to print about them."""
    runs: dict[tuple[str, str, int], RunRecord] = {}
    machines: dict[str, Path] = {}  # each machine, and the first file it ran
    unknown: list[Path] = []
    commits: dict[str, set[str]] = {}  # contender -> the commits of its runs
    for path in paths:
        results = ResultsFile.read(path)
        if results.machine:
            machines.setdefault(machine_text(results.machine), path)
        else:
            unknown.append(path)
        for record in results.runs:
            runs[record.key] = record
            commits.setdefault(record.contender, set()).add(results.commit)
    said = []
    if len(paths) > 1:
        why = "a contender repeats on one machine only, so a merged table would compare floating-point "
        why += "paths, not procedures: run them on one machine, or pass --across-machines"
        several = bool(unknown) or len(machines) > 1
        if several and not across_machines:
            if unknown:
                raise MachinesDiffer(f"{unknown[0]} does not say which machine ran it; {why}")
            (first, a), (second, b) = list(machines.items())[:2]
            raise MachinesDiffer(f"{a} ran on {first}, {b} on {second}; {why}")
        if several:
            said.append(
                "(runs of more than one machine merged: a difference between contenders there is "
                "partly the machines')"
            )
        by_commit: dict[str, list[str]] = {}
        for contender, found in commits.items():
            by_commit.setdefault(", ".join(sorted(found)), []).append(contender)
        if len(by_commit) > 1:
            said.append("commits: " + "; ".join(f"{c} ran {', '.join(n)}" for c, n in by_commit.items()))
    return list(runs.values()), said
