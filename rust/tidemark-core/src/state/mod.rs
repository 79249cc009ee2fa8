//! Snapshots: a small, versioned, checksummed binary format.
//!
//! Every snapshot is an envelope:
//!
//! | bytes | content |
//! |---|---|
//! | 4 | magic `TDMK` |
//! | 2 | format version (little-endian) |
//! | 1 | kind (what the snapshot holds: pipeline, timers, ...) |
//! | 8 | fingerprint of the configuration that wrote it |
//! | 8 | payload length |
//! | n | payload |
//! | 4 | CRC-32 of everything before |
//!
//! Restoring checks each field and fails with [`TidemarkError::StateCorrupted`] saying
//! what is wrong: never a panic, never a silent fresh start. Inside the payload,
//! [`Writer`] and [`Reader`] encode integers little-endian and byte strings with a
//! length prefix; every read is bounds-checked.

use crate::error::{Result, TidemarkError};

/// Magic bytes at the start of every snapshot.
pub const MAGIC: &[u8; 4] = b"TDMK";
/// Snapshot format version this build writes and reads.
pub const FORMAT_VERSION: u16 = 6;
const HEADER: usize = 4 + 2 + 1 + 8 + 8;

/// What a snapshot holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum SnapshotKind {
    /// A pipeline operator.
    Pipeline = 1,
    /// A timer service.
    Timers = 2,
    /// A reorder operator.
    Reorder = 3,
    /// A per-partition watermark tracker.
    Partitions = 4,
    /// A pipeline operator sharded over cores (the runtime).
    Sharded = 5,
    /// A per-key watermark tracker.
    Keyed = 6,
    /// A memory-bounded per-key watermark tracker (exact keys and a sketch).
    CompactKeyed = 7,
    /// A state partition's report of a micro-batch (see
    /// [`crate::runtime::micro_batch::Report`]).
    Report = 8,
}

impl SnapshotKind {
    fn name(self) -> &'static str {
        match self {
            SnapshotKind::Pipeline => "pipeline",
            SnapshotKind::Timers => "timer service",
            SnapshotKind::Reorder => "reorder operator",
            SnapshotKind::Partitions => "partition watermark tracker",
            SnapshotKind::Sharded => "sharded pipeline operator",
            SnapshotKind::Keyed => "keyed watermark tracker",
            SnapshotKind::CompactKeyed => "compact keyed watermark tracker",
            SnapshotKind::Report => "micro-batch report",
        }
    }

    fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => SnapshotKind::Pipeline,
            2 => SnapshotKind::Timers,
            3 => SnapshotKind::Reorder,
            4 => SnapshotKind::Partitions,
            5 => SnapshotKind::Sharded,
            6 => SnapshotKind::Keyed,
            7 => SnapshotKind::CompactKeyed,
            8 => SnapshotKind::Report,
            _ => return None,
        })
    }
}

/// Wraps a payload in the envelope.
pub fn seal(kind: SnapshotKind, fingerprint: u64, payload: &[u8]) -> Vec<u8> {
    let mut w = Writer::sealed(payload.len());
    w.raw(payload);
    w.seal(kind, fingerprint)
}

/// The kind of a snapshot, from its header (`None`: not a tidemark snapshot).
pub fn peek_kind(bytes: &[u8]) -> Option<SnapshotKind> {
    if bytes.len() < HEADER || &bytes[..4] != MAGIC {
        return None;
    }
    SnapshotKind::from_u8(bytes[6])
}

