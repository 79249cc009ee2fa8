//! Thread-per-core watermark integration.
//!
//! Each core owns a [`CoreWatermarkState`] for the partitions assigned to it and
//! publishes its local watermark to a shared, lock-free [`WatermarkCoordinator`]
//! (one cache-line-padded pair of atomics per core). The coordinator combines the
//! published local watermarks into the global one (`collect_watermarks`) and
//! broadcasts it back (`broadcast_watermark`); cores read the broadcast value when
//! they trigger windows. No locks are taken on either side.
//!
//! Combining follows the one convention (DESIGN.md): minimum over cores that have an
//! active partition; cores whose partitions are all idle are excluded; if every core
//! is idle the maximum is used; the result is monotonic.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;

use crate::time::{advance, combine, PartitionId, Watermark};

#[derive(Debug)]
#[repr(align(64))]
struct CoreSlot {
    local: AtomicI64,
    /// `true` when the core has no active partition (idle, or nothing assigned).
    idle: AtomicBool,
    /// `true` once the core has had a partition assigned.
    has_input: AtomicBool,
}

/// Shared board where cores publish local watermarks and read the global one.
///
/// # Examples
///
/// ```
/// use tidemark_core::time::{CoreWatermarkState, PartitionId, Watermark, WatermarkCoordinator};
///
/// let coord = WatermarkCoordinator::new(2);
/// let mut c0 = CoreWatermarkState::new(0, coord.clone());
/// let mut c1 = CoreWatermarkState::new(1, coord.clone());
/// c0.assign_partition(PartitionId::new(0, 0));
/// c1.assign_partition(PartitionId::new(0, 1));
/// c0.update_partition(PartitionId::new(0, 0), 5_000);
/// c1.update_partition(PartitionId::new(0, 1), 3_000);
/// assert_eq!(coord.collect_watermarks(), Some(Watermark::new(3_000)));
/// coord.broadcast_watermark(Watermark::new(3_000));
/// assert_eq!(c0.global_watermark(), Some(Watermark::new(3_000)));
/// ```
#[derive(Debug, Clone)]
pub struct WatermarkCoordinator {
    cores: Arc<[CoreSlot]>,
    global: Arc<AtomicI64>,
}

impl WatermarkCoordinator {
    /// A coordinator for `num_cores` cores.
    pub fn new(num_cores: usize) -> Self {
        let cores: Vec<CoreSlot> = (0..num_cores)
            .map(|_| CoreSlot {
                local: AtomicI64::new(i64::MIN),
                idle: AtomicBool::new(true),
                has_input: AtomicBool::new(false),
            })
            .collect();
        Self {
            cores: cores.into(),
            global: Arc::new(AtomicI64::new(i64::MIN)),
        }
    }

    /// Number of cores.
    pub fn num_cores(&self) -> usize {
        self.cores.len()
    }

    fn publish(&self, core: usize, local: i64, idle: bool) {
        let slot = &self.cores[core];
        slot.has_input.store(true, Ordering::Release);
        if idle {
            slot.local.store(local, Ordering::Release);
            slot.idle.store(true, Ordering::Release);
        } else {
            slot.idle.store(false, Ordering::Release);
            slot.local.store(local, Ordering::Release);
        }
    }

    /// Combines the cores' local watermarks into the global one: the minimum over
    /// non-idle cores, or the maximum when all are idle. Returns the combined value
    /// (which may be lower than the last broadcast; see [`Self::broadcast_watermark`]).
    pub fn collect_watermarks(&self) -> Option<Watermark> {
        let cores = || {
            self.cores
                .iter()
                .filter(|c| c.has_input.load(Ordering::Acquire))
        };
        let min_active = cores()
            .filter(|c| !c.idle.load(Ordering::Acquire))
            .map(|c| c.local.load(Ordering::Acquire))
            .min();
        let max_all = || {
            cores()
                .map(|c| c.local.load(Ordering::Acquire))
                .max()
                .unwrap_or(i64::MIN)
        };
        Watermark::from_raw(combine(min_active, max_all))
    }

    /// Broadcasts a global watermark to every core. The broadcast value is monotonic:
    /// a lower value than the current one is ignored. Returns `true` if it advanced.
    pub fn broadcast_watermark(&self, watermark: Watermark) -> bool {
        self.global
            .fetch_max(watermark.timestamp(), Ordering::AcqRel)
            < watermark.timestamp()
    }

    /// `collect_watermarks` followed by `broadcast_watermark`; returns the new global
    /// watermark if it advanced.
    pub fn advance(&self) -> Option<Watermark> {
        let w = self.collect_watermarks()?;
        self.broadcast_watermark(w).then_some(w)
    }

    /// The last broadcast global watermark.
    pub fn global_watermark(&self) -> Option<Watermark> {
        Watermark::from_raw(self.global.load(Ordering::Acquire))
    }
}

/// Per-core partition watermark aggregator: the local watermark of one core is the
/// minimum over its active assigned partitions (maximum if all are idle), monotonic.
#[derive(Debug)]
pub struct CoreWatermarkState {
    core_id: usize,
    /// `(partition, watermark, idle)` for each assigned partition. Cores own few
    /// partitions, so a linear scan beats hashing here.
    assigned: Vec<(PartitionId, i64, bool)>,
    local_watermark: i64,
    coordinator: WatermarkCoordinator,
}

