"""Event-time parsing, the parser registry, and zero-copy Arrow crossing."""

from __future__ import annotations

import datetime as dt

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import tidemark as tm


def test_builtin_types_are_listed() -> None:
    names = tm.event_time_types()
    for n in [
        "iso8601",
        "unixtimestamp_s",
        "unixtimestamp_ms",
        "unixtimestamp_us",
        "unixtimestamp_ns",
    ]:
        assert n in names


@pytest.mark.parametrize(
    ("values", "type_name", "expected"),
    [
        (pa.array([1, 2], pa.int64()), "unixtimestamp_s", [1_000_000, 2_000_000]),
        (pa.array([1500], pa.int32()), "unixtimestamp_ms", [1_500_000]),
        (pa.array([7], pa.uint16()), "unixtimestamp_us", [7]),
        (pa.array([1_999, -1], pa.int64()), "unixtimestamp_ns", [1, -1]),
        (pa.array([1.25]), "unixtimestamp_s", [1_250_000]),
        (pa.array(["42", "4.5"]), "unixtimestamp_ms", [42_000, 4_500]),
        (pa.array(["1970-01-01T00:00:01.5Z"]), "iso8601", [1_500_000]),
        (pa.array([" 1970-01-01T00:00:01Z\n"]), "iso8601", [1_000_000]),  # CSV padding
        (pa.array(["2024-03-01 10:00:00+02:00"], pa.large_string()), "iso8601", [1709280000000000]),
        (pa.array([2_000], pa.timestamp("ms", tz="Europe/Paris")), None, [2_000_000]),
        (pa.array([3], pa.timestamp("s")), None, [3_000_000]),
        (pa.array([dt.date(1970, 1, 2)]), None, [86_400_000_000]),
    ],
)
def test_builtin_parsers_normalise_to_micros(values, type_name, expected) -> None:  # type: ignore[no-untyped-def]
    parsed = tm.parse_event_time(values, event_time_type=type_name)
    assert parsed.values.to_pylist() == expected
    assert parsed.errors.num_rows == 0


def test_row_failures_become_error_rows_not_exceptions() -> None:
    values = pa.array([1.0, float("nan"), None, float("inf"), 1e30])
    parsed = tm.parse_event_time(values, event_time_type="unixtimestamp_s")
    assert parsed.values.to_pylist() == [1_000_000, None, None, None, None]
    assert parsed.errors.column("row").to_pylist() == [1, 2, 3, 4]
    reasons = parsed.errors.column("reason").to_pylist()
    assert reasons[0] == "event time is NaN"
    assert reasons[1] == "event time is null"
    assert "not finite" in reasons[2]
    assert "out of range" in reasons[3]

    garbage = tm.parse_event_time(pa.array(["yesterday"]), event_time_type="iso8601")
    assert garbage.errors.column("reason").to_pylist() == [
        'cannot parse "yesterday" as an ISO 8601 timestamp'
    ]


def test_unknown_type_lists_registered_names() -> None:
    # Other tests of the process may have registered types of their own.
    with pytest.raises(tm.UnknownEventTimeTypeError, match=r"registered types: .*iso8601"):
        tm.parse_event_time(pa.array([1]), event_time_type="epoch_days")


def test_type_that_does_not_fit_the_column_is_a_config_error() -> None:
    with pytest.raises(tm.ConfigError, match="expects a string column"):
        tm.parse_event_time(pa.array([1]), event_time_type="iso8601")
    with pytest.raises(tm.ConfigError, match="need no event_time_type"):
        tm.parse_event_time(pa.array([1], pa.timestamp("us")), event_time_type="unixtimestamp_ms")
    with pytest.raises(tm.ConfigError, match="must be an Arrow timestamp"):
        tm.parse_event_time(pa.array([1]))


def test_missing_column_names_the_available_ones() -> None:
    table = pa.table({"a": [1], "b": [2]})
    with pytest.raises(tm.MissingColumnError, match="'ts' not found; available columns: a, b"):
        tm.parse_event_time(table, "ts", event_time_type="unixtimestamp_s")
    with pytest.raises(KeyError):
        tm.parse_event_time(table, "ts", event_time_type="unixtimestamp_s")


