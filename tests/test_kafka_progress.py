"""Progress on a real Kafka topic from its offsets: the partitions a micro-batch's
offsets name hold the per-partition watermark from the first micro-batch (and those
added mid-stream join it), and a partition whose records wait unread is never idle.
Each run is compared with the same micro-batches through the standalone operator
without the offsets (what the rows alone tell)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import tidemark as tm
from test_kafka import end_of_data, kafka_stream, produce_rows, topic_name
from tidemark.spark import StreamProcessor

pytestmark = pytest.mark.spark

T0 = 1_767_225_600_000  # ms


def readings(partition: int, devices: int, start_s: int, end_s: int) -> pa.Table:
    """``devices`` devices of ``partition``, each reporting once a second from
    ``start_s`` to ``end_s`` (seconds from ``T0``), in time order."""
    rows = [
        {"device": f"p{partition}-d{d}", "ts": T0 + s * 1000 + d, "value": 1}
        for s in range(start_s, end_s)
        for d in range(devices)
    ]
    return pa.Table.from_pylist(rows)


class Run:
    """A :class:`StreamProcessor` over a topic, its outputs as Arrow, and each
    micro-batch's rows kept for the operator run beside it."""

    def __init__(self, pipe: tm.Pipeline, tmp_path: Path) -> None:
        self.pipe = pipe
        self.windows: list[pa.Table] = []
        self.late: list[pa.Table] = []
        self.batches: list[pa.Table] = []
        #: Each micro-batch's source partitions as its driver record has them.
        self.sources: list[Any] = []
        #: What the offsets say for a column that is not the source's partition column.
        self.not_partition: list[Any] = []
        self.proc = StreamProcessor(
            pipe,
            str(tmp_path / "state"),
            2,
            sink=lambda t, _b: self.windows.append(t),
            late_sink=lambda t, _b: self.late.append(t),
            arrow_sinks=True,
        )

    def __call__(self, df: Any, batch_id: int) -> None:
        from tidemark.spark._files import micro_batch_plan
        from tidemark.spark._kafka import source_view

        self.not_partition.append(source_view(micro_batch_plan(df), "value"))
        df = df.persist()  # read from Kafka once: for the operator and the processor
        self.batches.append(df.toArrow())
        self.proc(df, batch_id)
        df.unpersist()
        rec = self.proc.store.last_record()
        self.sources.append(None if rec is None else rec.source)

    def counted(self) -> dict[tuple[str, int], int]:
        """(device, window start) -> count, end markers left out; a window twice fails."""
        got: dict[tuple[str, int], int] = {}
        for t in self.windows:
            for r in t.filter(pc.field("device") != "end").to_pylist():
                key = (r["device"], r["window_start"])
                assert key not in got, f"window {key} emitted twice"
                got[key] = r["n"]
        return got

    def late_rows(self) -> int:
        return sum(t.num_rows for t in self.late)

    def operator_late_rows(self, pipe: tm.Pipeline) -> int:
        """Late rows of ``pipe``'s standalone operator fed the same micro-batches."""
        op = pipe.operator()
        return sum(op.process(b).late.num_rows for b in self.batches)


def pipeline(idle_timeout: str, **declared: Any) -> tm.Pipeline:
    """Per device, 10 s windows counted, a watermark per source partition 5 s behind."""
    return tm.Pipeline(
        key="device",
        event_time="ts",
        watermark=tm.BoundedOutOfOrderness(
            "5s", per="partition", idle_timeout=idle_timeout, **declared
        ),
        window=tm.Tumbling("10s"),
        aggs={"n": tm.count()},
    )


def expected(events: pa.Table) -> dict[tuple[str, int], int]:
    """(device, 10 s window start) -> count of ``events``."""
    out: dict[tuple[str, int], int] = {}
    for r in events.to_pylist():
        start = r["ts"] // 10_000 * 10_000
        key = (r["device"], start)
        out[key] = out.get(key, 0) + 1
    return out


def as_counted(run: Run) -> dict[tuple[str, int], int]:
    """The run's windows keyed by window start in epoch milliseconds."""
    return {(d, round(s.timestamp() * 1000)): n for (d, s), n in run.counted().items()}


