"""Pre-aggregation in Spark's engine: a batch's rows folded per (key, pane) by Spark's own
``groupBy`` before they cross into Python.

Every row of a batch crossing into a Python worker as Arrow is most of what a
``mapInArrow`` pipeline costs (see the streaming guide's profile); Spark's own
``groupBy(window, key)`` folds rows in the JVM and sends partial aggregates through its
shuffle. Where that fold is exact, tidemark lets Spark do it: rows are grouped by key
(and source partition) and *pane* (the grid cell of the window: the size of a tumbling
window, ``gcd(size, slide)`` of a sliding one), each group becomes one row holding its
partial aggregates and its largest event time, and the pipeline runs over those rows
with each aggregate merging partials (``count`` -> ``sum`` of counts, ``sum`` -> ``sum``
of sums, ``min``/``max`` -> ``min``/``max``). Every row of a pane falls in the same
windows, so each window's result is the raw path's, in the same output schema.

Exact only for: ``count`` (of rows or of non-null values), ``sum`` of 8/16/32-bit
integers (a group's partial sum cannot overflow a long), ``sum`` of floats and doubles
(one column: see below), ``min``/``max`` of integers, dates and timestamps; tumbling
or sliding windows on a Spark ``TIMESTAMP`` event time;
keys of types Spark groups as tidemark does (not floats: Spark groups ``-0.0`` with
``0.0`` and every NaN together). A pane's rows share one fate in the core wherever it
can read their event time (the window bounds fit 64 bits or not for all of them, a key
too long or a source partition out of range fails all of them, a late window takes all
of them), and the fold's weight counts each failed row; rows whose event time the core
cannot read (null, a reserved value, ``ts - offset`` beyond 64 bits) fold only with rows
of the same key and event time, so that each is an error row as in the raw path.

A float sum folds exactly, which Spark's own double ``sum`` does not (its result
depends on the order of the rows). Most values fall in a *main window* (``2^-18 <= |x|
< 2^26``, about 3.8e-6 to 6.7e7, and the zeros): there ``x`` is an integer of at most
96 bits in units of ``2^-70``, which exact double operations (a scale by a literal
power of two, truncations and subtractions: no logarithm per row) split into three
integers below 2^32, which Spark sums as longs with no overflow for fewer than 2^31
rows per group. Outside it each value ``x`` is ``m * 2^E`` with ``m`` an integer of
at most 55 bits and ``E`` at most the exponent of its last mantissa bit (one below
``floor(log2(|x|)) - 52``, which a rounded ``log2`` may put one too high); rows are also
grouped by ``E``'s *bucket* (``floor(E / 14)``; the main window is one more bucket),
and within a bucket each value is three integers of at most 33 bits (``m``'s 19 + 18 +
18 bits, shifted by ``E mod 14``), summed the same way. A group's partial is then a
list of six doubles, each a 32-bit half of such a long sum times a power of two, so
exactly representable, whose exact sum is the group's; the pipeline's exact float
``sum`` adds every element of the list (the core's ``sum`` of a list of floats).
Non-finite values fold apart, counted in the same three long sums (+inf, -inf, NaN: the
group's sum is NaN where a NaN or both infinities are among them, else the infinity);
a fourth sum counts the negative zeros (``[-0.0]`` where every value of a group is
``-0.0``). A sum of huge values of mixed signs whose partial sum leaves the double
range becomes infinite, as the core's own exact sum does on the raw path. A key and
pane whose values lie outside the main window fold into a group per bucket (more than
about 14 binary orders of magnitude apart: more groups).

Where a batch is one arrival unit (``aggregate`` without ``order_by``) no row is late, so
a window's result depends on its own rows alone: a tumbling window's rows are one group,
and the pipeline can merge each group where Spark's aggregation left it
(:meth:`Preaggregation.in_place`), with no second shuffle.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from tidemark.aggs import Agg
from tidemark.pipeline import Pipeline
from tidemark.spark._args import quoted
from tidemark.spark._codec import arrow_schema_of
from tidemark.spark._types import spark_type, type_name

_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1

#: Where :meth:`Preaggregation.rows`' statement reads the micro-batch (a character no
#: SQL text of it holds otherwise).
_SOURCE = "\x00"
#: The input rows a group row stands for (its weight in the batch's counts).
WEIGHT = "__tm_rows"
#: Rows of a batch input's first file :meth:`Preaggregation.pays_on` reads.
SAMPLE_ROWS = 65_536


# The exact fold of a float sum (see the module docs): per row, the value as a double
# (_FX); where it lies in the main window (or is a zero), the value as an integer in
# units of the window's last bit, as a double (_FY), else NULL; its kind (_FK: _MAIN in
# the window, 0 finite outside it, 1000 not finite, NULL null); outside the window, the
# exponent of its last mantissa bit (_FLOW: at most the true one; 0 for the other
# kinds), its mantissa as a long (_FM; for a value not finite, a count in one limb: see
# _SPECIAL) and the bucket it groups by (_FBUCKET: the kind where not 0, so that each
# group holds values of one kind); in the window, the limbs of _FY (_FT, _FR: the
# double split below).
_FX, _FY, _FK, _FLOW, _FM = (f"__tm_f{n}" for n in ("x", "y", "k", "low", "m"))
_FT = tuple(f"__tm_ft{i}" for i in range(3))
_FR = "__tm_fr"
_FBUCKET = "__tm_fbucket"
_BITS = 14  # binary orders of magnitude per bucket outside the main window
#: The main window: finite values ``2^_MAIN_LOW <= |x| < 2^(_MAIN_LOW + _MAIN_BITS)``
#: (about 3.8e-6 to 6.7e7) and the zeros, one bucket (``_MAIN``) whose scale is a
#: literal. Each such ``x`` is ``_FY * 2^(_MAIN_LOW - 52)`` with ``_FY`` an integer
#: below 2^96, split into three limbs below 2^32 with no log and no shift per row.
_MAIN_LOW, _MAIN_BITS, _MAIN = -18, 44, 2000
#: ``_FM`` of a value that is not finite, one in each limb's place: with the limbs
#: unshifted (``_FLOW`` 0), a group of such values counts +inf in the first limb, -inf
#: in the second, NaN in the third.
_SPECIAL = ("68719476736L", "262144L", "1L")  # 2^36, 2^18, 1
_INF = "CAST('Infinity' AS DOUBLE)"


def _pow2(shift: str) -> str:
    """``2^shift`` as two factors, each a finite double for shifts in [-1100, 1100]."""
    return f"power(2, ({shift}) div 2) * power(2, ({shift}) - ({shift}) div 2)"


def _lit(x: float) -> str:
    return f"{x!r}D"


def _float_stages(col: str) -> list[list[str]]:
    """The per-row columns of the fold of ``col``'s sum, one projection per stage.

    In the main window ``_FY = x * 2^(52 - _MAIN_LOW)`` is an exact integer (``x``'s
    last bit is at least ``2^(_MAIN_LOW - 52)``) below ``2^(_MAIN_BITS + 52)`` = 2^96,
    and its limbs come from exact double operations: ``t2 = trunc(_FY / 2^64)``, the
    rest ``_FR = _FY - t2 * 2^64`` (exact: a part of ``_FY``'s bits), ``t1 =
    trunc(_FR / 2^32)``, ``t0 = _FR - t1 * 2^32``; each below 2^32 in magnitude, with
    ``_FY``'s sign. Outside it, ``floor(log2(|x|))`` may be one off either way near a
    power of two: the exponent taken is one below it, never above the true one, so the
    mantissa ``m`` is an exact integer of at most 55 bits (two more than needed, which
    the limbs have room for)."""
    x, lo, hi = _FX, _lit(2.0**_MAIN_LOW), _lit(2.0 ** (_MAIN_LOW + _MAIN_BITS))
    return [
        [f"CAST({quoted(col)} AS DOUBLE) AS {x}"],
        [
            # NULL, NaN and the infinities fail both tests.
            f"IF(abs({x}) < {hi} AND (abs({x}) >= {lo} OR {x} = 0.0D), "
            f"{x} * {_lit(2.0 ** (52 - _MAIN_LOW))}, NULL) AS {_FY}"
        ],
        [
            f"CASE WHEN {_FY} IS NOT NULL THEN {_MAIN} WHEN {x} IS NULL THEN NULL "
            f"WHEN isnan({x}) OR abs({x}) = {_INF} THEN 1000 ELSE 0 END AS {_FK}",
            f"CAST({_FY} * {_lit(2.0**-64)} AS BIGINT) AS {_FT[2]}",
        ],
        [
            f"CASE WHEN {_FK} = 0 THEN greatest(CAST(floor(log2(abs({x}))) AS INT) - 53, -1074) "
            f"WHEN {_FK} = 1000 THEN 0 END AS {_FLOW}",
            f"{_FY} - CAST({_FT[2]} AS DOUBLE) * {_lit(2.0**64)} AS {_FR}",
        ],
        [
            # x * 2^-E: by a power of two made from a long where it fits one (Math.pow is
            # most of a row's cost), else power() (one factor where 2^-E is a finite
            # double, else two). Each is exact: x's bits only move.
            f"CASE WHEN {_FK} = 0 THEN CAST(CASE WHEN {_FLOW} BETWEEN -62 AND 0 "
            f"THEN {x} * CAST(shiftleft(1L, -{_FLOW}) AS DOUBLE) "
            f"WHEN {_FLOW} BETWEEN 1 AND 62 THEN {x} / CAST(shiftleft(1L, {_FLOW}) AS DOUBLE) "
            f"WHEN {_FLOW} >= -1023 THEN {x} * power(2, -{_FLOW}) "
            f"ELSE {x} * {_pow2(f'-{_FLOW}')} END AS BIGINT) "
            f"WHEN isnan({x}) THEN {_SPECIAL[2]} "
            f"WHEN {_FK} = 1000 THEN IF({x} > 0, {_SPECIAL[0]}, {_SPECIAL[1]}) END AS {_FM}",
            f"IF({_FK} = 0, ({_FLOW} - pmod({_FLOW}, {_BITS})) div {_BITS}, {_FK}) AS {_FBUCKET}",
            f"CAST({_FR} * {_lit(2.0**-32)} AS BIGINT) AS {_FT[1]}",
        ],
        [f"CAST({_FR} - CAST({_FT[1]} AS DOUBLE) * {_lit(2.0**32)} AS BIGINT) AS {_FT[0]}"],
    ]


#: A group's sums of the float fold (the aggregation's columns): the three limbs (see
#: the module docs), and the count of its ``-0.0`` values.
_FSUMS = tuple(f"__tm_fsum{i}" for i in range(3))
_FNEG = "__tm_fneg"


def _float_sums() -> list[str]:
    """The aggregates of a group's float fold over :func:`_float_stages`' columns (named
    ``_FSUMS`` and ``_FNEG``): its three limb sums (in the main window the limbs of
    ``_FY``, else ``_FM``'s, each shifted into place within the bucket) and the count
    of its negative zeros (``power(-0.0, -1)`` is -inf: a division by zero fails under
    ANSI)."""
    r = f"pmod({_FLOW}, {_BITS})"
    limbs = [
        f"coalesce({_FT[2]}, shiftleft(shiftright({_FM}, 36), {r}))",
        f"coalesce({_FT[1]}, shiftleft(shiftright({_FM}, 18) & 262143, {r}))",
        f"coalesce({_FT[0]}, shiftleft({_FM} & 262143, {r}))",
    ]
    negative = f"IF({_FX} = 0.0D AND power({_FX}, -1.0D) < 0, 1L, 0L)"
    return [
        *(f"sum({e}) AS {n}" for e, n in zip(limbs, _FSUMS, strict=True)),
        f"sum({negative}) AS {_FNEG}",
    ]


#: Per group, the bucket's power of two ``2^(bucket * _BITS)`` as two factors, each a
#: finite double (:func:`_float_scale`), which :func:`_float_parts` reads.
_FH = ("__tm_fh0", "__tm_fh1")


def _float_scale() -> list[str]:
    """The columns ``_FH`` of a group, from its bucket (outside the main window):
    computed once per group, where each of the six terms took two ``power`` calls of its
    own."""
    scale = f"IF({_FBUCKET} < 1000, {_FBUCKET} * {_BITS}, 0)"
    return [
        f"power(2, ({scale}) div 2) AS {_FH[0]}",
        f"power(2, ({scale}) - ({scale}) div 2) AS {_FH[1]}",
    ]


def _float_terms(places: tuple[int, int, int], scale: Callable[[int], str]) -> str:
    """The six terms of a group's exact sum: each 32-bit half of a limb sum (the limbs
    at ``2^p`` for ``p`` in ``places``), times ``scale(q)``, the factors that put a term
    at ``2^q``."""
    terms = []
    for total, at in zip(_FSUMS, places, strict=True):
        for half, extra in ((f"shiftright({total}, 32)", 32), (f"({total} & 4294967295)", 0)):
            terms.append(f"CAST({half} AS DOUBLE) * {scale(at + extra)}")
    return ", ".join(terms)


def _float_parts() -> str:
    """A group's partial of the float sum, from its :func:`_float_sums` and
    :func:`_float_scale` (the group's bucket ``_FBUCKET``, one of its keys, tells its
    kind): ``NULL`` without values, the non-finite values' sum, or six exactly
    representable doubles whose exact sum is the group's (``[-0.0]`` where every value
    is ``-0.0``). Each is a 32-bit half of a limb sum times a power of two. In the main
    window the limbs are ``_FY``'s, at ``2^(32 i + _MAIN_LOW - 52)``: one literal factor.
    Outside it the limbs sit at ``2^36``, ``2^18``, ``1`` within the bucket: the half
    times ``2^at`` (exact: below 2^100), times each of the bucket's two factors (exact:
    the first keeps it a normal double, the second gives the term, which is
    representable)."""
    main = _float_terms((64, 32, 0), lambda at: _lit(2.0 ** (at + _MAIN_LOW - 52)))
    bucket = _float_terms((36, 18, 0), lambda at: f"{_lit(2.0**at)} * {_FH[0]} * {_FH[1]}")
    # Not finite: NaN where a NaN is among the values, else their sum (both infinities:
    # inf - inf computed per group, as the core computes it; a constant NaN would be
    # Java's), else the infinity. Every value -0.0: -(n * 0.0), not a literal -0.0D,
    # which Spark's optimizer takes as equal to 0.0D.
    pos, neg, nan = _FSUMS
    return (
        f"CASE WHEN {_FBUCKET} IS NULL THEN NULL "
        f"WHEN {_FBUCKET} = 1000 THEN array(CASE WHEN {nan} > 0 THEN CAST('NaN' AS DOUBLE) "
        f"WHEN {pos} > 0 AND {neg} > 0 THEN {pos} * {_INF} - {neg} * {_INF} "
        f"WHEN {pos} > 0 THEN {_INF} ELSE -{_INF} END) "
        f"WHEN {_FBUCKET} = {_MAIN} THEN IF({_FNEG} = {WEIGHT}, "
        f"array(-(CAST({_FNEG} AS DOUBLE) * 0.0D)), array({main})) "
        f"ELSE array({bucket}) END"
    )


_FLOAT_PARTS = _float_parts()


@dataclass(frozen=True)
class Preaggregation:
    """How a pipeline runs over Spark's partial aggregates (see the module docs)."""

    #: The pipeline over the group rows: the same keys, event time, window and
    #: watermark; aggregates merging the partial columns.
    pipe: Pipeline
    #: The grid cell, and its origin, in microseconds.
    pane: int
    offset: int
    #: The window's offset as the core reads it (``ts - offset`` must fit 64 bits).
    window_offset: int
    #: ``(partial column, Spark SQL aggregate of a group (a float sum's: its
    #: expression over :func:`_float_sums`), the column's Spark type, the aggregate's
    #: kind: count, sum, fsum, min or max, its input column)``.
    partials: tuple[tuple[str, str, Any, str, str], ...]
    #: The columns a group is keyed by besides its pane: keys and source partition.
    group_by: tuple[str, ...]
    #: The statement's analyzed plan, for a stream's next micro-batches (``rows(df,
    #: reuse=True)``).
    template: FoldTemplate = field(
        default_factory=lambda: FoldTemplate(), compare=False, repr=False
    )

    @property
    def split(self) -> str | None:
        """The float column whose sum folds exactly (groups are also split by its
        values' exponent buckets), or ``None``."""
        return next((col for *_, kind, col in self.partials if kind == "fsum"), None)

    def in_place(self) -> bool:
        """Whether a batch run as one arrival unit can merge the groups where Spark's
        aggregation leaves them: each group is the whole of one window of one key (a
        tumbling window, grouped by the pipeline's keys alone)."""
        return (
            self.pipe.config["window"]["kind"] == "tumbling"
            and self.group_by == tuple(self.pipe.key)
            and self.split is None
        )

    def pays_on(self, df: Any) -> bool:
        """Whether the fold pays on batch ``df``, as far as a sample tells: ``df`` is a
        bare Parquet file scan (:func:`~tidemark.spark._files.scan_sample`) whose first
        file's groups (key and pane) are estimated at most ``FOLD_SHARE`` of its rows
        (:func:`fold_share`); anything it cannot tell runs raw."""
        from tidemark.spark._files import scan_sample
        from tidemark.spark._layout import FOLD_SHARE

        ts = self.pipe.event_time
        sample = scan_sample(df, [*dict.fromkeys([*self.group_by, ts])], SAMPLE_ROWS)
        if isinstance(sample, str) or sample.rows.num_rows == 0:
            return False
        try:
            us = pc.cast(sample.rows.column(ts), pa.timestamp("us"), safe=False)
            micros = pc.cast(us, pa.int64())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return False
        keys = sample.rows.select(list(self.group_by))
        share = fold_share(keys, micros, self.pane, self.offset, sample.file_rows)
        return share <= FOLD_SHARE

    def rows(self, df: Any, reuse: bool = False) -> Any:
        """``df``'s rows as the pipeline's input, in one scan and one aggregation: rows
        folded per (key, pane) where the core reads their event time, the others per
        (key, event time), each then an error row as in the raw path (see the module
        docs). One SQL statement over ``df``: Spark analyzes it once, where a chain of
        DataFrame calls is analyzed call by call (measured on 400,000 rows with a float
        sum: 0.06 s against 0.12 s, and the fold's run 10% shorter). With ``reuse`` (a
        stream's micro-batches, alike in their columns), the statement's analyzed plan
        over an earlier ``df`` is reused where it can be (see :class:`FoldTemplate`)."""
        if reuse and (again := self.template.over(df)) is not None:
            return again
        folded = self._statement(df)
        if reuse:
            self.template.learn(folded, df)
        return folded

    def _statement(self, df: Any) -> Any:
        ts = quoted(self.pipe.event_time)
        us, p, o = f"unix_micros({ts})", self.pane, self.window_offset
        # The core reads ts - offset; i64::MIN and i64::MAX are reserved values.
        fold = f"({us} BETWEEN {_I64_MIN + max(1, o)}L AND {_I64_MAX + min(-1, o)}L)"
        # floor((micros - offset) / pane) without overflow near the 64-bit bounds; one
        # division where micros >= offset (>= 0: no overflow), as nearly always (three
        # divisions per row were a fifth of the statement on 2M rows).
        floor = (
            f"({us} div {p}) - IF({us} % {p} < 0, 1, 0) - IF(pmod({us}, {p}) < {self.offset}, 1, 0)"
        )
        index = f"IF({us} >= {self.offset}, ({us} - {self.offset}) div {p}, {floor})"
        keys = [quoted(c) for c in self.group_by]
        source = _SOURCE
        by = [*keys]
        if self.split is not None:
            for stage in _float_stages(self.split):
                source = f"(SELECT *, {', '.join(stage)} FROM {source})"
            by.append(_FBUCKET)
        # The pane, else the event time: the two never meet. A pane number lies within
        # the readable event times [L, U] (floor((us - off) / p) is at most us where us
        # >= 0, negative where us < 0, at least us where us < 0, at least -1 where us >=
        # 0; and L <= -1 <= U), an unreadable event time outside them (or null).
        by.append(f"CASE WHEN {fold} THEN {index} ELSE {us} END")
        # The aggregation, then each group's partials from its aggregates (analyzed in
        # half the time of aggregates within the float fold's expression). Float sums
        # fold one column (``split``): its sums serve each of them.
        aggs = [f"max({ts}) AS {ts}", *(_float_sums() if self.split is not None else [])]
        outer = [*keys, ts]
        for n, sql, _, kind, _ in self.partials:
            if kind == "fsum":
                outer.append(f"{_FLOAT_PARTS} AS {n}")
            else:
                aggs.append(f"{sql} AS {n}")
                outer.append(n)
        inner = [*keys, *([_FBUCKET] if self.split is not None else []), *aggs]
        inner.append(f"count(1) AS {WEIGHT}")
        outer.append(WEIGHT)
        groups = f"(SELECT {', '.join(inner)} FROM {source} GROUP BY {', '.join(by)})"
        if self.split is not None:
            groups = f"(SELECT *, {', '.join(_float_scale())} FROM {groups})"
        text = f"SELECT {', '.join(outer)} FROM {groups}"
        # ``spark.sql`` formats the text (``{rows}``: ``df``, a temporary view while the
        # statement is analyzed, also under Spark Connect): braces in names are doubled.
        text = text.replace("{", "{{").replace("}", "}}").replace(_SOURCE, "{rows}")
        return df.sparkSession.sql(text, rows=df)

    def lift(self) -> Callable[[pa.Table], pa.Table]:
        """A function of raw rows (Arrow, as Spark hands a micro-batch to Python) to the
        pipeline's input: each row its own fold, of weight 1, with the partial columns
        Spark's fold of it alone would give (other columns are kept). A micro-batch run
        without Spark's fold goes through the pipeline that merges folds this way, so
        that folded and raw micro-batches share one state. Small to ship to a task."""
        return functools.partial(
            _lift, tuple((n, kind, col) for n, _, _, kind, col in self.partials)
        )


