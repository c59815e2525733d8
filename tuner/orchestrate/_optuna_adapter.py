"""The few things tuner needs from Optuna that its public API does not offer, in one place:
a few private calls (each below says why; among them several attributes in one write,
``set_user_attrs``), reading a whole study fast from Optuna's tables, the
gRPC proxy's server object (``grpc_proxy_server``), and, for tests only, skewing the clock Optuna
stamps trials with (at the end).

Everything else goes through public API: ``RDBStorage`` methods (``create_new_trial``,
``set_trial_state_values``, which also finishes a trial with its value: ``record.Recorder``,
``record_heartbeat``, ``get_trial_id_from_study_id_trial_number``…) and ``Study.tell`` (a
pruned trial). Optuna is pinned to the majors this was written against (pyproject.toml);
when it moves, this module is the one to check.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

_study_ids: dict[tuple[int, str], int] = {}


def study_id(storage: Any, study: Any) -> int:
    """Public: the id of ``study`` (an ``optuna.Study``) in ``storage`` (asked once: it never changes)."""
    key = (id(storage), study.study_name)
    if key not in _study_ids:
        _study_ids[key] = int(storage.get_study_id_from_name(study.study_name))
    return _study_ids[key]


def trial_id(storage: Any, study: Any, number: int) -> int:
    """Public: the storage id of trial ``number`` of ``study`` (``FrozenTrial`` keeps it privately)."""
    return int(storage.get_trial_id_from_study_id_trial_number(study_id(storage, study), number))


def stale_trial_ids(storage: Any, study: Any) -> list[int]:
    """RUNNING trials whose heartbeat is older than the grace period.

    Private: Optuna's public ``fail_stale_trials`` turns them FAIL *before* telling anyone,
    while tuner must write why (``failure_reason``, ``retried``) before the trial is finished
    (Optuna refuses writes to finished trials) and decide on a retry under the phase lock.
    """
    return list(storage._get_stale_trial_ids(study_id(storage, study)))


def trial_for_sampling(study: Any, trial_id_: int) -> Any:
    """An ``optuna.trial.Trial`` for a trial we created ourselves, so the sampler can suggest.

    ``Trial(study, trial_id)`` is how ``Study.ask`` builds one; ``ask`` itself cannot be used:
    it would create (or pop a WAITING) trial outside the phase lock. Private, as in ``ask``: the
    study's per-thread cache of all trials (``_thread_local.cached_all_trials``, which samplers
    read through ``Study._get_trials(use_cache=True)``) is emptied first, "sync storage once
    every trial". Otherwise a sampler that reads the study (TPE) would see the list cached while
    the worker's previous trial was sampled, without the trial it is sampling now: a
    ``KeyError``. ``tell`` empties it too, but a trial finished without ``tell`` (a failure, a
    result written in one call: ``record.Recorder``) does not.
    """
    import optuna

    study._thread_local.cached_all_trials = None
    return optuna.trial.Trial(study, trial_id_)


def set_user_attrs(storage: Any, trial_id: int, attrs: dict[str, Any]) -> None:
    """The user attributes ``attrs`` of trial ``trial_id``, in one transaction on a database.

    Private (``optuna.storages._rdb.storage._create_scoped_session`` and
    ``RDBStorage._set_trial_attr_without_commit``, exactly what the public
    ``RDBStorage.set_trial_user_attr`` runs for one attribute): the public API writes one
    attribute per transaction, and a trial's result carries five (``worker_rss_mb``,
    ``final_train_loss``, ``train_s``, ``best_step``, ``final_step``; ``record.Recorder``): four
    round trips to the database more than needed, for every trial; a failure carries three or
    more (``failures.fail_trial``), a trial whose point the sampler chooses its six bookkeeping
    attributes (``worker.Worker``). One transaction is also all or nothing, so a retry
    after a dropped connection writes them again whole. A trial finished elsewhere raises
    ``UpdateFinishedTrialError`` as the public call does. Through the gRPC proxy or on a journal,
    one public call each.
    """
    from optuna.storages import RDBStorage

    if isinstance(storage, RDBStorage) and len(attrs) > 1:
        from optuna.storages._rdb import models
        from optuna.storages._rdb.storage import _create_scoped_session

        with _create_scoped_session(storage.scoped_session, True) as session:
            for key, value in attrs.items():
                storage._set_trial_attr_without_commit(
                    session, models.TrialUserAttributeModel, trial_id, key, value
                )
        return
    for key, value in attrs.items():
        storage.set_trial_user_attr(trial_id, key, value)


def grpc_storage_proxy(host: str, port: int) -> Any:
    """Optuna's ``GrpcStorageProxy`` whose trial list never misses a trial for good.

    Private (``GrpcStorageProxy._cache``): the client caches a study's trials and afterwards asks
    the proxy only for trials with a larger id than the last finished one it has seen, plus the
    unfinished ones it knows (``GrpcClientCache._read_trials_from_remote_storage``, Optuna 4.2 to
    5.0). A trial created by another process just before a later one that finished first (ids come
    from the database's sequence; the proxy's own cache adds a trial once its insert returns) can
    be absent from one answer and then never asked for again: that worker's view lacks it for the
    rest of its life. Seen in a local suite run here: 8 processes claiming 200 trials, one process waiting for
    ever on a slot whose trial it could not see, though all 200 were complete. A trial's number is
    its rank among the study's trials, so a view with a gap in the numbers has missed one: the
    study's cache is then dropped and read again whole (rare: only when the race happened).
    """
    import optuna

    from tuner.orchestrate.retry_log import note_reread

    class _GapFreeProxy(optuna.storages.GrpcStorageProxy):
        def _setup(self) -> None:
            """Optuna's channel and stub: every call ends within ``grpc_call_timeout_s``, and a
            proxy started again is reached within ``RECONNECT_MAX_MS``."""
            import grpc
            from optuna.storages._grpc.auto_generated import api_pb2_grpc
            from optuna.storages._grpc.client import GrpcClientCache

            from tuner.orchestrate.env_settings import grpc_call_timeout_s

            self._channel = grpc.insecure_channel(f"{self._host}:{self._port}", options=CHANNEL_OPTIONS)
            bounded = grpc.intercept_channel(self._channel, _deadline(grpc_call_timeout_s()))
            self._stub = api_pb2_grpc.StorageServiceStub(bounded)
            self._cache = GrpcClientCache(self._stub)

        def get_all_trials(self, study_id: int, deepcopy: bool = True, states: Any = None) -> list[Any]:
            trials = super().get_all_trials(study_id, deepcopy=deepcopy)
            if trials and trials[-1].number != len(trials) - 1:  # sorted by number
                note_reread(study_id, len(trials), trials[-1].number)
                self._cache.delete_study_cache(study_id)
                trials = super().get_all_trials(study_id, deepcopy=deepcopy)
            return trials if states is None else [t for t in trials if t.state in states]

    return _GapFreeProxy(host=host, port=port)


#: a client tries a proxy that is down again within 1 s (gRPC's default backoff grows to 120 s, so
#: a client came back about 1.6x the outage after its proxy did: its trials' beats lapsed, and
#: workers on the database failed them as killed, seen after a 4.5 s outage with an 8 s grace)
RECONNECT_MAX_MS = 1000
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", -1),  # Optuna's own (``create_insecure_channel``)
    ("grpc.initial_reconnect_backoff_ms", 250),
    ("grpc.min_reconnect_backoff_ms", 250),
    ("grpc.max_reconnect_backoff_ms", RECONNECT_MAX_MS),
]


def _deadline(timeout_s: float) -> Any:
    """A gRPC client interceptor that gives each unary call without a timeout ``timeout_s``."""
    import collections

    import grpc

    fields = ("method", "timeout", "metadata", "credentials", "wait_for_ready", "compression")

    class CallDetails(collections.namedtuple("CallDetails", fields), grpc.ClientCallDetails):  # type: ignore[misc]
        pass

    class Deadline(grpc.UnaryUnaryClientInterceptor):  # type: ignore[misc]
        def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
            if details.timeout is None:
                details = CallDetails(
                    **{**{f: getattr(details, f, None) for f in fields}, "timeout": timeout_s}
                )
            return continuation(details, request)

    return Deadline()


def grpc_proxy_server(storage: Any, host: str, port: int, thread_pool: Any) -> Any:
    """Optuna's gRPC storage proxy server for ``storage``, bound and not yet started.

    Private: the public ``run_grpc_proxy_server`` builds this same server with ``make_server``,
    then blocks with no handle on it, so a Ctrl-C could only kill it mid-request. With the server
    ``tuner storage-proxy`` stops it with ``stop(grace)``: requests in flight finish first. A port
    that cannot be bound (in use, or an address not this machine's) is one line, exit 2.
    """
    from optuna.storages._grpc.server import make_server

    from tuner.errors import UsageError

    try:
        return make_server(storage, host, port, thread_pool)
    except RuntimeError as error:  # grpc: "Failed to bind to address ..."
        raise UsageError(
            f"cannot listen on {host}:{port} ({str(error).strip() or 'bind failed'}): the port is in "
            "use, or the address is not one of this machine's; choose another with --host/--port"
        ) from None


# -- reading a whole study fast: Optuna's tables, read with plain SELECTs --------------------------
#
# Why: ``Study.get_trials`` builds every ``FrozenTrial`` with all its intermediate values through
# the ORM (about 14 s for 10,000 trials of 50 evaluations), and ``RDBStorage`` creates its tables
# in an empty database, which a reader must never do. The report needs the trials' values,
# parameters and user attributes, and intermediate values only of the few trials it plots. These
# queries read the schema Optuna's alembic revision ``KNOWN_SCHEMAS`` describes (the one of
# Optuna 4.x and 5.x); ``stored.StorageReader`` falls back to the public API on any other.
# A connection is SQLAlchemy's, or for an SQLite file ``sqlite3``'s (``_rows`` runs the same SQL on
# both): a report of 10,000 trials then spends no third of a second importing SQLAlchemy and
# wrapping its ~200,000 rows in ``Row`` objects.

KNOWN_SCHEMAS = frozenset({"v3.2.0.a"})
_VALUE_TYPES = {"INF_POS": float("inf"), "INF_NEG": float("-inf"), "NAN": float("nan")}


def _rows(connection: Any, sql: str, params: dict[str, Any] | None = None) -> list[Any]:
    """Every row of ``sql`` (``:name`` parameters) on a ``sqlite3`` or a SQLAlchemy connection."""
    import sqlite3

    if isinstance(connection, sqlite3.Connection):
        return connection.execute(sql, params or {}).fetchall()
    from sqlalchemy import text

    return list(connection.execute(text(sql), params or {}).all())


def _when(value: Any) -> datetime | None:
    """A stored time: a ``datetime`` from a server's driver, the text SQLite keeps otherwise."""
    return datetime.fromisoformat(value) if isinstance(value, str) else value


def schema_known(connection: Any) -> bool | None:
    """True: a schema these queries read; False: Optuna's, another revision; None: not Optuna's."""
    import sqlite3

    if isinstance(connection, sqlite3.Connection):
        tables = {row[0] for row in _rows(connection, "SELECT name FROM sqlite_master WHERE type = 'table'")}
    else:
        from sqlalchemy import inspect

        tables = set(inspect(connection).get_table_names())
    if not {"studies", "trials", "alembic_version"} <= tables:
        return None
    revisions = {row[0] for row in _rows(connection, "SELECT version_num FROM alembic_version")}
    return bool(revisions) and revisions <= KNOWN_SCHEMAS


def select_study_names(connection: Any) -> list[str]:
    return [row[0] for row in _rows(connection, "SELECT study_name FROM studies ORDER BY study_id")]


def select_study(connection: Any, name: str) -> tuple[int, str, dict[str, Any]] | None:
    """``(study_id, direction, user_attrs)`` of the study ``name``; None if there is none."""
    import json

    found = _rows(connection, "SELECT study_id FROM studies WHERE study_name = :name", {"name": name})
    if not found:
        return None
    study_id = int(found[0][0])
    directions = _rows(
        connection,
        "SELECT direction FROM study_directions WHERE study_id = :id ORDER BY objective",
        {"id": study_id},
    )
    attrs = {
        key: json.loads(value)
        for key, value in _rows(
            connection,
            'SELECT "key", value_json FROM study_user_attributes WHERE study_id = :id',
            {"id": study_id},
        )
    }
    return study_id, (str(directions[0][0]).lower() if directions else "minimize"), attrs


def _decode(value: float | None, kind: str) -> float | None:
    return _VALUE_TYPES.get(kind, value) if value is not None or kind in _VALUE_TYPES else None


def select_trials(connection: Any, study_id: int) -> list[dict[str, Any]]:
    """Every trial of the study as ``StoredTrial`` fields, in trial-number order: four queries,
    whatever the number of trials (never one per trial)."""
    import json

    where = {"id": study_id}
    rows: dict[int, dict[str, Any]] = {}
    for trial_id, number, state, started, completed in _rows(
        connection,
        "SELECT trial_id, number, state, datetime_start, datetime_complete FROM trials "
        "WHERE study_id = :id ORDER BY number",
        where,
    ):
        rows[trial_id] = {
            "number": int(number),
            "state": str(state),
            "value": None,
            "params": {},
            "user_attrs": {},
            "datetime_start": _when(started),
            "datetime_complete": _when(completed),
        }
    for trial_id, value, kind in _rows(
        connection,
        "SELECT v.trial_id, v.value, v.value_type FROM trial_values v JOIN trials t "
        "ON t.trial_id = v.trial_id WHERE t.study_id = :id AND v.objective = 0",
        where,
    ):
        if trial_id in rows:
            rows[trial_id]["value"] = _decode(value, kind)
    external: dict[str, Callable[[float], Any]] = {}
    for trial_id, name, value, distribution in _rows(
        connection,
        "SELECT p.trial_id, p.param_name, p.param_value, p.distribution_json FROM trial_params p "
        "JOIN trials t ON t.trial_id = p.trial_id WHERE t.study_id = :id",
        where,
    ):
        if distribution not in external:
            external[distribution] = _to_external(distribution)
        if trial_id in rows:
            rows[trial_id]["params"][name] = external[distribution](value)
    attrs = _rows(
        connection,
        'SELECT a.trial_id, a."key", a.value_json FROM trial_user_attributes a '
        "JOIN trials t ON t.trial_id = a.trial_id WHERE t.study_id = :id",
        where,
    )
    # every value is JSON text: decoded as one array, one call instead of one per attribute
    # (10,000 trials hold ~160,000: a quarter of a second of tuner report's two)
    values = json.loads("[" + ",".join(value for _, _, value in attrs) + "]") if attrs else []
    for (trial_id, key, _), value in zip(attrs, values, strict=True):
        if trial_id in rows:
            rows[trial_id]["user_attrs"][key] = value
    return list(rows.values())


def _to_external(distribution_json: str) -> Callable[[float], Any]:
    """How a parameter's stored value becomes the value the trial was given, read from the JSON of
    its distribution: what ``json_to_distribution(...).to_external_repr`` returns (a choice by its
    index, an int, a float as stored), without importing Optuna (a third of a second of every
    ``tuner report``, which otherwise needs none of it). A distribution this does not know is
    Optuna's to decode."""
    import json

    document = json.loads(distribution_json)
    # Optuna's name for the distribution (or a deprecated one), or the short form's type
    kind = document.get("name") or document.get("type")
    if kind in ("CategoricalDistribution", "categorical"):
        choices = list(document.get("attributes", document)["choices"])
        return lambda value: choices[int(value)]
    if kind in ("IntDistribution", "IntUniformDistribution", "IntLogUniformDistribution", "int"):
        return int
    if kind in ("FloatDistribution", "float") or str(kind).endswith("UniformDistribution"):
        return float
    from optuna.distributions import json_to_distribution

    return json_to_distribution(distribution_json).to_external_repr


def select_intermediate_values(
    connection: Any, study_id: int, numbers: list[int]
) -> dict[int, dict[int, float]]:
    """Trial number -> {step: value} for the given trial numbers of the study."""
    # the numbers are written into the query (whole numbers, so nothing else can be): no limit on
    # how many a query may bind (999 in older SQLite builds)
    listed = ", ".join(str(int(number)) for number in numbers)
    query = (
        "SELECT t.number, i.step, i.intermediate_value, i.intermediate_value_type "
        "FROM trial_intermediate_values i JOIN trials t ON t.trial_id = i.trial_id "
        f"WHERE t.study_id = :id AND t.number IN ({listed}) ORDER BY t.number, i.step"
    )
    curves: dict[int, dict[int, float]] = {number: {} for number in numbers}
    for number, step, value, kind in _rows(connection, query, {"id": study_id}):
        decoded = _decode(value, kind)
        if decoded is not None:
            curves[int(number)][int(step)] = decoded
    return curves


def skew_optuna_stamps() -> None:
    """Private, tests only: make Optuna's trial stamps (``datetime_start``/``datetime_complete``)
    use ``tuner._clock`` when a test sets ``TUNER_TEST_CLOCK_OFFSET_S``: what a worker on a machine
    whose clock is off would write. Optuna stamps with ``datetime.now()`` inside its RDB storage
    module, with no public hook; a no-op without the test setting."""
    from datetime import datetime, timedelta

    from tuner import _clock

    offset = _clock.offset_s()
    if not offset:
        return
    from optuna.storages._rdb import storage as rdb

    class _SkewedDatetime(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:  # type: ignore[override]
            return datetime.now(tz) + timedelta(seconds=offset)

    rdb.datetime = _SkewedDatetime  # type: ignore[misc]
