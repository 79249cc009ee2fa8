"""What a new user ran into outside the per-key happy path, each as a test: lagging
source partitions, windows reopened after a key was forgotten, the default watermark,
and the smaller configuration mistakes that raised the wrong error or none."""

from __future__ import annotations

import random
import threading
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest

import tidemark as tm

SCHEMA = pa.schema(
    [("k", pa.string()), ("partition", pa.int64()), ("ts", pa.timestamp("us", tz="UTC"))]
)


def lagging_partition_stream(seed: int = 7) -> list[pa.Table]:
    """8 source partitions of 4 keys each, one event a second per key for 10 minutes;
    partitions 0-2 arrive 60-72 s behind the others (a consumer that fell behind), each
    event up to 2 s later still. Micro-batches of 5 s of arrival time."""
    rng = random.Random(seed)
    lag = {p: (60 + 6 * p if p < 3 else 0) for p in range(8)}
    events = []
    for p in range(8):
        for i in range(4):
            key = f"p{p}-k{i}"
            for t in range(600):
                events.append((t + lag[p] + rng.random() * 2, key, p, t * 1_000_000))
    events.sort()
    batches: dict[int, list[tuple[str, int, int]]] = {}
    for arrival, key, p, ts in events:
        batches.setdefault(int(arrival // 5), []).append((key, p, ts))
    return [
        pa.table(
            {
                "k": [r[0] for r in rows],
                "partition": [r[1] for r in rows],
                "ts": [r[2] for r in rows],
            },
            schema=SCHEMA,
        )
        for _, rows in sorted(batches.items())
    ]


def counted_share(wm: tm.BoundedOutOfOrderness, batches: list[pa.Table]) -> float:
    """Share of the events counted in a window, one process() per micro-batch."""
    pipe = tm.Pipeline(
        key="k", event_time="ts", window=tm.Tumbling("10s"), aggs={"n": tm.count()}, watermark=wm
    )
    op = pipe.operator()
    counted = sum(pc_sum(op.process(b).windows) for b in batches) + pc_sum(op.flush().windows)
    return counted / sum(b.num_rows for b in batches)


def pc_sum(windows: pa.Table) -> int:
    return int(sum(windows.column("n").to_pylist())) if windows.num_rows else 0


def test_declared_partitions_keep_a_lagging_partitions_events() -> None:
    batches = lagging_partition_stream()
    glob = counted_share(tm.BoundedOutOfOrderness("5s"), batches)
    undeclared = counted_share(tm.BoundedOutOfOrderness("5s", per="partition"), batches)
    declared = counted_share(tm.BoundedOutOfOrderness("5s", per="partition", partitions=8), batches)
    per_key = counted_share(tm.BoundedOutOfOrderness("5s", per="key"), batches)
    # The global watermark follows the five fast partitions: the three lagging ones'
    # events come 60-72 s behind it and are late.
    assert glob < 0.7
    # A lagging partition's first rows are late, but from them on it holds the
    # combined watermark back (its rows used to count only when on time, so it never
    # got a say and per="partition" counted what per="global" counts).
    assert undeclared > 0.95
    # Declared up front, every partition holds it back from the first micro-batch.
    assert declared >= 0.999
    assert per_key == 1.0


def test_declared_partitions_are_checked_and_shown() -> None:
    wm = tm.BoundedOutOfOrderness("5s", per="partition", partitions=8)
    assert "partitions=8" in repr(wm)
    with pytest.raises(tm.ConfigError, match='per="partition"'):
        tm.BoundedOutOfOrderness("5s", per="key", partitions=8)
    for bad in (0, -1, 1 << 21, True, 2.0):
        with pytest.raises(tm.ConfigError, match="partitions"):
            tm.BoundedOutOfOrderness("5s", per="partition", partitions=bad)  # type: ignore[arg-type]


def t(keys: list[str], secs: list[int]) -> pa.Table:
    """Keys ``k`` at event times ``ts`` (seconds)."""
    return pa.table(
        {"k": keys, "ts": pa.array([s * 1_000_000 for s in secs], pa.timestamp("us", "UTC"))}
    )


def test_an_evicted_key_does_not_reopen_a_window_it_emitted() -> None:
    op = tm.Pipeline(
        key="k",
        event_time="ts",
        window=tm.Tumbling("10s"),
        aggs={"n": tm.count()},
        max_keys=2,
        watermark=tm.BoundedOutOfOrderness("1m", per="key"),
    ).operator()
    outs = [op.process(t(["a", "b"], [1, 2]))]
    # A key of the call is never evicted for the call's new keys, whatever the order of
    # its rows: "c" evicts "b" here, not "a".
    outs.append(op.process(t(["c", "a"], [3, 4])))
    assert outs[1].late.num_rows == 0
    assert [r["k"] for r in outs[1].windows.to_pylist()] == ["b"]
    outs.append(op.process(t(["d"], [5])))
    outs.append(op.process(t(["b"], [6])))
    outs.append(op.flush())
    emitted = Counter((r["k"], r["window_start"]) for o in outs for r in o.windows.to_pylist())
    assert max(emitted.values()) == 1, emitted
    # "b" was evicted in call 2 (its [0, 10) emitted early, n=1); its row at 6 s came
    # back and would have reopened that window: it is late instead.
    assert outs[3].late.column("k").to_pylist() == ["b"]
    with pytest.raises(tm.ConfigError, match="flushed"):
        op.process(t(["e"], [6]))


def test_a_pipeline_says_which_watermark_it_needs() -> None:
    with pytest.raises(tm.ConfigError, match=r"watermark is required.*BoundedOutOfOrderness"):
        tm.Pipeline(key="k", event_time="ts", window=tm.Tumbling("10s"), aggs={"n": tm.count()})
    # Pipelines without an event-time watermark need none.
    tm.Pipeline(key="k", window=tm.Tumbling("10s"), aggs={"n": tm.count()}, time="processing")
    tm.Pipeline(
        key="k",
        event_time="ts",
        window=tm.Rows(2),
        aggs={"n": tm.count()},
        emit="on_update",
    )


@pytest.mark.parametrize(
    ("build", "setting"),
    [
        (lambda: _pipe(max_keys=-1), "max_keys"),
        (lambda: _pipe(max_keys=1.5), "max_keys"),
        (lambda: tm.stddev("v", ddof=-1), "ddof"),
        (lambda: tm.variance("v", ddof=256), "ddof"),
        (lambda: _pipe(watermark=tm.BoundedOutOfOrderness("1M")), "ambiguous"),
    ],
)
def test_bad_settings_are_config_errors_naming_them(build: Any, setting: str) -> None:
    with pytest.raises(tm.ConfigError, match=setting):
        build()


def _pipe(**kw: Any) -> tm.Pipeline:
    args: dict[str, Any] = dict(
        key="k",
        event_time="ts",
        window=tm.Tumbling("10s"),
        aggs={"n": tm.count()},
        watermark=tm.BoundedOutOfOrderness("5s"),
    )
    args.update(kw)
    return tm.Pipeline(**args)


def test_a_table_with_two_columns_of_one_name_is_refused() -> None:
    ts = pa.array([1_000_000], pa.timestamp("us", "UTC"))
    twice = pa.Table.from_arrays([pa.array(["a"]), pa.array(["b"]), ts], names=["k", "k", "ts"])
    with pytest.raises(tm.ConfigError, match=r'2 columns named "k".*ambiguous'):
        _pipe().operator().process(twice)
    # A duplicate the pipeline does not read is no ambiguity.
    other = pa.Table.from_arrays(
        [pa.array(["a"]), pa.array([1]), pa.array([2]), ts], names=["k", "x", "x", "ts"]
    )
    assert _pipe().operator().process(other).errors.num_rows == 0


def test_an_operator_shared_by_threads_serves_one_call_at_a_time() -> None:
    op = _pipe().operator()
    rows = 200_000
    table = pa.table(
        {
            "k": pa.array([f"k{i % 1000}" for i in range(rows)]),
            "ts": pa.array(range(rows), pa.timestamp("us", "UTC")),
        }
    )
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(3):
                op.process(table)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    assert op.metrics()["rows_in"] == 12 * rows


def test_a_flush_before_any_batch_gives_the_pipelines_columns() -> None:
    kw: dict[str, Any] = {
        "key": "k",
        "event_time": "ts",
        "window": tm.Tumbling("10s"),
        "aggs": {"n": tm.count(), "s": tm.sum("v")},
        "watermark": tm.BoundedOutOfOrderness("1s"),
    }
    out = tm.Pipeline(**kw).operator().flush()
    assert out.windows["n"].to_pylist() == []  # was a KeyError: no columns at all
    assert out.windows.column_names == ["k", "window_start", "window_end", "n", "s"]
    assert out.errors.column_names == ["k", "ts", "v", "reason"]
    schema = pa.schema([("k", pa.string()), ("ts", pa.timestamp("us", "UTC")), ("v", pa.int64())])
    op = tm.Pipeline(**kw, schema=schema).operator()
    typed = op.flush()
    batch = tm.Pipeline(**kw).operator()
    batch.process(schema.empty_table())
    want = batch.flush()
    assert typed.windows.schema == want.windows.schema
    assert typed.late.schema == want.late.schema
    assert typed.errors.schema == want.errors.schema
    assert op.tick().windows.schema == want.windows.schema


def test_one_absurd_event_time_moves_no_watermark_with_max_ahead() -> None:
    op = tm.Pipeline(
        key="k",
        event_time="ts",
        window=tm.Tumbling("10s"),
        aggs={"n": tm.count()},
        watermark=tm.BoundedOutOfOrderness("5s", per="key", idle_timeout="1m", max_ahead="1h"),
        clock=tm.ManualClock(),  # a replay's clock: the stream's own time bounds it
    ).operator()
    op.process(t(["a", "b"], [1, 2]))
    year_2300 = 10_413_792_000
    out = op.process(t(["a", "c"], [3, year_2300]))
    assert out.errors.column("reason").to_pylist() == [
        "event time 2300-01-01T00:00:00Z is more than max_ahead (1h) ahead of the stream's "
        "event time (1970-01-01T00:00:01Z)"
    ]
    # Neither a watermark nor idleness moved: "b" is not idle, nothing of "a" late.
    out = op.process(t(["a", "b"], [4, 5]))
    assert out.late.num_rows == 0
    assert op.metrics()["idle_keys"] == 0
    with pytest.raises(tm.ConfigError, match="max_ahead"):
        tm.Pipeline(
            key="k",
            event_time="ts",
            window=tm.Tumbling("10s"),
            aggs={"n": tm.count()},
            watermark=tm.BoundedOutOfOrderness("5s", max_ahead="0s"),
        )


def test_a_bare_int_duration_is_refused_with_how_to_write_it() -> None:
    # BoundedOutOfOrderness(5000, idle_timeout=60000) read as 5 ms and 60 s: refused.
    with pytest.raises(tm.ConfigError, match=r"watermark\.delay=5000: a bare int names no unit"):
        tm.BoundedOutOfOrderness(5000, per="partition", idle_timeout="1m")
    with pytest.raises(tm.ConfigError, match=r"'60000ms'"):
        tm.BoundedOutOfOrderness("5s", per="partition", idle_timeout=60000)
    with pytest.raises(tm.ConfigError, match=r"window\.size"):
        tm.Pipeline(
            key="k",
            event_time="ts",
            window=tm.Tumbling(10_000),
            aggs={"n": tm.count()},
            watermark=tm.BoundedOutOfOrderness("5s"),
        )
    # Zero names no unit and means nothing else; strings and timedeltas say theirs.
    import datetime as dt

    wm = tm.BoundedOutOfOrderness(0, per="key", idle_timeout=dt.timedelta(minutes=1))
    assert wm.delay == 0
    # The trackers count in their caller's own ticks: ints as given.
    assert tm.KeyedWatermarkTracker(bounded_delay=5, idle_timeout=10) is not None


def test_settings_that_would_do_nothing_are_refused() -> None:
    with pytest.raises(tm.ConfigError, match="per='global'"):
        tm.BoundedOutOfOrderness("5s", idle_timeout="1m")
    with pytest.raises(tm.ConfigError, match="quorum"):
        tm.BoundedOutOfOrderness("5s", per="partition", quorum=0)


@pytest.mark.spark
def test_a_column_the_stream_lacks_is_named_before_any_task_runs(spark: Any, tmp_path: Any) -> None:
    from tidemark.spark import StreamProcessor

    pipe = tm.Pipeline(
        key="device",
        event_time="ts",
        watermark=tm.BoundedOutOfOrderness("5s", per="partition", partition_column="part"),
        window=tm.Tumbling("10s"),
        aggs={"n": tm.count(), "avg": tm.mean("temp")},
    )
    from pyspark.sql import functions as F

    df = spark.createDataFrame(
        [("d1", 0, 20.0)], "device string, partition int, temp double"
    ).withColumn("ts", F.current_timestamp())
    proc = StreamProcessor(pipe, str(tmp_path / "state"), 2, sink=lambda t, _b: None)
    with pytest.raises(tm.MissingColumnError, match="part"):
        proc(df, 0)
    assert not list((tmp_path / "state").rglob("*.snap")), "no task ran"


@pytest.mark.spark
def test_a_new_streams_first_micro_batch_shuffled_is_judged_by_spark_estimated_quartiles(
    spark: Any, tmp_path: Any
) -> None:
    """Run in parts (one task per state partition), a new stream's first micro-batch
    has no task holding all its rows: it is judged by its event times' quartiles, which
    Spark estimates first (recorded with the batch, so a replay in any layout judges
    alike), and a 1969 and a 2300 event time among them are error rows, as in one
    task."""
    import datetime as dt

    from tidemark.spark import StreamProcessor

    t0 = dt.datetime(2026, 12, 1, tzinfo=dt.timezone.utc)
    rows = [(f"d{i % 20}", t0 + dt.timedelta(seconds=i)) for i in range(400)]
    rows += [("d1", dt.datetime(1969, 12, 31, tzinfo=dt.timezone.utc))]
    rows += [("d2", dt.datetime(2300, 1, 1, tzinfo=dt.timezone.utc))]
    df = spark.createDataFrame(rows, "device string, ts timestamp")
    pipe = tm.Pipeline(
        key="device",
        event_time="ts",
        watermark=tm.BoundedOutOfOrderness("5s", per="key"),
        window=tm.Tumbling("10s"),
        aggs={"n": tm.count()},
    )
    errors: list[pa.Table] = []
    for shuffle in (True, False):
        proc = StreamProcessor(
            pipe,
            str(tmp_path / f"state-{shuffle}"),
            4,
            sink=lambda t, _b: None,
            error_sink=lambda t, _b: errors.append(t),
            arrow_sinks=True,
            shuffle=shuffle,
            on_driver=False,
        )
        proc(df, 0)
        assert proc.last_progress is not None
        assert proc.last_progress["layout"] == ("shuffled" if shuffle else "one task")
        rec = proc.store.read_record(0)
        assert rec.quartiles is not None
    first, second = ([e.year for e in t["ts"].to_pylist()] for t in errors)
    assert sorted(first) == sorted(second) == [1969, 2300]
