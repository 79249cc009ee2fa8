"""Ready sinks for :class:`~tidemark.spark.StreamProcessor` and
:class:`~tidemark.spark.ReorderStream`."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from tidemark.errors import ConfigError

__all__ = ["delta_sink"]


def delta_sink(
    path: str | os.PathLike[str],
    *,
    app_id: str | None = None,
    partition_by: Sequence[str] = (),
    options: dict[str, str] | None = None,
) -> Callable[[Any, int], None]:
    """A sink that appends each micro-batch's rows to the Delta table at ``path``
    exactly once.

    Every write is one of Delta's idempotent writes: it carries ``txnAppId`` (``app_id``)
    and ``txnVersion`` (the micro-batch id), and Delta skips a write whose version the
    table already holds for that application. A micro-batch that Spark runs again after
    a restart (its sink wrote, the query died before committing the batch) adds
    nothing twice; a sink that died mid-write left no commit, so the replay writes it.

    Parameters
    ----------
    path : str or os.PathLike
        The table's location (created by the first write).
    app_id : str, optional
        The application id of the table's writes: one per query writing the table,
        the same across the query's restarts. Default: ``"tidemark:" + path``.
    partition_by : sequence of str
        Partition columns of a new table.
    options : dict, optional
        More Delta writer options (e.g. ``{"mergeSchema": "true"}``).

    Needs Delta Lake in the session (``delta-spark``; see the deployment guide). The
    sink takes Spark DataFrames: use it without ``arrow_sinks``.

    A Delta commit takes most of a second however few its rows: once the table exists
    (written by this sink in this process, or a local table with its ``_delta_log``),
    the sink skips a micro-batch with no rows for the table where that is known without
    a Spark job (rows the driver computed, as ``StreamProcessor`` does for a small
    micro-batch). A late-rows or error table then gets a commit only when it has rows,
    also after a restart.

    Examples
    --------
    >>> proc = StreamProcessor(pipe, "/state", sink=delta_sink("/tables/windows"),  # doctest: +SKIP
    ...                        late_sink=delta_sink("/tables/late"))
    """
    where = os.fspath(path)
    app = app_id if app_id is not None else f"tidemark:{where}"
    extra = dict(options or {})
    for reserved in ("txnAppId", "txnVersion"):
        if reserved in extra:
            raise ConfigError(
                f"delta_sink sets {reserved} itself (the micro-batch id makes the write "
                "idempotent): leave it out of options"
            )

    wrote = False

    def write(df: Any, batch_id: int) -> None:
        nonlocal wrote
        if not hasattr(df, "write"):
            raise ConfigError(
                f"delta_sink writes Spark DataFrames, got {type(df).__name__}: build the "
                "processor without arrow_sinks=True"
            )
        if (wrote or _local_table(where)) and _known_empty(df):
            return
        writer = (
            df.write.format("delta")
            .mode("append")
            .option("txnAppId", app)
            .option("txnVersion", str(batch_id))
        )
        for k, v in extra.items():
            writer = writer.option(k, v)
        if partition_by:
            writer = writer.partitionBy(*partition_by)
        writer.save(where)
        wrote = True

    return write


def _local_table(where: str) -> bool:
    """Whether ``where`` is a Delta table on the local file system (a plain path or a
    ``file:`` URI holding ``_delta_log``); ``False`` for any other store."""
    path = where.removeprefix("file://").removeprefix("file:")
    if "://" in path:
        return False
    return os.path.isdir(os.path.join(path, "_delta_log"))


def _known_empty(df: Any) -> bool:
    """Whether ``df`` holds no rows, where its rows are on the driver (a local relation:
    asking runs no Spark job); ``False`` where that is not known so cheaply."""
    try:
        return bool(df._jdf.isLocal()) and bool(df.isEmpty())
    except Exception:  # Spark Connect (no JVM handle), or a plan that cannot say
        return False
