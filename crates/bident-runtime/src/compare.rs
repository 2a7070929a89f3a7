//! How a plan compares with the alternatives measured beside it, block by block: a lead beyond
//! the noise between blocks, whether the blocks decide yet, regret, and spreads over blocks.

#[cfg(doc)]
use crate::{RunReport, WholeRun};

/// Whether a baseline measured faster than the plan by more than `margin` beyond the noise
/// between blocks, from its [`WholeRun::block_ratios`]: from five blocks, Wilcoxon's signed-rank
/// test of the log ratios against `ln(1 - margin)` (one-sided, p at most 0.035: at six blocks one
/// block may go the other way if it is the closest); below five, every block faster by the
/// margin. By medians alone the fastest of several baselines each as fast as the plan beats it
/// by chance (the winner's curse); ranks keep one odd block from hiding a lead, or making one.
/// Equal distances are ranked in block order; beyond 1,000 blocks the first 1,000 count.
pub fn consistently_faster(block_ratios: &[f64], margin: f64) -> bool {
    /// Largest one-sided p-value that counts.
    const ALPHA: f64 = 0.035;
    /// 2^n stays a finite f64 up to n = 1,023.
    const MOST_BLOCKS: usize = 1000;
    let block_ratios = &block_ratios[..block_ratios.len().min(MOST_BLOCKS)];
    let n = block_ratios.len();
    if n == 0 || block_ratios.iter().any(|r| !(r.is_finite() && *r > 0.0)) {
        return false;
    }
    let limit = (1.0 - margin).ln();
    // d > 0 where the baseline was not faster by the margin
    let d: Vec<f64> = block_ratios.iter().map(|r| r.ln() - limit).collect();
    if n < 5 {
        return d.iter().all(|&x| x < 0.0);
    }
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| d[a].abs().total_cmp(&d[b].abs()));
    // the rank sum of the blocks that went the plan's way
    let against: usize = order.iter().enumerate().filter(|&(_, &i)| d[i] >= 0.0).map(|(rank, _)| rank + 1).sum();
    // under no difference every sign is a coin: how many of the 2^n sign patterns have a rank
    // sum against of at most this one
    let most = n * (n + 1) / 2;
    let mut ways = vec![0f64; most + 1];
    ways[0] = 1.0;
    for rank in 1..=n {
        for sum in (rank..=most).rev() {
            ways[sum] += ways[sum - rank];
        }
    }
    let p = ways[..=against].iter().sum::<f64>() / 2f64.powi(n as i32);
    p <= ALPHA
}

/// Whether the blocks do not yet tell an alternative's median from the plan's: the confidence
/// interval of the median of `block_ratios` ([`bident_stats::median_ci`], 95%) holds 1 and is
/// wider than [`DECIDED_WITHIN`] either side. Fewer than five blocks never decide.
pub(crate) fn undecided(block_ratios: &[f64]) -> bool {
    if block_ratios.iter().any(|x| !(x.is_finite() && *x > 0.0)) {
        return false;
    }
    let mut s = block_ratios.to_vec();
    s.sort_by(f64::total_cmp);
    match bident_stats::median_ci(&s) {
        Some((lo, hi)) if s.len() >= 5 => {
            lo <= 1.0 && hi >= 1.0 && hi / lo > (1.0 + DECIDED_WITHIN) / (1.0 - DECIDED_WITHIN)
        }
        _ => true,
    }
}

/// Each of `theirs` over the plan's block median beside it.
pub(crate) fn over(theirs: &[f64], plan: &[f64]) -> Vec<f64> {
    theirs.iter().zip(plan).map(|(t, p)| t / p).collect()
}

/// How close to the plan's the median of an alternative's block ratios must be known to be
/// decided ([`undecided`]).
const DECIDED_WITHIN: f64 = 0.05;

/// A plan's regret against the alternatives measured beside it ([`RunReport::regret`],
/// [`RunReport::regret_beyond_noise`]).
#[derive(Debug)]
pub(crate) struct Regret {
    pub regret: f64,
    pub fastest: String,
    pub beyond_noise: f64,
    pub clearly_faster: Option<String>,
}

