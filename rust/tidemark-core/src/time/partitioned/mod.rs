//! Per-partition watermarks with idle detection.
//!
//! A source (a Kafka topic, a set of files, a Spark source) has partitions that make
//! event-time progress at different rates. [`PartitionedWatermarkTracker`] keeps one
//! watermark per `(source, partition)` and combines them:
//!
//! * the combined watermark is the minimum over **active** partitions;
//! * idle partitions are excluded; if every partition is idle, the combined watermark
//!   is the maximum over all partitions (so the pipeline still makes progress);
//! * a partition registered but never updated holds the combined watermark back
//!   (its watermark is "none yet") until it goes idle, as in Flink;
//! * the combined watermark is monotonic: a lower candidate is ignored.
//!
//! Idleness is decided on the injected [`Clock`](crate::clock::Clock): a partition is
//! idle when `now - last_activity > idle_timeout`, checked by
//! [`PartitionedWatermarkTracker::check_idle_partitions`]. Any update marks the
//! partition active again.
//!
//! The minimum is kept incrementally in a [`MinTree`], so an update is O(log n) with
//! an early exit, and reading the combined watermark is O(1).

use std::time::Duration;

use crate::clock::{system_clock, ClockRef};
use crate::error::{Result, TidemarkError};
use crate::state::{Reader, Writer};
use crate::time::{advance, combine, MinTree, Watermark};

/// Partition identifier within a source.
#[derive(Debug, Clone, Copy, Hash, Eq, PartialEq, Ord, PartialOrd)]
pub struct PartitionId {
    /// The source.
    pub source_id: usize,
    /// The partition within the source.
    pub partition: u32,
}

impl PartitionId {
    /// A partition id.
    pub const fn new(source_id: usize, partition: u32) -> Self {
        Self {
            source_id,
            partition,
        }
    }
}

/// Per-partition watermark state, as returned by
/// [`PartitionedWatermarkTracker::partition_state`] and `remove_partition`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionWatermarkState {
    /// Current watermark of the partition (`None`: none yet).
    pub watermark: Option<i64>,
    /// Largest event time seen through `update_partition_from_event` (`None`: none).
    pub last_event_time: Option<i64>,
    /// Clock reading of the last update or registration.
    pub last_activity: i64,
    /// Whether the partition is idle (excluded from the minimum).
    pub is_idle: bool,
    /// Core the partition is assigned to, if any.
    pub assigned_core: Option<usize>,
}

/// Metrics for partitioned watermark tracking.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PartitionedWatermarkMetrics {
    /// Total partitions tracked.
    pub total_partitions: usize,
    /// Currently active (non-idle) partitions.
    pub active_partitions: usize,
    /// Idle partitions.
    pub idle_partitions: usize,
    /// Number of times the combined watermark advanced.
    pub watermark_advances: u64,
    /// Partitions added or removed after their source was registered.
    pub rebalances: u64,
}

const NO_CORE: u32 = u32::MAX;
const NO_SLOT: u32 = u32::MAX;

/// Compact internal state of one partition (32 bytes).
#[derive(Debug, Clone, Copy)]
struct Slot {
    watermark: i64,
    last_event_time: i64,
    last_activity: i64,
    core: u32,
    idle: bool,
    /// `false` for a slot on the free list.
    live: bool,
}

#[derive(Debug, Clone)]
struct Source {
    source_id: usize,
    /// Slot index per partition number; `NO_SLOT` where not tracked.
    slots: Vec<u32>,
}

