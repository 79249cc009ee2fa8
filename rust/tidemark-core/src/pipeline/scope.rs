//! The watermark of a pipeline's scope, combined over the operators that share it.
//!
//! Several operators may run one pipeline side by side: the cores of a
//! [`crate::runtime::ShardedOperator`], or the state partitions of a Spark micro-batch.
//! Each reports what its rows saw ([`Progress`]); [`ScopeWatermark::advance`] combines
//! the reports into the one watermark they all close windows with, by the pipeline's
//! rule:
//!
//! * global: `max(on-time event time) - delay` over every operator, monotonic (under
//!   Spark's late rule the maximum counts in whole milliseconds, as in Spark);
//! * per source partition: one watermark per partition (`event time - delay`, the
//!   event time its keys agree on, `pipeline/agree.rs`: every believed row counting,
//!   late or not), combined by the minimum over
//!   active partitions, idle ones excluded (all idle: the maximum); declared
//!   partitions hold it back until they report or go idle; a call whose rows on a
//!   partition are all behind its watermark is no activity for it;
//! * per key: the minimum over every operator's active keys (none active: the highest
//!   key watermark any reports), which closes idle keys' windows.
//!
//! The same rule serves one operator alone (it reports to itself), so a pipeline
//! gives one answer on one core, on many, and spread over Spark tasks.
//!
//! The scope also keeps its **event time** ([`ScopeWatermark::time`]): the highest
//! event time `quorum` keys agreed on (see `pipeline/agree.rs`). With idleness in
//! event time (the default, [`Idleness::EventTime`]) it is the clock idleness is measured on: an input is idle
//! at a call when the scope's event time as the call began is more than
//! `idle_timeout` past the scope's event time as the call in which the input last
//! sent rows began ([`idle_reading`]). Every operator of the scope reads the same
//! value before a call, so sources replayed at any speed, on any number of cores or
//! tasks, go idle in the same calls.

use super::{Agreement, Idleness, LateRule, PipelineConfig, Progress, Scope, TimeMode};
use crate::clock::ClockRef;
use crate::error::Result;
use crate::state::{Reader, Writer};
use crate::time::{advance, PartitionId, PartitionedWatermarkTracker};

/// What is known of a source's partitions besides the rows of a call: a Kafka
/// micro-batch's offsets name every partition of the subscribed topics, and those
/// whose records the micro-batch left unread (`maxOffsetsPerTrigger`). Per source
/// partition, the scope registers every partition named (one that has sent nothing
/// yet holds the watermark back, as a declared one does) and keeps the waiting ones
/// active: a partition is idle only when none of its records wait and it sent nothing
/// for the idle timeout. Not kept in the scope's state: the driver records it with
/// the micro-batch, so a replay decides the same.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SourceView {
    /// Every partition of the source.
    pub partitions: Vec<u32>,
    /// Partitions with records waiting, unread by this micro-batch.
    pub waiting: Vec<u32>,
}

/// The combined watermark of a pipeline's scope (see the module docs).
#[derive(Debug, Clone)]
pub struct ScopeWatermark {
    scope: Scope,
    time: TimeMode,
    delay: i64,
    /// Source partitions declared up front (`0..declared`), registered at the first
    /// call: their idle timeouts run from the first micro-batch, wherever the
    /// operator was built.
    declared: u32,
    /// Global scope under Spark's late rule: the largest event time counts in whole
    /// milliseconds, as Spark keeps its watermark (so a window end within the
    /// millisecond is judged as Spark judges it).
    millis: bool,
    idleness: Idleness,
    /// Keys that must agree on progress (see [`Progress`]).
    quorum: u32,
    clock: ClockRef,
    /// The highest event time `quorum` keys agreed on (`i64::MIN`: none): the scope's
    /// event time.
    pub(crate) event_time: i64,
    /// The largest believed event time reported (`i64::MIN`: none): the newest event,
    /// what Spark's one watermark follows (a `LatenessReport` measures against it).
    pub(crate) max_time: i64,
    /// Global scope (and processing time): the watermark.
    pub(crate) watermark: i64,
    /// Global scope: the largest on-time event time seen.
    pub(crate) global_max: i64,
    /// Partition scope: one watermark per source partition.
    pub(crate) partitions: PartitionedWatermarkTracker,
    /// Key scope: the highest combined watermark reported.
    pub(crate) key_reported: i64,
    /// What the call knows of the source's partitions besides its rows (not state).
    source: Option<SourceView>,
}

