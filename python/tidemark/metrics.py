"""Metrics for Prometheus: a text exposition and a ``prometheus_client`` collector,
with stable metric names, for pipeline operators, reorder operators and the three
watermark trackers.

>>> import pyarrow as pa, tidemark as tm
>>> from tidemark.metrics import prometheus_text
>>> pipe = tm.Pipeline(key="k", event_time="ts", event_time_type="unixtimestamp_ms",
...                    watermark=tm.BoundedOutOfOrderness("1s", per="key"),
...                    window=tm.Tumbling("10s"), aggs={"n": tm.count()})
>>> op = pipe.operator(cores=2)
>>> _ = op.process(pa.table({"k": ["a", "b", "c"], "ts": [1_000, 2_000, 3_000]}))
>>> text = prometheus_text(op)
>>> 'tidemark_rows_in_total 3' in text
True
>>> sum(int(line.split()[-1]) for line in text.splitlines()
...     if line.startswith("tidemark_partition_records_processed{"))
3
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

from tidemark.operator import Operator


def _pairs(text: str) -> Iterator[tuple[list[str], str]]:
    """Each series of a table: its line's words, and its help (the indented line
    below it)."""
    lines = text.strip().splitlines()
    for head, help_ in zip(lines[::2], lines[1::2], strict=True):
        yield head.split(), help_.strip()


def _table(text: str) -> list[tuple[str, str, str, str]]:
    """Series from lines ``metric type key``, each with its help below it, as
    ``(metric, help, type, key)``."""
    return [(metric, help_, kind, key) for (metric, kind, key), help_ in _pairs(text)]


def _core_table(text: str) -> list[tuple[str, str, str, str, float]]:
    """Per-core series from lines ``metric type key scale``, each with its help below."""
    return [(m, help_, kind, key, float(scale)) for (m, kind, key, scale), help_ in _pairs(text)]


# (metric, help, type, key in the per-core dict, scale)
_CORE: list[tuple[str, str, str, str, float]] = _core_table(
    """
tidemark_partition_records_processed counter records_processed 1.0
    Input rows routed to this core (partition).
tidemark_partition_processing_time_seconds counter processing_time_us 1e-06
    Time this core spent working.
tidemark_partition_queue_depth gauge queue_depth 1.0
    Messages waiting in this core's queue.
tidemark_partition_channel_utilization gauge channel_utilization 1.0
    Queue depth over capacity (0-1).
tidemark_partition_utilization gauge utilization 1.0
    Share of wall time this core was busy (0-1).
tidemark_partition_backpressure_events counter backpressure_events 1.0
    Times the router waited on this core's full queue.
"""
)
_LATENCY = ("tidemark_partition_latency_seconds", "Batch latency per core (ingest to close).")
_BACKPRESSURE = ("healthy", "warning", "critical", "saturated")
# (metric, help, type, key in metrics()): one series each, where the key is present
# and not None.
_Series = list[tuple[str, str, str, str]]
_OPERATOR: _Series = _table(
    """
tidemark_rows_in_total counter rows_in
    Input rows.
tidemark_late_dropped_total counter late_dropped_count
    Rows behind the watermark.
tidemark_rows_error_total counter rows_error
    Rows sent to the error output.
tidemark_windows_emitted_total counter windows_emitted
    Final window results emitted.
tidemark_updates_emitted_total counter updates_emitted
    Window updates emitted (on_update).
tidemark_batches_total counter batches
    Batches processed.
tidemark_retractions_emitted_total counter retractions_emitted
    Retraction rows emitted (on_update).
tidemark_windows_closed_by_watermark_total counter windows_closed_by_watermark
    Windows closed by the watermark.
tidemark_windows_closed_by_timer_total counter windows_closed_by_timer
    Windows closed by an idle key's timer.
tidemark_sessions_closed_by_watermark_total counter sessions_closed_by_watermark
    Sessions closed by the watermark.
tidemark_sessions_closed_by_timer_total counter sessions_closed_by_timer
    Sessions closed by an idle key's timer.
