"""One Spark job computes a batch's three outputs (windows, late rows, error rows).

``mapInArrow`` has one output schema, so the task emits one of two forms:

* *combined* batches (streaming with late or error sinks): a kind code, the window
  columns, the input columns (for late and error rows) and the error reason; the
  driver persists them once and splits them into three DataFrames with projections;
* *packed* batches (batch ``aggregate``): a kind code and an Arrow IPC stream of that
  output's batches, in its own exact schema. Persisting a few large binary values
  costs Spark far less than caching every output row column by column; each output
  is then unpacked from the persisted blobs by a ``mapInArrow`` that only reads them.

Spark does not cast ``mapInArrow`` output, so the task casts every batch to the
exact Arrow schema Spark expects (string vs large_string, session time zone).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from tidemark import _native
from tidemark.pipeline import Output, Pipeline

KIND_WINDOW, KIND_LATE, KIND_ERROR = 0, 1, 2

_KIND = "__tm_kind"
_REASON = "__tm_reason"
_BLOB = "__tm_blob"
#: Output rows per packed blob, and bytes (wide rows: fewer rows), far below the
#: 2 GB Spark allows one binary value.
PACK_ROWS = 65_536
PACK_BYTES = 64 << 20
#: On 2 cores, an input (or micro-batch) Spark estimates below this many bytes runs in
#: one task with no shuffle by default: a stage less, and too little work to gain from
#: parallel tasks (measured: one task stays faster up to about 20 MB of Parquet). More
#: cores gain more from parallel tasks: the bound shrinks in proportion
#: (:func:`fits_one_task`).
SINGLE_TASK_BYTES = 16 << 20


def combined_block(
    schema: pa.Schema, kind_name: str, n: int, kind: int, columns: dict[str, Any]
) -> pa.RecordBatch:
    """``n`` rows of a combined output: the kind code, the given columns cast to the
    exact types Spark expects, nulls elsewhere."""
    arrays = []
    for f in schema:
        if f.name == kind_name:
            arrays.append(pa.array([kind] * n, f.type))
        elif f.name in columns:
            arrays.append(columns[f.name].cast(f.type))
        else:
            arrays.append(pa.nulls(n, f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def session_arrow_settings(spark: Any) -> tuple[str, bool]:
    """The session time zone and whether strings travel as large_string. The zone is
    read without a default: unset, it is the JVM's zone (``get(key, "UTC")`` would
    answer "UTC" where Spark's Arrow batches say, e.g., "Etc/UTC")."""
    try:
        tz = spark.conf.get("spark.sql.session.timeZone") or "UTC"
    except Exception:  # a session that cannot say: Spark's own fallback
        tz = "UTC"
    large = str(spark.conf.get("spark.sql.execution.arrow.useLargeVarTypes", "false")).lower()
    return tz, large == "true"


def to_arrow_schema(task_schema: pa.Schema) -> pa.Schema:
    """The schema ``toArrow()`` gives a DataFrame whose tasks' schema is
    ``task_schema`` (:func:`arrow_schema_of`): session-zone timestamps in UTC, every
    column nullable. Arrow sinks get their tables in it."""

    def utc(t: pa.DataType) -> pa.DataType:
        if pa.types.is_timestamp(t) and t.tz is not None:
            return pa.timestamp(t.unit, tz="UTC")
        return t

    return pa.schema([f.with_type(utc(f.type)).with_nullable(True) for f in task_schema])


def arrow_schema_of(spark_schema: Any, tz: str, large: bool) -> pa.Schema:
    """The Arrow schema Spark uses for ``spark_schema`` in ``mapInArrow``."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(spark_schema, timezone=tz, prefers_large_types=large)


def spark_schema_of(arrow_schema: pa.Schema) -> Any:
    """The Spark schema of Arrow data (timestamps without a time zone are NTZ)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(arrow_schema, prefer_timestamp_ntz=True)


