"""Local worker processes outlive a failing progress view."""

from __future__ import annotations

import sys
from pathlib import Path

from tuner.orchestrate.pool import LocalPool, LocalWorker


def test_an_error_in_the_view_does_not_kill_the_workers(tmp_path: Path) -> None:
    marker = tmp_path / "finished"
    code = f"import time, pathlib; time.sleep(1.5); pathlib.Path({str(marker)!r}).touch()"
    pool = LocalPool(
        lambda worker: [sys.executable, "-c", code], [LocalWorker("w0")], env={}, log_dir=tmp_path / "logs"
    )
    pool.start()

    def broken_view() -> None:
        raise OSError("the storage is unreachable")

    codes = pool.wait(tick=broken_view, tick_s=0.1)
    assert codes == {"w0": 0}  # it ran to its end: not killed
    assert marker.exists()
    assert pool.tick_errors and all(isinstance(e, OSError) for e in pool.tick_errors)
