"""A Parquet file stream's micro-batches read from their files by the driver
(``StreamProcessor(read_files=True)``, the default): the same windows as rows fetched
from Spark, and rows fetched from Spark wherever the two could differ."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tidemark as tm
from test_spark_pipeline import pipeline, rows_of, stream_batches, write_stream_files
from tidemark.spark import StreamProcessor
from tidemark.spark._files import read_batch_files

T0 = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
COLUMNS = ["device", "window_start", "n", "s"]
WANT = pa.schema(
    [("device", pa.string()), ("ts", pa.timestamp("us", tz="UTC")), ("value", pa.float64())]
)


def _table(**columns: pa.Array) -> pa.Table:
    base = {
        "device": pa.array(["a", "b", None]),
        "ts": pa.array([T0, T0 + dt.timedelta(seconds=1), None], pa.timestamp("us", tz="UTC")),
        "value": pa.array([1.0, None, 3.0]),
    }
    return pa.table({**base, **columns})


def test_files_are_read_where_pyarrow_reads_them_as_spark_does(tmp_path: Path) -> None:
    def write(name: str, table: pa.Table, **kw: Any) -> str:
        f = tmp_path / name
        pq.write_table(table, f, **kw)
        return f.as_uri()

    base = _table()
    ok = write("ok.parquet", base)
    got = read_batch_files([ok, ok], WANT)
    assert isinstance(got, pa.Table) and got.equals(pa.concat_tables([base, base]).cast(WANT))
    # Columns are read by name, in the asked order, others left out.
    got = read_batch_files([ok], pa.schema([WANT.field("value"), WANT.field("device")]))
    assert isinstance(got, pa.Table) and got.column_names == ["value", "device"]
    # Widths Spark does not see: strings as large_string, timestamps in ms, another zone.
    large = pa.schema([WANT.field("device").with_type(pa.large_string())])
    got = read_batch_files([ok], large)
    assert isinstance(got, pa.Table) and got.column("device").to_pylist() == ["a", "b", None]
    ms = _table(ts=base.column("ts").cast(pa.timestamp("ms", tz="Europe/Paris")))
    got = read_batch_files([write("ms.parquet", ms)], WANT)
    assert isinstance(got, pa.Table) and got.column("ts").equals(base.column("ts"))
    categories = _table(device=pa.array(["a", "b", None]).dictionary_encode())
    got = read_batch_files([write("dictionary.parquet", categories)], WANT)
    assert isinstance(got, pa.Table) and got.equals(base.cast(WANT))
    assert read_batch_files([], WANT) == WANT.empty_table()

    refused = {
        "naive timestamps": _table(ts=base.column("ts").cast(pa.timestamp("us"))),
        "nanoseconds (Spark fails on them)": _table(ts=base.column("ts").cast(pa.timestamp("ns"))),
        "another number type (Spark may widen it)": _table(value=pa.array([1, 2, 3], pa.int32())),
        "a column in another case": base.rename_columns(["Device", "ts", "value"]),
        "two columns one name to Spark": base.append_column("DEVICE", pa.array(["x"] * 3)),
        "a missing column": base.drop_columns(["value"]),
        "binary where Spark has a string": _table(device=pa.array([b"a", b"b", None])),
        "a dictionary of other values": _table(device=pa.array([1, 2, None]).dictionary_encode()),
    }
    for why, table in refused.items():
        assert isinstance(read_batch_files([ok, write(f"{why}.parquet", table)], WANT), str), why
    int96 = write("int96.parquet", base, use_deprecated_int96_timestamps=True)
    # The reason names what to change: Spark writes INT96 timestamps by default.
    assert "INT96" in str(read_batch_files([int96], WANT))
    legacy = base.replace_schema_metadata({"org.apache.spark.legacyDateTime": ""})
    assert "legacy" in str(read_batch_files([write("legacy.parquet", legacy)], WANT))
    assert isinstance(read_batch_files([(tmp_path / "gone.parquet").as_uri()], WANT), str)
    assert isinstance(read_batch_files(["s3a://bucket/x.parquet"], WANT), str)
    dotted = pa.schema([pa.field("a.b", pa.int64())])
    got = read_batch_files([write("dotted.parquet", pa.table({"a.b": [1]}))], dotted)
    assert isinstance(got, str)
    (tmp_path / "bad.parquet").write_bytes(b"not parquet")
    assert isinstance(read_batch_files([(tmp_path / "bad.parquet").as_uri()], WANT), str)


def _run(
    spark: Any,
    tmp_path: Path,
    name: str,
    inp: Path,
    query: Callable[[Any], Any],
    options: dict[str, str],
    **kw: Any,
) -> tuple[list[tuple], list[str]]:
    """The windows of the file stream ``query`` makes of ``inp`` (two files a
    micro-batch, then a flush) through ``StreamProcessor(**kw)``, and where each
    micro-batch ran and how its rows were read (``"driver/files"``, ...)."""
    schema = spark.read.parquet(str(inp)).schema
    got: list[tuple] = []
    reads: list[str] = []

    columns = kw.pop("columns", COLUMNS)

    def sink(df: Any, _batch_id: int) -> None:
        got.extend(rows_of(df, columns))

    derive = kw.pop("derive", lambda df: df)
    whys: list[str] = kw.pop("why", [])
    pipe = kw.pop("pipe", None) or pipeline()
    proc = StreamProcessor(pipe, str(tmp_path / name / "state"), 3, sink=sink, **kw)

    def each_batch(df: Any, batch_id: int) -> None:
        proc(derive(df), batch_id)
        assert proc.last_progress is not None
        reads.append(f"{proc.last_progress['layout']}/{proc.last_progress['read']}")
        whys.append(proc.last_progress.get("read_why", ""))

    reader = spark.readStream.schema(schema).option("maxFilesPerTrigger", 2)
    for k, v in options.items():
        reader = reader.option(k, v)
    stream = query(reader.parquet(str(inp)))
    q = (
        stream.writeStream.foreachBatch(each_batch)
        .option("checkpointLocation", str(tmp_path / name / "chk"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    proc.flush(spark, stream.schema)
    return sorted(got), reads


@pytest.mark.parametrize(
    ("query", "options", "conf", "read"),
    [
        (lambda s: s, {}, {}, "files"),
        (lambda s: s.select("value", "ts", "device"), {}, {}, "files"),
        (lambda s: s, {}, {"spark.sql.execution.arrow.useLargeVarTypes": "true"}, "files"),
        # Rows the query changes come from Spark: a filter (that keeps every row), a
        # computed column, a renamed one; so do rows read with options of their own.
        (lambda s: s.filter("value >= 0"), {}, {}, "spark"),
        (
            lambda s: s.filter("coalesce(value, 0) + rand() >= 0"),
            {},
            {},
            "spark",
        ),  # kept above the scan
        (lambda s: s.selectExpr("device", "ts", "value * 1.0 AS value"), {}, {}, "spark"),
        (lambda s: s, {"mergeSchema": "true"}, {}, "spark"),
    ],
    ids=[
        "bare",
        "plain-columns",
        "large-strings",
        "filter",
        "unpushed-filter",
        "computed",
        "option",
    ],
)
def test_a_parquet_file_stream_gives_the_same_windows_read_either_way(
    spark: Any,
    tmp_path: Path,
    query: Callable[[Any], Any],
    options: dict[str, str],
    conf: dict[str, str],
    read: str,
) -> None:
    inp = tmp_path / "in"
    write_stream_files(inp, stream_batches())
    want, reads = _run(spark, tmp_path, "spark", inp, lambda s: s, {}, read_files=False)
    assert reads == ["driver/spark"] * 3
    for k, v in conf.items():
        spark.conf.set(k, v)
    try:
        got, reads = _run(spark, tmp_path, "files", inp, query, options)
    finally:
        for k in conf:
            spark.conf.unset(k)
    assert reads == [f"driver/{read}"] * 3
    assert got == want


def test_a_preaggregating_processor_reads_small_micro_batches_from_their_files(
    spark: Any, tmp_path: Path
) -> None:
    # preaggregate=True folds only micro-batches too large for one task: a small one of
    # a file stream is read from its files by the driver, each row its own fold, into
    # the state the folds share; the windows are the raw processor's.
    pipe = tm.Pipeline(
        "device",
        "ts",
        window=tm.Tumbling("10s"),
        aggs={"n": tm.count(), "first": tm.min("ts")},
        watermark=tm.BoundedOutOfOrderness("5s", per="key"),
    )
    inp = tmp_path / "in"
    write_stream_files(inp, stream_batches())
    same = lambda s: s  # noqa: E731
    columns = ["device", "window_start", "n", "first"]
    want, reads = _run(spark, tmp_path, "raw", inp, same, {}, pipe=pipe, columns=columns)
    assert reads == ["driver/files"] * 3
    got, reads = _run(
        spark, tmp_path, "pre", inp, same, {}, pipe=pipe, columns=columns, preaggregate=True
    )
    assert reads == ["driver/files"] * 3
    assert got == want and len(want) > 10


def test_a_micro_batch_read_from_its_files_runs_in_the_driver_up_to_a_larger_size(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Above ``ON_DRIVER_BYTES`` a micro-batch the driver can read from its files still
    runs there, up to ``FILES_ON_DRIVER_BYTES``; ``on_driver=True`` reads any size
    from its files, and ``on_driver=False`` or ``shuffle=True`` none."""
    from tidemark.spark import _layout

    inp = tmp_path / "in"
    write_stream_files(inp, stream_batches())
    same = lambda s: s  # noqa: E731
    want, reads = _run(spark, tmp_path, "small", inp, same, {})
    assert reads == ["driver/files"] * 3
    monkeypatch.setattr(_layout, "ON_DRIVER_BYTES", 1)
    got, reads = _run(spark, tmp_path, "above-driver-bytes", inp, same, {})
    assert (got, reads) == (want, ["driver/files"] * 3)
    got, reads = _run(spark, tmp_path, "toarrow", inp, same, {}, read_files=False)
    assert (got, reads) == (want, ["one task/spark"] * 3)
    monkeypatch.setattr(_layout, "FILES_ON_DRIVER_BYTES", 1)
    got, reads = _run(spark, tmp_path, "above-files-bytes", inp, same, {})
    assert (got, reads) == (want, ["one task/spark"] * 3)
    got, reads = _run(spark, tmp_path, "on-driver", inp, same, {}, on_driver=True)
    assert (got, reads) == (want, ["driver/files"] * 3)
    got, reads = _run(spark, tmp_path, "tasks", inp, same, {}, on_driver=False)
    assert (got, reads) == (want, ["one task/spark"] * 3)
    got, reads = _run(spark, tmp_path, "shuffled", inp, same, {}, shuffle=True)
    # shuffle=True folds by default; the fold kept more than FOLD_SHARE of this
    # stream's rows, so the next micro-batches run raw.
    assert (got, reads) == (want, ["shuffled/folds"] + ["shuffled/spark"] * 2)
    got, reads = _run(spark, tmp_path, "raw", inp, same, {}, shuffle=True, preaggregate=False)
    assert (got, reads) == (want, ["shuffled/spark"] * 3)


