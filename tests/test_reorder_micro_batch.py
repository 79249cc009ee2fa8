"""A reorder's micro-batch in the core (``_native.MicroBatch`` with a reorder, the call
``ReorderStream``'s tasks and driver make) equals one ``tm.Reorder`` per state
partition fed the rows Spark's shuffle would give it, batch by batch: routed by Spark's
hash of ``partition_by`` (or dealt out in turn without it), or carried in by the rows'
tags (a shuffled batch, in any grouping of the state partitions over tasks); and the
driver's summary of the partitions' reports is the partitions' counts and the least
watermark. Hypothesis generates the streams (no Spark)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tidemark as tm
from tidemark import _native

SCHEMA = pa.schema([("device", pa.string()), ("ts", pa.int64()), ("seq", pa.int64())])
SP = "__tm_state_partition"


def reorder() -> tm.Reorder:
    return tm.Reorder("ts", "unixtimestamp_ms", late_tolerance="2s", late="side_output")


def shards(table: pa.Table, n: int, keys: list[str]) -> list[pa.Table]:
    """What each state partition gets: Spark's hash of the keys, or row ``i`` to ``i mod
    n``."""
    if n == 1:
        return [table]
    if keys:
        router = tm.HashRouter(n, keys, hash="spark")
        return [pa.Table.from_batches([b]) for b in router.route(table)]
    return [table.take(pa.array(range(p, table.num_rows, n), pa.int64())) for p in range(n)]


def tag(parts: list[pa.Table], n: int) -> pa.Table:
    """The partitions' rows with their tags and one placeholder row each (as
    ``tagged`` builds a shuffled batch), in one table."""
    data, placeholder = _native.spark_tags(n)
    tables = [
        t.append_column(SP, pa.array([data[p]] * t.num_rows, pa.int32()))
        for p, t in enumerate(parts)
    ]
    holders = pa.table(
        {
            "device": pa.nulls(n, pa.string()),
            "ts": pa.nulls(n, pa.int64()),
            "seq": pa.nulls(n, pa.int64()),
            SP: pa.array(placeholder, pa.int32()),
        }
    )
    return pa.concat_tables([*tables, holders])


@st.composite
def streams(draw: st.DrawFn) -> list[pa.Table]:
    batches, seq, clock = [], 0, 10_000
    for _ in range(draw(st.integers(1, 5))):
        clock += draw(st.integers(0, 4_000))
        rows = []
        for _ in range(draw(st.integers(0, 12))):
            rows.append((f"d{draw(st.integers(0, 4))}", clock - draw(st.integers(0, 5_000)), seq))
            seq += 1
        batches.append(
            pa.Table.from_pylist([dict(zip(SCHEMA.names, r, strict=True)) for r in rows], SCHEMA)
        )
    return batches


def rows_of(t: pa.Table) -> list[int]:
    return t.column("seq").to_pylist()


@settings(max_examples=60, deadline=None)
@given(
    stream=streams(),
    n=st.sampled_from([1, 2, 3]),
    keyed=st.booleans(),
    tagged=st.booleans(),
    split=st.booleans(),
)
def test_a_reorder_micro_batch_equals_a_reorder_per_state_partition(
    stream: list[pa.Table], n: int, keyed: bool, tagged: bool, split: bool
) -> None:
    keys = ["device"] if keyed else []
    config = reorder()._config
    ref = [reorder() for _ in range(n)]
    snaps: list[bytes | None] = [None] * n
    for b, batch in enumerate([*stream, None]):
        flush = batch is None
        parts = [SCHEMA.empty_table()] * n if flush else shards(batch, n, keys)
        want = [r.flush() if flush else r.process(t) for r, t in zip(ref, parts, strict=True)]
        run = f"run-{b}"
        if tagged and not flush:
            mb = _native.MicroBatch(config, n, tag_column=SP, flush=flush, run=run, keys=keys)
            data = tag(parts, n)
            # The state partitions in one task, or each alone (a task per partition).
            groups = [list(range(n))] if not split else [[p] for p in range(n)]
            got = []
            tags = _native.spark_tags(n)
            for g in groups:
                mine = pa.array([t[p] for p in g for t in tags], pa.int32())
                held = [(p, snaps[p], f"p{p}") for p in g]
                got += mb.run(data.filter(pc.is_in(data.column(SP), mine)), held)
        else:
            mb = _native.MicroBatch(config, n, flush=flush, run=run, keys=keys, threads=2)
            data = SCHEMA.empty_table() if flush else batch
            got = mb.run(data, [(p, snaps[p], f"p{p}") for p in range(n)])
        assert [p for p, *_ in got] == list(range(n))
        for (p, (released, late, errors), snap, _), w in zip(got, want, strict=True):
            assert rows_of(released) == rows_of(w.rows), (b, p)
            assert rows_of(late) == rows_of(w.late), (b, p)
            assert errors.num_rows == w.errors.num_rows == 0
            snaps[p] = snap
        summary = _native.summarize_batch(config, [r for *_, r in got], run, None, 0)
        assert summary is not None
        marks = [r.watermark for r in ref if r.watermark is not None]
        assert summary["watermark"] == (min(marks) if marks else None)
        assert summary["input_rows"] == (0 if flush else batch.num_rows)
        assert summary["released_rows"] == sum(w.rows.num_rows for w in want)
        assert summary["late_rows"] == sum(w.late.num_rows for w in want)
        assert summary["buffered_rows"] == sum(r.metrics()["buffer_size"] for r in ref)
        # The bytes the buffers hold depend on how the rows were cut from the batch.
        assert (summary["buffer_bytes"] > 0) == (summary["buffered_rows"] > 0)
        # Another run's reports are not this one's.
        assert _native.summarize_batch(config, [r for *_, r in got], "other", None, 0) is None


def test_a_reorder_that_drops_late_rows_counts_them() -> None:
    """``late="drop"`` keeps no late rows but the report counts them."""
    r = tm.Reorder("ts", "unixtimestamp_ms", late_tolerance="1s")
    mb = _native.MicroBatch(r._config, 1, run="a")
    t = pa.table({"ts": pa.array([5_000, 4_500], pa.int64())})
    ((_, (released, late, _), snap, report),) = mb.run(t, [(0, None, "p0")])
    assert late.num_rows == 0 and released.num_rows == 0
    summary = _native.summarize_batch(r._config, [report], "a", None, 0)
    assert summary is not None and summary["late_rows"] == 0 and summary["buffered_rows"] == 2
    ((_, (released, late, _), _, report),) = mb.run(
        pa.table({"ts": pa.array([500, 9_000], pa.int64())}), [(0, snap, "p0")]
    )
    summary = _native.summarize_batch(r._config, [report], "a", None, 0)
    assert summary is not None and summary["late_rows"] == 1 and late.num_rows == 0
    assert released.num_rows == summary["released_rows"] == 2
    assert summary["watermark"] == 8_000_000


def test_a_reorder_micro_batch_names_its_mistakes() -> None:
    """A pipeline routes by its own keys; a damaged buffer names its file; a late
    policy the core does not know lists the ones it does."""
    r = tm.Reorder("ts", "unixtimestamp_ms")
    pipe = tm.Pipeline(
        key="device",
        event_time="ts",
        watermark=tm.BoundedOutOfOrderness("1s"),
        window=tm.Tumbling("10s"),
        aggs={"n": tm.count()},
    )
    with pytest.raises(tm.ConfigError, match="keys"):
        _native.MicroBatch(pipe._config, 1, keys=["device"])
    with pytest.raises(tm.StateCorruptedError, match="p0"):
        _native.MicroBatch(r._config, 1).run(pa.table({"ts": [1]}), [(0, b"junk", "p0")])
    with pytest.raises(tm.ConfigError, match='unknown late "later"'):
        tm.Reorder("ts", late="later")
