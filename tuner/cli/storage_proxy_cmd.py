"""``tuner storage-proxy``: serve a study database to many machines through one gRPC proxy.

Workers far away then reach the database through the proxy (``grpc://HOST:PORT``) instead of
holding PostgreSQL connections of their own (``docs/design/scale.md``). Every command works through
it (``run-round``, ``worker``, ``sweep-lr``, ``tune``, ``report``, ``list``, ``validate``): claims
need no database lock there (``docs/design/claim-protocol.md``).

The proxy has no TLS and no authentication, so it listens on 127.0.0.1 unless ``--allow-remote``
is given together with another ``--host``; then it says, once, what that exposes.
"""

from __future__ import annotations

import typer

from tuner.cli._console import err, out, warning_line
from tuner.cli._errors import guarded
from tuner.errors import UsageError


@guarded
def storage_proxy(
    storage: str | None = typer.Option(
        None,
        "--storage",
        metavar="URL",
        envvar="TUNER_STORAGE",
        help="The database to serve, postgresql://USER@HOST/DB (default: $TUNER_STORAGE).",
    ),
    host: str = typer.Option("127.0.0.1", "--host", metavar="ADDRESS", help="Address to listen on."),
    port: int = typer.Option(13000, "--port", metavar="PORT", help="Port to listen on."),
    workers: int = typer.Option(
        100, "--workers", metavar="N", help="Workers expected: sizes the thread pool (1 per 100, 8 to 64)."
    ),
    threads: int | None = typer.Option(
        None, "--threads", metavar="N", help="Threads (and database connections); overrides --workers."
    ),
    allow_remote: bool = typer.Option(
        False, "--allow-remote", help="Listen on an address other machines reach (no TLS, no auth)."
    ),
    health_every: float = typer.Option(
        60.0, "--health-every", metavar="SECONDS", help="How often to check and log the database."
    ),
) -> None:
    """Serve a study database over Optuna's gRPC storage proxy (grpc://HOST:PORT)."""
    from tuner.orchestrate.storage_proxy import LOCAL_HOSTS, ProxyEvent, serve, threads_for

    if not storage:
        raise UsageError(
            "give the database to serve: --storage postgresql://USER@HOST/DB (or $TUNER_STORAGE)"
        )
    if not 0 < port < 65536:
        raise UsageError(f"--port {port}: give a port from 1 to 65535")
    if workers < 1 or (threads is not None and threads < 1) or health_every <= 0:
        raise UsageError("--workers, --threads and --health-every must be positive")
    if host not in LOCAL_HOSTS:
        if not allow_remote:
            raise UsageError(
                f"--host {host} lets other machines reach the proxy, which has no TLS and no "
                "authentication: add --allow-remote on a private network, or keep 127.0.0.1 and "
                "reach it through an SSH tunnel (docs: Scaling out, A gRPC storage proxy)"
            )
        warning_line(
            f"listening on {host}:{port} with no TLS and no authentication: anyone who reaches this "
            "port can read and change every study in the database"
        )

    def say(event: ProxyEvent) -> None:
        (err if event.kind == "unhealthy" else out).print(f"storage-proxy: {event.text}", markup=False)

    serve(
        storage,
        host=host,
        port=port,
        threads=threads or threads_for(workers),
        say=say,
        health_every_s=health_every,
    )
