//! Rescaling: the keyed state of operator snapshots redistributed over another number
//! of shards (cores or Spark state partitions), by key.
//!
//! Works on the snapshot payload ([`Operator::snapshot`]): every key's tracker entry
//! and open windows move to the shard `route` assigns; a key found in several
//! snapshots (two-phase mode spreads keys) merges: its windows' partial aggregates
//! merge, its watermark is the largest. Scope-wide values (the global watermark, the
//! per-partition tracker, metrics) come from `Shared`.

use arrow_schema::{DataType, Field};

use super::adaptive::Lateness;
use super::floors::FloorSketch;
use super::snapshot::{read_fields, write_fields};
use super::watch::{self, LatenessEntry, SlotWatch};
use super::{Operator, PipelineConfig};
use crate::agg::codec::{read_acc, write_acc};
use crate::agg::Acc;
use crate::error::{Result, TidemarkError};
use crate::state::{self, Reader, SnapshotKind, Writer};
use crate::time::PartitionedWatermarkTracker;

/// One window of a key: start, end, flags, partial aggregates.
type Window = (i64, i64, u8, Vec<Acc>);

/// One key's state in a snapshot.
#[derive(Debug, Clone)]
pub struct KeyState {
    /// Canonical key encoding.
    pub key: Vec<u8>,
    max_event: i64,
    last_activity: i64,
    idle: bool,
    windows: Vec<Window>,
    /// Spark's rule per key: the watermark its windows were closed at while a close
    /// is pending, else `NOT_PENDING`.
    pending: i64,
    /// Sessions per key or partition: the end of the last session it closed.
    session_end: i64,
    /// With an adaptive delay: the key's delay and lateness histogram.
    adaptive: Option<(i64, (i64, Vec<u32>))>,
    /// With a lateness report: the key's record.
    watch: Option<SlotWatch>,
}

/// A parsed operator snapshot.
#[derive(Debug, Clone)]
pub struct Parsed {
    /// Stored input fields, if the operator saw a schema.
    pub fields: Option<Vec<Field>>,
    /// Keys in activity order (least recent first).
    pub keys: Vec<KeyState>,
    tracker_tail: (i64, i64, i64, u64, u64, u64),
    /// Global-scope watermark and maximum event time.
    pub watermark: (i64, i64),
    /// The per-partition tracker, re-serialised.
    pub partitions: Vec<u8>,
    /// Pipeline metrics, in snapshot order.
    pub metrics: [u64; 17],
    /// The operator was flushed.
    flushed: bool,
    /// Floors of forgotten keys.
    floors: FloorSketch,
    /// The watermark the last call began with (Spark's rule judges the next one's rows
    /// against it).
    late_mark: i64,
    /// The scope's highest key-scope watermark reported.
    key_reported: i64,
    /// The scope's event time ([`super::ScopeWatermark::time`]).
    pub event_time: i64,
    /// The scope's largest event time ([`super::ScopeWatermark::max_time`]).
    pub max_time: i64,
    /// With a lateness report: the source partitions' entries and Spark's watermark
    /// as the last call began.
    watch_tail: Option<(Vec<LatenessEntry>, i64)>,
}

/// Scope-wide values for the new shards.
#[derive(Debug, Clone)]
pub struct Shared {
    /// Global-scope watermark and maximum event time.
    pub watermark: (i64, i64),
    /// The per-partition tracker state ([`PartitionedWatermarkTracker::write_state`]).
    pub partitions: Vec<u8>,
    /// The highest key-scope global watermark reported.
    pub key_reported: i64,
    /// The scope's event time ([`super::ScopeWatermark::time`]).
    pub event_time: i64,
    /// The scope's largest event time ([`super::ScopeWatermark::max_time`]).
    pub max_time: i64,
    /// Windows emitted so far (`None`: the sum over the snapshots).
    pub windows_emitted: Option<u64>,
}

