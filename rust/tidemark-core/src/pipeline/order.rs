//! The output order: window end, window start, key bytes, retraction first.

use super::Emit;
use crate::key::KeyBytes;

/// The order of the output rows: by window end, start, key bytes, retraction first.
/// (end, start, key, retraction) identifies a row, so an unstable sort is
/// deterministic. `keys[i]` holds the bytes of `emits[i].key`.
///
/// `step`: the grid of the windows' bounds (a tumbling window's size, a sliding
/// window's slide), `None` for sessions.
pub(super) fn output_order(emits: &[Emit], keys: &[KeyBytes<'_>], step: Option<u64>) -> Vec<usize> {
    let n = emits.len();
    // A key's windows mostly close together, so its rows come in runs. With few runs,
    // the runs' keys are ranked by their bytes once, and rows sort on integers alone;
    // otherwise rows sort on the keys' first 8 bytes (big-endian, so integer order is
    // byte order) and compare whole keys only on a tie.
    let mut runs: Vec<u32> = Vec::new();
    for (i, e) in emits.iter().enumerate() {
        if i == 0 || e.key != emits[i - 1].key {
            runs.push(i as u32);
            if runs.len() * 4 > n {
                break;
            }
        }
    }
    let few_runs = runs.len() * 4 <= n;
    // The key part of a row's sort key (with the retraction flag in its low bit).
    let key_part: Vec<u64> = if few_runs {
        let mut by_key: Vec<u32> = (0..runs.len() as u32).collect();
        let key_of_run = |r: u32| &*keys[runs[r as usize] as usize];
        by_key.sort_unstable_by(|&a, &b| key_of_run(a).cmp(key_of_run(b)).then(a.cmp(&b)));
        if let Some(order) = step.and_then(|step| grid_order(emits, &runs, &by_key, step)) {
            return order;
        }
        let mut rank_of_run = vec![0u64; runs.len()];
        let mut rank = 0u64;
        for (j, &r) in by_key.iter().enumerate() {
            if j > 0 && key_of_run(r) != key_of_run(by_key[j - 1]) {
                rank += 1;
            }
            rank_of_run[r as usize] = rank;
        }
        let mut out = Vec::with_capacity(n);
        let mut run = 0;
        for (i, e) in emits.iter().enumerate() {
            if run + 1 < runs.len() && runs[run + 1] as usize == i {
                run += 1;
            }
            out.push(rank_of_run[run] << 1 | u64::from(!e.retract));
        }
        out
    } else {
        keys.iter()
            .map(|k| {
                let mut prefix = [0u8; 8];
                let m = k.len().min(8);
                prefix[..m].copy_from_slice(&k[..m]);
                u64::from_be_bytes(prefix)
            })
            .collect()
    };
    if few_runs {
        // The key part is the whole key: rows sort on (end, start, key part) packed
        // into one integer when their spreads fit, a primitive sort.
        let spread = |f: fn(&Emit) -> i64| {
            let lo = emits.iter().map(f).min().unwrap_or(0);
            let hi = emits.iter().map(f).max().unwrap_or(0);
            (lo, hi.abs_diff(lo))
        };
        let (end0, end_span) = spread(|e| e.end);
        let (start0, start_span) = spread(|e| e.start);
        let key_span = key_part.iter().copied().max().unwrap_or(0);
        let packed = packed_order(n, &[end_span, start_span, key_span], |i| {
            [
                emits[i].end.abs_diff(end0),
                emits[i].start.abs_diff(start0),
                key_part[i],
            ]
        });
        if let Some(order) = packed {
            return order;
        }
    }
    let tie = |a: u32, b: u32| {
        if few_runs {
            return std::cmp::Ordering::Equal; // the key part is the whole key
        }
        let (a, b) = (a as usize, b as usize);
        (*keys[a])
            .cmp(&*keys[b])
            .then_with(|| emits[b].retract.cmp(&emits[a].retract))
    };
    let one_window = emits
        .windows(2)
        .all(|w| (w[0].end, w[0].start) == (w[1].end, w[1].start));
    if one_window {
        // Every row in the same window (the usual close of a tumbling window): sort on
        // the key part alone.
        let mut by_key: Vec<(u64, u32)> = key_part
            .iter()
            .zip(0..n as u32)
            .map(|(&k, i)| (k, i))
            .collect();
        by_key.sort_unstable_by(|x, y| x.0.cmp(&y.0).then_with(|| tie(x.1, y.1)));
        return by_key.iter().map(|k| k.1 as usize).collect();
    }
    let mut sort_keys: Vec<(i64, i64, u64, u32)> = emits
        .iter()
        .zip(&key_part)
        .zip(0..n as u32)
        .map(|((e, &k), i)| (e.end, e.start, k, i))
        .collect();
    sort_keys.sort_unstable_by(|x, y| {
        (x.0, x.1, x.2)
            .cmp(&(y.0, y.1, y.2))
            .then_with(|| tie(x.3, y.3))
    });
    sort_keys.iter().map(|k| k.3 as usize).collect()
}

/// The output order by counting sort, when no row is a retraction and every row's
/// window has the same length, with its end on a grid of `step` (tumbling and sliding
/// windows): the order by (end, start, key, row) is then the order by (end, key, row).
/// The rows are listed key by key (`by_key`: the runs starting at `runs[r]`, by key
/// bytes, then by position), then distributed stably over the ends. `None` if the rows
/// do not fit, or if there are more distinct ends than rows.
pub(super) fn grid_order(
    emits: &[Emit],
    runs: &[u32],
    by_key: &[u32],
    step: u64,
) -> Option<Vec<usize>> {
    let n = emits.len();
    let first = emits.first()?;
    let width = first.end.wrapping_sub(first.start);
    let end0 = emits.iter().map(|e| e.end).min()?;
    let inv = 1.0 / step as f64;
    let mut cells: Vec<u32> = Vec::with_capacity(n);
    let mut max_cell = 0u32;
    for e in emits {
        if e.retract || e.end.wrapping_sub(e.start) != width {
            return None;
        }
        let d = e.end.abs_diff(end0);
        // A quotient by multiplication, checked exactly (a wrong guess only loses the
        // fast path).
        let q = (d as f64 * inv).round() as u64;
        if q >= n as u64 || q.checked_mul(step) != Some(d) {
            return None;
        }
        max_cell = max_cell.max(q as u32);
        cells.push(q as u32);
    }
    let mut fill = vec![0u32; max_cell as usize + 2];
    for &c in &cells {
        fill[c as usize + 1] += 1;
    }
    for i in 1..fill.len() {
        fill[i] += fill[i - 1];
    }
    let mut order = vec![0usize; n];
    for &r in by_key {
        let lo = runs[r as usize] as usize;
        let hi = runs.get(r as usize + 1).map_or(n, |&h| h as usize);
        for i in lo..hi {
            let c = &mut fill[cells[i] as usize];
            order[*c as usize] = i;
            *c += 1;
        }
    }
    Some(order)
}

/// The rows of the batch's keys (`group[row]` not `u32::MAX`) as (event time, row,
/// key index), by the cell of the window grid (`step` apart, aligned to `origin`)
/// their event time falls in, rows of a cell in arrival order: a counting sort. With
/// more cells than rows, runs of cells are merged into one (the order stays by time).
/// `None` when the rows arrived in time order already.
pub(super) fn by_window_cell(
    group: &[u32],
    times: &[i64],
    step: i64,
    origin: i64,
) -> Option<Vec<(i64, u32, u32)>> {
    let (mut lo, mut hi, mut n, mut in_order) = (i64::MAX, i64::MIN, 0usize, true);
    for (&g, &t) in group.iter().zip(times) {
        if g != u32::MAX {
            in_order &= t >= hi;
            lo = lo.min(t);
            hi = hi.max(t);
            n += 1;
        }
    }
    if in_order {
        return None;
    }
    // The grid line at or below the earliest event time.
    // (Below the range of `i64`: the earliest time, unaligned.)
    let base = i128::from(lo) - (i128::from(lo) - i128::from(origin)).rem_euclid(i128::from(step));
    let base = i64::try_from(base).unwrap_or(lo);
    let offset = |t: i64| t.abs_diff(base) as f64;
    let mut scale = 1.0 / step as f64;
    let cells = offset(hi) * scale + 1.0;
    if cells > n as f64 {
        scale *= n as f64 / cells;
    }
    // Monotone in `t`: float rounding and truncation never reverse an order.
    let last = ((offset(hi) * scale) as usize).min(n - 1);
    let cell = |t: i64| ((offset(t) * scale) as usize).min(last);
    let mut fill = vec![0u32; last + 2];
    for (&g, &t) in group.iter().zip(times) {
        if g != u32::MAX {
            fill[cell(t) + 1] += 1;
        }
    }
    for i in 1..fill.len() {
        fill[i] += fill[i - 1];
    }
    let mut out = vec![(0i64, 0u32, 0u32); n];
    for (row, (&g, &t)) in group.iter().zip(times).enumerate() {
        if g != u32::MAX {
            let c = &mut fill[cell(t)];
            out[*c as usize] = (t, row as u32, g);
            *c += 1;
        }
    }
    Some(out)
}

/// Bits that hold values up to `max`.
fn bits_for(max: u64) -> u32 {
    u64::BITS - max.leading_zeros()
}

/// The order of rows `0..n` by three unsigned sort fields (`fields(i)`, most
/// significant first, each at most its `maxes` entry), sorting the fields and the row
/// index packed into one `u64` or `u128`; `None` if they need more than 128 bits.
pub(super) fn packed_order(
    n: usize,
    maxes: &[u64; 3],
    fields: impl Fn(usize) -> [u64; 3],
) -> Option<Vec<usize>> {
    let widths = maxes.map(bits_for);
    let index_bits = bits_for(n as u64);
    let total = widths.iter().sum::<u32>() + index_bits;
    if total > u128::BITS {
        return None;
    }
    let pack = |i: usize| -> u128 {
        let f = fields(i);
        let mut x = 0u128;
        for (v, w) in f.iter().zip(widths) {
            x = x << w | u128::from(*v);
        }
        x << index_bits | i as u128
    };
    let index_mask = (1u128 << index_bits) - 1;
    if total <= u64::BITS {
        let mut rows: Vec<u64> = (0..n).map(|i| pack(i) as u64).collect();
        rows.sort_unstable();
        Some(
            rows.iter()
                .map(|&x| (u128::from(x) & index_mask) as usize)
                .collect(),
        )
    } else {
        let mut rows: Vec<u128> = (0..n).map(pack).collect();
        rows.sort_unstable();
        Some(rows.iter().map(|&x| (x & index_mask) as usize).collect())
    }
}

/// A row with no key index in the batch (an error row).
pub(super) const SKIP: u32 = u32::MAX;

/// The rows of the batch's keys ordered by key (a counting sort on the batch key
/// index `group[row]`, `SKIP` rows left out): key `g`'s `(event time, row)` pairs are
/// `pairs[starts[g]..starts[g + 1]]`, in the order of `cells` (the rows listed by
/// window first, see `by_window_cell`) where given, else in input order.
pub(super) fn rows_by_key(
    group: &[u32],
    time_vals: &[i64],
    groups: usize,
    cells: Option<Vec<(i64, u32, u32)>>,
) -> (Vec<u32>, Vec<(i64, u32)>) {
    let mut starts = vec![0u32; groups + 1];
    for &g in group {
        if g != SKIP {
            starts[g as usize + 1] += 1;
        }
    }
    for i in 0..groups {
        starts[i + 1] += starts[i];
    }
    // Each entry is (event time, row): phase 3 reads the times in sequence.
    let mut fill = starts.clone();
    let mut pairs = vec![(0i64, 0u32); starts[groups] as usize];
    match cells {
        Some(cells) => {
            for (ts, row, g) in cells {
                pairs[fill[g as usize] as usize] = (ts, row);
                fill[g as usize] += 1;
            }
        }
        None => {
            for (row, &g) in group.iter().enumerate() {
                if g != SKIP {
                    pairs[fill[g as usize] as usize] = (time_vals[row], row as u32);
                    fill[g as usize] += 1;
                }
            }
        }
    }
    (starts, pairs)
}