@dataclass(frozen=True)
class Plan:
    """Schemas of one pipeline over one input schema."""

    input_arrow: pa.Schema
    windows_arrow: pa.Schema
    combined_arrow: pa.Schema
    combined_spark: Any
    window_names: list[str]
    input_names: list[str]
    reason_name: str
    #: Per output (KIND_WINDOW, KIND_LATE, KIND_ERROR): its Spark schema and the exact
    #: Arrow schema Spark expects of it, for jobs that compute one output alone.
    single_spark: dict[int, Any]
    single_arrow: dict[int, pa.Schema]

    @staticmethod
    def build(pipe: Pipeline, df_schema: Any, tz: str, large: bool) -> Plan:
        from pyspark.sql.types import IntegerType, StringType, StructField, StructType

        missing = [k for k in pipe.key if k not in df_schema.fieldNames()]
        if missing:
            from tidemark.errors import ConfigError

            why = (
                " (Spark routes rows by the pipeline's keys before the lookup join, so keys "
                "must be input columns; aggregates may use lookup columns)"
                if pipe.lookup is not None
                else ""
            )
            raise ConfigError(
                f"key column(s) {missing} are not columns of the DataFrame; it has "
                f"{', '.join(df_schema.fieldNames())}{why}"
            )
        collated = collated_columns(df_schema, pipe.key)
        if collated:
            from tidemark.errors import ConfigError

            name, collation = collated[0]
            raise ConfigError(
                f"key column {name!r} is a string with collation {collation}: Spark "
                "groups and hashes it by its collation key ('A' and 'a' are one key "
                "under UTF8_LCASE), while tidemark compares keys byte for byte and would "
                "keep them apart. Pass F.collate(F.lower(...), 'UTF8_BINARY') of the "
                f"column for case-insensitive keys, or F.collate({name!r}, 'UTF8_BINARY') "
                "to compare bytes"
            )
        input_arrow = arrow_schema_of(df_schema, tz, large)
        windows_arrow = pipe.output_schema(input_arrow)
        windows_spark = spark_schema_of(windows_arrow)
        fields = [StructField(_KIND, IntegerType(), False)]
        fields += [
            StructField(f"__tm_w{i}", f.dataType, True) for i, f in enumerate(windows_spark.fields)
        ]
        fields += [
            StructField(f"__tm_i{i}", f.dataType, True) for i, f in enumerate(df_schema.fields)
        ]
        fields.append(StructField(_REASON, StringType(), True))
        combined_spark = StructType(fields)
        reason = "reason" if "reason" not in df_schema.fieldNames() else "_tidemark_reason"
        single_spark = {
            # Nullable as in the combined result, so both ways give one schema.
            KIND_WINDOW: StructType(
                [StructField(f.name, f.dataType, True) for f in windows_spark.fields]
            ),
            KIND_LATE: df_schema,
            KIND_ERROR: StructType([*df_schema.fields, StructField(reason, StringType(), True)]),
        }
        return Plan(
            single_spark=single_spark,
            single_arrow={k: arrow_schema_of(v, tz, large) for k, v in single_spark.items()},
            input_arrow=input_arrow,
            windows_arrow=windows_arrow,
            combined_arrow=arrow_schema_of(combined_spark, tz, large),
            combined_spark=combined_spark,
            window_names=windows_arrow.names,
            input_names=list(df_schema.fieldNames()),
            reason_name=reason,
        )

    # --- task side ---------------------------------------------------------------

    def _block(self, n: int, kind: int, columns: dict[str, pa.Array]) -> pa.RecordBatch:
        return combined_block(self.combined_arrow, _KIND, n, kind, columns)

    def _columns(self, table: pa.Table, kind: int) -> list[pa.Array | None]:
        """The columns of an output in output order: the window columns, or the input
        columns (``None`` where the table lacks one) and, for errors, the reason."""
        if kind == KIND_WINDOW:
            return [table.column(i).combine_chunks() for i in range(table.num_columns)]
        cols: list[pa.Array | None] = [
            table.column(n).combine_chunks() if n in table.column_names else None
            for n in self.input_names
        ]
        if kind == KIND_ERROR:
            cols.append(table.column(table.num_columns - 1).combine_chunks())
        return cols

    def _combined_names(self, kind: int) -> list[str]:
        """The combined-result columns that hold :meth:`_columns` of an output."""
        if kind == KIND_WINDOW:
            return [f"__tm_w{i}" for i in range(len(self.window_names))]
        names = [f"__tm_i{i}" for i in range(len(self.input_names))]
        return [*names, _REASON] if kind == KIND_ERROR else names

    @staticmethod
    def _tables(out: Output) -> dict[int, pa.Table]:
        return {KIND_WINDOW: out.windows, KIND_LATE: out.late, KIND_ERROR: out.errors}

    def encode(self, out: Output) -> Iterator[pa.RecordBatch]:
        """The combined batches of one operator output."""
        for kind, table in self._tables(out).items():
            if table.num_rows == 0:
                continue
            cols = zip(self._combined_names(kind), self._columns(table, kind), strict=True)
            yield self._block(table.num_rows, kind, {n: c for n, c in cols if c is not None})

    def encode_one(self, out: Output, kind: int) -> Iterator[pa.RecordBatch]:
        """The batches of output ``kind`` alone, in the exact schema of
        :attr:`single_arrow` (a job that computes that output only)."""
        table = self._tables(out)[kind]
        if table.num_rows == 0:
            return
        schema = self.single_arrow[kind]
        arrays = [
            pa.nulls(table.num_rows, f.type) if c is None else c.cast(f.type)
            for c, f in zip(self._columns(table, kind), schema, strict=True)
        ]
        yield pa.RecordBatch.from_arrays(arrays, schema=schema)

    def encode_packed(
        self, out: Output, rows: int = PACK_ROWS, max_bytes: int = PACK_BYTES
    ) -> Iterator[pa.RecordBatch]:
        """One operator output as packed batches (:func:`packed_spark`): per output
        kind, its :meth:`encode_one` batches as Arrow IPC streams of up to ``rows``
        rows and about ``max_bytes`` bytes each (at least one row)."""
        for kind in (KIND_WINDOW, KIND_LATE, KIND_ERROR):
            for batch in self.encode_one(out, kind):
                per_row = max(1, batch.nbytes // max(1, batch.num_rows))
                step = max(1, min(rows, max_bytes // per_row))
                for start in range(0, batch.num_rows, step):
                    sink = pa.BufferOutputStream()
                    with pa.ipc.new_stream(sink, batch.schema) as writer:
                        writer.write_batch(batch.slice(start, step))
                    yield _packed_row(kind, sink.getvalue())

    # --- driver side ---------------------------------------------------------------

    def split_arrow(self, combined: pa.Table, kinds: list[int]) -> dict[int, pa.Table]:
        """Outputs ``kinds`` of a combined Arrow result, each in the schema
        :meth:`split` gives its DataFrame (:meth:`split_spark`)."""
        import pyarrow.compute as pc

        out = {}
        for kind in kinds:
            rows = combined.filter(pc.equal(combined.column(_KIND), kind))
            arrow = self.split_arrow_schema(kind)
            cols = [rows.column(n) for n in self._combined_names(kind)]
            out[kind] = pa.Table.from_arrays(cols, names=arrow.names).cast(arrow)
        return out

    def split_arrow_schema(self, kind: int) -> pa.Schema:
        """The Arrow schema of output ``kind`` as :meth:`split_spark` gives it (every
        column nullable)."""
        return pa.schema([f.with_nullable(True) for f in self.single_arrow[kind]])

    def sink_arrow_schema(self, kind: int) -> pa.Schema:
        """The Arrow schema ``toArrow()`` gives output ``kind``'s DataFrame (see
        :func:`to_arrow_schema`)."""
        return to_arrow_schema(self.split_arrow_schema(kind))

    def split_spark(self, kind: int) -> Any:
        """The Spark schema of output ``kind`` as :meth:`split` gives it (every
        column nullable, as in the combined result)."""
        from pyspark.sql.types import StructField, StructType

        fields = self.single_spark[kind].fields
        return StructType([StructField(f.name, f.dataType, True) for f in fields])

    def split(self, combined: Any) -> tuple[Any, Any, Any]:
        """The windows, late and error DataFrames of a (persisted) combined result."""
        from pyspark.sql import functions as F

        kind = F.col(_KIND)
        windows = combined.filter(kind == KIND_WINDOW).select(
            *[F.col(f"__tm_w{i}").alias(n) for i, n in enumerate(self.window_names)]
        )
        inputs = [F.col(f"__tm_i{i}").alias(n) for i, n in enumerate(self.input_names)]
        late = combined.filter(kind == KIND_LATE).select(*inputs)
        errors = combined.filter(kind == KIND_ERROR).select(
            *inputs, F.col(_REASON).alias(self.reason_name)
        )
        return windows, late, errors


def packed_spark() -> Any:
    """The Spark schema of packed batches (:meth:`Plan.encode_packed`)."""
    from pyspark.sql.types import BinaryType, IntegerType, StructField, StructType

    return StructType(
        [StructField(_KIND, IntegerType(), False), StructField(_BLOB, BinaryType(), False)]
    )


def _packed_row(kind: int, blob: pa.Buffer) -> pa.RecordBatch:
    """One packed row, the blob's bytes not copied."""
    offsets = pa.array([0, blob.size], pa.int32()).buffers()[1]
    blobs = pa.Array.from_buffers(pa.binary(), 1, [None, offsets, blob])
    return pa.record_batch([pa.array([kind], pa.int32()), blobs], names=[_KIND, _BLOB])


def unpack(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The output batches inside packed batches (the ``mapInArrow`` of
    :func:`split_packed`; blobs arrive as binary or large_binary)."""
    for batch in batches:
        for blob in batch.column(_BLOB):
            yield from pa.ipc.open_stream(blob.as_buffer())


def split_packed(plan: Plan, packed: Any) -> tuple[Any, Any, Any]:
    """The windows, late and error DataFrames of a (persisted) packed result."""
    from pyspark.sql import functions as F

    kind = F.col(_KIND)
    out = [
        packed.filter(kind == k).select(_BLOB).mapInArrow(unpack, plan.single_spark[k])
        for k in (KIND_WINDOW, KIND_LATE, KIND_ERROR)
    ]
    return out[0], out[1], out[2]


def spark_context(spark: Any) -> Any | None:
    """The ``SparkContext`` of a classic session; ``None`` for a Spark Connect session,
    which has none (``spark.sparkContext`` raises there)."""
    try:
        return spark.sparkContext
    except Exception:  # PySparkAttributeError under Spark Connect
        return None


class ShippedPipeline:
    """A pipeline as executors receive it: a lookup table (``Pipeline.enrich``)
    travels as a Spark broadcast variable (once per executor), not inside every
    task's closure. Spark Connect has no broadcast variables: there the table travels
    inside the closure."""

    def __init__(self, pipe: Pipeline, spark: Any) -> None:
        lk = pipe.lookup
        self.bare = pipe.without_lookup()
        self.spec = None if lk is None else (lk.on, lk.how, lk.prefix)
        self.table: Any = None
        self.inline: pa.Table | None = None
        if lk is not None:
            sc = spark_context(spark)
            if sc is None:
                self.inline = lk.table
            else:
                self.table = sc.broadcast(lk.table)

    def get(self) -> Pipeline:
        """The pipeline, with its lookup table (read from the broadcast variable)."""
        if self.spec is None:
            return self.bare
        table = self.inline if self.table is None else self.table.value
        on, how, prefix = self.spec
        return self.bare.enrich(table, on, how, prefix)


#: Spark's size estimate of a streaming micro-batch at most which a
#: :class:`~tidemark.spark.StreamProcessor` runs it in the driver's process by default,
#: if it would run in one task (its rows come back as Arrow; no Python worker takes
#: part). A cap on what the driver holds at once: Spark estimates a Parquet file by
#: its compressed size.
ON_DRIVER_BYTES = 8 << 20

#: The same for a micro-batch the driver reads from its Parquet files (see
#: ``StreamProcessor(read_files=...)``), shuffled or not: pyarrow reads the files
#: several times faster than Spark hands rows to a task, so the driver outruns the
#: tasks on small machines well beyond ``ON_DRIVER_BYTES``; the cap bounds what it
#: holds (about 4 million rows of a key, a timestamp and a number).
FILES_ON_DRIVER_BYTES = 32 << 20

#: Spark's size estimate of a one-task input at most which its unused fixed-width
#: columns travel to the task instead of being projected away (see
#: :func:`unused_columns_are_cheap`).
CHEAP_INPUT_BYTES = 1 << 20


def _fixed_width_types() -> tuple[type, ...]:
    from pyspark.sql import types as T

    return (
        T.ByteType,
        T.ShortType,
        T.IntegerType,
        T.LongType,
        T.FloatType,
        T.DoubleType,
        T.BooleanType,
        T.DateType,
        T.TimestampType,
        T.TimestampNTZType,
        T.DecimalType,
    )


def unused_columns_are_cheap(schema: Any, used: list[str], size: int | None) -> bool:
    """Whether a task should read every column of ``schema`` (a Spark ``StructType``)
    though it uses only ``used``: the others are all fixed-width (numbers, booleans,
    dates, timestamps, decimals) and Spark estimates the whole input at most
    :data:`CHEAP_INPUT_BYTES`. Sending such columns costs the task well under a
    millisecond; the projection that drops them costs the driver a JVM analysis of the
    plan (about 15 ms for a streaming micro-batch here)."""
    if size is None or size > CHEAP_INPUT_BYTES:
        return False
    fixed = _fixed_width_types()
    keep = set(used)
    return all(type(f.dataType) in fixed for f in schema.fields if f.name not in keep)


def collated_columns(schema: Any, names: list[str]) -> list[tuple[str, str]]:
    """``(name, collation)`` for each of the columns ``names`` of ``schema`` (a Spark
    ``StructType``) that is a string with a collation other than ``UTF8_BINARY``
    (byte-wise equality): Spark compares, groups and hashes those by their collation
    key.

    >>> from pyspark.sql import types as T
    >>> schema = T.StructType([T.StructField("a", T.StringType()),
    ...                        T.StructField("b", T.StringType("UTF8_LCASE"))])
    >>> collated_columns(schema, ["a", "b", "missing"])
    [('b', 'UTF8_LCASE')]
    """
    from pyspark.sql import types as T

    fields = {f.name: f.dataType for f in schema.fields}
    out = []
    for name in names:
        dt = fields.get(name)
        if type(dt) is T.StringType:
            collation = getattr(dt, "collation", "UTF8_BINARY")
            if collation != "UTF8_BINARY":
                out.append((name, collation))
    return out


def spark_hash_matches(schema: Any, names: list[str]) -> bool:
    """Whether tidemark's Spark hash (``HashRouter(hash="spark")``) of these columns of
    ``schema`` (a Spark ``StructType``), read from their Arrow form in a task, equals
    Spark's own ``hash()`` of them, so that a task may route rows to state partitions
    itself. True for the types ``tests/test_route.py`` checks against Spark's
    ``repartition``; false for any other type, and for strings with a collation other
    than ``UTF8_BINARY`` (Spark hashes those by their collation key)."""
    from pyspark.sql import types as T

    exact = (*_fixed_width_types(), T.BinaryType, T.StringType)
    fields = {f.name: f.dataType for f in schema.fields}
    if collated_columns(schema, names):
        return False
    return all(type(fields.get(name)) in exact for name in names)


def runs_on_driver(
    on_driver: bool | None,
    last_on_driver: bool | None,
    flush: bool,
    routable: Callable[[], bool],
    small: Callable[[], bool],
) -> bool:
    """Where a streaming processor's micro-batch runs (its ``on_driver`` argument):
    never with ``False``; a flush (no rows) with ``True`` or after a micro-batch that
    ran in the driver; a micro-batch only where ``routable()`` (the driver puts its
    rows where Spark's shuffle would, or where the layout does not matter), then with
    ``True``, or by default where ``small()``."""
    if on_driver is False:
        return False
    if flush:
        return on_driver is True or last_on_driver is True
    if not routable():
        return False
    return on_driver is True or small()


def quoted(name: str) -> str:
    """A column name as a SQL identifier."""
    return "`" + name.replace("`", "``") + "`"


def map_in_arrow(df: Any, fn: Any, schema: Any) -> Any:
    """``df.mapInArrow(fn, schema)`` for any column names. PySpark's ``mapInArrow``
    resolves each input column by its name, which fails for a name with a dot or a
    backtick (``user.id`` from flattened JSON): such an input travels under
    positional names, and ``fn`` sees batches with the real names again."""
    names = list(df.columns)
    if not any("." in n or "`" in n for n in names):
        return df.mapInArrow(fn, schema)
    safe = df.selectExpr(*[f"{quoted(n)} AS `__tm_c{i}`" for i, n in enumerate(names)])

    def renamed(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return fn(b.rename_columns(names) for b in batches)  # type: ignore[no-any-return]

    return safe.mapInArrow(renamed, schema)


def require_batch(df: Any, call: str, streaming_way: str) -> None:
    """Raises :class:`~tidemark.ConfigError` for a streaming DataFrame (Spark's own
    error would come later, from the first action, and not say what to use), and a
    ``TypeError`` for anything but a DataFrame."""
    if not (hasattr(df, "isStreaming") and hasattr(df, "sparkSession")):
        raise TypeError(f"{call} takes a pyspark.sql.DataFrame, got {type(df).__name__}")
    if df.isStreaming:
        from tidemark.errors import ConfigError

        raise ConfigError(
            f"{call} takes a batch DataFrame; for a streaming one, pass "
            f"{streaming_way} to df.writeStream.foreachBatch(...)"
        )


def require_args(
    call: str,
    operator: tuple[str, Any, type],
    counts: dict[str, Any],
    sinks: dict[str, Any] | None = None,
) -> None:
    """Checks the arguments of a Spark entry point when it is called, where a wrong
    one would otherwise fail later inside a Spark job (or be silently replaced):
    ``operator`` is ``(name, value, expected type)``; each of ``counts`` is ``None``
    (its default) or an int of at least 1; each of ``sinks`` is ``None`` or callable.

    >>> require_args("f()", ("pipe", 1, str), {})
    Traceback (most recent call last):
    TypeError: f(): pipe must be a str, got int
    >>> require_args("f()", ("pipe", "p", str), {"num_partitions": 0})
    Traceback (most recent call last):
    tidemark.errors.ConfigError: f(): num_partitions must be an int >= 1, got 0
    """
    from tidemark.errors import ConfigError

    name, value, expected = operator
    if not isinstance(value, expected):
        raise TypeError(f"{call}: {name} must be a {expected.__name__}, got {type(value).__name__}")
    for name, n in counts.items():
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise ConfigError(f"{call}: {name} must be an int >= 1, got {n!r}")
    for name, sink in (sinks or {}).items():
        if sink is not None and not callable(sink):
            raise TypeError(
                f"{call}: {name} must be a function (DataFrame, batch_id) or None, "
                f"got {type(sink).__name__}"
            )
    # A Pipeline and a Reorder both say what they do with late rows.
    if (sinks or {}).get("late_sink") is not None and getattr(value, "late", None) == "drop":
        # Every batch would hand it an empty table: as if no row were ever late.
        raise ConfigError(
            f'{call}: late_sink gets no rows from a {operator[0]} built with late="drop" (late '
            'rows are dropped and counted); build it with late="side_output" or leave '
            "late_sink out"
        )


def column(name: str) -> Any:
    """The top-level column ``name``, whatever characters it holds (Spark reads a bare
    ``"a.b"`` as field ``b`` of struct ``a``)."""
    from pyspark.sql import functions as F

    return F.col(quoted(name))


def used_input(pipe: Pipeline, schema: Any) -> Any:
    """The fields of ``schema`` (a Spark ``StructType``) the pipeline's windows read:
    keys, event time, source partition, aggregate inputs, in input order. With a
    lookup (:meth:`Pipeline.enrich`), every field (its columns meet the input's)."""
    from pyspark.sql.types import StructType

    if pipe.lookup is not None:
        return schema
    cfg = pipe.config
    used = {*cfg["keys"], cfg["event_time"]}
    if cfg["scope"] == "partition":
        used.add(cfg["partition_column"])
    used.update(c for a in cfg["aggs"] for c in (a[2], a[4]) if c is not None)
    return StructType([f for f in schema.fields if f.name in used])


#: Event times (epoch microseconds) within this bound always give a row its windows:
#: with window sizes, slides, offsets and gaps up to ``_SAFE_WINDOW_MICROS``, no window
#: bound can leave the core's 64-bit range.
_SAFE_MICROS = 4 * 10**18
_SAFE_WINDOW_MICROS = 10**18
_INTEGERS = ("ByteType", "ShortType", "IntegerType", "LongType")
_EPOCH_SCALE = {"unixtimestamp_s": 10**6, "unixtimestamp_ms": 10**3, "unixtimestamp_us": 1}
#: A key column value's most bytes in the core's key encoding, for fixed-width types
#: (a decimal: a tag, a 4-byte length, 16 bytes); strings and binaries take 5 + their
#: bytes.
_FIXED_KEY_BYTES = 21
_FIXED_KEYS = (
    *_INTEGERS,
    "FloatType",
    "DoubleType",
    "BooleanType",
    "DecimalType",
    "DateType",
    "TimestampType",
    "TimestampNTZType",
)
_VARIABLE_KEYS = ("StringType", "BinaryType", "CharType", "VarcharType")


def _safe_event_time(pipe: Pipeline, schema: Any) -> Callable[[], Any] | None:
    """A builder of a Spark predicate true for rows whose event time the core reads and
    windows without fail (not null, well inside the 64-bit microsecond range), or
    ``None`` where only the core can tell (strings, floats, user parsers)."""
    from pyspark.sql import functions as F

    kind = type(schema[pipe.event_time].dataType).__name__
    name = pipe.event_time_type

    def within(lo: Callable[[], Any], hi: Callable[[], Any]) -> Callable[[], Any]:
        def build() -> Any:
            ts = column(pipe.event_time)
            return ts.isNotNull() & (ts >= lo()) & (ts <= hi())

        return build

    if name is None and kind == "TimestampType":
        return within(
            lambda: F.timestamp_micros(F.lit(-_SAFE_MICROS)),
            lambda: F.timestamp_micros(F.lit(_SAFE_MICROS)),
        )
    if name is None and kind == "TimestampNTZType":
        return within(
            lambda: F.timestamp_micros(F.lit(-_SAFE_MICROS)).cast("timestamp_ntz"),
            lambda: F.timestamp_micros(F.lit(_SAFE_MICROS)).cast("timestamp_ntz"),
        )
    if name is None and kind == "DateType":
        days = _SAFE_MICROS // 86_400_000_000
        return within(
            lambda: F.date_from_unix_date(F.lit(-days)), lambda: F.date_from_unix_date(F.lit(days))
        )
    if name == "unixtimestamp_ns" and kind in _INTEGERS:
        # A long of nanoseconds always fits in microseconds.
        return lambda: column(pipe.event_time).isNotNull()
    if name in _EPOCH_SCALE and kind in _INTEGERS:
        bound = _SAFE_MICROS // _EPOCH_SCALE[name]
        return within(lambda: F.lit(-bound), lambda: F.lit(bound))
    return None


def known_late_and_errors(
    df: Any, pipe: Pipeline, plan: Plan, error_task: Any
) -> Callable[[], tuple[Any, Any]] | None:
    """A builder of the late and error rows of a batch ``aggregate`` run without a
    replay (each partition one arrival unit), computed without the pipeline's windows,
    where a row fails or not on its own: no row of such a run is late, and a row fails
    for its event time (null, unreadable, out of range) or its key (too long) alone.

    ``late`` is then empty, and ``errors`` is ``error_task`` (the pipeline, emitting
    its error rows) run on the input rows a Spark filter cannot clear: a non-null,
    well-ranged event time, a short key and (partition scope) a source partition in
    range clear a row, so the task usually sees none, and it gives exactly the rows
    and reasons of the full run. ``None`` where a row's fate depends on others or on
    state (``max_keys``, a lookup, ``state_ttl``), or where the filter would clear no
    row (string, float or user-parsed event times or partitions): only the full run
    tells, and its result is persisted. Whether the rows are known is decided now
    (from the schema alone); the builder makes the two DataFrames (a few dozen calls
    into the JVM, saved when only the windows are read)."""
    from pyspark.sql import functions as F

    cfg = pipe.config
    schema = df.schema
    if (
        pipe.lookup is not None
        or pipe.max_keys is not None
        or pipe.state_ttl is not None
        or cfg["time"] != "event"
        or cfg["parsed_externally"]
        or any(
            abs(v) > _SAFE_WINDOW_MICROS
            for k, v in cfg["window"].items()
            if k in ("size", "slide", "offset", "gap")
        )
    ):
        return None
    safe_time = _safe_event_time(pipe, schema)
    if safe_time is None:
        return None
    part = cfg["partition_column"] if cfg["scope"] == "partition" else None
    if part is not None and type(schema[part].dataType).__name__ not in _INTEGERS:
        return None
    kinds = [type(schema[k].dataType).__name__ for k in pipe.key]
    if any(k not in _FIXED_KEYS and k not in _VARIABLE_KEYS for k in kinds):
        return None  # not a key type the core takes: its run says so
    var = [k for k, kind in zip(pipe.key, kinds, strict=True) if kind in _VARIABLE_KEYS]

    def build() -> tuple[Any, Any]:
        safe = safe_time()
        if part is not None:
            pc = column(part)
            safe = safe & pc.isNotNull() & (pc >= 0) & (pc < F.lit(_native.SOURCE_PARTITIONS))
        if var:
            most = F.lit(_FIXED_KEY_BYTES * (len(pipe.key) - len(var)) + 5 * len(var))
            for k in var:
                most = most + F.coalesce(F.octet_length(column(k)), F.lit(0))
            safe = safe & (most <= F.lit(_native.MAX_KEY_BYTES))
        doubtful = df.filter(~F.coalesce(safe, F.lit(False)))
        errors = map_in_arrow(doubtful, error_task, plan.single_spark[KIND_ERROR])
        return df.filter(F.lit(False)), errors

    return build


def estimated_bytes(df: Any) -> int | None:
    """Spark's size estimate of ``df`` (optimizer statistics), if it has one. A Spark
    Connect DataFrame has no JVM handle: its estimate is read from the cost plan
    (one request to the server)."""
    try:
        stats = df._jdf.queryExecution().optimizedPlan().stats()
        return int(stats.sizeInBytes())
    except Exception:  # an API Spark does not promise: no estimate, not an error
        pass
    try:
        return size_in_cost_plan(df._explain_string(mode="cost"))
    except Exception:
        return None


_UNITS = {"B": 0, "KiB": 1, "MiB": 2, "GiB": 3, "TiB": 4, "PiB": 5, "EiB": 6}


def size_in_cost_plan(text: str) -> int | None:
    """The root's ``sizeInBytes`` in the optimized plan of ``explain(mode="cost")``
    text (``Statistics(sizeInBytes=1239.3 KiB)``), or ``None`` where it has none.

    >>> size_in_cost_plan("== Optimized Logical Plan ==\\nRelation [a#1L] parquet, "
    ...                   "Statistics(sizeInBytes=1.5 KiB)\\n\\n== Physical Plan ==")
    1536
    """
    _, found, plan = text.partition("== Optimized Logical Plan ==")
    m = re.search(r"Statistics\(sizeInBytes=([0-9.]+) ([KMGTPE]iB|B)\b", plan) if found else None
    if m is None:
        return None
    return int(float(m.group(1)) * 1024 ** _UNITS[m.group(2)])


def fits_one_task(spark: Any, size: int | None) -> bool:
    """Whether an input of ``size`` estimated bytes runs in one task with no shuffle:
    below ``SINGLE_TASK_BYTES`` with 2 cores, ``2 / cores`` of it with more
    (``SparkContext.defaultParallelism``; 2 under Spark Connect, which does not tell);
    never without an estimate."""
    if size is None:
        return False
    sc = spark_context(spark)
    cores = 2 if sc is None else max(2, int(sc.defaultParallelism))
    return size * cores < SINGLE_TASK_BYTES * 2


def concat_input(batches: Iterator[pa.RecordBatch], schema: pa.Schema) -> pa.Table:
    """Every Arrow batch of a task's partition as one table: one arrival unit."""
    collected = list(batches)
    if not collected:
        return schema.empty_table()
    return pa.Table.from_batches(collected)
