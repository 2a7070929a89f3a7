//! The rule by which a server decides that a PU drifted: a decision from measurements, kept
//! apart from the timings so it is tested on numbers ([`DriftWatch`]'s tests), not on a machine
//! whose load could flip it.
//!
//! Each inference gives, per PU it used, the ratio of its measured to its predicted time there.
//! Inferences are taken in windows; a window's ratio is its median (one inference stalled by the
//! machine is no drift). The session's first window is its warm-up and is dropped; the second
//! calibrates each PU (the prediction's own bias). A PU drifts when its window ratio is over
//! `threshold` times its calibrated one for `sustain` windows in a row; its factor is the median
//! of those windows' factors, and of several drifting PUs the one with the largest factor is
//! named.

/// Windows of per-PU time ratios, calibrated per session, and their strikes.
#[derive(Clone, Debug)]
pub struct DriftWatch {
    window: usize,
    threshold: f64,
    sustain: usize,
    /// Inferences observed in this session.
    in_session: usize,
    /// Per PU: each inference's ratio this window.
    samples: Vec<Vec<f64>>,
    /// Per PU: its median ratio in the session's second window.
    calibrated: Vec<Option<f64>>,
    /// Per PU: windows in a row over the threshold, and their factors.
    strikes: Vec<usize>,
    factors: Vec<Vec<f64>>,
}

impl DriftWatch {
    /// A watch over `pus` PUs: windows of `window` inferences, a drift past `threshold` times
    /// the calibrated ratio, held for `sustain` windows.
    pub fn new(pus: usize, window: usize, threshold: f64, sustain: usize) -> Self {
        Self {
            window: window.max(1),
            threshold,
            sustain: sustain.max(1),
            in_session: 0,
            samples: vec![vec![]; pus],
            calibrated: vec![None; pus],
            strikes: vec![0; pus],
            factors: vec![vec![]; pus],
        }
    }

    /// One inference: per PU its measured over predicted time, None where it ran nothing or
    /// the inference is no evidence (it ran beside the server's own measuring); it still counts
    /// in the window. At a window's end, the PU that drifted and its factor, if `may_report`
    /// (a re-plan already under way: strikes are still counted, nothing is reported).
    pub fn observe(&mut self, ratios: &[Option<f64>], may_report: bool) -> Option<(usize, f64)> {
        self.in_session += 1;
        for (pu, r) in ratios.iter().enumerate().take(self.samples.len()) {
            if let Some(r) = r {
                self.samples[pu].push(*r);
            }
        }
        if !self.in_session.is_multiple_of(self.window) {
            return None;
        }
        let warm_up = self.in_session == self.window;
        let n = self.samples.len();
        let mut drifting: Option<(usize, f64)> = None;
        for (pu, mut w) in std::mem::replace(&mut self.samples, vec![vec![]; n]).into_iter().enumerate() {
            if w.is_empty() || warm_up {
                continue;
            }
            let ratio = bident_stats::quantile(&mut w, 0.5);
            let Some(base) = self.calibrated[pu] else {
                // a window timed at 0 µs (or not at all) calibrates nothing: every later one
                // would drift infinitely, and the re-plan would price the PU infinitely slow
                if ratio.is_finite() && ratio > 0.0 {
                    self.calibrated[pu] = Some(ratio);
                }
                continue;
            };
            let drift = ratio / base;
            if drift > self.threshold {
                self.strikes[pu] += 1;
                self.factors[pu].push(drift);
            } else {
                self.strikes[pu] = 0;
                self.factors[pu].clear();
            }
            if self.strikes[pu] >= self.sustain && may_report {
                let f = bident_stats::quantile(&mut self.factors[pu].clone(), 0.5);
                if drifting.is_none_or(|(_, g)| f > g) {
                    drifting = Some((pu, f));
                }
            }
        }
        drifting
    }

    /// The plan was kept through a drift of `pu` by `factor`: that is its new normal (its
    /// calibration scaled), and every PU's strikes start again. Calibrating afresh instead would
    /// take whatever the next windows measure as normal, even a slowdown begun meanwhile.
    pub fn rebase(&mut self, pu: usize, factor: f64) {
        if let Some(c) = self.calibrated.get_mut(pu).and_then(Option::as_mut) {
            *c *= factor;
        }
        self.strikes.iter_mut().for_each(|s| *s = 0);
        self.factors.iter_mut().for_each(Vec::clear);
    }