@pytest.mark.slow
def test_a_topics_partitions_hold_the_watermark_without_being_declared(
    spark: Any, kafka: Any, tmp_path: Path
) -> None:
    """A topic of 4 partitions, one silent for three minutes, then 2 partitions added
    while the query runs, whose records come two minutes behind: nobody declared a
    partition count, yet the silent partition and the new ones hold the watermark from
    the micro-batch whose offsets name them. Nothing is late, every window comes out
    once with every record; fed the same micro-batches, the operator without the
    offsets counts most of the silent partition's records and the new partitions'
    records late."""
    topic = topic_name()
    kafka.create_topic(topic, 4)
    pipe = pipeline("5m")
    run = Run(pipe, tmp_path)
    q = (
        kafka_stream(spark, kafka.bootstrap, topic)
        .writeStream.foreachBatch(run)
        .option("checkpointLocation", str(tmp_path / "chk"))
        .start()
    )
    sent: list[pa.Table] = []

    def send(partition: int, start_s: int, end_s: int) -> None:
        rows = readings(partition, 2, start_s, end_s)
        produce_rows(kafka, topic, rows, partition)
        sent.append(rows)

    def step(partitions: range | tuple[int, ...], start_s: int, end_s: int) -> None:
        for p in partitions:
            send(p, start_s, end_s)
        q.processAllAvailable()

    try:
        for start in (0, 60, 120):
            step(range(3), start, start + 60)  # partition 3 is silent
        # Partition 3, which nobody declared, held it: no watermark yet.
        assert run.proc.watermark() is None
        assert run.sources[-1] == ([0, 1, 2, 3], [])
        step((3,), 0, 180)  # three minutes behind
        held = run.proc.watermark()
        # The last reading its two devices agree on (quorum: the lower of two), less 5 s.
        assert held == (T0 + 179_000 - 5_000) * 1000
        kafka.add_partitions(topic, 6)
        for start in (180, 240):
            step(range(4), start, start + 60)
            # Partitions 4 and 5 have sent nothing: they hold it where it was.
            assert run.proc.watermark() == held
        assert run.sources[-1] == ([0, 1, 2, 3, 4, 5], [])
        step((4, 5), 180, 300)  # two minutes behind
        end_of_data(kafka, topic, range(6), T0 + 3_600_000, [q])
    finally:
        q.stop()
    events = pa.concat_tables(sent)
    # Another column is never taken for the source's partitions.
    assert all("not the Kafka source's partition column" in w for w in run.not_partition)
    assert run.late_rows() == 0
    assert as_counted(run) == expected(events)
    # The rows alone: the silent partition's and the new partitions' records came
    # behind a watermark the others had moved.
    blind = run.operator_late_rows(pipe)
    print(f"\nlate rows: from the offsets 0 of {events.num_rows}; from the rows alone {blind}")
    assert blind > 0


