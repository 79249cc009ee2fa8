//! The sharded operator's snapshot: the coordinator's watermarks and every shard's
//! operator state, resharded when the number of cores changes.

use super::worker::{Job, Reply};
use super::ShardedOperator;
use crate::clock::ClockRef;
use crate::error::Result;
use crate::pipeline::{reshard, Operator, PipelineConfig};
use crate::state;
use crate::state::{Reader, SnapshotKind, Writer};
use crate::time::PartitionedWatermarkTracker;

/// A sharded (or one-operator) snapshot, read.
struct SavedState {
    watermark: i64,
    global_max: i64,
    key_reported: i64,
    /// The coordinator's scope event time.
    event_time: i64,
    /// The coordinator's scope largest event time.
    max_time: i64,
    hot: Option<f64>,
    windows_out: u64,
    hot_rows: u64,
    rows_unmatched: u64,
    /// The coordinator's partition tracker ([`PartitionedWatermarkTracker::write_state`]).
    partitions: Vec<u8>,
    shards: Vec<Vec<u8>>,
}

impl SavedState {
    fn read(cfg: &PipelineConfig, bytes: &[u8]) -> Result<Self> {
        if state::peek_kind(bytes) == Some(SnapshotKind::Pipeline) {
            // A one-core operator: it is its own coordinator.
            let p = reshard::parse(cfg, bytes)?;
            let shared = reshard::shared_of(&p);
            return Ok(Self {
                watermark: p.watermark.0,
                global_max: p.watermark.1,
                key_reported: shared.key_reported,
                event_time: shared.event_time,
                max_time: shared.max_time,
                hot: None,
                windows_out: p.metrics[4],
                hot_rows: 0,
                rows_unmatched: 0,
                partitions: shared.partitions,
                shards: vec![bytes.to_vec()],
            });
        }
        let payload = state::open(bytes, SnapshotKind::Sharded, Some(cfg.fingerprint()))?;
        let mut r = Reader::new(payload);
        let n = r.u32()? as usize;
        let watermark = r.i64()?;
        let global_max = r.i64()?;
        let key_reported = r.i64()?;
        let event_time = r.i64()?;
        let max_time = r.i64()?;
        let hot = r.f64()?;
        let hot = (!hot.is_nan()).then_some(hot);
        let windows_out = r.u64()?;
        let hot_rows = r.u64()?;
        let rows_unmatched = r.u64()?;
        let mut pt = PartitionedWatermarkTracker::new();
        pt.read_state(&mut r)?;
        let mut pw = Writer::new();
        pt.write_state(&mut pw);
        // `n` comes from the file: no allocation sized by it before its shards are read.
        let mut shards = Vec::new();
        for _ in 0..n {
            shards.push(r.bytes()?.to_vec());
        }
        r.finish()?;
        Ok(Self {
            watermark,
            global_max,
            key_reported,
            event_time,
            max_time,
            hot,
            windows_out,
            hot_rows,
            rows_unmatched,
            partitions: pw.finish(),
            shards,
        })
    }

    /// The shards' keyed state redistributed over `cores` by the runtime's routing.
    fn reshard(&self, cfg: &PipelineConfig, cores: usize) -> Result<Vec<Vec<u8>>> {
        let parsed = self
            .shards
            .iter()
            .map(|b| reshard::parse(cfg, b))
            .collect::<Result<Vec<_>>>()?;
        let shared = reshard::Shared {
            watermark: (self.watermark, self.global_max),
            partitions: self.partitions.clone(),
            key_reported: self.key_reported,
            event_time: self.event_time,
            max_time: self.max_time,
            // Two-phase shards count partial windows: the coordinator counted the
            // merged ones.
            windows_emitted: (self.shards.len() > 1 && (cfg.keys.is_empty() || self.hot.is_some()))
                .then_some(self.windows_out),
        };
        let keyed = !cfg.keys.is_empty();
        let out = reshard::redistribute(cfg, parsed, cores, &shared, |keys| {
            Ok(keys
                .iter()
                .map(|k| {
                    if keyed {
                        crate::route::xxh3_partition(k, cores as u32)
                    } else {
                        0
                    }
                })
                .collect())
        })?;
        Ok(out)
    }
}

