//! The statistics the profile, the runtime and the reports share: quantiles by nearest rank and
//! the distribution-free confidence interval of a median. No dependencies.

/// Quantile by nearest rank (sorts in place); 0 for an empty sample.
pub fn quantile(xs: &mut [f64], q: f64) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    xs.sort_by(f64::total_cmp);
    let k = ((xs.len() - 1) as f64 * q).round() as usize;
    xs[k]
}

/// The distribution-free 95% confidence interval of the median of `sorted` (order statistics
/// n/2 -+ 0.98 sqrt(n)); None below three samples.
pub fn median_ci(sorted: &[f64]) -> Option<(f64, f64)> {
    let n = sorted.len();
    if n < 3 {
        return None;
    }
    let half = 0.98 * (n as f64).sqrt();
    let lo = ((n as f64 / 2.0 - half).floor().max(0.0)) as usize;
    let hi = ((n as f64 / 2.0 + half).ceil() as usize).min(n - 1);
    Some((sorted[lo], sorted[hi]))
}

/// Half-width of [`median_ci`], relative to the median.
pub fn median_rel_ci(sorted: &[f64]) -> f64 {
    let Some((lo, hi)) = median_ci(sorted) else { return f64::INFINITY };
    let median = sorted[sorted.len() / 2];
    if median <= 0.0 {
        return if hi <= lo { 0.0 } else { f64::INFINITY };
    }
    (hi - lo) / 2.0 / median
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_by_nearest_rank() {
        let mut v = vec![5.0, 1.0, 3.0, 2.0, 4.0];
        assert_eq!((quantile(&mut v, 0.0), quantile(&mut v, 0.5), quantile(&mut v, 1.0)), (1.0, 3.0, 5.0));
        assert_eq!(quantile(&mut [], 0.5), 0.0);
    }

    #[test]
    fn the_medians_interval_widens_with_spread() {
        assert_eq!(median_ci(&[1.0, 2.0]), None);
        let tight: Vec<f64> = (0..100).map(|i| 100.0 + (i % 3) as f64).collect();
        let wide: Vec<f64> = (0..100).map(|i| 50.0 + i as f64).collect();
        assert!(median_rel_ci(&tight) < median_rel_ci(&wide));
        assert!(median_rel_ci(&tight) < 0.03);
    }
}