tidemark_sessions_merged_total counter sessions_merged
    Sessions merged by a bridging event.
tidemark_windows_flushed_total counter windows_flushed
    Windows closed by flush().
tidemark_windows_evicted_total counter windows_evicted
    Windows closed early for an evicted key (max_keys).
tidemark_keys_evicted_total counter keys_evicted
    Keys evicted at max_keys.
tidemark_keys_expired_total counter keys_expired
    Keys dropped by state_ttl.
tidemark_windows_expired_total counter windows_expired
    Windows dropped by state_ttl.
tidemark_rows_unmatched_total counter rows_unmatched
    Rows whose lookup found no match.
tidemark_windows_open gauge windows_open
    Windows held in state.
tidemark_keys gauge keys
    Keys held in state.
tidemark_active_keys gauge active_keys
    Keys taking part in the watermark.
tidemark_idle_keys gauge idle_keys
    Keys idle (not holding the watermark back).
tidemark_watermark_microseconds gauge watermark
    The operator's watermark.
tidemark_delay_state_bytes gauge delay_state_bytes
    Bytes of the delays keys learn (AdaptiveOutOfOrderness).
"""
)
_REORDER: _Series = _table(
    """
tidemark_reorder_rows_in_total counter rows_in
    Input rows.
tidemark_reorder_rows_released_total counter rows_released
    Rows released in event-time order.
tidemark_reorder_late_dropped_total counter late_dropped_count
    Rows behind the emitted watermark.
tidemark_reorder_rows_error_total counter rows_error
    Rows sent to the error output.
tidemark_reorder_batches_total counter batches
    Batches processed.
tidemark_reorder_watermarks_emitted_total counter watermark_emitted_count
    Watermarks emitted.
tidemark_reorder_buffer_size gauge buffer_size
    Rows waiting in the buffer.
tidemark_reorder_buffer_bytes gauge buffer_bytes
    Bytes of the buffered rows.
tidemark_reorder_max_timestamp_seen_microseconds gauge max_timestamp_seen
    Largest event time seen.
tidemark_reorder_watermark_microseconds gauge watermark
    The emitted watermark.
"""
)
_KEYED: _Series = _table(
    """
tidemark_keyed_keys gauge total_keys
    Keys tracked.
tidemark_keyed_active_keys gauge active_keys
    Keys taking part in the global watermark.
tidemark_keyed_idle_keys gauge idle_keys
    Idle keys.
tidemark_keyed_evicted_keys_total counter evicted_keys
    Keys evicted at max_keys.
tidemark_keyed_global_advances_total counter global_advances
    Rises of the global watermark.
tidemark_keyed_key_advances_total counter key_advances
    Rises of a key's watermark.
tidemark_keyed_global_watermark gauge global_watermark
    The global watermark (minimum over active keys).
"""
)
_COMPACT: _Series = _table(
    """
tidemark_compact_exact_keys gauge exact_keys
    Keys tracked exactly.
tidemark_compact_evicted_keys_total counter evicted_keys
    Keys moved to the sketch.
tidemark_compact_distinct_keys gauge estimated_distinct_keys
    Distinct keys seen (HyperLogLog estimate).
tidemark_compact_sketch_fill gauge sketch_fill
    Share of sketch buckets holding a value (0-1).
tidemark_compact_global_watermark gauge global_watermark
    The exact part's global watermark.
"""
)
_PARTITIONED: _Series = _table(
    """
tidemark_source_partitions gauge total_partitions
    Source partitions tracked.
tidemark_source_active_partitions gauge active_partitions
    Partitions taking part in the watermark.
tidemark_source_idle_partitions gauge idle_partitions
    Idle partitions.
tidemark_source_watermark_advances_total counter watermark_advances
    Rises of the combined watermark.
tidemark_source_rebalances_total counter rebalances
    Partitions added or removed.
tidemark_source_watermark gauge watermark
    The combined watermark.