@pytest.mark.slow
def test_a_throttled_backfill_never_idles_a_partition_whose_records_wait(
    spark: Any, kafka: Any, tmp_path: Path
) -> None:
    """A backfill of 4 partitions read with ``maxOffsetsPerTrigger``, partition 0 ten
    times heavier than the others. Spark shares each micro-batch's offsets among the
    partitions by their backlog, so a partition with records waiting always gets some
    offsets; partition 1's first 300 records are diagnostics the query filters out, so
    for several micro-batches it gives tidemark no rows while its readings wait. With
    the offsets, it is not idle while its records wait: nothing is late. With the idle
    rule alone (the same partitions declared, no offsets), it goes idle after 30 s of
    event time and its readings come out late."""
    from pyspark.sql import functions as F

    topic = topic_name()
    kafka.create_topic(topic, 4)
    diag = [
        (b"p1-diag", json.dumps({"device": "p1-d0", "ts": T0, "kind": "diag"}).encode(), None)
    ] * 300
    kafka.produce(topic, diag, 1)
    sent = [readings(0, 10, 0, 200)] + [readings(p, 1, 0, 200) for p in (1, 2, 3)]
    for p, rows in enumerate(sent):
        produce_rows(kafka, topic, rows, p)
    end = json.dumps({"device": "end", "ts": T0 + 3_600_000, "value": 0}).encode()
    for p in range(4):
        kafka.produce(topic, [(None, end, None)], p)

    run = Run(pipeline("30s"), tmp_path)
    kind = F.get_json_object(F.col("value").cast("string"), "$.kind")
    stream = kafka_stream(
        spark,
        kafka.bootstrap,
        topic,
        keep=kind.isNull() | (kind != "diag"),
        maxOffsetsPerTrigger="290",
    )
    q = (
        stream.writeStream.foreachBatch(run)
        .option("checkpointLocation", str(tmp_path / "chk"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(600)
    run.proc.flush(spark, stream.schema)  # the end of the backfill: every window out
    events = pa.concat_tables(sent)
    starved = [b for b in run.batches if b.num_rows and 1 not in b["partition"].to_pylist()]
    assert len(starved) >= 3, "partition 1 sent tidemark nothing in several micro-batches"
    # Recorded with each micro-batch (a replay decides the same): every partition had
    # records waiting at first; none at the end.
    assert run.sources[0] == ([0, 1, 2, 3], [0, 1, 2, 3])
    assert run.sources[-1] == ([0, 1, 2, 3], [])
    assert run.late_rows() == 0
    assert as_counted(run) == expected(events)
    blind = run.operator_late_rows(pipeline("30s", partitions=4))
    print(
        f"\nthrottled backfill, {events.num_rows} readings in {len(run.batches)} micro-batches, "
        f"{len(starved)} without a row of partition 1: "
        f"late with the offset rule 0, with the idle rule alone {blind}"
    )
    assert blind > 0


@pytest.mark.slow
def test_a_quiet_topic_emits_its_closed_windows_and_a_backfill_closes_the_live_windows(
    spark: Any, kafka: Any, tmp_path: Path
) -> None:
    """Progress from the data on Kafka. Live (``StreamProcessor.start``: a heartbeat,
    a trigger a second): each time the topic falls silent, the windows its watermark
    closed come out without new data; partition 2 silent for two minutes goes idle in
    event time, so the others' windows come out meanwhile. Then a backfill of the same
    topic read at full speed in other micro-batches (``maxOffsetsPerTrigger``) closes
    the same windows, none late."""
    import time

    topic = topic_name()
    kafka.create_topic(topic, 3)
    pipe = pipeline("30s")
    live = Run(pipe, tmp_path / "live")
    stream = kafka_stream(spark, kafka.bootstrap, topic)
    q = live.proc.start(stream, str(tmp_path / "live" / "chk"), trigger="1 second")
    sent: list[pa.Table] = []

    def closed_ones_out(last_s: int) -> int:
        """Waits until the watermark reached the last reading at ``last_s`` seconds (of
        both devices of a partition: the quorum) less the delay, and the windows out
        are those it closed; their number."""
        deadline = time.monotonic() + 60
        until = (T0 + last_s * 1000 - 5_000) * 1000
        while True:
            w = live.proc.watermark()
            closed = {
                k for k in expected(pa.concat_tables(sent)) if w and (k[1] + 10_000) * 1000 <= w
            }
            out = set(as_counted(live))
            if w is not None and w >= until and out == closed:
                return len(out)
            assert out <= closed or time.monotonic() < deadline, "a window came out early"
            assert time.monotonic() < deadline, f"{len(out)} windows out, {len(closed)} closed"
            time.sleep(0.3)

    try:
        for p, (start, end) in enumerate([(0, 60)] * 3):
            rows = readings(p, 2, start, end)
            produce_rows(kafka, topic, rows, p)
            sent.append(rows)
        first = closed_ones_out(59)
        for p in (0, 1):  # partition 2 falls silent for two minutes
            rows = readings(p, 2, 60, 180)
            produce_rows(kafka, topic, rows, p)
            sent.append(rows)
        # Partition 2 went idle in event time: the others' windows came out meanwhile.
        assert closed_ones_out(179) > first
        for p in range(3):
            rows = readings(p, 2, 180, 240)
            produce_rows(kafka, topic, rows, p)
            sent.append(rows)
        closed_ones_out(239)
    finally:
        q.stop()
    live.proc.flush(spark, stream.schema)
    events = pa.concat_tables(sent)
    assert live.late_rows() == 0
    assert as_counted(live) == expected(events)

    backfill = Run(pipe, tmp_path / "backfill")
    q = (
        kafka_stream(spark, kafka.bootstrap, topic, maxOffsetsPerTrigger="500")
        .writeStream.foreachBatch(backfill)
        .option("checkpointLocation", str(tmp_path / "backfill" / "chk"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(300)
    backfill.proc.flush(spark, stream.schema)
    assert len(backfill.batches) > 2
    assert backfill.late_rows() == 0
    assert as_counted(backfill) == as_counted(live)


def test_another_partition_column_on_a_kafka_source_fails_before_a_row_is_read(
    spark: Any, kafka: Any, tmp_path: Path
) -> None:
    """A per-partition watermark over a column that is not the Kafka source's own
    ``partition`` (renamed, or computed as ``partition % 3``) cannot know the topic's
    partitions from the offsets: a ConfigError at the first micro-batch, with nothing
    written; ``kafka_offsets=False`` takes the column's values knowingly and says so in
    ``last_progress``."""
    from pyspark.sql import functions as F

    topic = topic_name()
    kafka.create_topic(topic, 4)
    produce_rows(kafka, topic, readings(0, 2, 0, 5), 0)
    for i, column in enumerate([F.col("partition"), F.col("partition") % 3]):
        stream = kafka_stream(spark, kafka.bootstrap, topic).withColumn("part", column)
        pipe = pipeline("1m", partition_column="part")
        state = tmp_path / f"state-{i}"
        proc = StreamProcessor(pipe, str(state), 2, sink=lambda t, _b: None, arrow_sinks=True)
        q = (
            stream.writeStream.foreachBatch(proc)
            .option("checkpointLocation", str(tmp_path / f"chk-{i}"))
            .start()
        )
        with pytest.raises(Exception, match="kafka_offsets=False") as err:
            q.processAllAvailable()
        q.stop()
        assert "column 'part' is not the Kafka source's partition column" in str(err.value)
        assert not list(state.rglob("*.snap")), "no state partition ran"
        knowing = StreamProcessor(
            pipe, str(tmp_path / f"knowing-{i}"), 2, sink=lambda t, _b: None, kafka_offsets=False
        )
        q = (
            stream.writeStream.foreachBatch(knowing)
            .option("checkpointLocation", str(tmp_path / f"chk-knowing-{i}"))
            .start()
        )
        try:
            q.processAllAvailable()
        finally:
            q.stop()
        assert knowing.last_progress is not None
        assert knowing.last_progress["partitions"] == (
            "rows: column 'part' is not the Kafka source's partition column"
        )
