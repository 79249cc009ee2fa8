"""One bad record costs one record: a dirty IoT topic (a lagging partition with stray
rows on it, a partition falling silent, 0.1% hostile records of five kinds from the first
second on) through the pipeline as a user writes it, with no bound or filter of their
own. The same topic on a real broker through ``StreamProcessor`` is in
``tests/test_kafka.py``; the full-size run against Spark is ``benches/dirty_stream.py``."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import tidemark as tm
from tidemark_tools import dirty
from tidemark_tools.datagen import HOSTILE_KINDS, dirty_iot, librdkafka_partition

#: A small topic of the issue's shape: 60 devices on 6 partitions for 6 minutes,
#: partition 2 arriving 90 s late, partition 5 silent after 3.5 minutes.
SHAPE = {"devices": 60, "minutes": 6.0, "silent_after_min": 3.5, "strays": 4}


@pytest.fixture(scope="module")
def topic() -> tuple[pa.Table, pa.Table]:
    return dirty_iot(**SHAPE)


def bad_offsets(records: pa.Table) -> set[int]:
    return set(pc.indices_nonzero(pc.not_equal(records["kind"], "reading")).to_pylist())


@pytest.mark.parametrize("seconds", [5, 60])
def test_the_operator_counts_every_reading_and_refuses_every_hostile_record(
    topic: tuple[pa.Table, pa.Table], seconds: int
) -> None:
    """Micro-batches of a few seconds and of a minute: every reading of every window
    the watermarks closed is counted, no window is spurious or out twice, and the
    error output holds exactly the hostile records. The operator learns a topic's
    partitions from its rows alone, so the user declares them (a Kafka stream in
    ``StreamProcessor`` reads them from its offsets)."""
    records, readings = topic
    out = dirty.operator_windows(dirty.user_pipeline(partitions=6), records, seconds)
    s = dirty.score(out["windows"], readings, dirty.closed_by(readings, 90))
    assert s.windows > 100
    assert (s.counted, s.exact, s.spurious, s.twice) == (s.events, s.windows, 0, 0)
    assert out["late"].num_rows == 0
    assert set(out["errors"]["offset"].to_pylist()) == bad_offsets(records)
    reasons = " ".join(out["errors"]["reason"].to_pylist())
    for why in ("ahead of the", "behind the", "is null", 'key column "device" is null'):
        assert why in reasons


def test_without_bounds_or_a_quorum_the_same_topic_loses_most_of_a_run(
    topic: tuple[pa.Table, pa.Table],
) -> None:
    """The same topic and micro-batches with the bounds off and one key's rows enough
    to move a partition (the rule before): the year-2300 record of the first second
    moves a watermark to 2299 and most readings come out late."""
    records, readings = topic
    unguarded = dirty.user_pipeline(partitions=6, max_ahead=None, max_behind=None, quorum=1)
    out = dirty.operator_windows(unguarded, records, 5)
    s = dirty.score(out["windows"], readings, dirty.closed_by(readings, 90))
    assert s.counted_share < 0.9
    assert s.spurious > 0


def test_the_generator_places_keys_as_confluent_kafka_does(
    topic: tuple[pa.Table, pa.Table],
) -> None:
    records, _ = topic
    kinds = set(records["kind"].to_pylist())
    assert kinds == {"reading", *HOSTILE_KINDS}
    first = records.filter(pc.less(records["arrival"], 1.0))
    assert set(first["kind"].to_pylist()) >= set(HOSTILE_KINDS), "one of each, first second"
    keyed = records.filter(pc.invert(pc.is_null(records["key"])))
    for key, part in zip(keyed["key"].to_pylist(), keyed["partition"].to_pylist(), strict=True):
        assert librdkafka_partition(key, 6) == part


def test_the_parsing_reads_as_spark_from_json_does() -> None:
    values = [
        b'{"device": "d1", "ts": 1000, "temp": 20}',
        b"\x00\xffnot json {",
        b'{"device": "d1", "ts": "1000", "temp": "21.5"}',
        b'{"ts": 1000, "temp": 20.0}',
    ]
    t = pa.table({"value": pa.array(values, pa.binary()), "partition": pa.array([0] * 4)})
    got = dirty.parsed(t)
    assert got["device"].to_pylist() == ["d1", None, "d1", None]
    assert got["ts"].cast(pa.int64()).to_pylist() == [1000, None, None, 1000]
    assert got["temp"].to_pylist() == [20.0, None, None, 20.0]


def test_a_stray_partition_column_of_the_operator_fails_loudly() -> None:
    """A missing column names itself at the first batch, before a row is counted."""
    op = dirty.user_pipeline().operator()
    rows = pa.table({"device": ["d1"], "ts": pa.array([1], pa.timestamp("ms", tz="UTC"))})
    with pytest.raises(tm.MissingColumnError, match="partition"):
        op.process(rows)