/// Parses an operator snapshot of this configuration.
pub fn parse(cfg: &PipelineConfig, bytes: &[u8]) -> Result<Parsed> {
    let payload = state::open(bytes, SnapshotKind::Pipeline, Some(cfg.fingerprint()))?;
    let mut r = Reader::new(payload);
    let fields = read_fields(&mut r)?;
    let nk = r.len(8 + 8 + 8 + 1)?;
    let mut keys = Vec::with_capacity(nk);
    for _ in 0..nk {
        keys.push(KeyState {
            key: r.bytes()?.to_vec(),
            max_event: r.i64()?,
            last_activity: r.i64()?,
            idle: r.bool()?,
            windows: Vec::new(),
            pending: super::marks::NOT_PENDING,
            session_end: i64::MIN,
            adaptive: None,
            watch: None,
        });
    }
    let _cursor = r.len(0)?;
    let tracker_tail = (r.i64()?, r.i64()?, r.i64()?, r.u64()?, r.u64()?, r.u64()?);
    let na = cfg.aggs.len();
    let marks = cfg.keeps_key_marks();
    let lateness = cfg.adaptive.as_ref().map(|a| Lateness::new(a, cfg.delay));
    for k in keys.iter_mut() {
        let count = r.len(17)?;
        for _ in 0..count {
            let (start, end, flags) = (r.i64()?, r.i64()?, r.u8()?);
            let mut accs = Vec::with_capacity(na);
            for _ in 0..na {
                accs.push(read_acc(&mut r)?);
            }
            k.windows.push((start, end, flags, accs));
        }
        if marks {
            k.pending = r.i64()?;
        }
        if cfg.keeps_session_ends() {
            k.session_end = r.i64()?;
        }
        if let Some(l) = &lateness {
            k.adaptive = Some((r.i64()?, l.read_record(&mut r)?));
        }
        if cfg.lateness.is_some() {
            k.watch = Some(SlotWatch::read(&mut r)?);
        }
    }
    // The scope watermark's state (`ScopeWatermark::write_state`).
    let watermark = (r.i64()?, r.i64()?);
    let key_reported = r.i64()?;
    let event_time = r.i64()?;
    let max_time = r.i64()?;
    let mut pt = PartitionedWatermarkTracker::new();
    pt.read_state(&mut r)?;
    let mut pw = Writer::new();
    pt.write_state(&mut pw);
    let mut metrics = [0u64; 17];
    for m in metrics.iter_mut() {
        *m = r.u64()?;
    }
    let flushed = r.bool()?;
    let floors = FloorSketch::read(&mut r)?;
    let late_mark = r.i64()?;
    let watch_tail = match cfg.lateness {
        Some(_) => Some(watch::read_tail(&mut r)?),
        None => None,
    };
    r.finish()?;
    Ok(Parsed {
        fields,
        keys,
        tracker_tail,
        watermark,
        partitions: pw.finish(),
        metrics,
        flushed,
        floors,
        late_mark,
        key_reported,
        event_time,
        max_time,
        watch_tail,
    })
}

/// The key types of a parsed snapshot's pipeline (for routing decoded keys), if it
/// saw a schema.
pub fn key_types(cfg: &PipelineConfig, parsed: &[Parsed]) -> Result<Option<Vec<DataType>>> {
    let Some(fields) = parsed.iter().find_map(|p| p.fields.as_ref()) else {
        return Ok(None);
    };
    let mut types = Vec::with_capacity(cfg.keys.len());
    for k in &cfg.keys {
        let f = fields.iter().find(|f| f.name() == k).ok_or_else(|| {
            TidemarkError::StateCorrupted(format!("key column {k:?} missing from the snapshot"))
        })?;
        types.push(f.data_type().clone());
    }
    Ok(Some(types))
}

