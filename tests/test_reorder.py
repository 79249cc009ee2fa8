"""Event-time reordering, processing-time mode and stream definitions (seed 004)."""

from __future__ import annotations

import json

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tidemark as tm


def batch(ts: list[int | None], ids: list[int] | None = None) -> pa.Table:
    """Event times in milliseconds, one id per row."""
    ids = list(range(len(ts))) if ids is None else ids
    return pa.table({"ts": pa.array(ts, pa.int64()), "id": pa.array(ids, pa.int64())})


def reorder(tolerance: str = "2s", **kw: object) -> tm.Reorder:
    return tm.Reorder("ts", "unixtimestamp_ms", late_tolerance=tolerance, **kw)  # type: ignore[arg-type]


# --- the seed's test list -------------------------------------------------------


def test_event_time_ordering_and_watermark_advancement() -> None:
    r = reorder("2s")
    out = r.process(batch([5_000, 1_000, 3_000, 2_000], [0, 1, 2, 3]))
    assert out.watermark == 3_000_000
    assert out.rows.column("ts").to_pylist() == [1_000, 2_000]
    assert out.rows.schema == batch([]).schema, "input schema unchanged"
    out = r.process(batch([4_000, 8_000], [4, 5]))
    assert out.watermark == 6_000_000
    assert out.rows.column("id").to_pylist() == [2, 4, 0]
    assert repr(out) == "ReorderOutput(rows=3 rows, watermark=6000000, late=0 rows, errors=0 rows)"
    # Nothing new beyond the watermark: no watermark emitted, nothing released.
    out = r.process(batch([7_000], [6]))
    assert out.watermark is None and out.rows.num_rows == 0
    m = r.metrics()
    assert (m["buffer_size"], m["watermark_emitted_count"], m["max_timestamp_seen"]) == (
        2,
        2,
        8_000_000,
    )
    end = r.flush()
    assert end.watermark is None, "no artificial MAX watermark at the end of input"
    assert end.rows.column("id").to_pylist() == [6, 5]


def test_late_rows_beyond_the_tolerance_are_dropped_or_side_output() -> None:
    dropped = reorder("1s")
    side = reorder("1s", late="side_output")
    for r in (dropped, side):
        r.process(batch([10_000], [0]))
        out = r.process(batch([8_000, 9_500, 8_999], [1, 2, 3]))
        assert out.rows.num_rows == 0
        assert r.metrics()["late_dropped_count"] == 2
    assert side.process(batch([1], [9])).late.column("id").to_pylist() == [9]
    assert dropped.process(batch([1], [9])).late.num_rows == 0
    assert [dropped.flush().rows.column("id").to_pylist()] == [[2, 0]]


def test_unparseable_rows_become_error_rows_and_never_abort() -> None:
    r = tm.Reorder("ts", "unixtimestamp_ms")
    t = pa.table({"ts": ["1000", "soon", None, "3000"], "id": [0, 1, 2, 3]})
    out = r.process(t)
    assert out.errors.column("id").to_pylist() == [1, 2]
    assert all(out.errors.column("reason").to_pylist())
    assert out.rows.column("id").to_pylist() == [0]
    assert r.flush().rows.column("id").to_pylist() == [3]
    assert r.metrics()["rows_error"] == 2


def test_unknown_event_time_type_lists_the_registered_types() -> None:
    with pytest.raises(tm.UnknownEventTimeTypeError, match="unixtimestamp_ms"):
        tm.Reorder("ts", "unixtime_ms")
    with pytest.raises(tm.UnknownEventTimeTypeError, match="iso8601"):
        tm.plan({"eventtime": {"column": "ts", "type": "epoch"}}, {"eventtime.enabled": True})


def test_missing_event_time_column_lists_the_columns() -> None:
    schema = pa.schema([("event_ts", pa.int64()), ("id", pa.int64())])
    with pytest.raises(tm.MissingColumnError, match="event_ts, id"):
        tm.Reorder("ts", "unixtimestamp_ms", schema=schema)
    with pytest.raises(tm.MissingColumnError, match="event_ts, id"):
        tm.plan(
            {"eventtime": {"column": "ts", "type": "unixtimestamp_ms"}},
            {"eventtime.enabled": True},
            schema=schema,
        )
    with pytest.raises(tm.MissingColumnError, match="event_ts"):
        reorder().process(schema.empty_table())


def test_event_time_enabled_without_a_definition_is_a_plan_error() -> None:
    with pytest.raises(tm.ConfigError, match="no stream definition"):
        tm.plan(None, {"eventtime.enabled": True})
    with pytest.raises(tm.ConfigError, match="no eventtime section"):
        tm.plan({"name": "orders"}, {"eventtime": {"enabled": True}})
    with pytest.raises(tm.ConfigError, match="lateTolerance"):
        tm.plan(None, {"eventtime.lateTolerance": "soon"})
    with pytest.raises(tm.ConfigError, match=r"eventtime\.enable"):
        tm.plan(None, {"eventtime.enable": True})