impl Regret {
    /// `candidates`: each alternative in words, its median (µs) and its blocks' medians over
    /// the plan's; `measured_us`: the plan's median.
    pub(crate) fn of(measured_us: f64, candidates: &[(String, f64, &[f64])]) -> Self {
        let fastest_of = |c: &mut dyn Iterator<Item = &(String, f64, &[f64])>| {
            c.min_by(|a, b| a.1.total_cmp(&b.1)).map(|(what, us, _)| (what.clone(), (measured_us / us - 1.0).max(0.0)))
        };
        let (fastest, regret) = fastest_of(&mut candidates.iter())
            .unwrap_or_else(|| ("nothing else: every candidate is the plan".into(), 0.0));
        let clearly = fastest_of(&mut candidates.iter().filter(|c| consistently_faster(c.2, 0.0)));
        Regret {
            regret,
            fastest,
            beyond_noise: clearly.as_ref().map_or(0.0, |c| c.1),
            clearly_faster: clearly.map(|c| c.0),
        }
    }
}

/// In how many of `block_ratios` the baseline was faster than the plan.
pub fn faster_blocks(block_ratios: &[f64]) -> usize {
    block_ratios.iter().filter(|&&r| r < 1.0).count()
}

/// Fewest fast blocks of the plan that [`RunReport::prediction_error_fast`] is given for.
pub const FAST_BLOCKS_MIN: u32 = 3;

/// p10, median and p90 of per-block figures.
pub(crate) fn spread(mut v: Vec<f64>) -> [f64; 3] {
    let q = bident_stats::quantile;
    [q(&mut v, 0.1), q(&mut v, 0.5), q(&mut v, 0.9)]
}

/// [`spread`] of the blocks flagged fast (`fast[k]` for `per_block[k]`), and how many those
/// were; None where fewer than [`FAST_BLOCKS_MIN`].
pub(crate) fn fast_spread(per_block: &[f64], fast: &[bool]) -> Option<([f64; 3], u32)> {
    let kept: Vec<f64> = per_block.iter().zip(fast).filter(|&(_, &f)| f).map(|(&e, _)| e).collect();
    let n = kept.len() as u32;
    (n >= FAST_BLOCKS_MIN).then(|| (spread(kept), n))
}

#[cfg(test)]
mod tests {
    use super::{Regret, consistently_faster, fast_spread, undecided};

    /// The prediction error over the fast blocks takes only those, and only where there are
    /// enough of them.
    #[test]
    fn the_fast_blocks_spread_takes_only_fast_blocks() {
        let errors = [0.5, 0.01, 0.9, 0.02, 0.03, 0.7];
        let fast = [false, true, false, true, true, false];
        let (spread, n) = fast_spread(&errors, &fast).expect("three fast blocks");
        assert_eq!(n, 3);
        assert!(spread.iter().all(|&e| (0.01..=0.03).contains(&e)), "{spread:?}");
        assert_eq!(spread[1], 0.02);
        // two fast blocks are too few, none even more so
        assert_eq!(fast_spread(&errors, &[false, true, false, true, false, false]), None);
        assert_eq!(fast_spread(&[], &[]), None);
    }

    /// A lead counts where it stands clear of the spread between blocks, never from no blocks.
    #[test]
    fn a_lead_counts_beyond_the_noise_between_blocks() {
        let cases: &[(&[f64], bool)] = &[
            (&[], false),
            (&[0.5], true),
            (&[0.99], false),
            (&[0.5, 1.1], false),
            (&[0.9, 0.9, 0.9, 0.9], true),
            // faster in every block, but by less than the margin
            (&[0.99, 0.985, 0.99, 0.995, 0.99], false),
            (&[0.9, 0.8, 0.85, 0.9, 0.95], true),
            // 5 of 6 faster by a third, the other block the closest call: a lead
            (&[0.6, 0.65, 0.7, 0.6, 0.62, 0.99], true),
            // 5 of 6, but the other block the furthest off: not
            (&[0.9, 0.92, 0.95, 0.9, 0.93, 1.3], false),
            // as fast as the plan, give or take 13%
            (&[0.87, 1.1, 0.9, 1.05, 0.95, 1.13], false),
            // 9 of 10
            (&[0.8, 0.85, 0.9, 0.8, 0.82, 0.84, 0.9, 0.86, 0.88, 1.05], true),
            (&[0.9, f64::NAN, 0.9], false),
        ];
        for (ratios, want) in cases {
            assert_eq!(consistently_faster(ratios, 0.02), *want, "{ratios:?}");
        }
    }

