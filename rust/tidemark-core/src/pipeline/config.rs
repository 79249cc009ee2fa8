//! Pipeline configuration: what a windowed event-time GROUP BY computes.

use crate::agg::{AggKind, AggSpec};
use crate::error::{Result, TidemarkError};
use crate::names::named;
use crate::state::Writer;
use crate::time::KeyEvictionPolicy;
use crate::window::WindowSpec;

/// Which watermark judges lateness and closes windows.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Scope {
    /// One watermark for all rows: `max(event time) - delay` (Spark's behaviour).
    Global,
    /// One watermark per source partition (the integer column `column`), combined by
    /// minimum over active partitions, with idle detection.
    Partition {
        /// The source-partition column.
        column: String,
    },
    /// One watermark per key; a key's windows close on its own watermark, and on the
    /// global watermark once the key is idle.
    Key,
}

impl Scope {
    /// The scope `tidemark.Pipeline(per=...)` names: `"global"`, `"key"`, or
    /// `"partition"` (of `partition_column`, required then).
    pub fn from_name(name: &str, partition_column: Option<String>) -> Result<Self> {
        match (name, partition_column) {
            ("global", _) => Ok(Scope::Global),
            ("key", _) => Ok(Scope::Key),
            ("partition", Some(column)) => Ok(Scope::Partition { column }),
            ("partition", None) => Err(TidemarkError::config(
                "partition_column",
                "per=\"partition\" needs the source-partition column",
            )),
            (other, _) => Err(TidemarkError::config(
                "watermark",
                format!("per={other:?}: use \"global\", \"partition\" or \"key\""),
            )),
        }
    }

    /// The scope's name (see [`Scope::from_name`]).
    pub fn name(&self) -> &'static str {
        match self {
            Scope::Global => "global",
            Scope::Partition { .. } => "partition",
            Scope::Key => "key",
        }
    }
}

/// When window results are emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EmitMode {
    /// Once per window, when the watermark passes `end + allowed_lateness`.
    OnWindowClose,
    /// The current value of every window changed by a batch (an upsert changelog;
    /// `retract` rows withdraw sessions merged away).
    OnUpdate,
}

/// What happens to rows behind the watermark (beyond allowed lateness).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LatePolicy {
    /// Returned in the `late` output.
    SideOutput,
    /// Dropped and counted.
    Drop,
}

/// When a window operator calls a row late (and when it closes a window).
///
/// `X` below is the *closed-through* mark: every window with `end <= X` is closed.
/// `allowed_lateness` adds to every rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum LateRule {
    /// Spark Structured Streaming's rule, timing included: a call closes the windows
    /// its *starting* watermark passed (`end + allowed_lateness <= W_start`), so a
    /// window comes out one call after the call whose rows moved the watermark past
    /// it; a row is late only when its window was closed by an earlier call
    /// (`end + allowed_lateness <= W_prev`, the watermark the previous call started
    /// with: Spark's `eventTimeWatermarkForLateEvents`). With a global scope the
    /// output equals Spark's `withWatermark` + `groupBy(window(...), key)` in append
    /// mode, micro-batch by micro-batch. Session windows: a row is late when its own
    /// session `[ts, ts + gap)` is closed (Spark filters before merging).
    #[default]
    Spark,
    /// Flink's `isWindowLate`: a row is late when its window was closed when the call
    /// began (`end + allowed_lateness <= W_start`); a window closes as soon as the
    /// watermark passes it (in the call whose rows moved the watermark). Session
    /// windows: a row is late when it merges into no open session and its own session
    /// is closed.
    Flink,
    /// The per-row rule: a row is late when `ts < W_start - allowed_lateness`; windows
    /// close as under `Flink`.
    Row,
}

named!(LateRule, "late_rule", { "spark" => LateRule::Spark, "flink" => LateRule::Flink, "row" => LateRule::Row });

/// Where a row's timestamp comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TimeMode {
    /// From the event-time column.
    Event,
    /// From the clock at ingest: windows close in wall time.
    Processing,
}

named!(TimeMode, "time", { "event" => TimeMode::Event, "processing" => TimeMode::Processing });