class FoldTemplate:
    """The analyzed plan of a fold's statement over one micro-batch, reused over the
    next ones: Spark's analysis of the statement (parsing, resolving its nested
    projections) was about half of the driver's time per folded micro-batch (0.08-0.1 s
    of 0.17 s at 400,000 rows from ``rate``). A stream's micro-batches are alike: the
    DataFrame ``foreachBatch`` hands over has the same output (the same columns, with
    the same attribute ids) in every micro-batch, and the statement's plan depends on
    that output alone. So the plan is kept, and for a later micro-batch whose output
    is the same its nodes are copied over the new micro-batch's plan (the one leaf that
    changes; the copies are kept in turn), which Spark then checks as any plan.
    Anything else (another output, Spark Connect, a plan of another shape, an error)
    takes the statement."""

    def __init__(self) -> None:
        #: The plan's nodes from its root down to the one holding the micro-batch (a
        #: temporary view's), each with one child; the micro-batch's output; its schema.
        self._path: list[Any] | None = None
        self._output: str | None = None
        self._schema: Any = None
        #: Micro-batches folded over the kept plan (for tests and measurements).
        self.reused = 0

    def __getstate__(self) -> dict[str, Any]:
        return {"_path": None, "_output": None, "_schema": None, "reused": 0}

    def learn(self, folded: Any, df: Any) -> None:
        """Keeps ``folded``'s analyzed plan (the statement over micro-batch ``df``)."""
        try:
            output = _output_of(df)
            node, path = folded._jdf.queryExecution().analyzed(), []
            while node.children().size() == 1 and node.nodeName() != "View":
                path.append(node)
                node = node.children().apply(0)
            if node.nodeName() != "View" or node.children().size() != 1:
                return
            if str(node.children().apply(0).output().toString()) != output:
                return
            path.append(node)
            self._path, self._output, self._schema = path, output, df.schema
        except Exception:  # an API Spark does not promise (or Spark Connect): no reuse
            self._path = None

    def over(self, df: Any) -> Any | None:
        """The kept plan over micro-batch ``df`` as a DataFrame, or ``None``."""
        if self._path is None:
            return None
        try:
            if _output_of(df) != self._output or df.schema != self._schema:
                return None
            from pyspark.sql.classic.dataframe import DataFrame

            spark = df.sparkSession
            jvm = spark._jvm
            node, seq, path = df._jdf.queryExecution().analyzed(), jvm.PythonUtils.toSeq, []
            for parent in reversed(self._path):
                node = parent.withNewChildren(seq([node]))  # a list: a java.util.List
                path.append(node)
            jdf = jvm.org.apache.spark.sql.classic.Dataset.ofRows(spark._jsparkSession, node)
            out = DataFrame(jdf, spark)
        except Exception:  # as in learn: the statement, from now on
            self._path = None
            return None
        # The copies are kept: the plan over the last micro-batch (whose RDD, shuffle
        # files included, the next one lets go of) rather than the first's for good.
        self._path = path[::-1]
        self.reused += 1
        return out