impl ScopeWatermark {
    /// The scope watermark of `cfg` before any row.
    pub fn new(cfg: &PipelineConfig, clock: ClockRef) -> Self {
        let mut partitions = PartitionedWatermarkTracker::new()
            .idle_timeout_ticks(cfg.idle_timeout)
            .with_clock(clock.clone());
        partitions.register_source(0, 0);
        Self {
            scope: cfg.scope.clone(),
            time: cfg.time,
            delay: cfg.delay,
            declared: cfg.source_partitions.unwrap_or(0),
            millis: cfg.late_rule == LateRule::Spark,
            idleness: cfg.idleness,
            quorum: cfg.quorum,
            clock,
            event_time: i64::MIN,
            max_time: i64::MIN,
            watermark: i64::MIN,
            global_max: i64::MIN,
            partitions,
            key_reported: i64::MIN,
            source: None,
        }
    }

    /// The source's partitions as known for the calls that follow (see
    /// [`SourceView`]); `None`: only what the rows show.
    pub fn set_source(&mut self, view: Option<SourceView>) {
        self.source = view;
    }

    /// A processing-time watermark alone: one global scope that follows `clock` (its
    /// milliseconds as microseconds, never falling back), as a processing-time
    /// pipeline's scope does; what a pass-through ticker emits.
    pub fn processing(clock: ClockRef) -> Self {
        let cfg = PipelineConfig {
            time: TimeMode::Processing,
            ..PipelineConfig::new(
                &[],
                "",
                crate::window::WindowSpec::Tumbling { size: 1, offset: 0 },
                Vec::new(),
            )
        };
        Self::new(&cfg, clock)
    }

    /// The current watermark (`None`: none yet): global, combined over source
    /// partitions, or (key scope) the highest reported.
    pub fn current(&self) -> Option<i64> {
        let w = match self.scope {
            Scope::Global => self.watermark,
            Scope::Partition { .. } => {
                return self.partitions.current_watermark().map(|w| w.timestamp())
            }
            Scope::Key => self.key_reported,
        };
        (w != i64::MIN).then_some(w)
    }

    /// The scope's event time: the highest event time `quorum` keys agreed on so far
    /// (`None`: none), late rows included (see `pipeline/agree.rs`).
    pub fn time(&self) -> Option<i64> {
        (self.event_time != i64::MIN).then_some(self.event_time)
    }

    /// The largest believed event time so far (`None`: none): the newest event.
    pub fn max_time(&self) -> Option<i64> {
        (self.max_time != i64::MIN).then_some(self.max_time)
    }

    /// The time idleness is measured at in the next call (see [`idle_reading`]).
    pub fn idle_now(&self) -> i64 {
        idle_reading(self.idleness, &self.clock, self.event_time)
    }