/// What a pipeline's time-outs (`idle_timeout`, `state_ttl`) are measured in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Idleness {
    /// In event time (the default): an input (source partition or key) is idle when
    /// the scope's event time advanced more than `idle_timeout` past the scope's
    /// event time at its last rows (see [`super::ScopeWatermark::time`]). Decided by
    /// the data alone: a replay, fast or slow, gives the same windows.
    #[default]
    EventTime,
    /// On the pipeline's clock: an input is idle when it sent nothing for
    /// `idle_timeout` clock ticks. For live sources whose inputs may fall silent
    /// while the others go quiet too; a replay at another speed gives other windows.
    Clock,
}

named!(Idleness, "idleness", { "event_time" => Idleness::EventTime, "clock" => Idleness::Clock });

/// What a row whose key (any key column) is null becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum NullKeys {
    /// An error row, with the key column named (the default: a keyed window of no key
    /// is rarely meant).
    #[default]
    Error,
    /// A key like any other (Spark's `groupBy` groups nulls together).
    Group,
}

named!(NullKeys, "null_keys", { "error" => NullKeys::Error, "group" => NullKeys::Group });

/// One day in microseconds.
const DAY: i64 = 86_400_000_000;

/// The default `max_ahead`: one day (see [`PipelineConfig::max_ahead`]).
pub const DEFAULT_MAX_AHEAD: i64 = DAY;

/// The default `max_behind`: thirty days (see [`PipelineConfig::max_behind`]).
pub const DEFAULT_MAX_BEHIND: i64 = 30 * DAY;

/// The default `quorum`: keys whose rows must agree (see [`PipelineConfig::quorum`]).
pub const DEFAULT_QUORUM: u32 = 3;
named!(EmitMode, "emit", {
    "on_window_close" => EmitMode::OnWindowClose,
    "on_update" => EmitMode::OnUpdate,
});
named!(LatePolicy, "late", { "side_output" => LatePolicy::SideOutput, "drop" => LatePolicy::Drop });

/// A pipeline: keys, event time, watermark, window, aggregates, emission.
///
/// All durations are microseconds, except `idle_timeout` and `state_ttl`
/// (milliseconds: of event time, or clock ticks with [`Idleness::Clock`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PipelineConfig {
    /// Key columns (empty: one global group).
    pub keys: Vec<String>,
    /// Event-time column (ignored in processing-time mode).
    pub event_time: String,
    /// Built-in event-time type name, `None` for Arrow temporal columns.
    pub event_time_type: Option<String>,
    /// The caller parses event times itself (a user-registered parser) and passes
    /// them to `process`; the column's own type is not checked.
    pub parsed_externally: bool,
    /// Bounded out-of-orderness.
    pub delay: i64,
    /// Watermark scope.
    pub scope: Scope,
    /// Idle timeout for partitions (partition scope) or keys (key scope).
    pub idle_timeout: Option<i64>,
    /// What `idle_timeout` and `state_ttl` are measured in.
    pub idleness: Idleness,
    /// Rows more than this ahead of the wall clock (on another clock: of the
    /// stream's event time) are error rows, so that one absurd event time moves no
    /// watermark (`None`: no bound; see `pipeline/bounds.rs`).
    pub max_ahead: Option<i64>,
    /// Rows more than this behind the stream's event time are error rows, so that an
    /// absurdly old event time (a clock reset to 1970) opens no window (`None`: no
    /// bound; see `pipeline/bounds.rs`).
    pub max_behind: Option<i64>,
    /// Keys whose rows must reach an event time before it counts as the stream's or
    /// a source partition's progress: per call, the `quorum`-th highest of the keys'
    /// largest event times (the lowest where fewer keys sent rows). 1: the largest
    /// event time.
    pub quorum: u32,
    /// What a row with a null key becomes.
    pub null_keys: NullKeys,
    /// Partition scope: the source's partitions `0..n`, declared up front. Each holds
    /// the combined watermark back from the first batch until it reports rows or goes
    /// idle (`None`: partitions count from their first row on).
    pub source_partitions: Option<u32>,
    /// The window.
    pub window: WindowSpec,
    /// Aggregates, in output order.
    pub aggs: Vec<AggSpec>,
    /// Emission mode.
    pub emit: EmitMode,
    /// Allowed lateness.
    pub allowed_lateness: i64,
    /// Late-row policy.
    pub late: LatePolicy,
    /// When a row is late and a window closes (processing time: windows close as soon
    /// as the clock passes them, and no row is late).
    pub late_rule: LateRule,
    /// Bound on keys held in state (`None`: unlimited).
    pub max_keys: Option<usize>,
    /// What to do when `max_keys` is reached.
    pub eviction: KeyEvictionPolicy,
    /// Event or processing time.
    pub time: TimeMode,
    /// Keyed state untouched for longer than this (milliseconds, measured as
    /// `idle_timeout` is) is dropped; its open windows are emitted early (`None`:
    /// kept until closed).
    pub state_ttl: Option<i64>,
    /// Per key: each key's delay learned from its own lateness, `delay` its longest
    /// (`None`: every key's delay is `delay`). See [`AdaptiveDelay`].
    pub adaptive: Option<AdaptiveDelay>,
    /// Lateness a user can see (`tidemark.LatenessReport`; `None`: not kept). See
    /// [`LatenessReport`].
    pub lateness: Option<LatenessReport>,
}