"""
)


def _kind(obj: Any) -> tuple[_Series, dict[str, Any]]:
    """The series of ``obj``'s kind and its metrics (trackers' watermarks added)."""
    from tidemark.reorder import ProcessingTimeWatermark, Reorder
    from tidemark.watermarks import (
        CompactKeyedWatermarkTracker,
        KeyedWatermarkTracker,
        PartitionedWatermarkTracker,
    )

    if isinstance(obj, Operator):
        return _OPERATOR, obj.metrics()
    if _is_stream_processor(obj):
        return _STREAM, _stream_metrics(obj)
    if isinstance(obj, (Reorder, ProcessingTimeWatermark)):
        return _REORDER, obj.metrics()
    if isinstance(obj, KeyedWatermarkTracker):
        return _KEYED, {**obj.metrics(), "global_watermark": obj.global_watermark()}
    if isinstance(obj, CompactKeyedWatermarkTracker):
        return _COMPACT, {**obj.metrics(), "global_watermark": obj.global_watermark()}
    if isinstance(obj, PartitionedWatermarkTracker):
        return _PARTITIONED, {**obj.metrics(), "watermark": obj.current_watermark()}
    raise TypeError(
        "metrics for Prometheus come from a pipeline Operator, a StreamProcessor, a "
        "Reorder or ProcessingTimeWatermark, or a Keyed, CompactKeyed or Partitioned "
        f"WatermarkTracker; got {type(obj).__name__}"
    )


_STREAM: _Series = _table(
    """
tidemark_stream_batch_id gauge batch_id
    The last micro-batch finished.
tidemark_stream_batch_input_rows gauge input_rows
    Input rows of the last micro-batch.
tidemark_stream_batch_late_rows gauge late_rows
    Late rows of the last micro-batch.
tidemark_stream_watermark_microseconds gauge next_watermark
    The watermark the next micro-batch begins with.
"""
)


def _is_stream_processor(obj: Any) -> bool:
    # A StreamProcessor's module is loaded wherever one exists (and pyspark with it).
    streaming = sys.modules.get("tidemark.spark.streaming")
    return streaming is not None and isinstance(obj, streaming.StreamProcessor)


def _stream_metrics(proc: Any) -> dict[str, Any]:
    """A StreamProcessor's last micro-batch (``last_progress``; nothing before the
    first), with its ``LatenessReport`` (the stream so far)."""
    return dict(proc.last_progress or {})


def _cores(metrics: dict[str, Any]) -> list[dict[str, Any]]:
    cores = metrics.get("cores")
    if cores is not None:
        return list(cores)
    # One core: the calling thread did all the work.
    return [
        {
            "core": 0,
            "records_processed": metrics["rows_in"],
            "processing_time_us": 0,
            "queue_depth": 0,
            "channel_utilization": 0.0,
            "utilization": 0.0,
            "backpressure": "healthy",
            "backpressure_events": 0,
            "latency_p50_us": 0,
            "latency_p95_us": 0,
            "latency_p99_us": 0,
        }
    ]


def _samples(obj: Any) -> Iterator[tuple[str, str, str, list[tuple[dict[str, str], float]]]]:
    series, m = _kind(obj)
    for name, help_, kind, key in series:
        if m.get(key) is not None:
            yield name, help_, kind, [({}, float(m[key]))]
    if series is _STREAM and m.get("lateness") is not None:
        yield from _lateness_samples(m["lateness"])
    if series is not _OPERATOR:
        return
    cores = _cores(m)
    for name, help_, kind, key, scale in _CORE:
        yield (
            name,
            help_,
            kind,
            [({"partition": str(c["core"])}, float(c[key]) * scale) for c in cores],
        )
    yield (
        "tidemark_partition_backpressure_state",
        "1 for the core's current backpressure state.",
        "gauge",
        [
            ({"partition": str(c["core"]), "state": s}, 1.0 if c["backpressure"] == s else 0.0)
            for c in cores
            for s in _BACKPRESSURE
        ],
    )
    if m.get("lateness") is not None:
        yield from _lateness_samples(m["lateness"])
    yield (
        _LATENCY[0],
        _LATENCY[1],
        "gauge",
        [
            ({"partition": str(c["core"]), "quantile": q}, c[f"latency_{p}_us"] / 1e6)
            for c in cores
            for q, p in (("0.5", "p50"), ("0.95", "p95"), ("0.99", "p99"))
        ],
    )


_QUANTILES = (("0.5", "p50"), ("0.9", "p90"), ("0.99", "p99"), ("0.999", "p999"))


def _lateness_samples(
    rep: dict[str, Any],
) -> Iterator[tuple[str, str, str, list[tuple[dict[str, str], float]]]]:
    """A lateness report's series (``LatenessReport``): the stream's, the top keys'
    and the source partitions'."""
    for name, help_, key in (
        ("rows", "Rows the lateness report counted.", "rows"),
        ("late_rows", "Rows judged late.", "late_rows"),
        ("spark_dropped", "Rows Spark's global watermark would have dropped.", "spark_dropped"),
        ("spark_kept", "Rows Spark would have dropped that tidemark kept.", "spark_kept"),
    ):
        yield f"tidemark_lateness_{name}_total", help_, "counter", [({}, float(rep[key]))]

    def behind(labels: dict[str, str], e: dict[str, Any]) -> list[tuple[dict[str, str], float]]:
        return [
            ({**labels, "quantile": q}, float(e[f"behind_{p}_s"]))
            for q, p in _QUANTILES
            if e[f"behind_{p}_s"] is not None
        ]

    yield (
        "tidemark_lateness_behind_seconds",
        "How far behind its key's newest event a row arrived (quantiles).",
        "gauge",
        behind({}, rep),
    )
    for scope, label, rows in (
        ("key", "key", rep["keys"]),
        ("source_partition", "partition", rep["partitions"]),
    ):
        what = "its key's newest event" if scope == "key" else "the stream's newest event"
        yield (
            f"tidemark_{scope}_lateness_behind_seconds",
            f"How far behind {what} a row arrived, per {label} (top keys).",
            "gauge",
            [s for e in rows for s in behind({label: str(e[label])}, e)],
        )
        for name, help_ in (
            ("late_rows", "late rows"),
            ("spark_kept", "rows Spark would have dropped that tidemark kept"),
        ):
            yield (
                f"tidemark_{scope}_lateness_{name}_total",
                f"Per {label}: {help_}.",
                "counter",
                [({label: str(e[label])}, float(e[name])) for e in rows],
            )


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items()) + "}"


