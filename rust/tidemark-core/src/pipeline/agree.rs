//! Progress that keys agree on.
//!
//! In a call, each key counts with the largest event time of its rows ([`Top`] keeps
//! the keys with the `quorum` highest); the stream's event time and a source
//! partition's watermark advance to what `quorum` of the keys that reached it agree
//! on ([`Top::agreed_from`]: the `quorum`-th highest of the keys at or past the
//! stream's event time, or the partition's watermark; the lowest of them where fewer
//! keys did: every one of them agrees). So a few keys with wrong clocks (a device set
//! an hour ahead, stray rows on a partition that lags) move nothing while the other
//! keys are behind, and a key whose rows are all behind neither moves nor holds back
//! anything.
//!
//! Keys are named by a hash of their encoding: operators that share a key's rows (hot
//! keys spread over cores, a global aggregate's partial operators) count it once.
//! Filtering the merged lists by a floor is exact: a key at or past the floor that is
//! missing from a list has `quorum` keys above it there, all past the floor too.

use crate::error::Result;
use crate::state::{Reader, Writer};

/// Keys with the highest event times: `(event time, key hash)`, highest time first,
/// each key once, at most `quorum` of them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Top(pub Vec<(i64, u64)>);

impl Top {
    /// The highest event time listed.
    pub fn max(&self) -> Option<i64> {
        self.0.first().map(|e| e.0)
    }

    /// Whether a key at `t` would enter a list of at most `q` (a key's hash is asked
    /// only then: most keys of a large call do not).
    pub(crate) fn takes(&self, q: usize, t: i64) -> bool {
        self.0.len() < q || self.0.last().is_some_and(|e| t > e.0)
    }

    /// Puts key `key` at `t` in the list of at most `q` (a key listed already keeps
    /// the higher of its two times).
    pub(crate) fn push(&mut self, q: usize, t: i64, key: u64) {
        if let Some(i) = self.0.iter().position(|e| e.1 == key) {
            if t <= self.0[i].0 {
                return;
            }
            self.0.remove(i);
        } else if !self.takes(q, t) {
            return;
        } else if self.0.len() >= q {
            self.0.pop();
        }
        let at = self.0.partition_point(|e| e.0 >= t);
        self.0.insert(at, (t, key));
    }

    /// Merges `other` in (a key in both counts once).
    pub(crate) fn merge(&mut self, q: usize, other: &Top) {
        for &(t, k) in &other.0 {
            self.push(q, t, k);
        }
    }

    /// What the listed keys at or past `floor` agree on: the lowest of their event
    /// times (the `quorum`-th highest where the list holds that many; `None`: none).
    pub fn agreed_from(&self, floor: i64) -> Option<i64> {
        self.0
            .iter()
            .map(|e| e.0)
            .take_while(|&t| t >= floor)
            .last()
    }

    fn write(&self, w: &mut Writer) {
        w.len(self.0.len());
        for &(t, k) in &self.0 {
            w.i64(t);
            w.u64(k);
        }
    }

    fn read(r: &mut Reader<'_>) -> Result<Self> {
        let n = r.len(16)?;
        Ok(Top((0..n)
            .map(|_| Ok((r.i64()?, r.u64()?)))
            .collect::<Result<_>>()?))
    }
}

/// The keys of a call with the highest event times, of the stream and of each source
/// partition (sorted by partition; [`super::Progress::keys`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Agreement {
    /// Over the stream.
    pub time: Top,
    /// Per source partition.
    pub partitions: Vec<(u32, Top)>,
}

impl Agreement {
    /// Merges `other` in, `q` keys kept per list.
    pub(crate) fn merge(&mut self, q: usize, other: &Agreement) {
        self.time.merge(q, &other.time);
        for (part, top) in &other.partitions {
            let at = match self.partitions.binary_search_by_key(part, |e| e.0) {
                Ok(i) => i,
                Err(i) => {
                    self.partitions.insert(i, (*part, Top::default()));
                    i
                }
            };
            self.partitions[at].1.merge(q, top);
        }
    }

    /// The list of source partition `p` (`None`: no key seen there).
    pub fn partition(&self, p: u32) -> Option<&Top> {
        self.partitions
            .binary_search_by_key(&p, |e| e.0)
            .ok()
            .map(|i| &self.partitions[i].1)
    }

    /// Writes the lists (see [`Self::read`]).
    pub(crate) fn write(&self, w: &mut Writer) {
        self.time.write(w);
        w.len(self.partitions.len());
        for (p, top) in &self.partitions {
            w.u32(*p);
            top.write(w);
        }
    }

    /// Reads what [`Self::write`] wrote.
    pub(crate) fn read(r: &mut Reader<'_>) -> Result<Self> {
        let time = Top::read(r)?;
        let n = r.len(8)?;
        let partitions = (0..n)
            .map(|_| Ok((r.u32()?, Top::read(r)?)))
            .collect::<Result<_>>()?;
        Ok(Agreement { time, partitions })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_shared_by_lists_count_once() {
        let mut a = Top::default();
        a.push(3, 10, 1);
        a.push(3, 9, 2);
        a.push(3, 8, 3);
        let mut b = Top::default();
        b.push(3, 12, 1);
        b.push(3, 7, 4);
        let mut all = a.clone();
        all.merge(3, &b);
        assert_eq!(all.0, vec![(12, 1), (9, 2), (8, 3)]);
        assert_eq!(all.agreed_from(i64::MIN), Some(8));
        // Fewer keys than the quorum at or past the floor: all of them agree.
        assert_eq!(all.agreed_from(9), Some(9));
        assert_eq!(b.agreed_from(i64::MIN), Some(7));
        assert_eq!(all.agreed_from(13), None);
        assert_eq!(Top::default().agreed_from(i64::MIN), None);
        // A key's lower time changes nothing.
        all.push(3, 1, 2);
        assert_eq!(all.agreed_from(i64::MIN), Some(8));
    }

    #[test]
    fn agreements_round_trip() {
        let mut a = Agreement::default();
        let mut t = Top::default();
        t.push(2, 5, 9);
        a.merge(
            2,
            &Agreement {
                time: t.clone(),
                partitions: vec![(3, t.clone()), (1, t)],
            },
        );
        assert_eq!(a.partitions.iter().map(|p| p.0).collect::<Vec<_>>(), [1, 3]);
        let mut w = Writer::new();
        a.write(&mut w);
        let bytes = w.finish();
        let mut r = Reader::new(&bytes);
        assert_eq!(Agreement::read(&mut r).unwrap(), a);
    }
}