/// Lateness kept per key and per source partition (`tidemark.LatenessReport`): how
/// far behind rows arrive, how many were late and by how much, and with
/// `spark_delay` the rows Spark's global watermark would have dropped (see
/// `pipeline/watch.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LatenessReport {
    /// Keys a report lists (furthest behind first).
    pub top: u32,
    /// The delay of the Spark query compared with (microseconds; `None`: none).
    pub spark_delay: Option<i64>,
}

/// A delay per key learned from the key's own lateness (`tidemark.
/// AdaptiveOutOfOrderness`): how far each of its rows arrives behind the key's largest
/// event time as the row's call began, in a histogram per key over the last
/// `horizon` of the key's event time; the key's delay is the `quantile` of it,
/// clamped to `min_delay` and the pipeline's `delay` (which a key seen in fewer than
/// `min_rows` rows keeps). Learned per call, so the same calls give the same
/// windows whatever the order of their rows (see `pipeline/adaptive.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AdaptiveDelay {
    /// The quantile of a key's lateness its delay follows, in parts per billion
    /// (999_000_000: the 99.9th percentile).
    pub quantile_ppb: u32,
    /// The shortest delay (microseconds).
    pub min_delay: i64,
    /// How much of a key's event time its lateness is learned over (microseconds):
    /// two halves, the older dropped as the key's events pass each half.
    pub horizon: i64,
    /// Rows a key is seen in before its delay is learned (until then: `delay`).
    pub min_rows: u32,
}

impl PipelineConfig {
    /// The input columns the pipeline reads, once each, in this order: keys, event
    /// time (event-time mode), source partition (partition scope), aggregate inputs
    /// and their `by` columns.
    pub fn input_columns(&self) -> Vec<&str> {
        let mut read: Vec<&str> = self.keys.iter().map(String::as_str).collect();
        if self.time == TimeMode::Event {
            read.push(&self.event_time);
        }
        if let Scope::Partition { column } = &self.scope {
            read.push(column);
        }
        for a in &self.aggs {
            read.extend(a.column.as_deref());
            read.extend(a.by.as_deref());
        }
        let mut seen = std::collections::HashSet::new();
        read.retain(|c| seen.insert(*c));
        read
    }

    /// The parsed event times of a call without rows: an empty array where the caller
    /// parses them (`parsed_externally`), else none.
    pub(crate) fn no_parsed_times(&self) -> Option<arrow_array::Int64Array> {
        self.parsed_externally
            .then(|| arrow_array::Int64Array::from(Vec::<i64>::new()))
    }