/// Tracks watermarks across partitions within sources.
///
/// # Examples
///
/// An example: two partitions, one falls idle:
///
/// ```
/// use tidemark_core::time::{PartitionedWatermarkTracker, PartitionId, Watermark};
///
/// let mut tracker = PartitionedWatermarkTracker::new();
///
/// // Register Kafka source with 4 partitions
/// tracker.register_source(0, 4);
///
/// // Update individual partitions
/// tracker.update_partition(PartitionId::new(0, 0), 5000).unwrap();
/// tracker.update_partition(PartitionId::new(0, 1), 3000).unwrap();
/// tracker.update_partition(PartitionId::new(0, 2), 4000).unwrap();
/// tracker.update_partition(PartitionId::new(0, 3), 4500).unwrap();
///
/// // Combined watermark is minimum (3000)
/// assert_eq!(tracker.current_watermark(), Some(Watermark::new(3000)));
///
/// // Mark partition 1 as idle
/// tracker.mark_partition_idle(PartitionId::new(0, 1)).unwrap();
///
/// // Now combined watermark advances to 4000 (min of active partitions)
/// assert_eq!(tracker.current_watermark(), Some(Watermark::new(4000)));
/// ```
#[derive(Debug, Clone)]
pub struct PartitionedWatermarkTracker {
    sources: Vec<Source>,
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// Watermark of every active partition; idle and free slots hold `MinTree::EMPTY`.
    active: MinTree,
    combined: i64,
    idle_timeout: Option<i64>,
    clock: ClockRef,
    metrics: PartitionedWatermarkMetrics,
}

impl Default for PartitionedWatermarkTracker {
    fn default() -> Self {
        Self::new()
    }
}

impl PartitionedWatermarkTracker {
    /// A tracker on the system clock with automatic idle detection disabled.
    pub fn new() -> Self {
        Self {
            sources: Vec::new(),
            slots: Vec::new(),
            free: Vec::new(),
            active: MinTree::with_capacity(16),
            combined: i64::MIN,
            idle_timeout: None,
            clock: system_clock(),
            metrics: PartitionedWatermarkMetrics::default(),
        }
    }

    /// A tracker with an idle timeout in milliseconds of clock time.
    pub fn with_idle_timeout(idle_timeout: Duration) -> Self {
        Self::new().idle_timeout_ticks(Some(idle_timeout.as_millis() as i64))
    }

    /// Sets the idle timeout in clock ticks (`None`: partitions only go idle when
    /// marked idle explicitly).
    pub fn idle_timeout_ticks(mut self, ticks: Option<i64>) -> Self {
        self.idle_timeout = ticks.map(|t| t.max(0));
        self
    }

    /// Uses `clock` for idle detection.
    pub fn with_clock(mut self, clock: ClockRef) -> Self {
        self.clock = clock;
        self
    }

    /// The idle timeout in clock ticks.
    pub fn idle_timeout(&self) -> Option<i64> {
        self.idle_timeout
    }

    /// The clock this tracker reads.
    pub fn clock(&self) -> &ClockRef {
        &self.clock
    }

    fn source_index(&self, source_id: usize) -> Option<usize> {
        self.sources.iter().position(|s| s.source_id == source_id)
    }

    #[inline]
    fn slot_of(&self, p: PartitionId) -> Result<usize> {
        let src = self
            .sources
            .iter()
            .find(|s| s.source_id == p.source_id)
            .ok_or_else(|| TidemarkError::SourceNotFound {
                source_id: p.source_id,
            })?;
        match src.slots.get(p.partition as usize) {
            Some(&s) if s != NO_SLOT => Ok(s as usize),
            _ => Err(TidemarkError::UnknownPartition {
                source_id: p.source_id,
                partition: p.partition,
            }),
        }
    }

