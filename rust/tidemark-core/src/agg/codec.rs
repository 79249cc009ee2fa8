//! The snapshot encoding of aggregate states (accumulators, scalars, exact sums).

use crate::agg::{Acc, ExactSum, Scalar, Unscaled, WideSum};
use crate::error::Result;
use crate::error::TidemarkError;
use crate::state::{Reader, Writer};

fn write_scalar(w: &mut Writer, s: &Scalar) {
    match s {
        Scalar::I(v) => {
            w.u8(0);
            w.i64(*v)
        }
        Scalar::U(v) => {
            w.u8(1);
            w.u64(*v)
        }
        Scalar::F(v) => {
            w.u8(2);
            w.f64(*v)
        }
        Scalar::Bool(v) => {
            w.u8(3);
            w.bool(*v)
        }
        Scalar::B(v) => {
            w.u8(4);
            w.bytes(v)
        }
        Scalar::D(v) => {
            w.u8(5);
            w.i128(v.get())
        }
    }
}

fn read_scalar(r: &mut Reader<'_>) -> Result<Scalar> {
    Ok(match r.u8()? {
        0 => Scalar::I(r.i64()?),
        1 => Scalar::U(r.u64()?),
        2 => Scalar::F(r.f64()?),
        3 => Scalar::Bool(r.bool()?),
        4 => Scalar::B(r.bytes()?.to_vec()),
        5 => Scalar::D(Unscaled::new(r.i128()?)),
        t => {
            return Err(TidemarkError::StateCorrupted(format!(
                "unknown value tag {t}"
            )))
        }
    })
}

fn write_sum(w: &mut Writer, s: &ExactSum) {
    // The parts as they come, their count after them (no vector per accumulator).
    let at = w.len_later();
    let mut n = 0;
    s.for_each_part(|p| {
        w.f64(p);
        n += 1;
    });
    w.set_len(at, n);
    let special = s.special();
    w.bool(special.is_some());
    w.f64(special.unwrap_or(0.0));
}

fn read_sum(r: &mut Reader<'_>) -> Result<ExactSum> {
    let n = r.len(8)?;
    let parts = r.f64s(n)?;
    let has = r.bool()?;
    let sp = r.f64()?;
    Ok(ExactSum::from_parts(parts, has.then_some(sp)))
}

pub(crate) fn write_acc(w: &mut Writer, a: &Acc) {
    let opt = |w: &mut Writer, s: &Option<Scalar>| match s {
        None => w.bool(false),
        Some(s) => {
            w.bool(true);
            write_scalar(w, s)
        }
    };
    let opt_t = |w: &mut Writer, s: &Option<(i64, Scalar)>| match s {
        None => w.bool(false),
        Some((t, s)) => {
            w.bool(true);
            w.i64(*t);
            write_scalar(w, s)
        }
    };
    match a {
        Acc::Count(c) => {
            w.u8(0);
            w.i64(*c)
        }
        Acc::SumI(s, n) => {
            w.u8(1);
            w.i128(*s);
            w.i64(*n)
        }
        Acc::SumF(s, n) => {
            w.u8(2);
            write_sum(w, s);
            w.i64(*n)
        }
        Acc::MeanI(s, n) => {
            w.u8(3);
            w.i128(*s);
            w.i64(*n)
        }
        Acc::MeanF(s, n) => {
            w.u8(4);
            write_sum(w, s);
            w.i64(*n)
        }
        Acc::Moments(m, n) => {
            w.u8(5);
            write_sum(w, &m[0]);
            write_sum(w, &m[1]);
            w.i64(*n)
        }
        Acc::Min(s) => {
            w.u8(6);
            opt(w, s)
        }
        Acc::Max(s) => {
            w.u8(7);
            opt(w, s)
        }
        Acc::First(s) => {
            w.u8(8);
            opt_t(w, s)
        }
        Acc::Last(s) => {
            w.u8(9);
            opt_t(w, s)
        }
        Acc::Dec(s, n) => {
            let (lo, carry) = s.parts();
            w.u8(10);
            w.i128(lo);
            w.i64(carry);
            w.i64(*n)
        }
        Acc::Distinct(values) => {
            w.u8(11);
            w.len(values.len());
            for v in values {
                write_scalar(w, v);
            }
        }
        Acc::Hll(reg) => {
            w.u8(12);
            w.bytes(reg);
        }
        Acc::Quantiles(q) => {
            w.u8(15);
            w.u64(q.n);
            w.u32(q.accuracy);
            w.len(q.samples.len());
            for x in &q.samples {
                write_scalar(w, &x.value);
                w.u64(x.g);
                w.u64(x.delta);
            }
            w.len(q.buffer.len());
            for v in &q.buffer {
                write_scalar(w, v);
            }
        }
        Acc::MinBy(b) | Acc::MaxBy(b) => {
            w.u8(if matches!(a, Acc::MinBy(_)) { 13 } else { 14 });
            match b {
                None => w.bool(false),
                Some(b) => {
                    w.bool(true);
                    write_scalar(w, &b.0);
                    opt(w, &b.1);
                }
            }
        }
    }
}

