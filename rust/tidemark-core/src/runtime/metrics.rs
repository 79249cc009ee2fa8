//! Per-core runtime metrics: backpressure states and an HDR-style latency histogram.

use std::sync::atomic::{AtomicU64, Ordering};

/// Backpressure of a core's queue, by its utilisation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackpressureState {
    /// Utilisation below 0.7.
    Healthy,
    /// 0.7 to below 0.85.
    Warning,
    /// 0.85 to below 0.95.
    Critical,
    /// 0.95 and above.
    Saturated,
}

impl BackpressureState {
    /// The state for a queue utilisation in `0.0..=1.0`.
    pub fn of(utilization: f64) -> Self {
        if utilization < 0.7 {
            Self::Healthy
        } else if utilization < 0.85 {
            Self::Warning
        } else if utilization < 0.95 {
            Self::Critical
        } else {
            Self::Saturated
        }
    }

    /// Lower-case name (`healthy`, `warning`, `critical`, `saturated`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Healthy => "healthy",
            Self::Warning => "warning",
            Self::Critical => "critical",
            Self::Saturated => "saturated",
        }
    }
}

/// Metrics of one core (worker thread).
#[derive(Debug, Clone, PartialEq)]
pub struct CoreMetrics {
    /// Core (shard) index.
    pub core: usize,
    /// Input rows routed to this core.
    pub records_processed: u64,
    /// Time spent working, microseconds.
    pub processing_time_us: u64,
    /// Messages waiting in the core's queue now.
    pub queue_depth: usize,
    /// The queue's capacity.
    pub queue_capacity: usize,
    /// `queue_depth / queue_capacity`.
    pub channel_utilization: f64,
    /// Share of wall time since the operator started that the core was busy.
    pub utilization: f64,
    /// Backpressure state of the queue.
    pub backpressure: BackpressureState,
    /// Times the router found this core's queue full and waited.
    pub backpressure_events: u64,
    /// Batch latency (ingest to windows closed), microseconds: median.
    pub latency_p50_us: u64,
    /// 95th percentile.
    pub latency_p95_us: u64,
    /// 99th percentile.
    pub latency_p99_us: u64,
}

const SUB_BITS: u32 = 4;
const SUB: usize = 1 << SUB_BITS;
const BUCKETS: usize = (64 - SUB_BITS as usize + 1) * SUB;

/// A lock-free log-linear histogram of `u64` values (HDR-style: 16 linear
/// sub-buckets per power of two, so a percentile is within 1/16 of the true value).
/// One thread records, any thread reads.
#[derive(Debug)]
pub struct LatencyHistogram {
    counts: Box<[AtomicU64]>,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self {
            counts: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

impl LatencyHistogram {
    fn bucket(v: u64) -> usize {
        if v < SUB as u64 {
            return v as usize;
        }
        let exp = 63 - v.leading_zeros(); // >= SUB_BITS
        let shift = exp - SUB_BITS;
        let sub = ((v >> shift) as usize) & (SUB - 1);
        ((shift + 1) as usize) * SUB + sub
    }

    /// The largest value of a bucket (what percentiles report: an upper bound).
    fn upper(b: usize) -> u64 {
        if b < SUB {
            return b as u64;
        }
        let shift = (b / SUB - 1) as u32;
        let sub = (b % SUB) as u64;
        (((SUB as u64) | sub) << shift) + ((1u64 << shift) - 1)
    }

    /// Records one value.
    pub fn record(&self, v: u64) {
        self.counts[Self::bucket(v)].fetch_add(1, Ordering::Relaxed);
    }

    /// Number of recorded values.
    pub fn count(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    /// The `q` quantile (`0.0..=1.0`), an upper bound within 1/16; 0 when empty.
    pub fn percentile(&self, q: f64) -> u64 {
        let counts: Vec<u64> = self
            .counts
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return 0;
        }
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (b, &c) in counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Self::upper(b);
            }
        }
        Self::upper(BUCKETS - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_within_one_sixteenth() {
        let h = LatencyHistogram::default();
        for v in 1..=10_000u64 {
            h.record(v);
        }
        assert_eq!(h.count(), 10_000);
        for (q, exact) in [(0.5, 5_000u64), (0.95, 9_500), (0.99, 9_900)] {
            let p = h.percentile(q);
            assert!(p >= exact && p <= exact + exact / 16 + 1, "{q}: {p}");
        }
        assert_eq!(LatencyHistogram::default().percentile(0.5), 0);
    }

    #[test]
    fn buckets_cover_every_value_in_order() {
        let mut last = 0;
        for v in [0u64, 1, 15, 16, 17, 31, 32, 1000, 1 << 40, u64::MAX] {
            let b = LatencyHistogram::bucket(v);
            assert!(b >= last && b < BUCKETS);
            assert!(LatencyHistogram::upper(b) >= v, "{v}");
            last = b;
        }
    }

    #[test]
    fn backpressure_thresholds_follow_the_seed() {
        assert_eq!(BackpressureState::of(0.0), BackpressureState::Healthy);
        assert_eq!(BackpressureState::of(0.69), BackpressureState::Healthy);
        assert_eq!(BackpressureState::of(0.7), BackpressureState::Warning);
        assert_eq!(BackpressureState::of(0.85), BackpressureState::Critical);
        assert_eq!(BackpressureState::of(0.95), BackpressureState::Saturated);
        assert_eq!(BackpressureState::of(1.0), BackpressureState::Saturated);
    }
}
