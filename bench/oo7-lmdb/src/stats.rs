//! Median and range of repeated measurements.

/// The median and range of some samples.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Summary {
    /// Samples.
    pub n: usize,
    /// The median (the mean of the middle two for an even count).
    pub median: f64,
    /// The smallest sample.
    pub min: f64,
    /// The largest sample.
    pub max: f64,
}

impl Summary {
    /// The summary of `xs`, or `None` if there are none (or one is not a number).
    pub fn of(xs: &[f64]) -> Option<Summary> {
        if xs.is_empty() || xs.iter().any(|x| x.is_nan()) {
            return None;
        }
        let mut v = xs.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
        Some(Summary { n, median, min: v[0], max: v[n - 1] })
    }

    /// "median (min-max)" with each value scaled by `scale` and `digits` decimals.
    pub fn show(&self, scale: f64, digits: usize) -> String {
        format!(
            "{:.d$} ({:.d$}-{:.d$})",
            self.median * scale,
            self.min * scale,
            self.max * scale,
            d = digits
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_range() {
        assert_eq!(Summary::of(&[]), None);
        assert_eq!(Summary::of(&[f64::NAN]), None);
        let s = Summary::of(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.n, s.median, s.min, s.max), (3, 2.0, 1.0, 3.0));
        assert_eq!(Summary::of(&[4.0, 1.0, 2.0, 3.0]).unwrap().median, 2.5);
        assert_eq!(s.show(1000.0, 1), "2000.0 (1000.0-3000.0)");
    }
}