    /// Turns go on while an alternative's median could still be either side of the plan's by
    /// more than 5%; they stop where it is clearly one side, or known to be within 5%.
    #[test]
    fn blocks_decide_once_the_median_is_known() {
        let three_of_four = |times: usize| [0.9, 0.9, 0.9, 1.1].repeat(times);
        let cases: &[(&[f64], bool)] = &[
            (&[], true),
            // four blocks never decide
            (&[0.5, 0.5, 0.5, 0.5], true),
            (&[0.8, 0.82, 0.8, 0.81, 0.8], false),
            (&[1.2, 1.3, 1.25, 1.2, 1.3, 1.2], false),
            // as fast as the plan, give or take 3%
            (&[0.98, 1.01, 0.99, 1.02, 1.0, 0.97], false),
            // give or take 20%
            (&[0.7, 1.2, 0.8, 1.1, 0.75, 1.15], true),
            // three blocks in four faster: not known from eight blocks, known from forty
            (&three_of_four(2), true),
            (&three_of_four(10), false),
            (&[0.9, f64::NAN, 0.9, 0.9, 0.9], false),
        ];
        for (ratios, want) in cases {
            assert_eq!(undecided(ratios), *want, "{ratios:?}");
        }
    }

    /// Regret by medians counts the fastest alternative; beyond the noise, only the fastest of
    /// those whose blocks agree it was faster.
    #[test]
    fn regret_beyond_the_noise_counts_only_clear_leads() {
        let noisy: &[f64] = &[0.7, 1.2, 0.8, 1.1, 0.75, 1.15];
        let clear: &[f64] = &[0.9, 0.92, 0.91, 0.93, 0.9, 0.92];
        let slower: &[f64] = &[1.2, 1.3, 1.25, 1.2, 1.3, 1.2];
        let c = |what: &str, us: f64, r: &'static [f64]| (what.to_string(), us, r);
        let clear_regret = 100.0 / 90.9 - 1.0;
        // (candidates, regret, fastest, beyond the noise, clearly faster), the plan at 100 µs
        type Case<'a> = (Vec<(String, f64, &'a [f64])>, f64, &'a str, f64, Option<&'a str>);
        let cases: Vec<Case> = vec![
            (vec![], 0.0, "nothing else: every candidate is the plan", 0.0, None),
            (vec![c("slower", 125.0, slower)], 0.0, "slower", 0.0, None),
            // the fastest median by chance: regret, none beyond the noise
            (vec![c("noisy", 80.0, noisy), c("slower", 125.0, slower)], 0.25, "noisy", 0.0, None),
            // a clear lead behind a noisy one: counted against the clear one
            (vec![c("noisy", 80.0, noisy), c("clear", 90.9, clear)], 0.25, "noisy", clear_regret, Some("clear")),
            (vec![c("clear", 90.9, clear)], clear_regret, "clear", clear_regret, Some("clear")),
        ];
        for (candidates, regret, fastest, beyond, clearly) in cases {
            let r = Regret::of(100.0, &candidates);
            assert!((r.regret - regret).abs() < 1e-12, "{candidates:?}: regret {}", r.regret);
            assert_eq!(r.fastest, fastest);
            assert!((r.beyond_noise - beyond).abs() < 1e-12, "{candidates:?}: beyond {}", r.beyond_noise);
            assert_eq!(r.clearly_faster.as_deref(), clearly);
        }
    }
}