/// Restores a one-core [`Operator`] from a snapshot of a one-core or a sharded
/// operator (the keyed state of all cores merged).
pub fn restore_operator(cfg: PipelineConfig, clock: ClockRef, bytes: &[u8]) -> Result<Operator> {
    if state::peek_kind(bytes) == Some(SnapshotKind::Pipeline) {
        return Operator::restore(cfg, clock, bytes);
    }
    let s = SavedState::read(&cfg, bytes)?;
    let shards = s.reshard(&cfg, 1)?;
    let mut op = Operator::restore(cfg, clock, &shards[0])?;
    op.recalculate_key_global();
    Ok(op)
}

impl ShardedOperator {
    /// The whole state: the coordinator's watermarks and every shard's operator.
    pub fn snapshot(&self) -> Result<Vec<u8>> {
        for w in &self.workers {
            w.send(Job::Snapshot)?;
        }
        let mut wr = Writer::new();
        wr.u32(self.workers.len() as u32);
        wr.i64(self.scope.watermark);
        wr.i64(self.scope.global_max);
        wr.i64(self.scope.key_reported);
        wr.i64(self.scope.event_time);
        wr.i64(self.scope.max_time);
        wr.f64(self.hot_share.unwrap_or(f64::NAN));
        wr.u64(self.windows_out);
        wr.u64(self.hot_rows);
        wr.u64(self.rows_unmatched);
        self.scope.partitions.write_state(&mut wr);
        for w in &self.workers {
            let Reply::Snapshot(b) = w.recv()? else {
                unreachable!("snapshot replies Snapshot")
            };
            wr.bytes(&b);
        }
        Ok(state::seal(
            SnapshotKind::Sharded,
            self.cfg.fingerprint(),
            &wr.finish(),
        ))
    }

    /// Restores a snapshot: of a sharded operator with any number of cores, or of a
    /// one-core [`Operator`]. When the core count differs, the keyed state is
    /// redistributed by key hash (rescaling); the hot-key setting is the snapshot's.
    pub fn restore(
        cfg: PipelineConfig,
        clock: ClockRef,
        cores: usize,
        queue_capacity: usize,
        bytes: &[u8],
    ) -> Result<Self> {
        let s = SavedState::read(&cfg, bytes)?;
        let shards = if s.shards.len() == cores {
            s.shards
        } else {
            s.reshard(&cfg, cores)?
        };
        let refs: Vec<&[u8]> = shards.iter().map(Vec::as_slice).collect();
        let hot = if cores > 1 { s.hot } else { None };
        let mut op = Self::build(cfg, clock.clone(), cores, queue_capacity, Some(refs), hot)?;
        // The input fields the shards were bound to (a tick or a flush of partials
        // before the next batch reads them).
        op.last_schema = match shards.first() {
            Some(bytes) => crate::pipeline::snapshot::snapshot_input(&op.cfg, bytes)?,
            None => None,
        };
        op.scope.watermark = s.watermark;
        op.scope.global_max = s.global_max;
        op.scope.key_reported = s.key_reported;
        op.scope.event_time = s.event_time;
        op.scope.max_time = s.max_time;
        op.windows_out = s.windows_out;
        op.hot_rows = s.hot_rows;
        op.rows_unmatched = s.rows_unmatched;
        op.scope.partitions = PartitionedWatermarkTracker::new()
            .idle_timeout_ticks(op.cfg.idle_timeout)
            .with_clock(clock);
        op.scope
            .partitions
            .read_state(&mut Reader::new(&s.partitions))?;
        Ok(op)
    }
}