/// Checks the envelope and returns the payload.
///
/// `fingerprint: None` accepts any configuration.
pub fn open(bytes: &[u8], kind: SnapshotKind, fingerprint: Option<u64>) -> Result<&[u8]> {
    let bad = |m: String| Err(TidemarkError::StateCorrupted(m));
    if bytes.len() < 4 || &bytes[..4] != MAGIC {
        return bad("not a tidemark snapshot (bad magic bytes)".into());
    }
    if bytes.len() < HEADER + 4 {
        return bad(format!(
            "truncated: {} bytes, the header alone needs {}",
            bytes.len(),
            HEADER + 4
        ));
    }
    let version = u16::from_le_bytes([bytes[4], bytes[5]]);
    if version != FORMAT_VERSION {
        let (who, what) = if version > FORMAT_VERSION {
            ("a newer", "restore it with that tidemark or a newer one")
        } else {
            (
                "an older",
                "older snapshots are not converted: finish the query with the tidemark that \
                 wrote it, or start over in a new state location",
            )
        };
        return bad(format!(
            "written by {who} tidemark: snapshot format version {version}; this build of \
             tidemark reads version {FORMAT_VERSION} ({what})"
        ));
    }
    let len = u64::from_le_bytes(bytes[15..23].try_into().expect("8 bytes")) as usize;
    let expected = HEADER.saturating_add(len).saturating_add(4);
    if bytes.len() != expected {
        return bad(format!(
            "{} bytes, expected {expected} (truncated or extended)",
            bytes.len()
        ));
    }
    let body = &bytes[..HEADER + len];
    let crc = u32::from_le_bytes(bytes[HEADER + len..].try_into().expect("4 bytes"));
    if crc32fast::hash(body) != crc {
        return bad("checksum mismatch: the snapshot is corrupted".into());
    }
    match SnapshotKind::from_u8(bytes[6]) {
        Some(k) if k == kind => {}
        Some(k) => {
            return bad(format!(
                "this is a {} snapshot, not a {}",
                k.name(),
                kind.name()
            ))
        }
        None => return bad(format!("unknown snapshot kind {}", bytes[6])),
    }
    let fp = u64::from_le_bytes(bytes[7..15].try_into().expect("8 bytes"));
    if let Some(want) = fingerprint {
        if fp != want {
            return bad(format!(
                "written by a different configuration (fingerprint {fp:016x}, this one is \
                 {want:016x}); restore it with the pipeline that wrote it"
            ));
        }
    }
    Ok(&bytes[HEADER..HEADER + len])
}

/// Appends encoded values to a payload.
#[derive(Debug, Default)]
pub struct Writer {
    buf: Vec<u8>,
    /// Bytes before the payload: room for the envelope's header ([`Self::sealed`]).
    start: usize,
}

impl Writer {
    /// An empty payload.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty payload to be wrapped in the envelope by [`Self::seal`], in the same
    /// buffer (with room for `capacity` payload bytes): the payload is not copied
    /// into a second buffer, as [`seal`] copies it.
    pub fn sealed(capacity: usize) -> Self {
        let mut buf = Vec::with_capacity(HEADER + capacity + 4);
        buf.resize(HEADER, 0);
        Self { buf, start: HEADER }
    }

    /// The envelope around the payload of a [`Self::sealed`] writer: the same bytes
    /// [`seal`] gives.
    pub fn seal(mut self, kind: SnapshotKind, fingerprint: u64) -> Vec<u8> {
        assert_eq!(
            self.start, HEADER,
            "Writer::seal needs a Writer::sealed writer"
        );
        let len = (self.buf.len() - HEADER) as u64;
        let mut head = [0u8; HEADER];
        head[..4].copy_from_slice(MAGIC);
        head[4..6].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        head[6] = kind as u8;
        head[7..15].copy_from_slice(&fingerprint.to_le_bytes());
        head[15..].copy_from_slice(&len.to_le_bytes());
        self.buf[..HEADER].copy_from_slice(&head);
        let crc = crc32fast::hash(&self.buf);
        self.buf.extend_from_slice(&crc.to_le_bytes());
        self.buf
    }