/// Redistributes the keys of `parsed` snapshots over `n` shards: `route` gives the
/// shard of every key (in the order given). Returns one snapshot per shard.
pub fn redistribute(
    cfg: &PipelineConfig,
    parsed: Vec<Parsed>,
    n: usize,
    shared: &Shared,
    route: impl FnOnce(&[Vec<u8>]) -> Result<Vec<u32>>,
) -> Result<Vec<Vec<u8>>> {
    let fields = parsed.iter().find_map(|p| p.fields.clone());
    let mut metrics = [0u64; 17];
    let (mut evicted, mut gadv, mut kadv) = (0, 0, 0);
    let mut max_seen = i64::MIN;
    // Every new shard keeps every floor (a key may land in any of them) and the
    // flushed mark.
    let mut floors = FloorSketch::default();
    let flushed = parsed.iter().any(|p| p.flushed);
    // Every shard saw every call: the same mark (the largest, to be safe).
    let late_mark = parsed.iter().map(|p| p.late_mark).max().unwrap_or(i64::MIN);
    // The source partitions' lateness, summed (each snapshot counted its own rows),
    // goes to the first new shard.
    let mut watch_parts: Vec<LatenessEntry> = Vec::new();
    let mut spark_prev = i64::MIN;
    for (parts, prev) in parsed.iter().filter_map(|p| p.watch_tail.as_ref()) {
        spark_prev = spark_prev.max(*prev);
        if watch_parts.len() < parts.len() {
            watch_parts.resize_with(parts.len(), LatenessEntry::default);
        }
        watch_parts
            .iter_mut()
            .zip(parts)
            .for_each(|(a, b)| a.add(b));
    }
    for p in &parsed {
        floors.merge(&p.floors)?;
        for (i, m) in p.metrics.iter().enumerate() {
            // [0] is the batch count: every shard saw every call.
            metrics[i] = if i == 0 {
                metrics[i].max(*m)
            } else {
                metrics[i] + m
            };
        }
        evicted += p.tracker_tail.3;
        gadv += p.tracker_tail.4;
        kadv += p.tracker_tail.5;
        max_seen = max_seen.max(p.tracker_tail.2);
    }
    // Merge keys present in several snapshots; keep activity order (oldest first).
    let mut all: Vec<KeyState> = parsed.into_iter().flat_map(|p| p.keys).collect();
    all.sort_by_key(|k| k.last_activity);
    let mut index: hashbrown::HashMap<Vec<u8>, usize> = hashbrown::HashMap::new();
    let mut keys: Vec<KeyState> = Vec::with_capacity(all.len());
    for k in all {
        match index.get(&k.key) {
            None => {
                index.insert(k.key.clone(), keys.len());
                keys.push(k);
            }
            Some(&i) => merge_key(&mut keys[i], k),
        }
    }
    if let Some(w) = shared.windows_emitted {
        metrics[4] = w;
    }
    let encoded: Vec<Vec<u8>> = keys.iter().map(|k| k.key.clone()).collect();
    let shard_of = route(&encoded)?;
    if shard_of.len() != keys.len() || shard_of.iter().any(|&s| s as usize >= n) {
        return Err(TidemarkError::config(
            "reshard",
            "routing gave an invalid shard",
        ));
    }
    let mut per: Vec<Vec<KeyState>> = vec![Vec::new(); n];
    for (k, s) in keys.into_iter().zip(shard_of) {
        per[s as usize].push(k);
    }
    let na = cfg.aggs.len();
    let mut out = Vec::with_capacity(n);
    for (s, keys) in per.into_iter().enumerate() {
        let mut w = Writer::new();
        write_fields(&mut w, fields.as_deref());
        w.len(keys.len());
        for k in &keys {
            w.bytes(&k.key);
            w.i64(k.max_event);
            w.i64(k.last_activity);
            w.bool(k.idle);
        }
        // The idle-scan cursor: the first key that is not idle (all before it are).
        w.len(keys.iter().position(|k| !k.idle).unwrap_or(keys.len()));
        // The tracker's global watermark is recomputed from its keys on restore.
        w.i64(i64::MIN);
        w.i64(shared.key_reported);
        w.i64(max_seen);
        let first = s == 0;
        for v in [evicted, gadv, kadv] {
            w.u64(if first { v } else { 0 });
        }
        for k in &keys {
            w.len(k.windows.len());
            for (start, end, flags, accs) in &k.windows {
                w.i64(*start);
                w.i64(*end);
                w.u8(*flags);
                debug_assert_eq!(accs.len(), na);
                for a in accs {
                    write_acc(&mut w, a);
                }
            }
            if cfg.keeps_key_marks() {
                w.i64(k.pending);
            }
            if cfg.keeps_session_ends() {
                w.i64(k.session_end);
            }
            if let Some((delay, record)) = &k.adaptive {
                w.i64(*delay);
                Lateness::write_record(&mut w, record);
            }
            if cfg.lateness.is_some() {
                k.watch.clone().unwrap_or_default().write(&mut w);
            }
        }
        w.i64(shared.watermark.0);
        w.i64(shared.watermark.1);
        w.i64(shared.key_reported);
        w.i64(shared.event_time);
        w.i64(shared.max_time);
        w.raw(&shared.partitions);
        for (i, m) in metrics.iter().enumerate() {
            w.u64(if first || i == 0 { *m } else { 0 });
        }
        w.bool(flushed);
        floors.write(&mut w);
        w.i64(late_mark);
        if cfg.lateness.is_some() {
            let none: &[LatenessEntry] = &[];
            watch::write_tail(&mut w, if first { &watch_parts } else { none }, spark_prev);
        }
        out.push(state::seal(
            SnapshotKind::Pipeline,
            cfg.fingerprint(),
            &w.finish(),
        ));
    }
    Ok(out)
}

