"""The report: what the storage and run folders say about a study, in plain words.

``read_study`` reads a study's phases (from the storage alone: it works on a study other
machines ran), ``build_report`` runs every diagnostic (best-step position, search-space
boundaries, search health, round-to-round transfer, sweep-lr, imbalanced data, best trial), and
the renderers print it (terminal), or write it (``--json``, ``--csv``, ``--html``).
"""

from tuner._lazy import lazy_exports

_EXPORTS = {
    "PhaseReport": "tuner.report.build",
    "StudyReport": "tuner.report.build",
    "build_report": "tuner.report.build",
    "write_csv": "tuner.report.csv_output",
    "Finding": "tuner.report.findings",
    "Level": "tuner.report.findings",
    "Suggestion": "tuner.report.findings",
    "report_json": "tuner.report.json_output",
    "StudyData": "tuner.report.study_data",
    "read_study": "tuner.report.study_data",
    "render_report": "tuner.report.terminal",
}

__getattr__ = lazy_exports(__name__, globals(), _EXPORTS)

__all__ = sorted(_EXPORTS)