    /// A configuration with the defaults of `tidemark.Pipeline`: no delay, one global
    /// watermark, no idle timeout (idleness in event time), event times believed
    /// within a day ahead and thirty days behind, three keys agreeing on progress,
    /// null keys refused, `on_window_close`, no allowed lateness, late rows to the
    /// side output, Spark's late rule, no key bound, event time, no state TTL. Change fields with
    /// struct update syntax: `PipelineConfig { delay: 5_000, ..PipelineConfig::new(...) }`.
    pub fn new(keys: &[&str], event_time: &str, window: WindowSpec, aggs: Vec<AggSpec>) -> Self {
        Self {
            keys: keys.iter().map(|k| k.to_string()).collect(),
            event_time: event_time.to_string(),
            event_time_type: None,
            parsed_externally: false,
            delay: 0,
            scope: Scope::Global,
            idle_timeout: None,
            idleness: Idleness::EventTime,
            max_ahead: Some(DEFAULT_MAX_AHEAD),
            max_behind: Some(DEFAULT_MAX_BEHIND),
            quorum: DEFAULT_QUORUM,
            null_keys: NullKeys::Error,
            source_partitions: None,
            window,
            aggs,
            emit: EmitMode::OnWindowClose,
            allowed_lateness: 0,
            late: LatePolicy::SideOutput,
            late_rule: LateRule::Spark,
            max_keys: None,
            eviction: KeyEvictionPolicy::LeastRecentlyActive,
            time: TimeMode::Event,
            state_ttl: None,
            adaptive: None,
            lateness: None,
        }
    }

    /// Session windows with a watermark per key or per source partition keep, per key,
    /// the end of the last session they closed (in snapshots too): a row whose own
    /// session would merge into a closed session is late. With one global watermark
    /// a row is judged by its own session alone, as Spark and Flink judge it.
    pub(crate) fn keeps_session_ends(&self) -> bool {
        self.window.is_session() && self.scope != Scope::Global
    }

    /// Per key under Spark's rule, each key keeps the watermark its windows were closed
    /// at (in snapshots too): its windows close one call after its watermark moves.
    pub(crate) fn keeps_key_marks(&self) -> bool {
        self.scope == Scope::Key && self.late_rule == LateRule::Spark
    }

