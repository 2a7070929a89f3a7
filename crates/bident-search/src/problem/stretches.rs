//! Local prices where runs were measured whole: the stretches of the order a move can change,
//! walked once and priced for every choice of PUs.

use std::cell::Cell;

use super::{Problem, Schedule};
use crate::Objective;

impl Problem {
    /// [`Problem::local_objective`] where runs were measured whole ([`MeasuredRuns`]). There an
    /// op's cost reads its whole run, so moving `ops` can change the cost of every op of the runs
    /// around them: from each moved op back to the nearest run boundary no moved op touches (its
    /// ops and the op before it stay where they are and stay apart) and on to the next one, a
    /// stretch whose runs may split or merge but whose ends stay put ([`Stretches`]). The part of
    /// the objective made by those stretches' runs, the moved ops' producers and consumers (their
    /// transfers) and every parallel phase among them, and the launch cost: the change a move
    /// makes is the change a full evaluation finds, for the price of the stretches, not of the
    /// plan.
    ///
    /// [`MeasuredRuns`]: crate::MeasuredRuns
    pub(super) fn local_measured(&self, assign: &[usize], ops: &[usize], schedule: Schedule, obj: Objective) -> f64 {
        self.stretches(assign, ops, schedule).price(self, assign, obj)
    }

    /// The stretches a move of `ops` can change ([`Problem::local_measured`]), walked once for
    /// every choice of PUs for them.
    pub(super) fn stretches<'a>(&self, assign: &[usize], ops: &'a [usize], schedule: Schedule) -> Stretches<'a> {
        let m = &self.segment_cost;
        let order = m.order();
        let n = order.len();
        let seq = schedule == Schedule::Sequential;
        // a move of many ops (a long branch) looks them up in a mask
        let mask = (ops.len() > 16).then(|| {
            let mut mask = vec![false; n];
            ops.iter().for_each(|&c| mask[c] = true);
            mask
        });
        let moved = |x: usize| mask.as_ref().map_or_else(|| ops.contains(&x), |m| m[x]);
        // whether the op at position `k` of the order joins the one before it, and whether the
        // boundary before it is one every choice for `ops` leaves where it is
        let joins = |k: usize| {
            let x = order[k];
            assign[x] == assign[order[k - 1]] && (seq || self.joins_in_parallel[x])
        };
        let fixed = |k: usize| k == 0 || (!joins(k) && !moved(order[k]) && !moved(order[k - 1]));
        let mut pieces = Vec::new();
        let mut spans: Vec<(usize, usize)> = Vec::new();
        for &c in ops {
            let at = m.position(c);
            if spans.iter().any(|&(from, to)| (from..to).contains(&at)) {
                continue;
            }
            let mut start = at;
            while !fixed(start) {
                start -= 1;
            }
            let mut k = start;
            loop {
                let from = k;
                k += 1;
                if !moved(order[from]) {
                    // the ops that stay, as far as they run together
                    while k < n && !moved(order[k]) && joins(k) {
                        k += 1;
                    }
                }
                pieces.push(Some((from, k)));
                if k == n || fixed(k) {
                    break;
                }
            }
            pieces.push(None);
            spans.push((start, k));
        }
        // the PUs the ops that stay use, for the launch cost (where one was measured)
        let mut used = vec![];
        if self.launch.iter().any(|&l| l != 0.0) {
            used = vec![0usize; self.pus()];
            match &mask {
                Some(m) => (0..n).filter(|&c| !m[c]).for_each(|c| used[assign[c]] += 1),
                None => {
                    assign.iter().for_each(|&j| used[j] += 1);
                    // each moved op once
                    let first = |i: usize| !ops[..i].contains(&ops[i]);
                    (0..ops.len()).filter(|&i| first(i)).for_each(|i| used[assign[ops[i]]] -= 1);
                }
            }
        }
        Stretches { ops, schedule, pieces, used }
    }

    /// Prices the runs of `ops` (neighbours in the order, the first starting a run: the whole
    /// order, or a branch of a parallel phase under a parallel schedule) into `eff`, each op at
    /// its cost in its run ([`Problem::effective`]); false if an op sits where it cannot run.
    pub(super) fn price_runs(&self, assign: &[usize], schedule: Schedule, ops: &[usize], eff: &mut [f64]) -> bool {
        let mut k = 0;
        while k < ops.len() {
            let mut end = k + 1;
            while end < ops.len() && self.joins(assign, ops[end], schedule) {
                end += 1;
            }
            let (run, pu) = (&ops[k..end], assign[ops[k]]);
            for &c in run {
                let Some(w) = self.w[c][pu] else { return false };
                eff[c] = w - self.saved(assign, c, schedule);
            }
            self.segment_cost.price(run, pu, eff);
            k = end;
        }
        true
    }
}

/// The stretches of the order a move of `ops` can change where runs were measured whole
/// ([`Problem::local_measured`]): each as its pieces, a moved op or the longest runs of
/// neighbours that stay (no choice for `ops` splits or joins them inside), found once for every
/// choice of PUs for `ops`; and per PU how many of the ops that stay run there (for the launch
/// cost; empty where none was measured).
pub(crate) struct Stretches<'a> {
    ops: &'a [usize],
    schedule: Schedule,
    /// `(first position, end position)` of a piece; None ends a stretch.
    pieces: Vec<Option<(usize, usize)>>,
    used: Vec<usize>,
}

