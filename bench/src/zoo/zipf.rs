//! `zipf`: skewed prefix popularity ([`ZipfSpec::scenario`]).

use kthena_bench::scenario::{DirectShare, Scenario};
use kthena_bench::shapes::Shape;
use kthena_bench::shapes::zipf::ZipfSpec;

/// The `zipf` scenario: [`ZipfSpec::scenario`] requests with the `long` scenario's load
/// (Poisson at 800 per second, 300 in flight); no direct anchor (no split of a Zipf
/// workload gives one engine a fair third).
pub(crate) fn build(quick: bool, seed: u64) -> Vec<Scenario> {
    let spec = ZipfSpec::scenario(quick, seed);
    let mut sc = Scenario::long(quick, seed);
    sc.name = "zipf".to_owned();
    sc.workload.num_groups = spec.prompts;
    sc.workload.system_prompt_len = spec.system_prompt_len;
    sc.workload.question_len = spec.question_len;
    sc.workload.output_len = spec.output_len;
    sc.shape = Shape::Zipf(spec);
    sc.direct = DirectShare::None;
    vec![sc]
}
