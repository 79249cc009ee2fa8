"""Operator metrics for Prometheus: a text exposition and a ``prometheus_client``
collector, with the seed's metric names.

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

from collections.abc import Iterator
from typing import Any

from tidemark.pipeline import Operator

# (metric, help, type, key in the per-core dict, scale)
_CORE: list[tuple[str, str, str, str, float]] = [
    (
        "tidemark_partition_records_processed",
        "Input rows routed to this core (partition).",
        "counter",
        "records_processed",
        1.0,
    ),
    (
        "tidemark_partition_processing_time_seconds",
        "Time this core spent working.",
        "counter",
        "processing_time_us",
        1e-6,
    ),
    (
        "tidemark_partition_queue_depth",
        "Messages waiting in this core's queue.",
        "gauge",
        "queue_depth",
        1.0,
    ),
    (
        "tidemark_partition_channel_utilization",
        "Queue depth over capacity (0-1).",
        "gauge",
        "channel_utilization",
        1.0,
    ),
    (
        "tidemark_partition_utilization",
        "Share of wall time this core was busy (0-1).",
        "gauge",
        "utilization",
        1.0,
    ),
    (
        "tidemark_partition_backpressure_events",
        "Times the router waited on this core's full queue.",
        "counter",
        "backpressure_events",
        1.0,
    ),
]
_LATENCY = ("tidemark_partition_latency_seconds", "Batch latency per core (ingest to close).")
_BACKPRESSURE = ("healthy", "warning", "critical", "saturated")
_TOTALS: list[tuple[str, str, str]] = [
    ("tidemark_rows_in_total", "Input rows.", "rows_in"),
    ("tidemark_late_dropped_total", "Rows behind the watermark.", "late_dropped_count"),
    ("tidemark_rows_error_total", "Rows sent to the error output.", "rows_error"),
    ("tidemark_windows_emitted_total", "Final window results emitted.", "windows_emitted"),
    ("tidemark_updates_emitted_total", "Window updates emitted (on_update).", "updates_emitted"),
]


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


def _samples(op: Operator) -> Iterator[tuple[str, str, str, list[tuple[dict[str, str], float]]]]:
    m = op.metrics()
    for name, help_, key in _TOTALS:
        yield name, help_, "counter", [({}, float(m[key]))]
    wm = m.get("watermark")
    if wm is not None:
        yield "tidemark_watermark_microseconds", "The operator's watermark.", "gauge", [({}, wm)]
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


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def _fmt(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else repr(float(v))


def prometheus_text(op: Operator) -> str:
    """The operator's metrics in the Prometheus text exposition format."""
    out: list[str] = []
    for name, help_, kind, samples in _samples(op):
        out.append(f"# HELP {name} {help_}")
        out.append(f"# TYPE {name} {kind}")
        out.extend(f"{name}{_labels(labels)} {_fmt(v)}" for labels, v in samples)
    return "\n".join(out) + "\n"


class PrometheusCollector:
    """A ``prometheus_client`` collector for an operator::

        from prometheus_client import REGISTRY
        REGISTRY.register(tidemark.metrics.PrometheusCollector(op))

    Needs the ``prometheus_client`` package (``pip install prometheus_client``).
    """

    def __init__(self, op: Operator) -> None:
        self._op = op

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