impl Stretches<'_> {
    /// What the stretches, the transfers of the moved ops and their producers and consumers, the
    /// parallel phases among them and the launch cost come to with `ops` where `assign` has them
    /// ([`Problem::local_measured`]).
    pub(crate) fn price(&self, p: &Problem, assign: &[usize], obj: Objective) -> f64 {
        let mut scratch = RUN_SCRATCH.with(|s| s.take());
        let total = self.price_with(p, assign, obj, &mut scratch);
        RUN_SCRATCH.with(|s| s.replace(scratch));
        total
    }

    fn price_with(&self, p: &Problem, assign: &[usize], obj: Objective, s: &mut RunScratch) -> f64 {
        let now = s.next_stamp(p.ops());
        let (m, ops, schedule) = (&p.segment_cost, self.ops, self.schedule);
        let order = m.order();
        let seq = schedule == Schedule::Sequential;
        let parallel = |x: usize| !seq && p.phases[p.place[x].0].len() > 1;
        let mut total = 0.0;
        s.phases.clear();
        // the runs the pieces make, each priced whole ([`MeasuredRuns::run_cost`]); a run of a
        // parallel phase stays within its branch, and the phase is priced whole below
        let mut run: Option<(usize, usize, usize)> = None;
        for piece in self.pieces.iter().chain([&None]) {
            if let (Some((from, to)), Some((first, end, pu))) = (piece, run) {
                let x = order[*from];
                if end == *from && assign[x] == pu && (seq || p.joins_in_parallel[x]) {
                    run = Some((first, *to, pu));
                    continue;
                }
            }
            if let Some((first, end, pu)) = run.take() {
                let x = order[first];
                if parallel(x) {
                    if !s.phases.contains(&p.place[x].0) {
                        s.phases.push(p.place[x].0);
                    }
                } else {
                    let Some((us, uj)) = m.run_cost(first, end - 1, pu) else { return f64::INFINITY };
                    total += match obj {
                        Objective::Latency => us,
                        Objective::Energy => uj,
                    };
                }
            }
            run = piece.map(|(from, to)| (from, to, assign[order[from]]));
        }
        // the transfers a move changes: the moved ops' and their producers' and consumers' (the
        // cost in its run of one outside the stretches is the same under every assignment of
        // `ops`, and left out)
        let parts = ops
            .iter()
            .flat_map(|&c| std::iter::once(c).chain(p.preds[c].iter().copied()).chain(p.succs[c].iter().copied()));
        for x in parts {
            if s.counted[x] == now {
                continue;
            }
            s.counted[x] = now;
            let j = assign[x];
            if p.w[x][j].is_none() {
                return f64::INFINITY;
            }
            if parallel(x) {
                let pi = p.place[x].0;
                if !s.phases.contains(&pi) {
                    s.phases.push(pi);
                }
                continue;
            }
            let (i, o) = p.transfers(assign, x);
            total += match obj {
                Objective::Latency => i + o,
                Objective::Energy => (i + o) * p.power[x][j],
            };
        }
        for &pi in &s.phases {
            // a parallel phase's runs stay within its branches
            if !p.phases[pi].iter().all(|b| p.price_runs(assign, schedule, b, &mut s.eff)) {
                return f64::INFINITY;
            }
            total += match p.run_phase(assign, pi, 0.0, schedule, Some(&s.eff), None) {
                Some((span, energy)) => match obj {
                    Objective::Latency => span,
                    Objective::Energy => energy,
                },
                None => return f64::INFINITY,
            };
        }
        if obj == Objective::Latency && !self.used.is_empty() {
            let on = |j: usize| self.used[j] > 0 || ops.iter().any(|&c| assign[c] == j);
            total +=
                (0..p.pus()).filter(|&j| on(j)).map(|j| p.launch.get(j).copied().unwrap_or(0.0)).fold(0.0, f64::max);
        }
        total
    }
}

/// Buffers of [`Stretches::price`], reused between calls: per op its cost in its run (in the
/// parallel phases priced) and the call that last counted its transfers (a stamp, so nothing
/// is cleared per call); the parallel phases met.
#[derive(Default)]
struct RunScratch {
    eff: Vec<f64>,
    counted: Vec<u32>,
    stamp: u32,
    phases: Vec<usize>,
}

impl RunScratch {
    /// A stamp no op carries yet, for a problem of `n` ops.
    fn next_stamp(&mut self, n: usize) -> u32 {
        if self.eff.len() != n || self.stamp == u32::MAX {
            (self.eff, self.counted, self.stamp) = (vec![0.0; n], vec![0; n], 0);
        }
        self.stamp += 1;
        self.stamp
    }
}

