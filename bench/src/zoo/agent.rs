//! `agent`: multi-turn agent sessions ([`AgentSpec::scenario`]).

use kthena_bench::scenario::{DirectShare, Scenario};
use kthena_bench::shapes::Shape;
use kthena_bench::shapes::agent::AgentSpec;

/// Sessions started per model second on average (Gamma arrivals of shape
/// [`START_BURSTINESS`]): the quick run's 96 sessions all start within about 25 s.
pub(crate) const START_RATE: f64 = 4.0;

/// Gamma shape of the session starts' gaps (coefficient of variation 1.4: bursty).
pub(crate) const START_BURSTINESS: f64 = 0.5;

/// The `agent` scenario: [`AgentSpec::scenario`] sessions, closed loop per session (no
/// client-wide concurrency cap), the direct anchor sent every third session.
pub(crate) fn build(quick: bool, seed: u64) -> Vec<Scenario> {
    let spec = AgentSpec::scenario(quick, seed);
    let mut sc = Scenario::long(quick, seed);
    sc.name = "agent".to_owned();
    sc.workload.num_groups = spec.agents;
    sc.workload.system_prompt_len = spec.system_prompt_len;
    sc.workload.output_len = spec.output_len;
    sc.workload.turns = spec.max_turns;
    sc.shape = Shape::Agent(spec);
    sc.request_rate = START_RATE;
    sc.arrival_shape = START_BURSTINESS;
    sc.max_concurrency = 100_000;
    sc.direct = DirectShare::Sessions;
    vec![sc]
}