    /// Checks everything that can be checked without data.
    pub fn validate(&self) -> Result<()> {
        self.window.validate()?;
        if self.delay < 0 {
            return Err(TidemarkError::config(
                "watermark",
                "the bounded delay must not be negative",
            ));
        }
        if self.allowed_lateness < 0 {
            return Err(TidemarkError::config(
                "allowed_lateness",
                "must not be negative",
            ));
        }
        if self.aggs.is_empty() {
            return Err(TidemarkError::config("aggs", "give at least one aggregate"));
        }
        if matches!(self.window, WindowSpec::Rows { .. }) && self.emit != EmitMode::OnUpdate {
            return Err(TidemarkError::config(
                "emit",
                "ROWS windows emit one row per input row: use emit=\"on_update\"",
            ));
        }
        if self.state_ttl.is_some_and(|t| t <= 0) {
            return Err(TidemarkError::config("state_ttl", "must be positive"));
        }
        if self.idle_timeout.is_some_and(|t| t < 0) {
            return Err(TidemarkError::config(
                "watermark.idle_timeout",
                "must not be negative",
            ));
        }
        if self.max_ahead.is_some_and(|t| t <= 0) {
            return Err(TidemarkError::config(
                "watermark.max_ahead",
                "must be positive (or None: no bound)",
            ));
        }
        if self.max_behind.is_some_and(|t| t <= 0) {
            return Err(TidemarkError::config(
                "watermark.max_behind",
                "must be positive (or None: no bound)",
            ));
        }
        if self.quorum == 0 {
            return Err(TidemarkError::config(
                "watermark.quorum",
                "must be at least 1 (1: the largest event time counts)",
            ));
        }
        for a in &self.aggs {
            if a.column.is_none() && a.kind != AggKind::Count {
                return Err(TidemarkError::config(
                    format!("aggs[{:?}]", a.name),
                    format!("{} needs a column", a.kind.name()),
                ));
            }
            let ordered = matches!(a.kind, AggKind::MinBy | AggKind::MaxBy);
            if ordered != a.by.is_some() {
                return Err(TidemarkError::config(
                    format!("aggs[{:?}]", a.name),
                    if ordered {
                        format!("{} needs the column to order by (by=...)", a.kind.name())
                    } else {
                        format!("{} takes no by= column", a.kind.name())
                    },
                ));
            }
        }
        let mut reserved = vec!["window_start", "window_end"];
        if self.emit == EmitMode::OnUpdate {
            reserved.push("retract");
        }
        if let Some(k) = self.keys.iter().find(|k| reserved.contains(&k.as_str())) {
            // The output would hold two columns of that name (Spark refuses to select
            // either); rename the input column first.
            return Err(TidemarkError::config(
                "key",
                format!(
                    "key column {k:?} has the name of an output column ({}); rename it \
                     before the pipeline, e.g. df.withColumnRenamed({k:?}, \"{k}_key\")",
                    reserved.join(", ")
                ),
            ));
        }
        let mut names: Vec<&str> = self.keys.iter().map(String::as_str).collect();
        names.extend(reserved);
        for a in &self.aggs {
            if names.contains(&a.name.as_str()) {
                return Err(TidemarkError::config(
                    "aggs",
                    format!("output column {:?} appears twice (aggregate names must differ from the key columns, window_start, window_end{})",
                        a.name, if self.emit == EmitMode::OnUpdate { " and retract" } else { "" }),
                ));
            }
            names.push(&a.name);
        }
        let mut seen = std::collections::HashSet::new();
        for k in &self.keys {
            if !seen.insert(k) {
                return Err(TidemarkError::config(
                    "key",
                    format!("key column {k:?} is listed twice"),
                ));
            }
        }
        if self.scope == Scope::Key && self.keys.is_empty() {
            return Err(TidemarkError::config(
                "watermark",
                "per=\"key\" needs key columns (a pipeline with key=None has one global group)",
            ));
        }
        if self.window.is_session() && self.keys.is_empty() && self.scope != Scope::Global {
            return Err(TidemarkError::config(
                "window",
                "a session window without keys forms one session over all rows; use per=\"global\"",
            ));
        }
        if self.max_keys == Some(0) {
            return Err(TidemarkError::config(
                "max_keys",
                "must be at least 1 (or None)",
            ));
        }
        if let Some(n) = self.source_partitions {
            if !matches!(self.scope, Scope::Partition { .. }) {
                return Err(TidemarkError::config(
                    "watermark.partitions",
                    "declared source partitions need per=\"partition\"",
                ));
            }
            if n == 0 || i64::from(n) > super::SOURCE_PARTITIONS {
                return Err(TidemarkError::config(
                    "watermark.partitions",
                    format!(
                        "must be between 1 and {} (got {n})",
                        super::SOURCE_PARTITIONS
                    ),
                ));
            }
        }
        if self.time == TimeMode::Processing && self.scope != Scope::Global {
            return Err(TidemarkError::config(
                "time",
                "processing-time pipelines have one clock-driven watermark; use per=\"global\"",
            ));
        }
        if let Some(a) = &self.adaptive {
            a.validate(self)?;
        }
        if let Some(l) = &self.lateness {
            if self.time != TimeMode::Event || matches!(self.window, WindowSpec::Rows { .. }) {
                return Err(TidemarkError::config(
                    "lateness",
                    "a lateness report measures event time: it needs time=\"event\" and \
                     a time window (tumbling, sliding or session)",
                ));
            }
            if l.spark_delay.is_some_and(|d| d < 0) {
                return Err(TidemarkError::config(
                    "lateness",
                    "spark_delay must not be negative",
                ));
            }
        }
        Ok(())
    }