def _fmt(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else repr(float(v))


def prometheus_text(obj: Any) -> str:
    """The metrics of ``obj`` (a pipeline operator, a ``StreamProcessor``: its last
    micro-batch and lateness report, a reorder operator or a watermark tracker) in the
    Prometheus text exposition format. Raises ``TypeError`` for anything else."""
    out: list[str] = []
    for name, help_, kind, samples in _samples(obj):
        out.append(f"# HELP {name} {help_}")
        out.append(f"# TYPE {name} {kind}")
        out.extend(f"{name}{_labels(labels)} {_fmt(v)}" for labels, v in samples)
    return "\n".join(out) + "\n"


class PrometheusCollector:
    """A ``prometheus_client`` collector for a pipeline operator, a reorder operator
    or a watermark tracker (the series of :func:`prometheus_text`)::

        from prometheus_client import REGISTRY
        REGISTRY.register(tidemark.metrics.PrometheusCollector(op))

    Needs the ``prometheus_client`` package (``pip install prometheus_client``).
    """

    def __init__(self, obj: Any) -> None:
        _kind(obj)  # refuses what has no metrics here now, not at the first scrape
        self._op = obj

    def collect(self) -> Iterator[Any]:
        """Yields one metric family per tidemark metric (called by the registry)."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        for name, help_, kind, samples in _samples(self._op):
            keys = sorted({k for labels, _ in samples for k in labels})
            family: Any
            if kind == "counter":
                family = CounterMetricFamily(name.removesuffix("_total"), help_, labels=keys)
            else:
                family = GaugeMetricFamily(name, help_, labels=keys)
            for labels, v in samples:
                family.add_metric([labels[k] for k in keys], v)
            yield family
