//! Which watermark judges a call's rows and which closes its windows: the marks an
//! operator keeps from call to call, and the values given from outside, in one type.
//!
//! A call begins with a watermark ([`Marks::start`]): the scope's own, or the one a
//! driver or coordinator combined over every operator of the scope. Rows are judged
//! against it, or under Spark's rule against the previous call's ([`Marks::judged`]).
//! Windows close at the watermark [`Marks::close`] gives for the late rule: Spark's
//! closes what the call's starting watermark passed; the others what the call's own
//! rows moved it to (or the coordinator's combined value). Per key under Spark's rule,
//! each key keeps the watermark its windows were closed at ([`Marks::key_closed`]),
//! valid in the call after it.

use super::{Bounds, LateRule, Scope};

/// A key with no closing mark in a snapshot (see [`Marks::key_closed`]).
pub(super) const NOT_PENDING: i64 = i64::MAX;

/// The call number of a key mark that is never valid (a dropped key's).
const NO_CALL: u64 = u64::MAX;

/// Values given from outside for the operator's next calls (`None`: its own).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct External {
    /// The watermark the call begins with: the operator's own, or the one combined
    /// over every operator of the scope (the Spark driver's, the runtime
    /// coordinator's), which judges rows (global and partition scope) and bounds what
    /// closes when `close` is not set.
    pub watermark: Start,
    /// The scope's event time (when higher than the operator's own): what idleness in
    /// event time and the bounds on event times measure from.
    pub time: Option<i64>,
    /// The wall clock's reading as the call begins (microseconds), for every operator
    /// of the scope alike: what `max_ahead` bounds (see `pipeline/bounds.rs`). `None`:
    /// the operator's own clock, if a wall clock.
    pub wall: Option<i64>,
    /// The bounds of the call, computed by whoever holds all of its rows (the stream's
    /// first call: its rows judge each other); `None`: from the stream's event time.
    pub bounds: Option<Bounds>,
    /// The scope's newest event time (its largest believed one, when higher than the
    /// operator's own): what a lateness report measures against.
    pub newest: Option<i64>,
}

/// Where the watermark a call begins with comes from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Start {
    /// The operator's own (it holds the whole scope).
    #[default]
    Own,
    /// Combined elsewhere over every operator of the scope (`None`: the scope has no
    /// watermark yet; the operator stays driven, as its own view of the rows it holds
    /// would run ahead of the scope's).
    Scope(Option<i64>),
}

impl Start {
    /// The combined watermark (`i64::MIN`: none yet), or `None` for the operator's own.
    fn given(self) -> Option<i64> {
        match self {
            Start::Own => None,
            Start::Scope(w) => Some(w.unwrap_or(i64::MIN)),
        }
    }
}

/// The marks of one operator (see the module documentation).
#[derive(Debug)]
pub(super) struct Marks {
    /// Given from outside.
    pub(super) external: External,
    /// What the scope's own rule gave for the last call: the watermark that closes
    /// windows (per key: idle keys' windows).
    own_close: i64,
    /// Spark's rule (global and partition scope): the watermark the previous call
    /// began with. Every window with `end + allowed_lateness` at or before it is
    /// closed; rows of those windows are late.
    late_mark: i64,
    /// The watermark this call began with (Spark's rule closes at it).
    call_start: i64,
    /// Spark's rule per key: per key slot the watermark its windows were closed at by
    /// the call that set it, and that call's number (valid in the call after it only:
    /// the key's windows are closed at its own watermark otherwise).
    key_mark: Vec<(i64, u64)>,
    /// Calls completed (numbers the marks above).
    calls: u64,
    /// Keys with windows that the last call's watermark passed: they close in the next
    /// call (at the key's watermark, unless the key has rows in it).
    pub(super) deferred: Vec<u32>,
    /// This call's keys (per key, Spark's rule): slot and watermark at the start.
    pub(super) key_starts: Vec<(u32, i64)>,
}

impl Default for Marks {
    fn default() -> Self {
        Self {
            external: External::default(),
            own_close: i64::MIN,
            late_mark: i64::MIN,
            call_start: i64::MIN,
            key_mark: Vec::new(),
            calls: 0,
            deferred: Vec::new(),
            key_starts: Vec::new(),
        }
    }
}

impl Marks {
    /// The watermark a call begins with: the scope's own (`own`; per key: the global
    /// watermark over keys, which closes idle keys' windows), or the combined one
    /// given from outside (global scope: the higher of the two).
    pub(super) fn start(&self, scope: &Scope, own: i64) -> i64 {
        match self.external.watermark.given() {
            Some(e) if *scope == Scope::Global => e.max(own),
            Some(e) => e,
            None => own,
        }
    }

    /// The watermark a call's rows are judged against, the call having begun at
    /// `start`: Spark's rule judges by the previous call's (whose windows are the
    /// closed ones); the others by `start`.
    pub(super) fn judged(&self, rule: LateRule, start: i64) -> i64 {
        if rule == LateRule::Spark {
            self.late_mark
        } else {
            start
        }
    }