def test_an_array_where_a_table_is_expected_is_a_clear_type_error() -> None:
    """A column passed with a column name (the type name in the name's place), or to an
    operator: a TypeError that says what to pass, not pyarrow's import error."""
    with pytest.raises(TypeError, match=r"parse_event_time\(values, event_time_type='iso8601'\)"):
        tm.parse_event_time(pa.array(["2026-01-01"]), "iso8601")
    pipe = tm.Pipeline(
        watermark=tm.BoundedOutOfOrderness("0s"),
        key=None,
        event_time="ts",
        window=tm.Tumbling("10s"),
        aggs={"n": tm.count()},
    )
    for data in (pa.array([1]), pl.Series("ts", [1])):
        with pytest.raises(TypeError, match=r"tabular data with named columns.*pa\.table"):
            pipe.operator().process(data)


def test_user_registered_parser() -> None:
    def yyyymmdd(arr: pa.Array) -> pa.Array:
        return pc.strptime(arr, format="%Y%m%d", unit="us", error_is_null=True)

    tm.register_event_time_type("yyyymmdd", yyyymmdd, replace=True)
    assert "yyyymmdd" in tm.event_time_types()
    parsed = tm.parse_event_time(
        pa.array(["19700102", "not a date", None]), event_time_type="yyyymmdd"
    )
    assert parsed.values.to_pylist() == [86_400_000_000, None, None]
    assert parsed.errors.to_pylist() == [
        {"row": 1, "reason": "yyyymmdd could not parse the value"},
        {"row": 2, "reason": "event time is null"},
    ]


def test_registry_validation() -> None:
    with pytest.raises(tm.ConfigError, match="built-in"):
        tm.register_event_time_type("iso8601", lambda a: a)
    tm.register_event_time_type("once_only", lambda a: a, replace=True)
    with pytest.raises(tm.ConfigError, match="already registered"):
        tm.register_event_time_type("once_only", lambda a: a)
    with pytest.raises(tm.ConfigError, match="callable"):
        tm.register_event_time_type("x", 3)  # type: ignore[arg-type]

    tm.register_event_time_type("bad_output", lambda a: pa.array(["x"] * len(a)), replace=True)
    with pytest.raises(tm.ConfigError, match="expected int64 epoch microseconds"):
        tm.parse_event_time(pa.array([1]), event_time_type="bad_output")
    tm.register_event_time_type("short_output", lambda a: pa.array([1], pa.int64()), replace=True)
    with pytest.raises(tm.ConfigError, match="returned 1 values for 2 rows"):
        tm.parse_event_time(pa.array([1, 2]), event_time_type="short_output")

    def boom(a: pa.Array) -> pa.Array:
        raise RuntimeError("kaput")

    tm.register_event_time_type("boom", boom, replace=True)
    with pytest.raises(tm.TidemarkError, match="kaput"):
        tm.parse_event_time(pa.array([1]), event_time_type="boom")


def test_zero_copy_across_the_boundary() -> None:
    """A timestamp[us] column comes back from Rust sharing the input's data buffer."""
    arr = pa.array(range(1000), pa.timestamp("us", tz="UTC"))
    parsed = tm.parse_event_time(arr)
    assert parsed.values.buffers()[1].address == arr.buffers()[1].address
    ints = pa.array(range(10), pa.int64())
    same = tm.parse_event_time(ints, event_time_type="unixtimestamp_us")
    assert same.values.buffers()[1].address == ints.buffers()[1].address


def test_chunked_columns_and_polars_input() -> None:
    chunked = pa.chunked_array([[1, 2], [3]], pa.timestamp("ms"))
    parsed = tm.parse_event_time(chunked)
    assert isinstance(parsed.values, pa.ChunkedArray)
    assert parsed.values.num_chunks == 2
    assert parsed.values.to_pylist() == [1_000, 2_000, 3_000]

    df = pl.DataFrame({"ts": ["1970-01-01T00:00:00Z", "bad"], "k": [1, 2]})
    parsed = tm.parse_event_time(df, "ts", event_time_type="iso8601")
    assert parsed.values.to_pylist() == [0, None]
    assert parsed.errors.column("row").to_pylist() == [1]

    null_chunk = pa.chunked_array([[1], [None, 2]], pa.int64())
    parsed = tm.parse_event_time(null_chunk, event_time_type="unixtimestamp_us")
    assert parsed.errors.column("row").to_pylist() == [1], "rows count across chunks"
