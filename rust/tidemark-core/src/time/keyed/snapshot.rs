//! The tracker's state as bytes, and its memory footprint.

use std::cmp::Reverse;

use super::{Cold, Hot, KeyEvictionPolicy, KeyedTicks, KeyedWatermarkTracker, NIL};
use crate::clock::ClockRef;
use crate::error::{Result, TidemarkError};
use crate::key::hash_key;
use crate::state;
use crate::state::{Reader, SnapshotKind, Writer};

impl KeyedWatermarkTracker {
    /// Writes the tracker's state (keys in activity order, watermarks, metrics).
    /// Returns the slots in the order written ([`Self::activity_order`]), as
    /// [`Self::read_state`] returns them: per-key state written after this follows
    /// it without walking the activity list again.
    pub fn write_state(&self, w: &mut Writer) -> Vec<u32> {
        let order = self.activity_order();
        w.len(order.len());
        let mut cursor_index = order.len();
        for (i, &s) in order.iter().enumerate() {
            if s == self.cursor {
                cursor_index = i;
            }
            w.bytes(&self.keys.key(s));
            w.i64(self.keys[s as usize].max_event);
            w.i64(self.cold[s as usize].last_activity);
            w.bool(self.keys[s as usize].idle);
        }
        w.len(cursor_index);
        w.i64(self.global);
        w.i64(self.reported);
        w.i64(self.max_seen);
        w.u64(self.metrics.evicted_keys);
        w.u64(self.metrics.global_advances);
        w.u64(self.metrics.key_advances);
        order
    }

    /// Restores state written by [`Self::write_state`] into this (empty) tracker.
    /// Returns the new slots in the written activity order.
    pub fn read_state(&mut self, r: &mut Reader<'_>) -> Result<Vec<u32>> {
        let n = r.len(8 + 8 + 8 + 1)?;
        let mut records = Vec::with_capacity(n);
        for _ in 0..n {
            records.push((r.bytes()?, r.i64()?, r.i64()?, r.bool()?));
        }
        // Every array sized once for the keys and half as many again (a restore of a
        // million keys otherwise spends much of its time growing and rehashing them;
        // see `KeyTable::reserve_keys`).
        self.keys.reserve_keys(records.iter().map(|k| k.0));
        self.cold
            .reserve((self.keys.len() + n + n / 2).saturating_sub(self.cold.len()));
        let mut slots = Vec::with_capacity(n);
        for (key, max_event, last, idle) in records {
            let hash = hash_key(key);
            if self.keys.get_hashed(key, hash).is_some() {
                return Err(TidemarkError::StateCorrupted(
                    "duplicate key in tracker state".into(),
                ));
            }
            let slot = self.keys.insert_new(key, hash)?;
            self.ensure_slot(slot);
            let s = slot as usize;
            self.keys[s] = Hot {
                max_event,
                pending: NIL,
                idle,
            };
            self.cold[s].last_activity = last;
            self.push_back(slot);
            self.metrics.total_keys += 1;
            if idle {
                self.metrics.idle_keys += 1;
                if self.cfg.eviction_policy == KeyEvictionPolicy::LowestWatermark {
                    self.idle_heap.push(Reverse((self.wm_of(s), slot)));
                }
            } else {
                self.metrics.active_keys += 1;
            }
            slots.push(slot);
        }
        // The minimum tree loaded in one pass over every slot (idle and free slots
        // take no part).
        let (keys, delays, delay) = (&self.keys, &self.delays, self.cfg.bounded_delay);
        self.active
            .build(keys.slot_bound(), |i| Self::leaf(keys, delays, delay, i));
        let cursor_index = r.len(0)?;
        self.cursor = slots.get(cursor_index).copied().unwrap_or(NIL);
        self.global = r.i64()?;
        self.reported = r.i64()?;
        self.max_seen = r.i64()?;
        self.metrics.evicted_keys = r.u64()?;
        self.metrics.global_advances = r.u64()?;
        self.metrics.key_advances = r.u64()?;
        Ok(slots)
    }