    /// The payload.
    pub fn finish(self) -> Vec<u8> {
        assert_eq!(
            self.start, 0,
            "a Writer::sealed writer ends with Writer::seal"
        );
        self.buf
    }
    /// Writes a byte.
    pub fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }
    /// Writes a bool.
    pub fn bool(&mut self, v: bool) {
        self.buf.push(v as u8);
    }
    /// Writes a `u32`.
    pub fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    /// Writes a `u64`.
    pub fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    /// Writes an `i64`.
    pub fn i64(&mut self, v: i64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    /// Writes an `i128`.
    pub fn i128(&mut self, v: i128) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    /// Writes an `f64` (bit-exact).
    pub fn f64(&mut self, v: f64) {
        self.buf.extend_from_slice(&v.to_bits().to_le_bytes());
    }
    /// Writes a length (as `u64`).
    pub fn len(&mut self, n: usize) {
        self.u64(n as u64);
    }

    /// Writes a length not known yet (0 for now), for [`Self::set_len`]: where it lies.
    pub fn len_later(&mut self) -> usize {
        let at = self.buf.len();
        self.len(0);
        at
    }

    /// Sets the length that [`Self::len_later`] wrote at `at`.
    pub fn set_len(&mut self, at: usize, n: usize) {
        self.buf[at..at + 8].copy_from_slice(&(n as u64).to_le_bytes());
    }
    /// Appends bytes as they are (an already encoded part).
    pub fn raw(&mut self, v: &[u8]) {
        self.buf.extend_from_slice(v);
    }

    /// Appends length-prefixed bytes.
    pub fn bytes(&mut self, v: &[u8]) {
        self.len(v.len());
        self.buf.extend_from_slice(v);
    }
    /// Writes a length-prefixed UTF-8 string.
    pub fn str(&mut self, v: &str) {
        self.bytes(v.as_bytes());
    }
}