def _output_of(df: Any) -> str:
    """The output of ``df``'s analyzed plan: names and attribute ids."""
    return str(df._jdf.queryExecution().analyzed().output().toString())


def fold_share(keys: pa.Table, micros: Any, pane: int, offset: int, total: int) -> float:
    """The share of ``total`` rows their fold keeps (groups per row), estimated from a
    sample of them: ``keys`` and event times (``micros``, a pane ``pane`` long from
    ``offset``), the first rows of the input in its order.

    Rows in event-time order (nine in ten of the sample's neighbours in order) are a
    stretch of time: the sample's own share is the input's where its density does not
    change over time. Rows in another order are taken as a random sample of the
    ``total``: the groups of all of them are estimated from the sample's by its
    coverage (Good-Turing: the share of rows whose group the sample holds more than
    once), then divided by ``total`` (within 2x of the true share on the generated
    inputs of ``tests/test_batch_fold_choice.py``)."""
    import numpy as np

    n = int(keys.num_rows)
    if n == 0:
        return 1.0
    t = np.asarray(micros.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
    table = keys.append_column("__tm_pane", pa.array((t - offset) // pane))
    sizes = table.group_by(table.column_names).aggregate([([], "count_all")])
    counts = sizes.column("count_all").to_numpy()
    groups = len(counts)
    if n < 2 or np.mean(t[1:] >= t[:-1]) >= 0.9 or total <= n:
        return float(groups / n)
    coverage = 1.0 - float(np.sum(counts == 1)) / n
    return float(min(1.0, groups / max(coverage, 1.0 / n) / total))


def _lift(partials: tuple[tuple[str, str, str], ...], table: pa.Table) -> pa.Table:
    import pyarrow.compute as pc

    for name, kind, col in partials:
        values = table.column(col)
        if kind == "count":
            values = pc.cast(pc.is_valid(values), pa.int64())
        elif kind == "sum":
            values = pc.cast(values, pa.int64())
        elif kind == "fsum":
            # Each row's exact sum is its value: a list of it alone (null for null).
            x = pc.cast(values, pa.float64()).combine_chunks()
            import numpy as np  # with pandas, which PySpark's Arrow path needs

            offsets = pa.array(np.arange(len(x) + 1, dtype=np.int64))
            values = pa.LargeListArray.from_arrays(offsets, x, mask=pc.is_null(x))
        table = table.append_column(name, values)
    return table.append_column(WEIGHT, pa.repeat(pa.scalar(1, pa.int64()), table.num_rows))


def preaggregation(pipe: Pipeline, schema: Any, tz: str, large: bool) -> Preaggregation | None:
    """The pre-aggregation of ``pipe`` over input ``schema`` (Spark's), or ``None`` where
    it would not be exact (see the module docs)."""
    from pyspark.sql.types import ArrayType, DoubleType, LongType

    cfg = pipe.config
    window = cfg["window"]
    if (
        window["kind"] not in ("tumbling", "sliding")
        or cfg["time"] != "event"
        or pipe.event_time_type is not None
        or pipe.lookup is not None
        or pipe.max_keys is not None
        or pipe.state_ttl is not None
        # A delay learned (or lateness reported) from each row's own event time: a
        # fold keeps only the latest.
        or cfg.get("adaptive") is not None
        or cfg.get("lateness") is not None
        or type_name(schema[pipe.event_time].dataType) != "TimestampType"
    ):
        return None
    size = int(window["size"])
    pane = size if window["kind"] == "tumbling" else math.gcd(size, int(window["slide"]))
    part = cfg["partition_column"] if cfg["scope"] == "partition" else None
    group_by = (*pipe.key, *([part] if part is not None else []))
    if any(
        not spark_type(schema[c].dataType).groups_alike
        # Spark groups a collated string by its collation key; tidemark by its bytes.
        or getattr(schema[c].dataType, "collation", "UTF8_BINARY") != "UTF8_BINARY"
        for c in group_by
    ):
        return None
    partials: list[tuple[str, str, Any, str, str]] = []
    merged: dict[str, Agg] = {}
    split: str | None = None
    for i, (name, agg) in enumerate(pipe.aggs.items()):
        p = f"__tm_partial{i}"
        col = agg.column
        if col is None:
            if agg.kind != "count":
                return None
            merged[name] = Agg("sum", WEIGHT)  # a group's rows: its weight
            continue
        kind, c = spark_type(schema[col].dataType), quoted(col)
        if agg.kind == "count":
            partials.append((p, f"count({c})", LongType(), "count", col))
            merged[name] = Agg("sum", p)
        elif agg.kind == "sum" and kind.small_int:
            partials.append((p, f"sum(CAST({c} AS BIGINT))", LongType(), "sum", col))
            merged[name] = Agg("sum", p)
        elif agg.kind == "sum" and type_name(schema[col].dataType) in ("FloatType", "DoubleType"):
            if split not in (None, col):
                return None  # groups split by one column's exponents
            split = col
            parts_type = ArrayType(DoubleType(), containsNull=True)
            partials.append((p, _FLOAT_PARTS, parts_type, "fsum", col))
            merged[name] = Agg("sum", p)
        elif agg.kind in ("min", "max") and kind.ordered:
            partials.append((p, f"{agg.kind}({c})", schema[col].dataType, agg.kind, col))
            merged[name] = Agg(agg.kind, p)
        else:
            return None
    # Every other setting carries over; the clock stays with the processor (the
    # pipeline that merges folds is shipped to executors).
    rewritten = pipe.with_aggs(merged).without_clock()
    offset = int(window.get("offset", 0))
    out = Preaggregation(rewritten, pane, offset % pane, offset, tuple(partials), group_by)
    # The same windows schema as the raw path's (else it is not the same answer).
    raw = pipe.output_schema(arrow_schema_of(schema, tz, large))
    if not _same_fields(raw, rewritten.output_schema(_partial_schema(out, schema, tz, large))):
        return None
    return out


def processor_fold(
    pipe: Pipeline,
    schema: Any,
    tz: str,
    large: bool,
    asked: bool | None,
    raw: bool,
    meta: dict[str, Any] | None,
) -> Preaggregation | None:
    """The fold a ``StreamProcessor`` keeps its state by, decided at its first
    micro-batch (``schema``: its input's): ``None`` with ``asked`` ``False``, where
    Spark's fold would not give the pipeline's exact windows (a ``"row"`` late rule
    judges each row on its own), and by default (``asked`` ``None``) also where the
    processor runs ``raw`` (it keeps late or error rows, which folds do not keep, or
    the driver reads its micro-batches from their files, faster than any fold) or its
    state location's ``meta`` was written by the raw pipeline (the state stays raw)."""
    if asked is False or pipe.late_rule == "row":
        return None
    pre = preaggregation(pipe, schema, tz, large)
    if asked is None and (raw or (meta or {}).get("fingerprint") == pipe.fingerprint):
        return None
    return pre


def _partial_schema(pre: Preaggregation, schema: Any, tz: str, large: bool) -> pa.Schema:
    """The Arrow schema of :meth:`Preaggregation.rows` (types as Spark gives them)."""
    from pyspark.sql.types import LongType, StructField, StructType

    fields = [schema[c] for c in pre.group_by] + [schema[pre.pipe.event_time]]
    fields += [StructField(name, ty, True) for name, _, ty, *_ in pre.partials]
    fields.append(StructField(WEIGHT, LongType(), False))
    return arrow_schema_of(StructType(fields), tz, large)


def _same_fields(a: pa.Schema, b: pa.Schema) -> bool:
    return [(f.name, f.type) for f in a] == [(f.name, f.type) for f in b]