@pytest.mark.parametrize(
    ("derive", "read"),
    [
        (lambda df: df.select("ts", "device", "value"), "files"),
        (lambda df: df.select("value", "device", "ts").select("ts", "device", "value"), "files"),
        (lambda df: df.filter("value >= 0"), "spark"),
        (lambda df: df.selectExpr("device", "ts", "value * 1.0 AS value"), "spark"),
    ],
    ids=["select", "select-twice", "filter", "computed"],
)
def test_a_micro_batch_derived_inside_foreach_batch_is_read_from_files_when_plain(
    spark: Any, tmp_path: Path, derive: Callable[[Any], Any], read: str
) -> None:
    """``foreachBatch(lambda df, b: proc(df.select(...), b))``: a selection of plain
    columns of the micro-batch is read from its files; anything else from Spark."""
    inp = tmp_path / "in"
    write_stream_files(inp, stream_batches())
    same = lambda s: s  # noqa: E731
    want, _ = _run(spark, tmp_path, "spark", inp, same, {}, read_files=False)
    got, reads = _run(spark, tmp_path, "derived", inp, same, {}, derive=derive)
    assert (got, reads) == (want, [f"driver/{read}"] * 3)


def test_read_files_knows_the_plans_of_the_spark_running_the_tests(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``read_files`` reads Spark's physical plan, which a release may change: it reads
    files only on the releases it was checked against. This test runs on the Spark the
    project installs, so an upgrade fails here until the tests above pass on it and its
    release joins ``SPARK_VERSIONS``; on any other release the rows come from Spark."""
    from tidemark.spark import _files

    release = ".".join(spark.version.split(".")[:2])
    assert release in _files.SPARK_VERSIONS, (
        f"Spark {release}: run tests/test_spark_files.py on it, then add it to SPARK_VERSIONS"
    )
    inp = tmp_path / "in"
    write_stream_files(inp, stream_batches())
    same = lambda s: s  # noqa: E731
    want, reads = _run(spark, tmp_path, "known", inp, same, {})
    assert reads == ["driver/files"] * 3
    monkeypatch.setattr(_files, "SPARK_VERSIONS", frozenset({"3.5"}))
    whys: list[str] = []
    got, reads = _run(spark, tmp_path, "unknown", inp, same, {}, why=whys)
    assert (got, reads) == (want, ["driver/spark"] * 3)
    assert whys == [f"Spark {release}: tidemark knows the plans of Spark 3.5"] * 3
