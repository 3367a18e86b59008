use super::*;

struct Words;
impl TokenCounter for Words {
    fn count(&self, text: &str) -> usize {
        text.split_whitespace().count()
    }
}

/// Counts 2 tokens per word: the sized text must halve.
struct Double;
impl TokenCounter for Double {
    fn count(&self, text: &str) -> usize {
        text.split_whitespace().count() * 2
    }
}

#[test]
fn sized_falls_back_to_largest_fitting_prefix() {
    let mut g = TextGen::new(1);
    let t = g.sized(10, true, &Double);
    assert_eq!(Double.count(&t), 10);
    let t = g.sized(7, false, &Double);
    assert_eq!(Double.count(&t), 6);
    assert!(t.starts_with(' '));
    assert_eq!(g.sized(5, true, &Words).split(' ').count(), 5);
}

#[test]
fn poisson_mean_gap_is_one_over_rate() {
    let a = poisson_arrivals(20_000, 50.0, 3);
    assert_eq!(a.len(), 20_000);
    assert!(a.windows(2).all(|w| w[0] <= w[1]));
    let mean = a[a.len() - 1] / a.len() as f64;
    assert!((mean - 0.02).abs() < 0.001, "{mean}");
    assert_eq!(poisson_arrivals(3, f64::INFINITY, 1), vec![0.0; 3]);
}