thread_local! {
    static RUN_SCRATCH: Cell<RunScratch> = Cell::new(RunScratch::default());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measured::{MeasuredRuns, OpCosts};
    use crate::problem::tests::{multi_phase, xorshift};

    /// Where runs were measured whole, a move's local price changes by what the full evaluation's
    /// does, whether its stretches are walked before and after it or once ([`Stretches`]): moves of one op, of blocks of 2-4 neighbours in the order and of a phase's ops, to
    /// PUs that can and cannot run them, on random multi-phase problems ([`multi_phase`]) with
    /// the whole order measured on the PU that runs every op, and every branch of 3 ops or more, up to twelve
    /// runs of 3-12 neighbours measured on random PUs, and launch costs; plans starting whole on that PU (one long run)
    /// or scattered; both schedules and objectives.
    #[test]
    fn measured_runs_are_priced_locally_as_the_evaluator_prices_them() {
        let mut r = xorshift();
        let pick = |r: &mut dyn FnMut() -> f64, n: usize| ((r() * n as f64) as usize).min(n - 1);
        let (mut checked, mut priced_from_runs) = (0, 0);
        for case in 0..300 {
            let mut p = multi_phase(&mut r, case, 12.0, 4.0);
            let (n, k) = (p.ops(), p.pus());
            let order: Vec<usize> = p.order().collect();
            let weight = |ops: &[usize], j: usize| ops.iter().map(|&c| p.w[c][j].unwrap_or(0.0)).sum::<f64>();
            let mut runs = std::collections::HashMap::from([((order[0], order[n - 1], 0), 0.4 * weight(&order, 0))]);
            for _ in 0..pick(&mut r, 13) {
                let (len, at, j) = (3 + pick(&mut r, 10), pick(&mut r, n), pick(&mut r, k));
                if at + len <= n {
                    runs.insert((order[at], order[at + len - 1], j), (0.2 + r()) * weight(&order[at..at + len], j));
                }
            }
            // every branch of three or more ops on that PU too (runs under a parallel schedule)
            for b in p.phases.iter().flatten().filter(|b| b.len() >= 3) {
                runs.insert((b[0], b[b.len() - 1], 0), (0.2 + r()) * weight(b, 0));
            }
            let costs = OpCosts { w: &p.w, saving: &p.saving, power: &p.power, next: &p.next };
            p.segment_cost = MeasuredRuns::new(runs, costs);
            p.launch = (0..k).map(|_| 5.0 * r()).collect();
            for schedule in [Schedule::Sequential, Schedule::Parallel] {
                for obj in [Objective::Latency, Objective::Energy] {
                    let scattered = r() < 0.5;
                    let mut assign: Vec<usize> =
                        (0..n).map(|c| if scattered && p.w[c][1].is_some() && r() < 0.2 { 1 } else { 0 }).collect();
                    for _ in 0..20 {
                        let ops: Vec<usize> = match pick(&mut r, 3) {
                            0 => vec![order[pick(&mut r, n)]],
                            1 => {
                                let at = pick(&mut r, n);
                                order[at..(at + 2 + pick(&mut r, 3)).min(n)].to_vec()
                            }
                            _ => p.phases[pick(&mut r, p.phases.len())].concat(),
                        };
                        let full = |a: &[usize]| p.full_objective(a, schedule, obj);
                        let (full_before, before) = (full(&assign), p.local_objective(&assign, &ops, schedule, obj));
                        // the stretches walked once, before the move, price it too
                        let kept = assign.clone();
                        let stretches = p.stretches(&kept, &ops, schedule);
                        let to = pick(&mut r, k);
                        ops.iter().for_each(|&c| assign[c] = if r() < 0.7 { to } else { pick(&mut r, k) });
                        let (full_after, after) = (full(&assign), p.local_objective(&assign, &ops, schedule, obj));
                        let walked_once = stretches.price(&p, &assign, obj) - stretches.price(&p, &kept, obj);
                        let moved = format!("case {case}, {schedule:?}, {obj:?}: {ops:?} from {kept:?} to {assign:?}");
                        assert_eq!(full_after.is_finite(), after.is_finite(), "{moved}");
                        assert_eq!(full_after.is_finite(), walked_once.is_finite(), "{moved}");
                        if !full_after.is_finite() {
                            assign = kept;
                            continue;
                        }
                        let (local, whole) = (after - before, full_after - full_before);
                        let close = |a: f64| (a - whole).abs() <= 1e-9 * full_before.max(1.0);
                        assert!(close(local) && close(walked_once), "{moved}: {local}, {walked_once} against {whole}");
                        checked += 1;
                        // whether some op of the plan is priced from a run measured whole
                        let eff = p.effective(&assign, schedule).expect("feasible");
                        let pairs = |c: usize| p.w[c][assign[c]].map(|w| w - p.saved(&assign, c, schedule));
                        priced_from_runs += (0..n).any(|c| pairs(c) != Some(eff[c])) as usize;
                        if r() < 0.7 {
                            assign = kept;
                        }
                    }
                }
            }
        }
        assert!(
            checked > 10_000 && priced_from_runs * 2 > checked,
            "{checked} moves, {priced_from_runs} priced from runs measured whole: the cases test too little"
        );
    }
}