    /// A stable fingerprint of the configuration (part of every snapshot header):
    /// xxh64 of an explicit encoding of every field.
    pub fn fingerprint(&self) -> u64 {
        let mut w = Writer::new();
        w.len(self.keys.len());
        self.keys.iter().for_each(|k| w.str(k));
        w.str(&self.event_time);
        w.str(self.event_time_type.as_deref().unwrap_or(""));
        w.bool(self.parsed_externally);
        w.i64(self.delay);
        match &self.scope {
            Scope::Global => w.u8(0),
            Scope::Partition { column } => {
                w.u8(1);
                w.str(column);
            }
            Scope::Key => w.u8(2),
        }
        w.i64(self.idle_timeout.unwrap_or(-1));
        if self.idleness == Idleness::EventTime
            && (self.idle_timeout.is_some() || self.state_ttl.is_some())
        {
            // Only where time-outs are measured: other configurations keep their
            // fingerprints (the clock's, the only measure before, keeps its own).
            w.str("idleness");
            w.str(self.idleness.name());
        }
        if let Some(a) = self.max_ahead {
            w.str("max_ahead");
            w.i64(a);
        }
        if let Some(b) = self.max_behind {
            // Only when set, as the settings below: configurations without it keep
            // their fingerprints.
            w.str("max_behind");
            w.i64(b);
        }
        if self.quorum != 1 {
            w.str("quorum");
            w.u32(self.quorum);
        }
        if self.null_keys != NullKeys::Group {
            w.str("null_keys");
            w.str(self.null_keys.name());
        }
        if let Some(n) = self.source_partitions {
            // Only when set: configurations without it keep their fingerprints.
            w.str("source_partitions");
            w.u64(u64::from(n));
        }
        if let Some(ttl) = self.state_ttl {
            // Only when set: configurations without a TTL keep their fingerprints.
            w.str("state_ttl");
            w.i64(ttl);
        }
        if let Some(a) = &self.adaptive {
            // Only when set: configurations with a fixed delay keep their fingerprints.
            w.str("adaptive");
            w.u64(u64::from(a.quantile_ppb));
            w.i64(a.min_delay);
            w.i64(a.horizon);
            w.u64(u64::from(a.min_rows));
        }
        if let Some(l) = &self.lateness {
            // Only when set (its state is in snapshots); `top` shapes reports only.
            w.str("lateness");
            w.i64(l.spark_delay.unwrap_or(-1));
        }
        match self.window {
            WindowSpec::Rows { n } => {
                w.u8(3);
                w.i64(n);
            }
            WindowSpec::Tumbling { size, offset } => {
                w.u8(0);
                w.i64(size);
                w.i64(offset);
            }
            WindowSpec::Sliding {
                size,
                slide,
                offset,
            } => {
                w.u8(1);
                w.i64(size);
                w.i64(slide);
                w.i64(offset);
            }
            WindowSpec::Session { gap } => {
                w.u8(2);
                w.i64(gap);
            }
        }
        w.len(self.aggs.len());
        for a in &self.aggs {
            w.str(&a.name);
            w.str(a.kind.name());
            if let AggKind::Variance { ddof } | AggKind::Stddev { ddof } = a.kind {
                w.u8(ddof);
            }
            if let AggKind::PercentileApprox {
                percentage_bits,
                accuracy,
            } = a.kind
            {
                w.u64(percentage_bits);
                w.u32(accuracy);
            }
            w.str(a.column.as_deref().unwrap_or(""));
            if let Some(by) = &a.by {
                // Only when set: other aggregates keep their fingerprints.
                w.str("by");
                w.str(by);
            }
        }
        w.u8(self.emit as u8);
        w.i64(self.allowed_lateness);
        w.u8(self.late as u8);
        if self.late_rule != LateRule::Row {
            // Only when not the per-row rule (the only one before): configurations of
            // that rule keep their fingerprints.
            w.str("late_rule");
            w.str(self.late_rule.name());
        }
        w.u64(self.max_keys.map_or(u64::MAX, |m| m as u64));
        w.u8(self.eviction as u8);
        w.u8(self.time as u8);
        xxhash_rust::xxh64::xxh64(&w.finish(), 0x7469_6465)
    }
}

impl AdaptiveDelay {
    fn validate(&self, cfg: &PipelineConfig) -> Result<()> {
        let bad = |why: &str| Err(TidemarkError::config("watermark", why.to_string()));
        if cfg.scope != Scope::Key || cfg.time != TimeMode::Event {
            return bad("an adaptive delay is learned per key: use per=\"key\" (event time)");
        }
        if self.quantile_ppb == 0 || self.quantile_ppb >= 1_000_000_000 {
            return bad("the adaptive delay's quantile must be between 0 and 1 (exclusive)");
        }
        if self.min_delay < 0 || self.min_delay > cfg.delay {
            return bad("the adaptive delay needs 0 <= min_delay <= max_delay");
        }
        if self.horizon < 2 {
            return bad("the adaptive delay's horizon must be positive");
        }
        if self.min_rows == 0 {
            return bad("the adaptive delay's min_rows must be at least 1");
        }
        Ok(())
    }
}
