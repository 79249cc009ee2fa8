"""Lateness a user can see: per key and per source partition, how far behind rows
arrive, how many were late and by how much, and what Spark would have dropped.

>>> import pyarrow as pa, tidemark as tm
>>> pipe = tm.Pipeline(
...     key="device", event_time="ts", event_time_type="unixtimestamp_ms",
...     watermark=tm.BoundedOutOfOrderness("5s", per="key"),
...     window=tm.Tumbling("10s"), aggs={"n": tm.count()},
...     lateness=tm.LatenessReport(top=5, spark_delay="5s"),
... )
>>> op = pipe.operator()
>>> _ = op.process(pa.table({"device": ["a", "b"], "ts": [60_000, 10_000]}))
>>> _ = op.process(pa.table({"device": ["a", "b"], "ts": [62_000, 12_000]}))
>>> # Device b runs 50 s behind a. Per key its rows are on time; Spark's one
>>> # watermark (60 s - 5 s, from the batch before) would drop them.
>>> _ = op.process(pa.table({"device": ["b", "b"], "ts": [13_000, 9_000]}))
>>> rep = op.metrics()["lateness"]
>>> rep["rows"], rep["late_rows"], rep["spark_dropped"], rep["spark_kept"]
(6, 0, 2, 2)
>>> [(k["key"], k["behind_max_s"], k["spark_kept"]) for k in rep["keys"]]
[('b', 3.0, 2), ('a', 0.0, 0)]
"""

from __future__ import annotations

from dataclasses import dataclass

from tidemark._duration import Duration, to_micros
from tidemark.errors import ConfigError

_EVERY_KEY = 2**32 - 1  # the core's count of keys listed: u32


@dataclass(frozen=True)
class LatenessReport:
    """Keep a lateness report (``Pipeline(lateness=...)``), read from
    ``Operator.metrics()["lateness"]``, ``StreamProcessor.last_progress["lateness"]``
    and the Prometheus exporter.

    Per key and per source partition (partition scope), and over the stream:

    * ``rows``; ``behind_p50_s`` ... ``behind_p999_s``, ``behind_max_s``: how far
      behind its rows arrive, in seconds. Per key: behind the key's own largest event
      time as the row's batch began (the delay the key needs); per source partition:
      behind the stream's largest event time (how far the partition lags).
    * ``late_rows``; ``late_by_p50_s``, ``late_by_p99_s``, ``late_by_max_s``: rows
      judged late, and how far behind the watermark that judged them.
    * ``spark_dropped`` and ``spark_kept`` (with ``spark_delay``): the rows Spark's
      one global watermark (``withWatermark(ts, spark_delay)``, the stream's largest
      event time less the delay, as the previous batch began) would have dropped, and
      of those the rows this pipeline kept.

    Quantiles are bucket bounds (0, then 1 ms, 2 ms, 5 ms, 10 ms, ... 50,000 s;
    never above the largest seen), the same on every machine, summed over cores and
    state partitions. Counted per batch from the state as the batch began, so the
    same batches give the same report whatever the row order, cores or state
    partitions. ``keys`` lists the ``top`` keys furthest behind (99th percentile,
    then late rows, then rows Spark would drop, then key). State: 232 bytes per key
    (in snapshots); a key evicted (``max_keys``) or expired (``state_ttl``) leaves the
    report. Spark's fold (``preaggregate``) does not apply: it keeps no row's own
    event time.

    Parameters
    ----------
    top : int or None
        Keys listed (the furthest behind first); ``None``: every key in the state, to
        find each key that lost rows to Spark's rule
        (``[k for k in report["keys"] if k["spark_dropped"]]``); a report's size then
        grows with the keys.
    spark_delay : str, timedelta, int or None
        The delay of the Spark query to compare with (``withWatermark``'s; ints are
        microseconds); ``None``: no comparison.
    """

    top: int | None = 10
    spark_delay: Duration | None = None

    def __post_init__(self) -> None:
        top = self.top
        if top is not None and (isinstance(top, bool) or not isinstance(top, int) or top < 0):
            raise ConfigError(f"LatenessReport top must be an int >= 0 or None, got {top!r}")
        if self.spark_delay is not None:
            to_micros(self.spark_delay, "lateness.spark_delay")

    def core_config(self) -> tuple[int, int | None]:
        """(top, Spark's delay in microseconds or ``None``): the core's settings."""
        spark = None if self.spark_delay is None else to_micros(self.spark_delay, "spark_delay")
        return _EVERY_KEY if self.top is None else min(self.top, _EVERY_KEY), spark