    /// The tracker's whole state as bytes (versioned, checksummed): its
    /// configuration, and per key its maximum event time, last activity and idleness,
    /// in activity order; the global watermark as reported so far, and the metrics.
    /// [`Self::restore`] reads it back on any clock.
    ///
    /// # Examples
    ///
    /// ```
    /// use tidemark_core::clock::system_clock;
    /// use tidemark_core::time::{KeyedWatermarkConfig, KeyedWatermarkTracker};
    /// let mut t = KeyedWatermarkTracker::new(KeyedWatermarkConfig::default());
    /// t.update("a", 15_000).unwrap();
    /// let back = KeyedWatermarkTracker::restore(&t.snapshot(), system_clock()).unwrap();
    /// assert_eq!(back.watermark_for_key("a"), Some(10_000));
    /// ```
    pub fn snapshot(&self) -> Vec<u8> {
        let mut w = Writer::sealed(256 + self.keys.len() * 40 + self.key_bytes());
        self.write_config(&mut w);
        self.write_state(&mut w);
        w.seal(SnapshotKind::Keyed, 0)
    }

    /// A tracker restored from [`Self::snapshot`] bytes, reading `clock` from now on.
    /// Fails with [`TidemarkError::StateCorrupted`] if the bytes are damaged, of
    /// another format version or of another kind of snapshot.
    pub fn restore(bytes: &[u8], clock: ClockRef) -> Result<Self> {
        let mut r = Reader::new(state::open(bytes, SnapshotKind::Keyed, None)?);
        let mut t = Self::with_ticks(Self::read_config(&mut r)?, clock);
        t.read_bounded_state(&mut r)?;
        r.finish()?;
        Ok(t)
    }

    /// Writes the configuration (for a snapshot that stands alone).
    pub(crate) fn write_config(&self, w: &mut Writer) {
        let c = &self.cfg;
        w.i64(c.bounded_delay);
        w.i64(c.idle_timeout.unwrap_or(-1));
        w.u64(c.max_keys.map_or(0, |m| m as u64 + 1));
        w.u8(match c.eviction_policy {
            KeyEvictionPolicy::LeastRecentlyActive => 0,
            KeyEvictionPolicy::LowestWatermark => 1,
            KeyEvictionPolicy::RejectNew => 2,
        });
    }

    /// Reads a configuration written by [`Self::write_config`].
    pub(crate) fn read_config(r: &mut Reader<'_>) -> Result<KeyedTicks> {
        let bounded_delay = r.i64()?;
        let idle_timeout = r.i64()?;
        let max_keys = r.u64()?;
        let eviction_policy = match r.u8()? {
            0 => KeyEvictionPolicy::LeastRecentlyActive,
            1 => KeyEvictionPolicy::LowestWatermark,
            2 => KeyEvictionPolicy::RejectNew,
            other => {
                return Err(TidemarkError::StateCorrupted(format!(
                    "unknown eviction policy {other} in tracker state"
                )))
            }
        };
        Ok(KeyedTicks {
            bounded_delay,
            idle_timeout: (idle_timeout >= 0).then_some(idle_timeout),
            max_keys: max_keys
                .checked_sub(1)
                .map(|m| usize::try_from(m).unwrap_or(usize::MAX)),
            eviction_policy,
        })
    }

    /// [`Self::read_state`], refusing more keys than the configuration bounds.
    pub(crate) fn read_bounded_state(&mut self, r: &mut Reader<'_>) -> Result<()> {
        self.read_state(r)?;
        if let Some(max) = self.cfg.max_keys {
            if self.keys.len() > max {
                return Err(TidemarkError::StateCorrupted(format!(
                    "tracker state holds {} keys, more than its max_keys {max}",
                    self.keys.len()
                )));
            }
        }
        Ok(())
    }

    /// Bytes of memory per key by layout, excluding the key's own bytes: the table
    /// entry (16-byte key head, holding keys of up to 15 encoded bytes inline, and the
    /// 16-byte per-key state), the activity record, a minimum-tree node, and the
    /// hash index's slot id and tag (a 64-byte chunk per 12 keys, rounded up to 6
    /// bytes). An upper bound: for an inline key the head's bytes are partly the key's
    /// own (a 9-byte integer key leaves 53 bytes).
    pub fn bytes_per_key() -> usize {
        16 /* key head */ + std::mem::size_of::<Hot>() + std::mem::size_of::<Cold>()
            + 8 /* min tree node */ + 64usize.div_ceil(12) /* hash index slot */
    }

    /// Heap bytes held, excluding the keys' own bytes.
    pub fn heap_bytes(&self) -> usize {
        self.cold.capacity() * std::mem::size_of::<Cold>()
            + self.active.heap_bytes()
            + self.keys.overhead_bytes()
            + self.idle_heap.capacity() * 16
    }
}