    fn alloc_slot(&mut self, now: i64) -> u32 {
        let slot = Slot {
            watermark: i64::MIN,
            last_event_time: i64::MIN,
            last_activity: now,
            core: NO_CORE,
            idle: false,
            live: true,
        };
        let idx = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = slot;
                i
            }
            None => {
                self.slots.push(slot);
                (self.slots.len() - 1) as u32
            }
        };
        // A fresh partition has no watermark yet: it holds the minimum at i64::MIN.
        self.active.set(idx as usize, i64::MIN);
        self.metrics.total_partitions += 1;
        self.metrics.active_partitions += 1;
        idx
    }

    fn free_slot(&mut self, idx: usize) -> PartitionWatermarkState {
        let s = self.slots[idx];
        self.slots[idx].live = false;
        self.active.set(idx, MinTree::EMPTY);
        self.free.push(idx as u32);
        self.metrics.total_partitions -= 1;
        if s.idle {
            self.metrics.idle_partitions -= 1;
        } else {
            self.metrics.active_partitions -= 1;
        }
        state_of(&s)
    }

    /// Registers a source with `num_partitions` partitions (numbered `0..n`).
    ///
    /// Registering a source again resizes it: partitions `>= num_partitions` are
    /// removed and missing ones below it are added (both count as rebalances).
    pub fn register_source(
        &mut self,
        source_id: usize,
        num_partitions: usize,
    ) -> Option<Watermark> {
        let now = self.clock.now();
        self.register_source_at(source_id, num_partitions, now)
    }

    /// [`Self::register_source`] at the time `now` given by the caller.
    pub fn register_source_at(
        &mut self,
        source_id: usize,
        num_partitions: usize,
        now: i64,
    ) -> Option<Watermark> {
        match self.source_index(source_id) {
            None => {
                let slots = (0..num_partitions).map(|_| self.alloc_slot(now)).collect();
                self.sources.push(Source { source_id, slots });
                None
            }
            Some(si) => {
                let old = self.sources[si].slots.clone();
                let mut slots = old.clone();
                for (p, &s) in old.iter().enumerate().skip(num_partitions) {
                    if s != NO_SLOT {
                        self.free_slot(s as usize);
                        self.metrics.rebalances += 1;
                    }
                    slots[p] = NO_SLOT;
                }
                slots.resize(num_partitions, NO_SLOT);
                for s in slots.iter_mut() {
                    if *s == NO_SLOT {
                        *s = self.alloc_slot(now);
                        self.metrics.rebalances += 1;
                    }
                }
                self.sources[si].slots = slots;
                self.recalculate()
            }
        }
    }

    /// Adds a partition to a registered source (Kafka rebalancing). Partition numbers
    /// need not be contiguous.
    pub fn add_partition(&mut self, p: PartitionId) -> Result<()> {
        let now = self.clock.now();
        self.add_partition_at(p, now)
    }

    fn add_partition_at(&mut self, p: PartitionId, now: i64) -> Result<()> {
        let si = self
            .source_index(p.source_id)
            .ok_or(TidemarkError::SourceNotFound {
                source_id: p.source_id,
            })?;
        let pi = p.partition as usize;
        if self.sources[si]
            .slots
            .get(pi)
            .is_some_and(|&s| s != NO_SLOT)
        {
            return Err(TidemarkError::InvalidPartition {
                source_id: p.source_id,
                partition: p.partition as i64,
                reason: "it is already registered".into(),
            });
        }
        let slot = self.alloc_slot(now);
        let slots = &mut self.sources[si].slots;
        if slots.len() <= pi {
            slots.resize(pi + 1, NO_SLOT);
        }
        slots[pi] = slot;
        self.metrics.rebalances += 1;
        Ok(())
    }

    /// Registers `p` at the time `now` unless it is tracked already (a source's
    /// partition known before its first row); returns whether it was added. A new
    /// partition holds the combined watermark where it is (it never goes back) until
    /// it reports or goes idle.
    pub fn ensure_partition_at(&mut self, p: PartitionId, now: i64) -> Result<bool> {
        match self.slot_of(p) {
            Ok(_) => Ok(false),
            Err(TidemarkError::UnknownPartition { .. }) => {
                self.add_partition_at(p, now)?;
                Ok(true)
            }
            Err(e) => Err(e),
        }
    }

    /// Keeps a tracked partition active at the time `now` without a new watermark (its
    /// records are known to be waiting, unread): its activity time becomes `now`, and
    /// an idle partition counts again, at the watermark it had. The combined watermark
    /// never goes back.
    pub fn keep_active_at(&mut self, p: PartitionId, now: i64) -> Result<()> {
        let idx = self.slot_of(p)?;
        self.touch(idx, now);
        let wm = self.slots[idx].watermark;
        self.active.set(idx, wm);
        Ok(())
    }

    /// Removes a partition from tracking (Kafka rebalancing) and returns its state,
    /// or `None` if it was not tracked. The combined watermark is recalculated.
    pub fn remove_partition(&mut self, p: PartitionId) -> Option<PartitionWatermarkState> {
        let idx = self.slot_of(p).ok()?;
        self.sources
            .iter_mut()
            .find(|s| s.source_id == p.source_id)
            .expect("slot_of found the source")
            .slots[p.partition as usize] = NO_SLOT;
        let state = self.free_slot(idx);
        self.metrics.rebalances += 1;
        self.recalculate();
        Some(state)
    }

    #[inline]
    fn touch(&mut self, idx: usize, now: i64) {
        let s = &mut self.slots[idx];
        s.last_activity = now;
        if s.idle {
            s.idle = false;
            self.metrics.idle_partitions -= 1;
            self.metrics.active_partitions += 1;
        }
    }

    #[inline]
    fn update_slot(&mut self, idx: usize, watermark: i64, now: i64) -> Option<Watermark> {
        self.touch(idx, now);
        let s = &mut self.slots[idx];
        if watermark > s.watermark {
            s.watermark = watermark;
        }
        let wm = s.watermark;
        self.active.set(idx, wm);
        self.recalculate()
    }

    /// Updates the watermark of one partition (a lower value is ignored) and marks it
    /// active. Returns the new combined watermark if it advanced.
    #[inline]
    pub fn update_partition(
        &mut self,
        p: PartitionId,
        watermark: i64,
    ) -> Result<Option<Watermark>> {
        let idx = self.slot_of(p)?;
        let now = self.clock.now();
        Ok(self.update_slot(idx, watermark, now))
    }

    /// Updates a partition from an event time: its watermark becomes
    /// `event_time - max_lateness` (bounded out-of-orderness).
    #[inline]
    pub fn update_partition_from_event(
        &mut self,
        p: PartitionId,
        event_time: i64,
        max_lateness: i64,
    ) -> Result<Option<Watermark>> {
        let idx = self.slot_of(p)?;
        let now = self.clock.now();
        let s = &mut self.slots[idx];
        s.last_event_time = s.last_event_time.max(event_time);
        Ok(self.update_slot(idx, event_time.saturating_sub(max_lateness), now))
    }

    /// Applies one observation per partition, reading the clock once: for each
    /// `(partition, max_event_time)` the partition's watermark becomes
    /// `max_event_time - max_lateness`. Unknown partitions are added when
    /// `add_missing` is set, else the call fails before changing anything.
    pub fn observe_max_event_times(
        &mut self,
        source_id: usize,
        observations: &[(u32, i64)],
        max_lateness: i64,
        add_missing: bool,
    ) -> Result<Option<Watermark>> {
        let now = self.clock.now();
        self.observe_max_event_times_at(source_id, observations, max_lateness, add_missing, now)
    }

    /// [`Self::observe_max_event_times`] at the time `now` given by the caller (a
    /// pipeline whose idleness is measured in event time reads no clock).
    pub fn observe_max_event_times_at(
        &mut self,
        source_id: usize,
        observations: &[(u32, i64)],
        max_lateness: i64,
        add_missing: bool,
        now: i64,
    ) -> Result<Option<Watermark>> {
        for &(partition, _) in observations {
            let p = PartitionId::new(source_id, partition);
            match self.slot_of(p) {
                Ok(_) => {}
                Err(TidemarkError::UnknownPartition { .. }) if add_missing => {
                    self.add_partition_at(p, now)?
                }
                Err(e) => return Err(e),
            }
        }
        let before = self.combined;
        for &(partition, max_event_time) in observations {
            let idx = self.slot_of(PartitionId::new(source_id, partition))?;
            self.touch(idx, now);
            let s = &mut self.slots[idx];
            s.last_event_time = s.last_event_time.max(max_event_time);
            s.watermark = s.watermark.max(max_event_time.saturating_sub(max_lateness));
            let wm = s.watermark;
            self.active.set(idx, wm);
        }
        self.recalculate();
        Ok((self.combined > before).then(|| Watermark::new(self.combined)))
    }

    /// Applies one call per partition at the time `now` given by the caller: for each
    /// `(partition, agreed, max)` the partition's watermark becomes `agreed -
    /// max_lateness` (never lower; `None`: unchanged), where `agreed` is what its keys
    /// agreed on and `max` the call's largest event time on it. The call is activity
    /// for the partition only where `max` reached its watermark as the call began: rows
    /// all behind it are no progress and keep it from going idle no more than silence
    /// does. Unknown partitions are added (their rows are their first activity).
    pub fn observe_evidence_at(
        &mut self,
        source_id: usize,
        observations: &[(u32, Option<i64>, i64)],
        max_lateness: i64,
        now: i64,
    ) -> Result<Option<Watermark>> {
        let before = self.combined;
        for &(partition, agreed, max) in observations {
            let p = PartitionId::new(source_id, partition);
            if matches!(self.slot_of(p), Err(TidemarkError::UnknownPartition { .. })) {
                self.add_partition_at(p, now)?;
            }
            let idx = self.slot_of(p)?;
            let s = self.slots[idx];
            if s.watermark == i64::MIN || max >= s.watermark {
                self.touch(idx, now);
            }
            let s = &mut self.slots[idx];
            s.last_event_time = s.last_event_time.max(max);
            if let Some(a) = agreed {
                s.watermark = s.watermark.max(a.saturating_sub(max_lateness));
            }
            if !s.idle {
                let wm = s.watermark;
                self.active.set(idx, wm);
            }
        }
        self.recalculate();
        Ok((self.combined > before).then(|| Watermark::new(self.combined)))
    }

    /// Marks a partition idle, excluding it from the minimum. Returns the new combined
    /// watermark if that advanced it.
    pub fn mark_partition_idle(&mut self, p: PartitionId) -> Result<Option<Watermark>> {
        let idx = self.slot_of(p)?;
        self.set_idle(idx);
        Ok(self.recalculate())
    }

    fn set_idle(&mut self, idx: usize) {
        let s = &mut self.slots[idx];
        if !s.idle {
            s.idle = true;
            self.metrics.idle_partitions += 1;
            self.metrics.active_partitions -= 1;
            self.active.set(idx, MinTree::EMPTY);
        }
    }

    /// Marks a partition active again (its activity time is reset to now, so it is
    /// not idled again before the timeout). The combined watermark never goes back.
    pub fn mark_partition_active(&mut self, p: PartitionId) -> Result<()> {
        let now = self.clock.now();
        self.keep_active_at(p, now)
    }

    /// Marks every active partition whose last activity is more than the idle timeout
    /// ago as idle. Returns the new combined watermark if it advanced.
    pub fn check_idle_partitions(&mut self) -> Option<Watermark> {
        let now = self.clock.now();
        self.check_idle_partitions_at(now)
    }

    /// [`Self::check_idle_partitions`] at the time `now` given by the caller. No
    /// partition is idle at `i64::MIN` (a time that has not started); partitions
    /// active before it started (activity `i64::MIN`) take `now` as their activity.
    pub fn check_idle_partitions_at(&mut self, now: i64) -> Option<Watermark> {
        let timeout = self.idle_timeout?;
        if now == i64::MIN {
            return None;
        }
        let mut any = false;
        for idx in 0..self.slots.len() {
            if self.slots[idx].live && self.slots[idx].last_activity == i64::MIN {
                self.slots[idx].last_activity = now;
            }
            let s = self.slots[idx];
            if s.live && !s.idle && now.saturating_sub(s.last_activity) > timeout {
                self.set_idle(idx);
                any = true;
            }
        }
        if any {
            self.recalculate()
        } else {
            None
        }
    }

    /// Forces recalculation of the combined watermark. Returns it if it advanced.
    #[inline]
    pub fn recalculate(&mut self) -> Option<Watermark> {
        let m = self.active.min();
        let candidate = combine((m != MinTree::EMPTY).then_some(m), || self.max_over_all());
        if advance(&mut self.combined, candidate) {
            self.metrics.watermark_advances += 1;
            Some(Watermark::new(candidate))
        } else {
            None
        }
    }

    /// Every partition is idle: the maximum over all lets the pipeline progress.
    #[cold]
    fn max_over_all(&self) -> i64 {
        self.sources
            .iter()
            .flat_map(|s| s.slots.iter())
            .filter(|&&s| s != NO_SLOT)
            .map(|&s| self.slots[s as usize].watermark)
            .max()
            .unwrap_or(i64::MIN)
    }

    /// The combined watermark (`None` until every active partition has one).
    #[inline]
    pub fn current_watermark(&self) -> Option<Watermark> {
        Watermark::from_raw(self.combined)
    }

    /// The watermark of one partition (`None` if untracked or none yet).
    pub fn partition_watermark(&self, p: PartitionId) -> Option<i64> {
        let idx = self.slot_of(p).ok()?;
        let wm = self.slots[idx].watermark;
        (wm != i64::MIN).then_some(wm)
    }

    /// The full state of one partition.
    pub fn partition_state(&self, p: PartitionId) -> Result<PartitionWatermarkState> {
        Ok(state_of(&self.slots[self.slot_of(p)?]))
    }

    /// The watermark of a source: the minimum over its active partitions, or the
    /// maximum over all of them when all are idle (`None` if unknown or none yet).
    pub fn source_watermark(&self, source_id: usize) -> Option<i64> {
        let src = self.sources.iter().find(|s| s.source_id == source_id)?;
        let tracked = || {
            src.slots
                .iter()
                .filter(|&&s| s != NO_SLOT)
                .map(|&s| &self.slots[s as usize])
        };
        let wm = tracked()
            .filter(|s| !s.idle)
            .map(|s| s.watermark)
            .min()
            .or_else(|| tracked().map(|s| s.watermark).max())?;
        (wm != i64::MIN).then_some(wm)
    }

    /// Whether a partition is idle.
    pub fn is_partition_idle(&self, p: PartitionId) -> Result<bool> {
        Ok(self.slots[self.slot_of(p)?].idle)
    }

    /// Number of active partitions of a source.
    pub fn active_partition_count(&self, source_id: usize) -> Result<usize> {
        let src = self
            .sources
            .iter()
            .find(|s| s.source_id == source_id)
            .ok_or(TidemarkError::SourceNotFound { source_id })?;
        Ok(src
            .slots
            .iter()
            .filter(|&&s| s != NO_SLOT && !self.slots[s as usize].idle)
            .count())
    }

    /// Partitions currently tracked, in (source, partition) order.
    pub fn partitions(&self) -> Vec<PartitionId> {
        let mut out: Vec<PartitionId> = self
            .sources
            .iter()
            .flat_map(|src| {
                src.slots
                    .iter()
                    .enumerate()
                    .filter(|(_, &s)| s != NO_SLOT)
                    .map(move |(p, _)| PartitionId::new(src.source_id, p as u32))
            })
            .collect();
        out.sort_unstable();
        out
    }

    /// Metrics.
    pub fn metrics(&self) -> &PartitionedWatermarkMetrics {
        &self.metrics
    }

    /// Assigns a partition to a core (for thread-per-core routing).
    pub fn assign_partition_to_core(&mut self, p: PartitionId, core_id: usize) -> Result<()> {
        let idx = self.slot_of(p)?;
        self.slots[idx].core = u32::try_from(core_id)
            .ok()
            .filter(|&c| c != NO_CORE)
            .ok_or_else(|| {
                TidemarkError::config("core", format!("core id {core_id} is out of range"))
            })?;
        Ok(())
    }

    /// The core a partition is assigned to.
    pub fn partition_core(&self, p: PartitionId) -> Option<usize> {
        let c = self.slots[self.slot_of(p).ok()?].core;
        (c != NO_CORE).then_some(c as usize)
    }

    /// Writes the tracker's state (sources, partitions, combined watermark, metrics).
    pub fn write_state(&self, w: &mut Writer) {
        w.len(self.sources.len());
        for src in &self.sources {
            w.u64(src.source_id as u64);
            w.len(src.slots.len());
            for &s in &src.slots {
                w.bool(s != NO_SLOT);
                if s != NO_SLOT {
                    let slot = &self.slots[s as usize];
                    w.i64(slot.watermark);
                    w.i64(slot.last_event_time);
                    w.i64(slot.last_activity);
                    w.u32(slot.core);
                    w.bool(slot.idle);
                }
            }
        }
        w.i64(self.combined);
        w.u64(self.metrics.watermark_advances);
        w.u64(self.metrics.rebalances);
    }

    /// Restores state written by [`Self::write_state`] into this (empty) tracker.
    pub fn read_state(&mut self, r: &mut Reader<'_>) -> Result<()> {
        let n = r.len(16)?;
        for _ in 0..n {
            let source_id = r.u64()? as usize;
            let parts = r.len(1)?;
            let mut slots = Vec::with_capacity(parts);
            for _ in 0..parts {
                if !r.bool()? {
                    slots.push(NO_SLOT);
                    continue;
                }
                let (watermark, last_event_time, last_activity) = (r.i64()?, r.i64()?, r.i64()?);
                let (core, idle) = (r.u32()?, r.bool()?);
                let idx = self.alloc_slot(last_activity);
                self.slots[idx as usize] = Slot {
                    watermark,
                    last_event_time,
                    last_activity,
                    core,
                    idle,
                    live: true,
                };
                if idle {
                    self.metrics.idle_partitions += 1;
                    self.metrics.active_partitions -= 1;
                    self.active.set(idx as usize, MinTree::EMPTY);
                } else {
                    self.active.set(idx as usize, watermark);
                }
                slots.push(idx);
            }
            self.sources.push(Source { source_id, slots });
        }
        self.combined = r.i64()?;
        self.metrics.watermark_advances = r.u64()?;
        self.metrics.rebalances = r.u64()?;
        Ok(())
    }

    /// Bytes of heap memory held by the tracker (slots, tree, indexes).
    pub fn heap_bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<Slot>()
            + self.free.capacity() * 4
            + self.active.heap_bytes()
            + self
                .sources
                .iter()
                .map(|s| s.slots.capacity() * 4 + std::mem::size_of::<Source>())
                .sum::<usize>()
    }

    /// Approximate bytes of memory held per tracked partition (slot, tree leaf and
    /// internal node, partition index), excluding spare capacity.
    pub fn bytes_per_partition() -> usize {
        std::mem::size_of::<Slot>() + 2 * std::mem::size_of::<i64>() + std::mem::size_of::<u32>()
    }
}

fn state_of(s: &Slot) -> PartitionWatermarkState {
    PartitionWatermarkState {
        watermark: (s.watermark != i64::MIN).then_some(s.watermark),
        last_event_time: (s.last_event_time != i64::MIN).then_some(s.last_event_time),
        last_activity: s.last_activity,
        is_idle: s.idle,
        assigned_core: (s.core != NO_CORE).then_some(s.core as usize),
    }
}

mod maxima;
pub use maxima::max_event_time_per_partition;

#[cfg(test)]
mod tests;