def test_processing_time_mode_is_the_default_and_follows_the_clock() -> None:
    clock = tm.ManualClock(1_000)
    stage = tm.plan({"eventtime": {"column": "ts", "type": "unixtimestamp_ms"}}, {}, clock=clock)
    assert isinstance(stage, tm.ProcessingTimeWatermark)
    t = batch([9_000, 1_000])
    out = stage.process(t)
    assert out.rows.equals(t), "processing time: rows pass through in arrival order"
    assert out.watermark == 1_000_000
    assert stage.tick().watermark is None, "clock did not move"
    clock.advance(250)
    assert stage.tick().watermark == 1_250_000
    # What a planned stream printed was an object address.
    assert repr(stage) == "ProcessingTimeWatermark(clock=ManualClock(now=1250), watermark=1250000)"


def _processing_time_count(clock: tm.ManualClock) -> tm.Pipeline:
    """A count per key in 10 s tumbling windows of processing time on ``clock``."""
    return tm.Pipeline(
        key="k",
        event_time="ts",
        window=tm.Tumbling("10s"),
        aggs={"n": tm.count()},
        time="processing",
        clock=clock,
    )


def test_processing_time_pipeline_closes_windows_in_wall_time() -> None:
    clock = tm.ManualClock(1_000)
    pipe = _processing_time_count(clock)
    op = pipe.operator()
    assert op.tick().windows.num_rows == 0, "nothing seen yet"
    # Event times in the data are ignored: rows are stamped with the clock (1 s).
    out = op.process(pa.table({"k": ["a", "a", "b"], "ts": [10**12, 0, -5]}))
    assert out.windows.num_rows == 0 and out.late.num_rows == 0
    clock.set(9_999)
    assert op.tick().windows.num_rows == 0
    clock.set(10_000)
    closed = op.tick().windows
    assert sorted(closed.select(["k", "n"]).to_pylist(), key=lambda r: r["k"]) == [
        {"k": "a", "n": 2},
        {"k": "b", "n": 1},
    ]
    assert closed.column("window_end").to_pylist()[0].timestamp() == 10.0


@pytest.mark.parametrize("cores", [1, 2])
def test_a_restored_operator_closes_windows_on_the_clock_before_any_batch(cores: int) -> None:
    # A service restarts from its snapshot while no rows arrive: its ticks close the
    # windows the clock closes (before, they waited for the next batch).
    clock = tm.ManualClock(1_000)
    pipe = _processing_time_count(clock)
    live = pipe.operator(cores=cores)
    live.process(pa.table({"k": ["a", "a", "b"], "ts": [0, 0, 0], "extra": [1, 2, 3]}))
    restored = pipe.operator(state=live.snapshot(), cores=cores)
    clock.set(10_000)
    for op in (live, restored):
        out = op.tick()
        assert sorted(out.windows.select(["k", "n"]).to_pylist(), key=lambda r: r["k"]) == [
            {"k": "a", "n": 2},
            {"k": "b", "n": 1},
        ]
        assert out.errors.column_names[-1] == "reason"


def test_event_time_pipeline_from_a_stream_definition() -> None:
    sd = tm.StreamDefinition({"column": "ts", "type": "unixtimestamp_ms"}, name="orders")
    pipe = tm.Pipeline.from_stream(
        sd,
        {"eventtime.enabled": True, "eventtime.lateTolerance": "1s"},
        key="k",
        window=tm.Tumbling("10s"),
        aggs={"n": tm.count()},
    )
    op = pipe.operator()
    op.process(pa.table({"k": ["a", "a"], "ts": [1_000, 10_500]}))
    out = op.process(pa.table({"k": ["a"], "ts": [11_000]}))
    # Spark's rule (the default): the call that began at W = 9.5 s closes nothing; the
    # next one begins at W = 10 s and closes [0, 10 s).
    assert out.windows.num_rows == 0
    out = op.process(pa.table({"k": pa.array([], pa.string()), "ts": pa.array([], pa.int64())}))
    assert out.windows.column("n").to_pylist() == [1], "W = 10 s closes [0, 10 s)"
    off = tm.Pipeline.from_stream(
        sd, {}, key="k", window=tm.Tumbling("10s"), aggs={"n": tm.count()}
    )
    assert off.time == "processing"


def test_stream_definition_round_trips_and_applies_the_first_message_rule() -> None:
    d = {
        "name": "mixed",
        "messages": [
            {"name": "header"},
            {"name": "order", "eventtime": {"column": "order_ts", "type": "unixtimestamp_ms"}},
            {"name": "audit", "eventtime": {"column": "audit_ts"}},
        ],
    }
    sd = tm.StreamDefinition.from_json(json.dumps(d))
    assert sd.to_dict() == d
    assert sd.event_time == tm.EventTimeColumn("order_ts", "unixtimestamp_ms")
    simple = tm.StreamDefinition.from_dict({"name": "s", "eventtime": {"column": "ts"}})
    assert tm.StreamDefinition.from_dict(simple.to_dict()).event_time == simple.event_time
    with pytest.raises(tm.ConfigError, match="unknown keys"):
        tm.StreamDefinition.from_dict({"name": "s", "event_time": {}})
    with pytest.raises(tm.ConfigError, match="JSON"):
        tm.StreamDefinition.from_json("{")


