"""A micro-batch's plan: read from its files by the driver (a Parquet file stream),
or one without rows (a quiet stream's, see :func:`heartbeat`).

``foreachBatch`` hands ``StreamProcessor`` a micro-batch as a DataFrame. Fetching its
rows with ``toArrow()`` runs a Spark job in which one task decodes the Parquet file
into rows and converts the rows, one by one, to Arrow: about two thirds of a
400,000-row micro-batch that runs in the driver (see the streaming guide). When the
micro-batch is a bare scan of a Parquet file stream, the files Spark's source chose
for it are known, and pyarrow reads them in a fraction of that time (about 0.09 s
for 2,000,000 rows of two columns here).

Spark's rules decide what a bare scan reads, so this module reads a micro-batch
itself only where those rules and pyarrow's give the same table, and answers
``None`` (the caller then fetches the rows from Spark) anywhere else:

- the micro-batch is the query's own (``foreachBatch``'s DataFrame, or a selection of
  its plain columns), and the query's physical plan is a Parquet file scan with no
  filter, no partition columns, and at most a projection of plain columns above it;
- the scan has no options that change how Spark reads the files (only the file
  stream's options that choose files);
- every column read is in every file under its exact name, with no other column
  whose name differs only in case, and of a type that Spark reads unchanged: the
  same Arrow type as ``toArrow()`` gives, up to string and binary widths and the
  unit of a timestamp (milliseconds or microseconds), with a time zone exactly where
  Spark's column has one; INT96 timestamps, and files written by Spark 2 (legacy
  calendar), are left to Spark;
- pyarrow can open and read every file;
- the Spark running the query is one whose physical plans this module was checked
  against (``SPARK_VERSIONS``; ``tests/test_spark_files.py`` fails on any other, so an
  upgrade re-checks it before the list grows): the plan's classes and their methods are
  Spark's internals, which a release may change.

A replayed micro-batch is the same DataFrame over the same files, so both runs read
the same rows, whichever way each is read.

A stream that falls silent gets micro-batches without rows from :func:`heartbeat`;
:func:`has_no_rows` knows them from their plan.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from tidemark.errors import ConfigError

#: The Spark releases (major.minor) whose physical plans :func:`batch_files` was
#: checked against: it reads a micro-batch itself only on these.
SPARK_VERSIONS = frozenset({"4.2", "4.3"})

# Options of the file stream source (lowercase, as Spark keeps them) that choose which
# files a micro-batch reads, not how a file is read: the micro-batch's file list has
# applied them already.
_FILE_CHOICE_OPTIONS = frozenset(
    {
        "path",
        "paths",
        "basepath",
        "__globpaths__",
        "maxfilespertrigger",
        "maxbytespertrigger",
        "maxfileage",
        "maxcachedfiles",
        "discardcachedinputratio",
        "latestfirst",
        "filenameonly",
        "cleansource",
        "sourcearchivedir",
        "pathglobfilter",
        "recursivefilelookup",
        "modifiedbefore",
        "modifiedafter",
    }
)

# Physical plan nodes between the query's root and its scan that pass rows through
# unchanged (a ``ProjectExec`` is checked apart: plain columns only).
_PASS_THROUGH = frozenset({"WholeStageCodegenExec", "ColumnarToRowExec", "InputAdapter"})

# Spark's Parquet writer marks files whose dates and timestamps need rebasing from the
# legacy hybrid calendar with these keys (Spark 2.x and 3.x in LEGACY mode).
_LEGACY_KEYS = (b"org.apache.spark.legacyDateTime", b"org.apache.spark.legacyINT96")


def simple_name(obj: Any) -> str:
    return str(obj.getClass().getSimpleName())


def _plain_column(expr: Any) -> bool:
    """Whether a projection's expression is a plain column: a column, or a column
    under its own name (a union names its inputs' columns anew)."""
    name = simple_name(expr)
    if name == "Alias":
        child = expr.child()
        return simple_name(child) == "AttributeReference" and str(child.name()) == str(expr.name())
    return name == "AttributeReference"


def _plain_columns(exprs: Any) -> bool:
    """Whether a projection's expressions (a JVM ``Seq``) are all plain columns."""
    return all(_plain_column(exprs.apply(i)) for i in range(exprs.size()))


def micro_batch_plan(df: Any) -> Any:
    """The physical plan of ``df``'s micro-batch, if ``df`` is ``foreachBatch``'s
    DataFrame (or a selection of its plain columns); else why not (a ``str``). Reads
    Spark's plan through the JVM: under Spark Connect, or on a Spark release whose
    plans were not checked (``SPARK_VERSIONS``), a reason."""
    try:
        if (unknown := _unchecked_spark(df)) is not None:
            return unknown
        jdf = df._jdf
        analyzed = jdf.queryExecution().analyzed()
        # A selection of plain columns of the micro-batch (df.select("a", "b")).
        while simple_name(analyzed) == "Project" and _plain_columns(analyzed.projectList()):
            analyzed = analyzed.child()
        if simple_name(analyzed) != "LogicalRDD":
            return "not foreachBatch's DataFrame (or one derived from it by more than a selection)"
        spark = df.sparkSession
        # foreachBatch runs inside the micro-batch's SQL execution, on the JVM thread
        # that called Python (py4j's pinned threads): its id names the query's plan.
        eid = spark._jsparkSession.sparkContext().getLocalProperty("spark.sql.execution.id")
        if eid is None:
            return "no SQL execution (called outside foreachBatch)"
        qe = spark._jvm.org.apache.spark.sql.execution.SQLExecution.getQueryExecution(int(eid))
        # The DataFrame foreachBatch made of that plan holds its RDD: the same object.
        if qe is None or not qe.toRdd().equals(analyzed.rdd()):
            return "not foreachBatch's DataFrame of this micro-batch"
        return qe.executedPlan()
    except Exception as e:  # Spark internals it does not promise
        return f"Spark's plan could not be read ({type(e).__name__})"


def never_rows(node: Any) -> bool:
    """Whether a plan node gives no rows whatever its input: a filter on ``false`` (as
    :func:`tidemark.spark.heartbeat`'s branch), an empty local relation, or a union,
    selection or stage of such nodes."""
    name = simple_name(node)
    if name == "FilterExec":
        cond = node.condition()
        return simple_name(cond) == "Literal" and str(cond.toString()) == "false"
    if name == "LocalTableScanExec":
        return bool(node.rows().isEmpty())
    if name in ("UnionExec", "ProjectExec", *_PASS_THROUGH):
        children = node.children()
        return all(never_rows(children.apply(i)) for i in range(children.size()))
    return False


def has_no_rows(plan: Any) -> bool:
    """Whether a micro-batch's plan (:func:`micro_batch_plan`) reads no rows: its
    source had nothing new, and Spark ran it for another input (a heartbeat)."""
    try:
        return not isinstance(plan, str) and never_rows(plan)
    except Exception:  # Spark internals it does not promise: maybe rows
        return False


def batch_files(df: Any, plan: Any = None) -> list[str] | str:
    """The files of ``df``'s micro-batch, if ``df`` is ``foreachBatch``'s DataFrame of
    a query whose plan is a bare Parquet file scan (see the module's text; branches of
    a union that give no rows, a heartbeat's, are left out), as URIs: none where no
    branch reads a file; else why not (a reason for the progress). ``plan``: the
    micro-batch's plan, if read already (:func:`micro_batch_plan`)."""
    node = micro_batch_plan(df) if plan is None else plan
    if isinstance(node, str):
        return node
    scan = _bare_scan(node)
    if scan is None or isinstance(scan, str):
        return [] if scan is None else scan
    try:
        return [str(f) for f in scan.relation().location().inputFiles()]
    except Exception as e:  # Spark internals it does not promise: read through Spark
        return f"Spark's plan could not be read ({type(e).__name__})"


def _bare_scan(node: Any) -> Any:
    """The Parquet file scan under plan ``node`` where the plan is a bare scan (see the
    module's text); ``None`` where no branch reads a file; else why not (a ``str``)."""
    try:
        while simple_name(node) != "FileSourceScanExec":
            if never_rows(node):
                return None
            if simple_name(node) == "UnionExec":
                children = node.children()
                rows = [
                    children.apply(i)
                    for i in range(children.size())
                    if not never_rows(children.apply(i))
                ]
                if len(rows) != 1:
                    return "the query's plan is not a bare file scan (UnionExec)"
                node = rows[0]
                continue
            name = simple_name(node)
            if name == "ProjectExec":
                if not _plain_columns(node.projectList()):
                    return "the query computes columns"
            elif name not in _PASS_THROUGH:
                return f"the query's plan is not a bare file scan ({name})"
            children = node.children()
            if children.size() != 1:
                return f"the query's plan is not a bare file scan ({name})"
            node = children.apply(0)
        rel = node.relation()
        fmt = simple_name(rel.fileFormat())
        if fmt != "ParquetFileFormat":
            return f"not a Parquet source ({fmt})"
        if rel.partitionSchema().size() != 0:
            return "partition columns"
        if node.dataFilters().size() != 0:
            return "the scan filters rows"
        keys = rel.options().keySet().iterator()
        while keys.hasNext():
            key = str(keys.next())
            if key.lower() not in _FILE_CHOICE_OPTIONS:
                return f"reading option {key!r}"
        return node
    except Exception as e:  # Spark internals it does not promise: read through Spark
        return f"Spark's plan could not be read ({type(e).__name__})"


@dataclass(frozen=True)
class Sample:
    """The first rows of a batch input's first Parquet file (:func:`scan_sample`)."""

    rows: pa.Table
    #: Rows in that file.
    file_rows: int


def scan_sample(df: Any, columns: list[str], rows: int) -> Sample | str:
    """The first ``rows`` rows or so of ``columns`` (the first row groups of the first
    file) of a batch DataFrame that is a bare Parquet file scan (as :func:`batch_files`
    sees a micro-batch's: at most a selection of plain columns over it), read by
    pyarrow as the files store them, with the file's row count; else why not. A sample for
    an estimate only: the rows Spark reads from the files are not checked against it."""
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    try:
        if (unknown := _unchecked_spark(df)) is not None:
            return unknown
        plan = df._jdf.queryExecution().executedPlan()
        if simple_name(plan) == "AdaptiveSparkPlanExec":
            plan = plan.inputPlan()
    except Exception as e:  # Spark internals it does not promise (or Spark Connect)
        return f"Spark's plan could not be read ({type(e).__name__})"
    if any("." in c for c in columns):
        return "a column name with a dot"  # pyarrow would take it for a nested path
    scan = _bare_scan(plan)
    if scan is None or isinstance(scan, str):
        return scan or "no files"
    try:
        # The first file alone (a table's listing may run to many thousands).
        files = scan.relation().location().inputFiles()
        if len(files) == 0:
            return "no files"
        first = str(files[0])
    except Exception as e:  # Spark internals it does not promise
        return f"Spark's plan could not be read ({type(e).__name__})"
    try:
        fs, path = pafs.FileSystem.from_uri(first)
        with fs.open_input_file(path) as f:
            pf = pq.ParquetFile(f)
            if any(c not in pf.schema_arrow.names for c in columns):
                return "a column is not in the file under its name"
            batch = next(pf.iter_batches(batch_size=rows, columns=columns), None)
            file_rows = pf.metadata.num_rows
    except Exception as e:  # unreadable here: no sample
        return f"pyarrow cannot read the files ({type(e).__name__})"
    if batch is None:
        return "an empty file"
    return Sample(pa.Table.from_batches([batch]), file_rows)


def _unchecked_spark(df: Any) -> str | None:
    """Why ``df``'s Spark is one whose plans this module was not checked against
    (``SPARK_VERSIONS``); ``None`` where it was."""
    version = ".".join(str(df.sparkSession.version).split(".")[:2])
    if version in SPARK_VERSIONS:
        return None
    return f"Spark {version}: tidemark knows the plans of Spark {', '.join(sorted(SPARK_VERSIONS))}"


def _readable_as(file_type: pa.DataType, want: pa.DataType) -> bool:
    """Whether Spark reads a Parquet column that pyarrow reads as ``file_type`` to
    the values ``want`` (the type ``toArrow()`` gives) holds, unchanged."""
    if file_type == want:
        return True
    t = pa.types
    if t.is_dictionary(file_type):  # a dictionary-encoded column: Spark sees its values
        return _readable_as(file_type.value_type, want)
    if t.is_timestamp(want):
        return (
            t.is_timestamp(file_type)
            and file_type.unit in ("ms", "us")
            and (file_type.tz is None) == (want.tz is None)
        )
    if t.is_string(want) or t.is_large_string(want):
        return bool(t.is_string(file_type) or t.is_large_string(file_type))
    if t.is_binary(want) or t.is_large_binary(want):
        return bool(t.is_binary(file_type) or t.is_large_binary(file_type))
    return False


def read_batch_files(files: list[str], schema: pa.Schema) -> pa.Table | str:
    """The rows of ``files`` (Parquet, as URIs), columns ``schema.names`` cast to
    ``schema``, or why not, where a file is not one Spark and pyarrow read alike (see
    the module's text) or cannot be read."""
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    try:
        tables = []
        for uri in files:
            fs, path = pafs.FileSystem.from_uri(uri)
            with fs.open_input_file(path) as f:
                pf = pq.ParquetFile(f)
                meta = pf.metadata.metadata or {}
                legacy = [k.decode() for k in _LEGACY_KEYS if k in meta]
                if legacy:
                    return f"{uri}: written with Spark's legacy calendar ({legacy[0]})"
                arrow = pf.schema_arrow
                for field in schema:
                    if "." in field.name:
                        # pyarrow would take it for a nested column's path
                        return f"column {field.name!r} has a dot in its name"
                    lower = field.name.lower()
                    same = [n for n in arrow.names if n.lower() == lower]
                    if same != [field.name]:
                        # missing, in another case, or ambiguous to Spark
                        return f"{uri}: column {field.name!r} is missing or differs in case"
                    # INT96 timestamps come as nanoseconds, which Spark reads
                    # otherwise (with its rebase rules): refused here by their unit.
                    got = arrow.field(field.name).type
                    if not _readable_as(got, field.type):
                        why = (
                            "INT96 or nanosecond timestamps (Spark's default for its own "
                            "files: spark.sql.parquet.outputTimestampType=TIMESTAMP_MICROS "
                            "writes them readable)"
                            if pa.types.is_timestamp(got) and got.unit == "ns"
                            else f"{got} where Spark reads {field.type}"
                        )
                        return f"{uri}: column {field.name!r}: {why}"
                tables.append(pf.read(columns=schema.names))
        if not tables:
            return schema.empty_table()
        return pa.concat_tables([t.cast(schema) for t in tables])
    except Exception as e:  # unreadable here (a file system pyarrow lacks, a bad file):
        # Spark reads it, by its own rules (ignoreCorruptFiles, ...)
        return f"pyarrow cannot read the files ({type(e).__name__})"


def heartbeat(stream_df: Any) -> Any:
    """``stream_df`` with a heartbeat: Spark runs a micro-batch at every trigger, with
    no rows when the stream is quiet, so that :class:`StreamProcessor` emits the windows
    its watermark closed without new data and without a flush.

    Spark runs a micro-batch only when a source has new data (or, for a query with a
    stateful operator of its own, when its watermark moved); a ``foreachBatch`` query
    whose stream falls silent is not called again. The heartbeat is a second source,
    Spark's ``rate-micro-batch``, with new offsets at every trigger and every one of
    its rows filtered out: it adds no row to any micro-batch, and Spark records its
    offsets in the query's checkpoint like any source's, so a replay after a crash
    sees the same micro-batches. Give the query a processing-time trigger (its
    interval is then the longest a closed window waits): without one, Spark would
    start micro-batches back to back. :meth:`StreamProcessor.start` does both.

    A micro-batch without rows costs the processor a look at the micro-batch's plan
    (a few milliseconds) once nothing is left to close; until then it runs calls
    without rows (one after the last rows, more where inputs went idle).

    Examples
    --------
    >>> q = (tidemark.spark.heartbeat(stream_df)                     # doctest: +SKIP
    ...      .writeStream.foreachBatch(proc).trigger(processingTime="10 seconds")
    ...      .option("checkpointLocation", "/chk/q").start())
    """
    from pyspark.sql import functions as F

    if not getattr(stream_df, "isStreaming", False):
        raise ConfigError(
            "heartbeat() takes a streaming DataFrame (spark.readStream...): a batch "
            "DataFrame has no micro-batches to add"
        )
    spark = stream_df.sparkSession
    beat = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", 1)
        .load()
        .where("false")
        .select(*[F.lit(None).cast(f.dataType).alias(f.name) for f in stream_df.schema.fields])
    )
    return stream_df.unionByName(beat)