    /// A call's rows are in: it began at `start`, and the scope's own rule now closes
    /// at `own_close`.
    pub(super) fn ingested(&mut self, start: i64, own_close: i64) {
        self.own_close = own_close;
        self.call_start = start;
        self.late_mark = start;
    }

    /// A call completed.
    pub(super) fn completed(&mut self) {
        self.calls += 1;
    }

    /// The watermark that closes windows now (per key: idle keys' windows; the
    /// current global watermark, the minimum over active keys, is at or below every
    /// active key's own, so it closes nothing early):
    ///
    /// * Spark's rule: the watermark the call began with;
    /// * `combined`: the watermark a coordinator combined over several operators
    ///   (`Operator::complete`'s argument);
    /// * else, with an external watermark (this operator holds part of the scope and
    ///   no combined close is known), the highest value known not to exceed the
    ///   combined one: its own or the external one (global scope), the external one
    ///   (partition and key scope: this operator's view of the partitions or keys it
    ///   saw would run ahead of the combined minimum);
    /// * else its own.
    pub(super) fn close(&self, rule: LateRule, scope: &Scope, combined: Option<i64>) -> i64 {
        if rule == LateRule::Spark {
            return self.call_start;
        }
        match (combined, self.external.watermark.given()) {
            (Some(c), _) => c,
            (None, Some(e)) if *scope == Scope::Global => e.max(self.own_close),
            (None, Some(e)) => e,
            (None, None) => self.own_close,
        }
    }

    /// The scope's event time as a call begins: `own`, or the one given from outside
    /// if higher; where the watermark is given too (this operator holds part of the
    /// scope), the one given alone: what this operator's keys agree on may run ahead
    /// of what the scope's keys do.
    pub(super) fn scope_time(&self, own: i64) -> i64 {
        let given = self.external.time.unwrap_or(i64::MIN);
        match self.external.watermark {
            Start::Own => own.max(given),
            Start::Scope(_) => given,
        }
    }

    /// The scope's newest event time as a call begins: `own`, or the one given from
    /// outside if higher.
    pub(super) fn newest(&self, own: i64) -> i64 {
        own.max(self.external.newest.unwrap_or(i64::MIN))
    }

    /// Spark's rule per key: the watermark the key's windows were closed at (the one
    /// its previous call began with, if its watermark moved then; else `wm`).
    pub(super) fn key_closed(&self, slot: u32, wm: i64) -> i64 {
        match self.key_mark.get(slot as usize) {
            Some(&(m, call)) if call == self.calls => m,
            _ => wm,
        }
    }

    /// Whether the key's closing mark holds in the call now running.
    pub(super) fn key_live(&self, slot: u32) -> bool {
        self.key_mark
            .get(slot as usize)
            .is_some_and(|m| m.1 == self.calls)
    }

    /// The key in `slot` closed its windows at `wk` in the call now running (valid in
    /// the next call).
    pub(super) fn set_key(&mut self, slot: u32, wk: i64) {
        let s = slot as usize;
        if self.key_mark.len() <= s {
            self.key_mark.resize(s + 1, (NOT_PENDING, NO_CALL));
        }
        self.key_mark[s] = (wk, self.calls + 1);
    }

    /// An idle key's window closed at `at` in the call now running: the key's mark, if
    /// set in this call, is at least `at`.
    pub(super) fn raise_key(&mut self, slot: u32, at: i64) {
        let call = self.calls + 1;
        if let Some(m) = self.key_mark.get_mut(slot as usize) {
            if m.1 == call {
                m.0 = m.0.max(at);
            }
        }
    }

    /// The key in `slot` was dropped: its mark no longer holds.
    pub(super) fn drop_key(&mut self, slot: u32) {
        if let Some(m) = self.key_mark.get_mut(slot as usize) {
            m.1 = NO_CALL;
        }
    }

    /// Room for the marks of `slots` key slots.
    pub(super) fn reserve_keys(&mut self, slots: usize) {
        if self.key_mark.len() < slots {
            self.key_mark.resize(slots, (NOT_PENDING, NO_CALL));
        }
    }

    /// A restored key's mark `m` (from a snapshot), valid in the next call.
    pub(super) fn restore_key(&mut self, slot: u32, m: i64) {
        self.reserve_keys(slot as usize + 1);
        self.key_mark[slot as usize] = (m, self.calls);
    }

    /// End of input: no key mark or deferred close holds.
    pub(super) fn clear_keys(&mut self) {
        self.deferred.clear();
        self.key_mark.clear();
    }

    /// Spark's late mark (kept in snapshots).
    pub(super) fn late_mark(&self) -> i64 {
        self.late_mark
    }

    /// Restores Spark's late mark from a snapshot.
    pub(super) fn restore_late_mark(&mut self, m: i64) {
        self.late_mark = m;
    }
}