    /// Combines one call's progress of every operator into the watermark that closes
    /// windows after it (per key: the global watermark closing idle keys' windows;
    /// `None`: none yet).
    pub fn advance<'a>(
        &mut self,
        progress: impl IntoIterator<Item = &'a Progress>,
    ) -> Result<Option<i64>> {
        let progress: Vec<&Progress> = progress.into_iter().collect();
        // Idleness is judged at the time the call began: this call's rows move the
        // scope's event time for the next one, as far as `quorum` keys agree.
        let now = self.idle_now();
        let q = self.quorum as usize;
        let mut call = Agreement::default();
        for p in &progress {
            call.merge(q, &p.keys);
        }
        // Keys behind the stream's event time neither move nor hold it back.
        self.max_time = self.max_time.max(call.time.max().unwrap_or(i64::MIN));
        let time = call.time.agreed_from(self.event_time);
        self.event_time = self.event_time.max(time.unwrap_or(i64::MIN));
        if call.time.0.is_empty() {
            // No row of the call was believed and some were only too far ahead of the
            // stream (no wall clock): the stream moved on (see `pipeline/bounds.rs`).
            if let Some(f) = progress.iter().filter_map(|p| p.ahead_floor).min() {
                self.event_time = self.event_time.max(f);
            }
        }
        match self.scope {
            Scope::Global => {
                let on_time = progress.iter().filter_map(|p| p.on_time_max).max();
                self.global_max = self.global_max.max(on_time.unwrap_or(i64::MIN));
                let w = match self.time {
                    TimeMode::Processing => self.clock.now().saturating_mul(1_000),
                    TimeMode::Event if self.millis && self.global_max != i64::MIN => {
                        // Spark: `max(event time in microseconds / 1000) - delay`, the
                        // division truncating (as the JVM's).
                        (self.global_max / 1_000 * 1_000).saturating_sub(self.delay)
                    }
                    TimeMode::Event => self.global_max.saturating_sub(self.delay),
                };
                advance(&mut self.watermark, w);
            }
            Scope::Partition { .. } => {
                let last = PartitionId::new(0, self.declared.saturating_sub(1));
                if self.declared > 0 && self.partitions.partition_state(last).is_err() {
                    // The first call: the declared partitions start holding it back.
                    self.partitions
                        .register_source_at(0, self.declared as usize, now);
                }
                let view = self.source.as_ref();
                for &p in view.map_or(&[][..], |v| &v.partitions) {
                    // Known before its first row: it holds the watermark from now on.
                    self.partitions
                        .ensure_partition_at(PartitionId::new(0, p), now)?;
                }
                // Per partition with rows in the call: the call's largest event time
                // there, and what its keys agreed on.
                // Keys behind the partition's own watermark neither move nor hold it
                // back.
                let evidence: Vec<(u32, Option<i64>, i64)> =
                    merged_partition_max(progress.iter().copied())
                        .into_iter()
                        .map(|(p, max)| {
                            let floor = self
                                .partitions
                                .partition_watermark(PartitionId::new(0, p))
                                .unwrap_or(i64::MIN);
                            let agreed = call.partition(p).and_then(|t| t.agreed_from(floor));
                            (p, agreed, max)
                        })
                        .collect();
                self.partitions
                    .observe_evidence_at(0, &evidence, self.delay, now)?;
                for &p in view.map_or(&[][..], |v| &v.waiting) {
                    // Records wait for it: not idle, whatever its rows.
                    let p = PartitionId::new(0, p);
                    self.partitions.ensure_partition_at(p, now)?;
                    self.partitions.keep_active_at(p, now)?;
                }
                self.partitions.check_idle_partitions_at(now);
            }
            Scope::Key => {
                // The minimum over active keys; none active: the highest key watermark.
                let active_min = progress.iter().filter_map(|p| p.key_parts.0).min();
                let g = active_min.or_else(|| progress.iter().filter_map(|p| p.key_parts.1).max());
                if let Some(g) = g {
                    advance(&mut self.key_reported, g);
                }
                // Per key the call's own value closes idle keys' windows (it may stand
                // below the highest reported).
                return Ok(g);
            }
        }
        Ok(self.current())
    }

    /// Writes the state (see [`Self::read_state`]).
    pub fn write_state(&self, w: &mut Writer) {
        w.i64(self.watermark);
        w.i64(self.global_max);
        w.i64(self.key_reported);
        w.i64(self.event_time);
        w.i64(self.max_time);
        self.partitions.write_state(w);
    }

    /// Restores state written by [`Self::write_state`] into a fresh scope watermark.
    pub fn read_state(&mut self, r: &mut Reader<'_>) -> Result<()> {
        self.watermark = r.i64()?;
        self.global_max = r.i64()?;
        self.key_reported = r.i64()?;
        self.event_time = r.i64()?;
        self.max_time = r.i64()?;
        self.partitions = PartitionedWatermarkTracker::new()
            .idle_timeout_ticks(self.partitions.idle_timeout())
            .with_clock(self.clock.clone());
        self.partitions.read_state(r)
    }

    /// The state as bytes (for a driver that keeps it between micro-batches).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut w = Writer::new();
        self.write_state(&mut w);
        w.finish()
    }

    /// A scope watermark of `cfg` restored from [`Self::to_bytes`].
    pub fn from_bytes(cfg: &PipelineConfig, clock: ClockRef, bytes: &[u8]) -> Result<Self> {
        let mut s = Self::new(cfg, clock);
        let mut r = Reader::new(bytes);
        s.read_state(&mut r)?;
        r.finish()?;
        Ok(s)
    }
}

/// The time idleness (and `state_ttl`) is measured at, in milliseconds: on the
/// clock, or (event time) the scope's event time in whole milliseconds, `time` being
/// the largest event time (microseconds) the scope saw before the call; `i64::MIN`
/// while it saw none (then nothing is idle, and what was active takes the first
/// reading as its activity).
pub fn idle_reading(idleness: Idleness, clock: &ClockRef, time: i64) -> i64 {
    match idleness {
        Idleness::Clock => clock.now(),
        Idleness::EventTime if time == i64::MIN => i64::MIN,
        Idleness::EventTime => time.div_euclid(1_000),
    }
}

/// The largest event time per source partition over several operators' progress,
/// sorted by partition.
pub(crate) fn merged_partition_max<'a>(
    progress: impl Iterator<Item = &'a Progress>,
) -> Vec<(u32, i64)> {
    let mut all: Vec<(u32, i64)> = Vec::new();
    for p in progress {
        all.extend(p.partition_max.iter().copied());
    }
    all.sort_unstable();
    all.dedup_by(|later, earlier| {
        // Sorted by (partition, time): keep the last (largest) per partition.
        if later.0 == earlier.0 {
            earlier.1 = earlier.1.max(later.1);
            true
        } else {
            false
        }
    });
    all
}