fn merge_key(into: &mut KeyState, k: KeyState) {
    if let (Some((d, mine)), Some((e, theirs))) = (into.adaptive.as_mut(), &k.adaptive) {
        // The larger watermark, over the larger max event time.
        let wm = into
            .max_event
            .saturating_sub(*d)
            .max(k.max_event.saturating_sub(*e));
        let max = into.max_event.max(k.max_event);
        *d = if wm == i64::MIN {
            (*d).max(*e)
        } else {
            max.saturating_sub(wm)
        };
        Lateness::merge_records(mine, theirs);
    }
    if let (Some(mine), Some(theirs)) = (into.watch.as_mut(), &k.watch) {
        mine.add(theirs);
    }
    into.max_event = into.max_event.max(k.max_event);
    into.last_activity = into.last_activity.max(k.last_activity);
    into.idle = into.idle && k.idle;
    into.session_end = into.session_end.max(k.session_end);
    into.pending = match (into.pending, k.pending) {
        (super::marks::NOT_PENDING, p) | (p, super::marks::NOT_PENDING) => p,
        (a, b) => a.max(b),
    };
    for (start, end, flags, accs) in k.windows {
        match into.windows.iter_mut().find(|w| w.0 == start && w.1 == end) {
            Some(w) => {
                w.2 |= flags;
                for (a, b) in w.3.iter_mut().zip(&accs) {
                    a.merge(b);
                }
            }
            None => into.windows.push((start, end, flags, accs)),
        }
    }
    into.windows.sort_by_key(|w| (w.0, w.1));
}

/// The scope-wide values of one operator snapshot (for resharding a `cores=1`
/// operator's state).
pub fn shared_of(p: &Parsed) -> Shared {
    Shared {
        watermark: p.watermark,
        partitions: p.partitions.clone(),
        key_reported: p.key_reported.max(p.tracker_tail.1),
        event_time: p.event_time,
        max_time: p.max_time,
        windows_emitted: None,
    }
}

impl Operator {
    /// Recomputes the key tracker's global watermark from its keys (after a reshard).
    pub(crate) fn recalculate_key_global(&mut self) {
        self.keys.recalculate_global();
    }
}

/// Operator snapshots (one per old shard or Spark state partition) redistributed over
/// `n` new ones, keys routed by `algo`: [`crate::route::HashAlgo::Xxh3`] as the runtime routes, or
/// [`crate::route::HashAlgo::Spark`] as `df.repartition(n, *keys)` does (keys decoded to the
/// input's Arrow types first). A global aggregate's state (no keys) goes to shard 0.
/// Scope-wide watermarks take the largest of the snapshots'.
pub fn reshard_snapshots(
    cfg: &PipelineConfig,
    snapshots: &[&[u8]],
    n: usize,
    algo: crate::route::HashAlgo,
) -> Result<Vec<Vec<u8>>> {
    if n == 0 {
        return Err(TidemarkError::config(
            "num_partitions",
            "must be at least 1",
        ));
    }
    let parsed = snapshots
        .iter()
        .map(|b| parse(cfg, b))
        .collect::<Result<Vec<_>>>()?;
    let types = key_types(cfg, &parsed)?;
    let shared = Shared {
        watermark: parsed.iter().fold((i64::MIN, i64::MIN), |a, p| {
            (a.0.max(p.watermark.0), a.1.max(p.watermark.1))
        }),
        partitions: parsed
            .first()
            .map(|p| p.partitions.clone())
            .unwrap_or_else(|| {
                let mut w = Writer::new();
                PartitionedWatermarkTracker::new().write_state(&mut w);
                w.finish()
            }),
        key_reported: parsed
            .iter()
            .map(|p| p.key_reported.max(p.tracker_tail.1))
            .max()
            .unwrap_or(i64::MIN),
        event_time: parsed
            .iter()
            .map(|p| p.event_time)
            .max()
            .unwrap_or(i64::MIN),
        max_time: parsed.iter().map(|p| p.max_time).max().unwrap_or(i64::MIN),
        windows_emitted: None,
    };
    let keys = cfg.keys.clone();
    redistribute(cfg, parsed, n, &shared, |encoded| {
        // One target partition takes every key: no hash, so any key type merges.
        if keys.is_empty() || encoded.is_empty() || n == 1 {
            return Ok(vec![0; encoded.len()]);
        }
        match algo {
            crate::route::HashAlgo::Xxh3 => Ok(encoded
                .iter()
                .map(|k| crate::route::xxh3_partition(k, n as u32))
                .collect()),
            crate::route::HashAlgo::Spark => {
                let types = types.ok_or_else(|| {
                    TidemarkError::StateCorrupted("keys without a stored schema".into())
                })?;
                let refs: Vec<&[u8]> = encoded.iter().map(Vec::as_slice).collect();
                let cols = crate::key::decode_key_columns(&refs, &types)?;
                let batch =
                    arrow_array::RecordBatch::try_from_iter(keys.iter().cloned().zip(cols))?;
                let mut router = crate::route::hash_router(
                    n,
                    &keys.iter().map(String::as_str).collect::<Vec<_>>(),
                    crate::route::HashAlgo::Spark,
                )?;
                router.partition_ids(&batch)
            }
        }
    })
}