def test_polars_input_user_parser_and_timestamp_columns() -> None:
    df = pl.DataFrame({"ts": [3_000, 1_000, 2_000], "v": ["c", "a", "b"]})
    out = reorder("0s").process(df)
    assert out.rows.column("v").to_pylist() == ["a", "b"]
    tm.register_event_time_type(
        "tenths", lambda a: pc.multiply(a.cast(pa.int64()), 100_000), replace=True
    )
    r = tm.Reorder("ts", "tenths", late_tolerance="0s")
    out = r.process(pa.table({"ts": [30, 10, None], "v": ["c", "a", "x"]}))
    assert out.rows.column("v").to_pylist() == ["a"]
    assert out.errors.column("v").to_pylist() == ["x"]
    ts = pa.array([3, 1, 2], pa.timestamp("s", tz="UTC"))
    out = tm.Reorder("ts", late_tolerance="1s").process(pa.table({"ts": ts}))
    assert out.rows.column("ts").to_pylist() == ts.sort().to_pylist()[:1]
    assert out.rows.schema.field("ts").type == ts.type


def test_snapshot_restores_the_buffer() -> None:
    r = reorder("5s")
    r.process(batch([9_000, 4_000], [0, 1]))
    r.process(batch([7_000, 6_000], [2, 3]))
    back = r.restore(r.snapshot())
    counters = {k: v for k, v in r.metrics().items() if k != "buffer_bytes"}
    assert {k: v for k, v in back.metrics().items() if k != "buffer_bytes"} == counters
    a, b = r.process(batch([20_000], [4])), back.process(batch([20_000], [4]))
    assert a.rows.equals(b.rows) and a.watermark == b.watermark
    with pytest.raises(tm.StateCorruptedError):
        reorder("1s").restore(r.snapshot()[:-1])
    with pytest.raises(tm.StateCorruptedError, match="configuration"):
        tm.Reorder("ts", "unixtimestamp_ms", state=r.snapshot())


def test_bad_arguments() -> None:
    with pytest.raises(tm.ConfigError, match="late"):
        reorder(late="keep")
    with pytest.raises(tm.ConfigError, match="late_tolerance"):
        reorder("-1s")
    with pytest.raises(tm.ConfigError, match="event_time"):
        tm.Reorder("")
    r = reorder()
    r.process(batch([1]))
    with pytest.raises(tm.ConfigError, match="schema changed"):
        r.process(pa.table({"ts": [2]}))


def test_held_rows_go_on_in_a_later_batchs_string_layout() -> None:
    """A pyarrow table, then a polars frame (string views): the rows held come out in
    the frame's layout, in order; a column of other values is refused by name."""
    r = reorder("2s")
    first = batch([5_000, 1_000]).append_column("who", pa.array(["e", "a"]))
    assert r.process(first).rows.column("id").to_pylist() == [1]
    frame = pl.from_arrow(batch([9_000, 4_000], [2, 3]).append_column("who", pa.array(["i", "d"])))
    out = r.process(frame)
    assert out.rows.schema.field("who").type == pa.string_view()
    assert out.rows.column("who").to_pylist() == ["d", "e"]
    with pytest.raises(tm.ConfigError, match='column "who" changed type'):
        r.process(batch([10_000]).append_column("who", pa.array([1])))
    assert r.flush().rows.column("who").to_pylist() == ["i"]


# --- properties ------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    batches=st.lists(
        st.lists(st.one_of(st.none(), st.integers(0, 300)), max_size=25), min_size=1, max_size=10
    ),
    tolerance_ms=st.integers(0, 80),
    snapshot_at=st.integers(0, 10),
)
def test_properties(batches: list[list[int | None]], tolerance_ms: int, snapshot_at: int) -> None:
    r = reorder(f"{tolerance_ms}ms", late="side_output")
    next_id = 0
    released: list[int] = []
    late: list[int] = []
    errors = 0
    last_ts = -1
    last_wm: int | None = None
    for i, ts in enumerate(batches):
        if i == snapshot_at:
            r = r.restore(r.snapshot())
        ids = list(range(next_id, next_id + len(ts)))
        next_id += len(ts)
        out = r.process(batch(ts, ids))
        times = out.rows.column("ts").to_pylist()
        for t in times:
            assert t >= last_ts, "released in non-decreasing event time"
            assert last_wm is None or t * 1000 >= last_wm, "no row below an emitted watermark"
            last_ts = t
        if out.watermark is not None:
            assert last_wm is None or out.watermark > last_wm, "watermark monotonic"
            last_wm = out.watermark
        released += out.rows.column("id").to_pylist()
        late += out.late.column("id").to_pylist()
        errors += out.errors.num_rows
    released += r.flush().rows.column("id").to_pylist()
    # Nothing lost, nothing twice.
    assert len(released) + len(late) + errors == next_id
    assert len(set(released) | set(late)) == len(released) + len(late)