/// Reads encoded values from a payload, every read bounds-checked.
#[derive(Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// Reads `buf` from the start.
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.buf.len() - self.pos < n {
            return Err(TidemarkError::StateCorrupted(format!(
                "payload ends at byte {} while reading {n} more bytes at {}",
                self.buf.len(),
                self.pos
            )));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Reads a byte.
    pub fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    /// Reads a bool.
    pub fn bool(&mut self) -> Result<bool> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(TidemarkError::StateCorrupted(format!(
                "invalid boolean byte {v} at {}",
                self.pos - 1
            ))),
        }
    }
    /// Reads a `u32`.
    pub fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }
    /// Reads a `u64`.
    pub fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }
    /// Reads an `i64`.
    pub fn i64(&mut self) -> Result<i64> {
        Ok(i64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }
    /// Reads an `i128`.
    pub fn i128(&mut self) -> Result<i128> {
        Ok(i128::from_le_bytes(self.take(16)?.try_into().expect("16")))
    }
    /// Reads an `f64`.
    pub fn f64(&mut self) -> Result<f64> {
        Ok(f64::from_bits(self.u64()?))
    }
    /// Reads `n` `f64`s (bit-exact), yielded from the buffer as they are consumed.
    pub fn f64s(&mut self, n: usize) -> Result<impl Iterator<Item = f64> + 'a> {
        let bytes = self.take(n.checked_mul(8).ok_or_else(|| {
            TidemarkError::StateCorrupted(format!("{n} doubles exceed any snapshot"))
        })?)?;
        Ok(bytes
            .chunks_exact(8)
            .map(|b| f64::from_bits(u64::from_le_bytes(b.try_into().expect("8 bytes")))))
    }
    /// Reads a length, checked against the bytes left (each item takes at least
    /// `min_item_bytes`), so a corrupted length cannot trigger a huge allocation.
    pub fn len(&mut self, min_item_bytes: usize) -> Result<usize> {
        let n = self.u64()?;
        let left = (self.buf.len() - self.pos) as u64;
        if n.saturating_mul(min_item_bytes.max(1) as u64) > left {
            return Err(TidemarkError::StateCorrupted(format!(
                "length {n} at byte {} exceeds the {left} bytes left",
                self.pos - 8
            )));
        }
        Ok(n as usize)
    }
    /// Reads length-prefixed bytes.
    pub fn bytes(&mut self) -> Result<&'a [u8]> {
        let n = self.len(1)?;
        self.take(n)
    }
    /// Reads a length-prefixed UTF-8 string.
    pub fn str(&mut self) -> Result<&'a str> {
        let b = self.bytes()?;
        std::str::from_utf8(b)
            .map_err(|_| TidemarkError::StateCorrupted("invalid UTF-8 string".into()))
    }
    /// Fails unless every byte was read.
    pub fn finish(self) -> Result<()> {
        if self.pos != self.buf.len() {
            return Err(TidemarkError::StateCorrupted(format!(
                "{} unread bytes after the state",
                self.buf.len() - self.pos
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_every_corruption_is_detected() {
        let mut w = Writer::new();
        w.i64(-5);
        w.str("hé");
        w.f64(f64::NAN);
        let payload = w.finish();
        let snap = seal(SnapshotKind::Pipeline, 42, &payload);
        let p = open(&snap, SnapshotKind::Pipeline, Some(42)).unwrap();
        let mut r = Reader::new(p);
        assert_eq!(r.i64().unwrap(), -5);
        assert_eq!(r.str().unwrap(), "hé");
        assert!(r.f64().unwrap().is_nan());
        r.finish().unwrap();

        let err = |b: &[u8], fp| open(b, SnapshotKind::Pipeline, fp).unwrap_err().to_string();
        assert!(err(&snap[..snap.len() - 1], Some(42)).contains("truncated"));
        assert!(err(b"nope", None).contains("magic"));
        let mut flipped = snap.clone();
        flipped[HEADER + 2] ^= 1;
        assert!(err(&flipped, Some(42)).contains("checksum"));
        assert!(err(&snap, Some(7)).contains("different configuration"));
        let mut v2 = snap.clone();
        v2[4] = 9;
        assert!(err(&v2, None).contains("a newer tidemark: snapshot format version 9"));
        v2[4] = 1;
        assert!(err(&v2, None).contains("an older tidemark: snapshot format version 1"));
        assert!(open(&snap, SnapshotKind::Timers, None)
            .unwrap_err()
            .to_string()
            .contains("not a timer service"));
        for cut in 0..snap.len() {
            assert!(open(&snap[..cut], SnapshotKind::Pipeline, Some(42)).is_err());
        }
    }

    #[test]
    fn a_sealed_writer_gives_the_bytes_of_seal() {
        for capacity in [0, 3, 1 << 10] {
            let mut w = Writer::sealed(capacity);
            let mut plain = Writer::new();
            for v in [7i64, -1, i64::MAX] {
                w.i64(v);
                plain.i64(v);
            }
            w.str("key");
            plain.str("key");
            let at = w.len_later();
            w.u8(1);
            w.set_len(at, 2);
            plain.len(2);
            plain.u8(1);
            let snap = w.seal(SnapshotKind::Reorder, 99);
            assert_eq!(snap, seal(SnapshotKind::Reorder, 99, &plain.finish()));
            let mut r = Reader::new(open(&snap, SnapshotKind::Reorder, Some(99)).unwrap());
            assert_eq!((r.i64().unwrap(), r.i64().unwrap()), (7, -1));
        }
        // An empty payload too.
        assert_eq!(
            Writer::sealed(0).seal(SnapshotKind::Timers, 1),
            seal(SnapshotKind::Timers, 1, &[])
        );
    }

    #[test]
    fn doubles_read_in_a_run_are_bit_exact_and_bounded() {
        let vals = [1.5, -0.0, f64::NAN, f64::MAX];
        let mut w = Writer::new();
        vals.iter().for_each(|&v| w.f64(v));
        w.u8(7);
        let payload = w.finish();
        let mut r = Reader::new(&payload);
        let got: Vec<u64> = r.f64s(vals.len()).unwrap().map(f64::to_bits).collect();
        assert_eq!(got, vals.map(f64::to_bits));
        assert_eq!(r.u8().unwrap(), 7);
        assert!(Reader::new(&payload).f64s(5).is_err());
        assert!(Reader::new(&payload).f64s(usize::MAX).is_err());
    }

    #[test]
    fn reader_rejects_huge_lengths() {
        let mut w = Writer::new();
        w.u64(u64::MAX);
        let payload = w.finish();
        let mut r = Reader::new(&payload);
        assert!(r.bytes().is_err());
    }
}
