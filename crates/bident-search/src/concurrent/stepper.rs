//! What a step of a concurrent plan costs: one place, read by the search and the evaluator.

use super::CoCost;
use crate::{Chain, Objective};

/// Step costs (one place, used by the search and the evaluator).
pub(super) struct Stepper<'a> {
    pub(super) a: &'a Chain,
    pub(super) b: &'a Chain,
    pub(super) sf: &'a [Vec<f64>],
    pub(super) co: &'a dyn CoCost,
    pub(super) obj: Objective,
    /// Per stream, `(transfers, execution)` of op i on PU x after the stream's last op ran on
    /// `last` (k: the host), at `(i * (k + 1) + last) * k + x`; None where x cannot run op i.
    pub(super) parts: [Vec<Option<(f64, f64)>>; 2],
}

impl<'a> Stepper<'a> {
    pub(super) fn new(a: &'a Chain, b: &'a Chain, sf: &'a [Vec<f64>], co: &'a dyn CoCost, obj: Objective) -> Self {
        let table = |ch: &Chain| {
            let k = ch.pus();
            let mut v = Vec::with_capacity(ch.len() * (k + 1) * k);
            for i in 0..ch.len() {
                for last in 0..=k {
                    for x in 0..k {
                        v.push(ch.w(i, x).map(|w| {
                            // the previous op's D2H is charged with this one
                            let into = if last != x && ch.accelerator[x] { ch.h2d(i, x) } else { 0.0 };
                            let out = if i > 0 && last < k && last != x && ch.accelerator[last] {
                                ch.d2h(i - 1, last)
                            } else {
                                0.0
                            };
                            (into + out, w)
                        }));
                    }
                }
            }
            v
        };
        Stepper { a, b, sf, co, obj, parts: [table(a), table(b)] }
    }

    /// Op i of a stream on PU x after the stream's last op ran on `last`; `fresh`: nothing of
    /// the other stream ran on `last` since, so on the same PU the two are compiled together
    /// and the op costs its measured saving less.
    #[inline]
    pub(super) fn parts(&self, stream: usize, i: usize, x: usize, last: usize, fresh: bool) -> Option<(f64, f64)> {
        let k = self.a.pus();
        let ch = if stream == 0 { self.a } else { self.b };
        self.parts[stream][(i * (k + 1) + last) * k + x]
            .map(|(t, w)| (t, if fresh && last == x && i > 0 { w - ch.saving_at(i, x) } else { w }))
    }

    /// Op i of a stream on PU x after its last op ran on `last`, without any saving.
    #[inline]
    pub(super) fn raw(&self, stream: usize, i: usize, x: usize, last: usize) -> Option<(f64, f64)> {
        self.parts[stream][(i * (self.a.pus() + 1) + last) * self.a.pus() + x]
    }

    pub(super) fn exit(&self, ch: &Chain, n: usize, last: usize) -> f64 {
        if n == 0 || last >= ch.pus() || !ch.accelerator[last] {
            return 0.0;
        }
        let d = ch.d2h(n - 1, last);
        match self.obj {
            Objective::Latency => d,
            Objective::Energy => d * ch.power(n - 1, last),
        }
    }

    /// The objective of A's op i on x and B's op j on y at once, given their parts.
    #[inline(always)]
    pub(super) fn pair(
        &self,
        i: usize,
        j: usize,
        x: usize,
        y: usize,
        (ta, wa): (f64, f64),
        (tb, wb): (f64, f64),
    ) -> f64 {
        let latency = self.obj == Objective::Latency;
        if x == y {
            let (ca, cb) = self.co.same_pu(i, j, x, (wa, wb));
            self.on_one_pu(i, x, (ta + ca).max(tb + cb))
        } else if self.sf[x][y].is_infinite() {
            // PUs that share hardware: one op after the other
            let (da, db) = (ta + wa, tb + wb);
            if latency { da + db } else { da * self.a.power(i, x) + db * self.b.power(j, y) }
        } else {
            let (da, db) = (ta + wa * self.sf[x][y], tb + wb * self.sf[y][x]);
            if latency { da.max(db) } else { da * self.a.power(i, x) + db * self.b.power(j, y) }
        }
    }

    /// The objective of two ops sharing PU x for `span` µs (A's op i's power).
    #[inline]
    pub(super) fn on_one_pu(&self, i: usize, x: usize, span: f64) -> f64 {
        if self.obj == Objective::Latency { span } else { span * self.a.power(i, x) }
    }

    /// The objective of one stream's op `i` alone on `x`, taking `us`.
    #[inline]
    pub(super) fn solo(&self, stream: usize, i: usize, x: usize, us: f64) -> f64 {
        let ch = if stream == 0 { self.a } else { self.b };
        if self.obj == Objective::Latency { us } else { us * ch.power(i, x) }
    }
}
