"""One exception root for everything a user can cause or fix.

The CLI maps these to one red line and an exit code; the library never calls ``sys.exit``.
"""

from __future__ import annotations


class TunerError(Exception):
    """Base of all errors the user should see as one line (no traceback)."""

    exit_code = 1


class UsageError(TunerError):
    """Bad input or usage: a wrong option, a missing file, an invalid override."""

    exit_code = 2


class SpecError(UsageError):
    """An invalid study file, located to the file, line and column when known."""

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        line: int | None = None,
        column: int | None = None,
        field: str | None = None,
    ) -> None:
        self.path, self.line, self.column, self.field = path, line, column, field
        self.detail = message
        super().__init__(self._format())

    def _format(self) -> str:
        where = ""
        if self.path is not None:
            where = self.path
            if self.line is not None:
                where += f":{self.line}"
                if self.column is not None:
                    where += f":{self.column}"
            where += ": "
        field = f"{self.field}: " if self.field else ""
        return f"{where}{field}{self.detail}"


class WorkloadError(UsageError):
    """A workload entry point that cannot be found or returns the wrong thing."""


class WorkloadCodeError(TunerError):
    """The user's workload code failed while the engine ran it (a bug in *their* code, not ours).

    Exit code 2, as for bad input: the user's to fix, and the same code fails the same way again
    (never 70, which is tuner's own bug). The run folder keeps ``error.log`` (the full
    traceback), which ``log_path`` points at once known.
    """

    exit_code = 2

    def __init__(self, detail: str, log_path: str | None = None) -> None:
        self.detail, self.log_path = detail, log_path
        super().__init__(detail)

    def __str__(self) -> str:
        return self.detail + (f" (traceback: {self.log_path})" if self.log_path else "")


class TrainingError(TunerError):
    """Training could not finish (e.g. it diverged)."""
