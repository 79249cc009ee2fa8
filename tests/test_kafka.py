"""tidemark on a real Kafka topic: a broker started by the test session
(``tidemark_tools.kafka``, the ``kafka`` fixture), records written by a real producer
(confluent-kafka), read by Spark's own Kafka source (``spark-sql-kafka-0-10``)."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import tidemark as tm
from tidemark.spark import StreamProcessor
from tidemark_tools.kafka import murmur2, partition_for, read_topic

pytestmark = pytest.mark.spark

EVENT = "device STRING, ts LONG, value LONG"


def topic_name() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


#: A task of Spark's Kafka reader that reads a few records up to a partition's end
#: waits about the consumer's ``fetch.max.wait.ms`` (500 ms by default) before it ends:
#: measured here, 40 records of one partition 0.63 s, 0.13 s with 10 ms; 20,000 records
#: per partition barely changed (0.85 s, 0.72 s). The tests' micro-batches are small.


def kafka_stream(spark: Any, bootstrap: str, topic: str, keep: Any = None, **options: str) -> Any:
    """The topic as Spark's Kafka source reads it, its JSON values parsed: ``device``,
    ``ts`` (a timestamp), ``value``, and the source's ``partition`` and ``offset``;
    ``keep``: a condition on the records that keeps some (the query's filter)."""
    from pyspark.sql import functions as F

    ev = F.from_json(F.col("value").cast("string"), EVENT)
    records = read_topic(spark, bootstrap, topic, **options)
    return (records if keep is None else records.where(keep)).select(
        ev["device"].alias("device"),
        F.timestamp_millis(ev["ts"]).alias("ts"),
        ev["value"].alias("value"),
        F.col("partition"),
        F.col("offset"),
    )


def test_murmur2_is_kafkas() -> None:
    # Kafka's own UtilsTest vectors.
    cases = {
        b"21": -973932308,
        b"foobar": -790332482,
        b"a-little-bit-long-string": -985981536,
        b"a-little-bit-longer-string": -1486304829,
        b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
        b"abc": 479470107,
    }
    assert {k: murmur2(k) for k in cases} == cases


def lagging_events(
    devices: int, seconds: int, partitions: int, lagging: tuple[int, ...], seed: int = 5
) -> pa.Table:
    """Each device reports once a second; a device's records go to the partition its
    key hashes to, and those of each ``lagging`` partition arrive 60-72 s behind the
    others (each partition its own lag; every record up to 2 s late besides). Rows in
    arrival order; ``arrival`` in seconds from the start."""
    rng = np.random.default_rng(seed)
    names = [f"dev-{d:04d}" for d in range(devices)]
    part = np.array([partition_for(n.encode(), partitions) for n in names])
    dev = np.repeat(np.arange(devices), seconds)
    t = np.tile(np.arange(seconds), devices) + rng.uniform(0, 1, devices)[dev]
    lags = np.where(np.isin(np.arange(partitions), lagging), rng.uniform(60, 72, partitions), 0)
    lag = lags[part[dev]]
    arrival = t + lag + rng.uniform(0, 2, len(dev))
    order = np.argsort(arrival, kind="stable")
    return pa.table(
        {
            "device": pa.array([names[d] for d in dev[order]]),
            "ts": pa.array((1_767_225_600_000 + t[order] * 1000).astype(np.int64)),
            "value": pa.array(rng.integers(0, 100, len(dev))[order]),
            "partition": pa.array(part[dev[order]]),
            "arrival": pa.array(arrival[order]),
        }
    )


def produce_rows(
    kafka: Any, topic: str, rows: pa.Table, partition: int | None = None
) -> list[tuple[int, int]]:
    """``rows`` as JSON records keyed by device (their event time also the record's
    timestamp), to ``partition`` or by key; each record's ``(partition, offset)``."""
    return list(
        kafka.produce(
            topic,
            (
                (r["device"].encode(), json.dumps(r).encode(), r["ts"])
                for r in rows.select(["device", "ts", "value"]).to_pylist()
            ),
            partition,
        )
    )


def arrival_slices(events: pa.Table, width: int, until: int) -> Iterator[tuple[int, pa.Table]]:
    """The rows arriving in each ``width`` seconds from 0 to ``until``: a live topic read
    once per slice."""
    arrival = events["arrival"].to_numpy()
    for start in range(0, until, width):
        yield start, events.filter(pa.array((arrival >= start) & (arrival < start + width)))


def end_of_data(kafka: Any, topic: str, partitions: range, ts: int, queries: list[Any]) -> None:
    """An end marker (device ``end`` at ``ts``, far past the data) on each of
    ``partitions``, twice, each time read by every query: the first moves every
    watermark past the data, the next micro-batch emits what it closed."""
    end = json.dumps({"device": "end", "ts": ts, "value": 0}).encode()
    for _ in range(2):
        for p in partitions:
            kafka.produce(topic, [(None, end, None)], p)
        for q in queries:
            q.processAllAvailable()


@pytest.mark.slow
def test_lagging_partitions_of_a_topic_lose_nothing_per_partition(
    spark: Any, kafka: Any, tmp_path: Path
) -> None:
    """The seed's scenario on a real topic: 8 partitions, keys hashed to them by the
    producer, partitions 0-2 arriving 60-72 s behind the others, read live (a slice of
    arrival time, then every micro-batch Spark has for it). Per-partition watermarks
    from the source's ``partition`` column count >= 99.9% of the events; the same
    micro-batches through the standalone operator give the same windows; Spark's own
    ``withWatermark`` query on the same topic is run beside it and its figure reported."""
    from pyspark.sql import functions as F

    topic, partitions, delay = topic_name(), 8, "5s"
    kafka.create_topic(topic, partitions)
    events = lagging_events(devices=64, seconds=240, partitions=partitions, lagging=(0, 1, 2))
    pipe = tm.Pipeline(
        key="device",
        event_time="ts",
        watermark=tm.BoundedOutOfOrderness(delay, per="partition", partitions=partitions),
        window=tm.Tumbling("10s"),
        aggs={"n": tm.count()},
    )
    windows: list[pa.Table] = []
    late: list[pa.Table] = []
    batches: list[pa.Table] = []
    proc = StreamProcessor(
        pipe,
        str(tmp_path / "state"),
        2,
        sink=lambda t, _b: windows.append(t),
        late_sink=lambda t, _b: late.append(t),
        arrow_sinks=True,
    )

    def tidemark_batch(df: Any, batch_id: int) -> None:
        df = df.persist()  # read from Kafka once: for the operator below and the processor
        batches.append(df.toArrow())
        proc(df, batch_id)
        df.unpersist()

    spark_counts: list[int] = []

    def spark_batch(df: Any, _batch_id: int) -> None:
        spark_counts.extend(r["count"] for r in df.collect())

    stream = kafka_stream(spark, kafka.bootstrap, topic)
    ours = (
        stream.writeStream.foreachBatch(tidemark_batch)
        .option("checkpointLocation", str(tmp_path / "chk-tidemark"))
        .start()
    )
    theirs = (
        stream.withWatermark("ts", "5 seconds")
        .groupBy(F.window("ts", "10 seconds"), "device")
        .count()
        .writeStream.outputMode("append")
        .foreachBatch(spark_batch)
        .option("checkpointLocation", str(tmp_path / "chk-spark"))
        .start()
    )
    try:
        for _, rows in arrival_slices(events, 80, 320):  # read after each 80 s of arrival
            produce_rows(kafka, topic, rows)
            ours.processAllAvailable()
            theirs.processAllAvailable()
        last = int(pa.compute.max(events["ts"]).as_py())
        end_of_data(kafka, topic, range(partitions), last + 3_600_000, [ours, theirs])
    finally:
        ours.stop()
        theirs.stop()

    got = pa.concat_tables(windows).filter(pa.compute.field("device") != "end")
    counted = pa.compute.sum(got["n"]).as_py()
    spark_counted = sum(spark_counts)
    total = events.num_rows
    print(
        f"\n{total} events on {partitions} partitions, 0-2 arriving 60-72 s behind: "
        f"tidemark per partition counted {counted / total:.4%}, "
        f"Spark's withWatermark {spark_counted / total:.4%}"
    )
    assert counted >= 0.999 * total
    assert counted + sum(t.num_rows for t in late) == total  # the rest came out late
    assert spark_counted < 0.9 * total  # Spark's one watermark drops the lagging partitions
    # Spark's source gave each record the partition the producer hashed its key to.
    seen = pa.concat_tables(batches).filter(pa.compute.field("device") != "end")
    want = dict(zip(events["device"].to_pylist(), events["partition"].to_pylist(), strict=True))
    pairs = zip(seen["device"].to_pylist(), seen["partition"].to_pylist(), strict=True)
    assert all(want[d] == p for d, p in pairs)
    assert seen.num_rows == total
    # The standalone operator, fed the same micro-batches, closes the same windows.
    op = pipe.operator()
    outs = [op.process(b).windows for b in batches]
    expected = pa.concat_tables(outs)
    key = ["device", "window_start"]
    assert (
        pa.concat_tables(windows)
        .sort_by([(k, "ascending") for k in key])
        .equals(
            expected.cast(pa.concat_tables(windows).schema).sort_by([(k, "ascending") for k in key])
        )
    )


@pytest.mark.slow
def test_hostile_records_go_to_errors_with_their_partition_and_offset(
    spark: Any, kafka: Any, tmp_path: Path
) -> None:
    """Values that are not the expected JSON, event times that are not numbers or are
    years ahead, records without a device (a null key: an error row by default), a
    producer that changes its schema mid-stream (the event time sent as a string, the
    value renamed), a record whose device is too long for a key (17 MiB: the topic
    takes records that large), and a partition whose records are all bad: every bad
    record comes out in the error output with its Kafka partition and offset, the rest
    in windows (or late), none lost, and the windows of the good partitions close (the
    bad partition goes idle)."""
    topic, partitions = topic_name(), 8
    kafka.create_topic(topic, partitions, {"max.message.bytes": str(24 << 20)})
    good = lagging_events(devices=21, seconds=120, partitions=7, lagging=())
    pipe = tm.Pipeline(
        key="device",
        event_time="ts",
        watermark=tm.BoundedOutOfOrderness(
            "5s", per="partition", partitions=partitions, idle_timeout="30s", max_ahead="1h"
        ),
        window=tm.Tumbling("10s"),
        aggs={"n": tm.count()},
    )
    out: dict[str, list[pa.Table]] = {"windows": [], "late": [], "errors": []}
    proc = StreamProcessor(
        pipe,
        str(tmp_path / "state"),
        2,
        sink=lambda t, _b: out["windows"].append(t),
        late_sink=lambda t, _b: out["late"].append(t),
        error_sink=lambda t, _b: out["errors"].append(t),
        arrow_sinks=True,
    )
    query = (
        kafka_stream(spark, kafka.bootstrap, topic)
        .writeStream.foreachBatch(proc)
        .option("checkpointLocation", str(tmp_path / "chk"))
        .start()
    )
    start_ms = int(good["ts"][0].as_py())
    bad: set[tuple[int, int]] = set()
    nulls = 0
    big = kafka.producer(**{"message.max.bytes": 24 << 20})
    placed: list[tuple[int, int]] = []
    try:
        for i, (start, rows) in enumerate(arrival_slices(good, 35, 140)):
            # Good records go to partitions 0-6 (the device's hash over 7), bad ones too.
            for part in range(7):
                produce_rows(
                    kafka, topic, rows.filter(pa.compute.equal(rows["partition"], part)), part
                )
            t = start_ms + (start + 20) * 1000
            hostile = [
                b"not json {",
                json.dumps({"device": "dev-x", "ts": "yesterday", "value": 1}).encode(),
            ]
            if i > 0:  # years ahead of what its partition saw (the first batch saw nothing)
                ahead = t + 10 * 365 * 86_400_000
                hostile.append(json.dumps({"device": "dev-x", "ts": ahead, "value": 1}).encode())
            bad.update(kafka.produce(topic, ((None, v, None) for v in hostile), i % 7))
            # No device: a null key, an error row.
            no_key = json.dumps({"ts": t, "value": 1}).encode()
            bad.update(kafka.produce(topic, [(None, no_key, None)], 3))
            nulls += 1
            # Partition 7 sends garbage only.
            bad.update(kafka.produce(topic, [(b"k", b"\x00\xff\xfe", None)] * 5, 7))
            if i >= 2:  # a producer's next release: ISO event times, the value renamed
                iso = dt.datetime.fromtimestamp(t / 1000, dt.timezone.utc).isoformat()
                v2 = json.dumps({"device": "dev-v2", "ts": iso, "reading": 1}).encode()
                bad.update(kafka.produce(topic, [(b"dev-v2", v2, None)] * 3, 5))
            if i == 1:  # a device name longer than a key may be
                huge = json.dumps({"device": "x" * (17 << 20), "ts": t, "value": 1}).encode()
                big.produce(
                    topic,
                    value=huge,
                    partition=4,
                    on_delivery=lambda err, m: placed.append((m.partition(), m.offset())),
                )
                assert big.flush(60) == 0 and len(placed) == 1
                bad.update(placed)
            query.processAllAvailable()
        end_of_data(kafka, topic, range(7), start_ms + 3_600_000, [query])
    finally:
        query.stop()
    errors = pa.concat_tables(out["errors"])
    got_bad = set(zip(errors["partition"].to_pylist(), errors["offset"].to_pylist(), strict=True))
    assert got_bad == bad
    reasons = errors["reason"].to_pylist()
    assert all(reasons)
    assert sum("longer than the supported" in r for r in reasons) == 1, "the 17 MiB key"
    windows = pa.concat_tables(out["windows"])
    counted = pa.compute.sum(windows["n"]).as_py()
    late = sum(t.num_rows for t in out["late"])
    # Every record but the end markers (whose windows stay open) came out once.
    assert counted + late + errors.num_rows == good.num_rows + len(bad)
    assert windows.filter(pa.compute.is_null(windows["device"])).num_rows == 0
    assert (
        sum(r.startswith('key column "device" is null') for r in errors["reason"].to_pylist())
        == nulls
    )
    good_counted = pa.compute.sum(
        windows.filter(pa.compute.starts_with(windows["device"], "dev-0"))["n"]
    ).as_py()
    assert good_counted >= 0.999 * good.num_rows


def test_a_micro_batch_knows_every_partition_and_what_it_left_unread(
    spark: Any, kafka: Any, tmp_path: Path
) -> None:
    """A throttled read (``maxOffsetsPerTrigger``) of a topic whose partitions are
    uneven, two of them empty: each micro-batch's plan gives every partition's start
    and end offsets (the rows are exactly those ranges), and the latest offsets Spark
    saw, so a partition with records left for later is told from a quiet one."""
    from tidemark.spark._files import micro_batch_plan
    from tidemark.spark._kafka import kafka_offsets, kafka_records

    topic = topic_name()
    kafka.create_topic(topic, 4)
    kafka.produce(topic, [(b"a", b"{}", None)] * 40, 0)
    kafka.produce(topic, [(b"b", b"{}", None)] * 5, 1)
    seen: list[tuple[Any, dict[int, list[int]]]] = []
    records: list[tuple[int | None, int]] = []

    def batch(df: Any, _batch_id: int) -> None:
        offsets = kafka_offsets(df)
        rows: dict[int, list[int]] = {}
        for r in df.select("partition", "offset").collect():
            rows.setdefault(r["partition"], []).append(r["offset"])
        seen.append((offsets, rows))
        # The records the layout sizes a micro-batch by, known from its plan.
        records.append((kafka_records(micro_batch_plan(df)), sum(map(len, rows.values()))))

    q = (
        read_topic(spark, kafka.bootstrap, topic, maxOffsetsPerTrigger="10")
        .writeStream.foreachBatch(batch)
        .option("checkpointLocation", str(tmp_path / "chk"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(300)
    latest = {(topic, p): o for p, o in kafka.end_offsets(topic).items()}
    assert latest == {(topic, 0): 40, (topic, 1): 5, (topic, 2): 0, (topic, 3): 0}
    assert len(seen) >= 4  # 45 records, 10 a micro-batch
    for offsets, rows in seen:
        assert not isinstance(offsets, str), offsets
        assert offsets.partitions() == [(topic, p) for p in range(4)]
        assert offsets.latest == latest
        for (_, p), end in offsets.end.items():
            assert sorted(rows.get(p, [])) == list(range(offsets.start[(topic, p)], end))
    first = seen[0][0]
    assert not isinstance(first, str)
    assert first.unread(topic, 0) == 40 - first.end[(topic, 0)] > 0  # waiting records
    assert first.unread(topic, 2) == 0  # a quiet partition
    assert all(known == rows for known, rows in records) and sum(r for _, r in records) == 45
    # Outside a Kafka micro-batch: a reason, nothing assumed.
    assert isinstance(kafka_offsets(spark.range(3)), str)
    assert kafka_records(micro_batch_plan(spark.range(3))) is None


def test_a_small_kafka_micro_batch_is_sized_by_its_records_and_runs_in_the_driver(
    spark: Any, kafka: Any, tmp_path: Path
) -> None:
    """Spark has no size estimate of a Kafka source; its micro-batch's offsets give its
    records before it runs, which at Spark's width of a row size its layout (the rules
    by size: ``test_layout.py``): a small one runs in the driver, its rows read by every
    source partition's task at once. Every record is counted once."""
    topic = topic_name()
    kafka.create_topic(topic, 4)
    events = lagging_events(devices=8, seconds=30, partitions=4, lagging=())
    produce_rows(kafka, topic, events)
    pipe = tm.Pipeline(
        key="device",
        event_time="ts",
        watermark=tm.BoundedOutOfOrderness("5s", per="key"),
        window=tm.Tumbling("10s"),
        aggs={"n": tm.count()},
    )
    windows: list[tuple[Any, ...]] = []
    layouts: list[str] = []
    proc = StreamProcessor(
        pipe,
        str(tmp_path / "state"),
        2,
        sink=lambda t, _b: windows.extend(
            (r["device"], r["window_start"], r["n"]) for r in t.to_pylist()
        ),
        arrow_sinks=True,
    )

    def each(df: Any, batch_id: int) -> None:
        proc(df, batch_id)
        assert proc.last_progress is not None
        layouts.append(proc.last_progress["layout"])

    q = (
        kafka_stream(spark, kafka.bootstrap, topic, maxOffsetsPerTrigger="120")
        .writeStream.foreachBatch(each)
        .option("checkpointLocation", str(tmp_path / "chk"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(300)
    proc.flush(spark, kafka_stream(spark, kafka.bootstrap, topic).schema)
    assert layouts == ["driver"] * 2  # 240 records, 120 a micro-batch
    assert sum(n for *_, n in windows) == events.num_rows
    assert len(set(w[:2] for w in windows)) == len(windows), "each window once"


@pytest.mark.slow(25)
def test_a_dirty_topic_loses_no_reading_through_stream_processor(
    spark: Any, kafka: Any, tmp_path: Path
) -> None:
    """The dirty IoT topic of ``tests/test_dirty.py`` on a real broker (6 partitions,
    devices placed by confluent-kafka's partitioner, partition 2 arriving 90 s late
    with stray on-time rows, partition 5 silent after 3.5 minutes, 0.1% hostile
    records of five kinds from the first second on), read live by Spark's Kafka source
    into the pipeline as a user writes it: a watermark per partition (not declared:
    the offsets tell), no bound, no filter. Two queries read it, one in micro-batches
    of 10 s of arrival and one of a minute: each counts every reading of every window
    its watermarks closed, with no spurious window and none twice, and sends exactly
    the hostile records to its error output with their partition and offset."""
    from tidemark_tools import dirty
    from tidemark_tools.datagen import dirty_iot

    records, readings = dirty_iot(devices=60, minutes=6.0, silent_after_min=3.5, strays=4)
    topic = topic_name()
    kafka.create_topic(topic, 6)
    stream = dirty.kafka_source(spark, kafka.bootstrap, topic)
    outs: dict[str, dict[str, list[pa.Table]]] = {}
    queries = {}
    for name in ("seconds", "minute"):
        got: dict[str, list[pa.Table]] = {"windows": [], "late": [], "errors": []}
        outs[name] = got
        proc = StreamProcessor(
            dirty.user_pipeline(),
            str(tmp_path / f"state-{name}"),
            2,
            sink=lambda t, _b, g=got: g["windows"].append(t),
            late_sink=lambda t, _b, g=got: g["late"].append(t),
            error_sink=lambda t, _b, g=got: g["errors"].append(t),
            arrow_sinks=True,
        )
        queries[name] = (
            stream.writeStream.foreachBatch(proc)
            .option("checkpointLocation", str(tmp_path / f"chk-{name}"))
            .start()
        )
    hostile: set[tuple[int, int]] = set()
    try:
        for i, batch in enumerate(dirty.slices(records, 10)):
            for p in range(6):
                part = batch.filter(pa.compute.equal(batch["partition"], p))
                sent = kafka.produce(
                    topic,
                    zip(
                        part["key"].to_pylist(),
                        part["value"].to_pylist(),
                        [None] * part.num_rows,
                        strict=True,
                    ),
                    p,
                )
                kinds = part["kind"].to_pylist()
                hostile.update(at for at, k in zip(sent, kinds, strict=True) if k != "reading")
            queries["seconds"].processAllAvailable()
            if i % 6 == 5:
                queries["minute"].processAllAvailable()
        queries["minute"].processAllAvailable()
    finally:
        for q in queries.values():
            q.stop()
    until = dirty.closed_by(readings, 90)
    for name, got in outs.items():
        windows = pa.concat_tables(got["windows"])
        s = dirty.score(windows, readings, until)
        errors = pa.concat_tables(got["errors"])
        print(
            f"\n{name}: {s.counted_share:.4%} of {s.events} readings counted, "
            f"{s.exact_share:.4%} of {s.windows} windows exact, {s.spurious} spurious, "
            f"{s.twice} twice, {errors.num_rows} error rows"
        )
        assert s.windows > 100
        assert s.counted >= 0.999 * s.events, name
        assert (s.spurious, s.twice) == (0, 0), name
        assert (
            set(zip(errors["partition"].to_pylist(), errors["offset"].to_pylist(), strict=True))
            == hostile
        )


def test_the_kafka_guide_says_where_the_producer_puts_each_device(kafka: Any) -> None:
    """The guide's statement of where its producer (confluent-kafka, default settings)
    puts devices ``d0`` to ``d11`` on a topic of 4 partitions, checked on a broker."""
    import re

    from confluent_kafka import Producer

    from tidemark_tools.datagen import librdkafka_partition

    guide = (Path(__file__).parent.parent / "docs" / "guide" / "kafka-to-delta.md").read_text()
    said = re.search(r"devices `d0` to `d11` land on partitions ([\d, ]+)\.", guide)
    assert said is not None
    quoted = [int(p) for p in said.group(1).split(", ")]
    topic = topic_name()
    kafka.create_topic(topic, 4)
    producer = Producer({"bootstrap.servers": kafka.bootstrap})
    placed: dict[str, int] = {}

    def delivered(err: Any, msg: Any) -> None:
        assert err is None
        placed[msg.key().decode()] = msg.partition()

    for d in range(12):
        producer.produce(topic, key=f"d{d}", value=b"{}", on_delivery=delivered)
    producer.flush()
    got = [placed[f"d{d}"] for d in range(12)]
    assert got == quoted
    assert got == [librdkafka_partition(f"d{d}".encode(), 4) for d in range(12)]


@pytest.mark.slow(12)
def test_a_topic_deleted_and_recreated_under_a_query_changes_nothing_committed(
    spark: Any, kafka: Any, tmp_path: Path
) -> None:
    """The topic a query reads is deleted and created again (its offsets start over).
    Spark's Kafka source stops the query with its data-loss error; the Delta table
    keeps what was committed, not a row more or less. Restarted with
    ``failOnDataLoss=false`` (the user's choice to go on), the query reads the new
    topic's records, and the rows committed before stay as they were."""
    from tidemark.spark import delta_sink

    topic = topic_name()
    kafka.create_topic(topic, 2)
    events = lagging_events(devices=6, seconds=40, partitions=2, lagging=())
    # The new topic holds fewer records than the query read of the old one: its offsets
    # go back, which Spark's source sees (one that already holds more is not told
    # apart from the old topic going on).
    first, second = events.slice(0, 160), events.slice(160)
    pipe = tm.Pipeline(
        key="device",
        event_time="ts",
        watermark=tm.BoundedOutOfOrderness("2s", per="partition", idle_timeout="10s"),
        window=tm.Tumbling("5s"),
        aggs={"n": tm.count()},
    )
    table = str(tmp_path / "windows")

    def start(**options: str) -> Any:
        proc = StreamProcessor(pipe, str(tmp_path / "state"), 2, sink=delta_sink(table))
        return (
            kafka_stream(spark, kafka.bootstrap, topic, **options)
            .writeStream.foreachBatch(proc)
            .option("checkpointLocation", str(tmp_path / "chk"))
            .start()
        )

    query = start()
    try:
        for part in (first.slice(0, 80), first.slice(80)):
            produce_rows(kafka, topic, part)
            query.processAllAvailable()
        committed = sorted(tuple(r) for r in spark.read.format("delta").load(table).collect())
        assert committed, "windows closed before the topic went away"
        kafka.delete_topic(topic)
        kafka.create_topic(topic, 2)
        produce_rows(kafka, topic, second)
        with pytest.raises(Exception, match=r"(?i)data loss|offset.*changed|reset"):
            query.awaitTermination(60)
            raise AssertionError("the query went on over a recreated topic")
    finally:
        query.stop()
    after = sorted(tuple(r) for r in spark.read.format("delta").load(table).collect())
    assert after == committed
    query = start(failOnDataLoss="false")
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    rows = sorted(tuple(r) for r in spark.read.format("delta").load(table).collect())
    assert set(committed) <= set(rows) and len(rows) > len(committed)