pub(crate) fn read_acc(r: &mut Reader<'_>) -> Result<Acc> {
    let opt = |r: &mut Reader<'_>| -> Result<Option<Scalar>> {
        Ok(if r.bool()? {
            Some(read_scalar(r)?)
        } else {
            None
        })
    };
    let opt_t = |r: &mut Reader<'_>| -> Result<Option<(i64, Scalar)>> {
        Ok(if r.bool()? {
            Some((r.i64()?, read_scalar(r)?))
        } else {
            None
        })
    };
    Ok(match r.u8()? {
        0 => Acc::Count(r.i64()?),
        1 => Acc::SumI(r.i128()?, r.i64()?),
        2 => Acc::SumF(read_sum(r)?, r.i64()?),
        3 => Acc::MeanI(r.i128()?, r.i64()?),
        4 => Acc::MeanF(read_sum(r)?, r.i64()?),
        5 => Acc::Moments(Box::new([read_sum(r)?, read_sum(r)?]), r.i64()?),
        6 => Acc::Min(opt(r)?),
        7 => Acc::Max(opt(r)?),
        8 => Acc::First(opt_t(r)?),
        9 => Acc::Last(opt_t(r)?),
        10 => Acc::Dec(WideSum::from_parts(r.i128()?, r.i64()?), r.i64()?),
        11 => {
            let n = r.len(2)?;
            let mut values = Vec::with_capacity(n);
            for _ in 0..n {
                values.push(read_scalar(r)?);
            }
            Acc::Distinct(values)
        }
        12 => {
            let reg = r.bytes()?;
            let mut fresh = crate::agg::hll_registers();
            if reg.len() != fresh.len() {
                return Err(TidemarkError::StateCorrupted(format!(
                    "approx_count_distinct: {} registers, expected {}",
                    reg.len(),
                    fresh.len()
                )));
            }
            fresh.copy_from_slice(reg);
            Acc::Hll(fresh)
        }
        15 => {
            let (n, accuracy) = (r.u64()?, r.u32()?);
            let count = r.len(17)?;
            let mut samples = Vec::with_capacity(count);
            for _ in 0..count {
                let (value, g, delta) = (read_scalar(r)?, r.u64()?, r.u64()?);
                samples.push(crate::agg::Sample { value, g, delta });
            }
            let mut q = crate::agg::QuantileSketch::from_parts(n, accuracy, samples)?;
            let buffered = r.len(2)?;
            for _ in 0..buffered {
                q.buffer.push(read_scalar(r)?);
            }
            Acc::Quantiles(Box::new(q))
        }
        t @ (13 | 14) => {
            let b = if r.bool()? {
                Some(Box::new((read_scalar(r)?, opt(r)?)))
            } else {
                None
            };
            if t == 13 {
                Acc::MinBy(b)
            } else {
                Acc::MaxBy(b)
            }
        }
        t => {
            return Err(TidemarkError::StateCorrupted(format!(
                "unknown aggregate tag {t}"
            )))
        }
    })
}