impl CoreWatermarkState {
    /// State for core `core_id`, publishing to `coordinator`.
    pub fn new(core_id: usize, coordinator: WatermarkCoordinator) -> Self {
        assert!(core_id < coordinator.num_cores(), "core id out of range");
        Self {
            core_id,
            assigned: Vec::new(),
            local_watermark: i64::MIN,
            coordinator,
        }
    }

    /// The core's id.
    pub fn core_id(&self) -> usize {
        self.core_id
    }

    /// Partitions assigned to this core.
    pub fn assigned_partitions(&self) -> impl Iterator<Item = PartitionId> + '_ {
        self.assigned.iter().map(|a| a.0)
    }

    /// Assigns a partition to this core (no-op if already assigned).
    pub fn assign_partition(&mut self, p: PartitionId) {
        if !self.assigned.iter().any(|a| a.0 == p) {
            self.assigned.push((p, i64::MIN, false));
            self.recompute();
        }
    }

    /// Removes a partition from this core. Returns its watermark if it was assigned.
    pub fn unassign_partition(&mut self, p: PartitionId) -> Option<i64> {
        let i = self.assigned.iter().position(|a| a.0 == p)?;
        let (_, wm, _) = self.assigned.swap_remove(i);
        self.recompute();
        Some(wm)
    }

    fn recompute(&mut self) -> Option<i64> {
        let active = self.assigned.iter().filter(|a| !a.2).map(|a| a.1).min();
        let all_idle = active.is_none();
        let candidate = combine(active, || {
            self.assigned.iter().map(|a| a.1).max().unwrap_or(i64::MIN)
        });
        let advanced = advance(&mut self.local_watermark, candidate);
        if !self.assigned.is_empty() {
            self.coordinator
                .publish(self.core_id, self.local_watermark, all_idle);
        }
        advanced.then_some(self.local_watermark)
    }

    /// Updates a partition watermark on this core (assigning the partition if it was
    /// not). Returns the new local watermark if it advanced.
    #[inline]
    pub fn update_partition(&mut self, p: PartitionId, watermark: i64) -> Option<i64> {
        match self.assigned.iter_mut().find(|a| a.0 == p) {
            Some(a) => {
                a.1 = a.1.max(watermark);
                a.2 = false;
            }
            None => self.assigned.push((p, watermark, false)),
        }
        self.recompute()
    }

    /// Marks an assigned partition idle. Returns the new local watermark if it advanced.
    pub fn mark_partition_idle(&mut self, p: PartitionId) -> Option<i64> {
        let a = self.assigned.iter_mut().find(|a| a.0 == p)?;
        a.2 = true;
        self.recompute()
    }

    /// The local (per-core) watermark (`i64::MIN`: none yet).
    #[inline]
    pub fn local_watermark(&self) -> i64 {
        self.local_watermark
    }

    /// The global watermark last broadcast by the coordinator.
    #[inline]
    pub fn global_watermark(&self) -> Option<Watermark> {
        self.coordinator.global_watermark()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_core_is_excluded_and_all_idle_uses_max() {
        let coord = WatermarkCoordinator::new(3);
        let mut c0 = CoreWatermarkState::new(0, coord.clone());
        let mut c1 = CoreWatermarkState::new(1, coord.clone());
        // core 2 never gets a partition: it does not hold anything back.
        c0.update_partition(PartitionId::new(0, 0), 1_000);
        c1.update_partition(PartitionId::new(0, 1), 4_000);
        assert_eq!(coord.advance(), Some(Watermark::new(1_000)));
        c0.mark_partition_idle(PartitionId::new(0, 0));
        assert_eq!(coord.advance(), Some(Watermark::new(4_000)));
        c1.mark_partition_idle(PartitionId::new(0, 1));
        assert_eq!(coord.collect_watermarks(), Some(Watermark::new(4_000)));
        // A lower collected value never moves the broadcast back.
        c0.update_partition(PartitionId::new(0, 0), 2_000);
        assert_eq!(coord.collect_watermarks(), Some(Watermark::new(2_000)));
        assert_eq!(coord.advance(), None);
        assert_eq!(c1.global_watermark(), Some(Watermark::new(4_000)));
    }

    #[test]
    fn local_watermark_is_min_of_active_and_monotonic() {
        let coord = WatermarkCoordinator::new(1);
        let mut c = CoreWatermarkState::new(0, coord);
        c.assign_partition(PartitionId::new(0, 0));
        c.assign_partition(PartitionId::new(0, 1));
        assert_eq!(c.update_partition(PartitionId::new(0, 0), 10), None);
        assert_eq!(c.update_partition(PartitionId::new(0, 1), 7), Some(7));
        assert_eq!(c.update_partition(PartitionId::new(0, 1), 20), Some(10));
        assert_eq!(c.unassign_partition(PartitionId::new(0, 0)), Some(10));
        assert_eq!(c.local_watermark(), 20);
        c.assign_partition(PartitionId::new(0, 2));
        assert_eq!(c.local_watermark(), 20, "monotonic");
    }
}