    /// A new session: warm-up and calibration again.
    pub fn recalibrate(&mut self) {
        self.in_session = 0;
        self.calibrated.iter_mut().for_each(|c| *c = None);
        self.strikes.iter_mut().for_each(|s| *s = 0);
        self.factors.iter_mut().for_each(Vec::clear);
        self.samples.iter_mut().for_each(Vec::clear);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feed `windows` (one ratio per PU per window, every inference of a window alike) and
    /// return what each window's end reported.
    fn run(w: &mut DriftWatch, windows: &[&[f64]]) -> Vec<Option<(usize, f64)>> {
        windows
            .iter()
            .map(|ratios| {
                let one: Vec<Option<f64>> = ratios.iter().map(|&r| (r >= 0.0).then_some(r)).collect();
                (0..5).map(|_| w.observe(&one, true)).last().flatten()
            })
            .collect()
    }

    fn watch() -> DriftWatch {
        DriftWatch::new(2, 5, 1.3, 2)
    }

    #[test]
    fn a_sustained_slowdown_is_reported_after_calibration() {
        let mut w = watch();
        // warm-up (30x: the first inferences after a load), calibration at 2x the prediction,
        // then PU 0 at 20x its calibration for two windows
        let said = run(&mut w, &[&[30.0, 30.0], &[2.0, 1.0], &[2.0, 1.0], &[40.0, 1.0], &[40.0, 1.0]]);
        assert_eq!(said, [None, None, None, None, Some((0, 20.0))]);
    }

    #[test]
    fn one_window_over_the_threshold_or_a_small_drift_is_not_a_drift() {
        let mut w = watch();
        let said = run(&mut w, &[&[1.0, 1.0], &[1.0, 1.0], &[5.0, 1.2], &[1.0, 1.25], &[1.0, 1.29], &[1.0, 1.2]]);
        assert!(said.iter().all(Option::is_none), "{said:?}");
    }

    #[test]
    fn one_stalled_inference_in_a_window_is_no_drift() {
        let mut w = watch();
        run(&mut w, &[&[1.0, 1.0], &[1.0, 1.0]]);
        for _ in 0..3 {
            // each window: four inferences as calibrated, one stalled 100x
            for k in 0..5 {
                let r = if k == 2 { 100.0 } else { 1.0 };
                assert_eq!(w.observe(&[Some(r), Some(1.0)], true), None);
            }
        }
    }

    #[test]
    fn of_two_drifting_pus_the_slower_is_named() {
        let mut w = watch();
        let said = run(&mut w, &[&[1.0, 1.0], &[1.0, 1.0], &[3.0, 8.0], &[3.0, 8.0]]);
        assert_eq!(said.last(), Some(&Some((1, 8.0))));
    }

    #[test]
    fn a_window_timed_at_zero_calibrates_nothing() {
        let mut w = watch();
        let said = run(&mut w, &[&[1.0, 1.0], &[0.0, 1.0], &[3.0, 1.0], &[3.0, 1.0], &[3.0, 1.0]]);
        // PU 0 calibrated at its first non-zero window (3.0), so 3.0 is no drift
        assert!(said.iter().all(Option::is_none), "{said:?}");
    }

    #[test]
    fn a_pending_replan_hears_of_no_drift_and_a_rebase_makes_it_the_norm() {
        let mut w = watch();
        run(&mut w, &[&[1.0, 1.0], &[1.0, 1.0]]);
        for _ in 0..10 {
            assert_eq!(w.observe(&[Some(20.0), Some(1.0)], false), None);
        }
        w.rebase(0, 20.0);
        let said = run(&mut w, &[&[20.0, 1.0], &[20.0, 1.0], &[20.0, 1.0]]);
        assert!(said.iter().all(Option::is_none), "{said:?}");
        // a new session: warm-up, then calibration at whatever it measures
        w.recalibrate();
        let said = run(&mut w, &[&[9.0, 9.0], &[20.0, 1.0], &[20.0, 1.0], &[20.0, 1.0]]);
        assert!(said.iter().all(Option::is_none), "{said:?}");
    }

    #[test]
    fn a_pu_without_evidence_is_not_judged() {
        let mut w = watch();
        let said = run(&mut w, &[&[1.0, -1.0], &[1.0, -1.0], &[1.0, -1.0], &[1.0, -1.0]]);
        assert!(said.iter().all(Option::is_none), "{said:?}");
    }
}
