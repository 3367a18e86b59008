use std::collections::HashMap;

use super::*;

fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[test]
fn reads_go_kthenas_variables_with_its_defaults() {
    assert_eq!(
        QueueConfig::from_env(&env(&[])).unwrap().mode,
        QueueMode::Off
    );
    let c = QueueConfig::from_env(&env(&[
        ("ENABLE_FAIRNESS_SCHEDULING", "true"),
        ("FAIRNESS_MAX_CONCURRENT", "4"),
        ("FAIRNESS_WINDOW_SIZE", "1h"),
        ("FAIRNESS_OUTPUT_TOKEN_WEIGHT", "3"),
    ]))
    .unwrap();
    let QueueMode::Fairness(f) = c.mode else {
        panic!("fairness expected");
    };
    assert_eq!(f.max_concurrent, 4);
    assert_eq!(f.window, Duration::from_secs(3600));
    assert!((f.output_token_weight - 3.0).abs() < f64::EPSILON);
    assert_eq!(f.timeout, Duration::from_secs(60));
    assert_eq!(f.max_qps, 100);
    let c = QueueConfig::from_env(&env(&[
        ("ENABLE_SESSION_BOOST", "true"),
        ("SESSION_BOOST_TIMEOUT", "0s"),
    ]))
    .unwrap();
    let QueueMode::SessionBoost(s) = c.mode else {
        panic!("session boost expected");
    };
    assert_eq!(s.header, "X-Session-ID");
    assert_eq!(s.inflight_per_pod, 16);
    assert_eq!(s.timeout, None);
}

#[test]
fn rejects_both_queues_and_values_out_of_range() {
    let e = |pairs: &[(&str, &str)]| QueueConfig::from_env(&env(pairs)).unwrap_err().to_string();
    assert_eq!(
        e(&[
            ("ENABLE_FAIRNESS_SCHEDULING", "true"),
            ("ENABLE_SESSION_BOOST", "1")
        ]),
        "invalid environment variable ENABLE_SESSION_BOOST=\"true\": fairness scheduling \
             and session boost are mutually exclusive: enable one"
    );
    assert_eq!(
        e(&[
            ("ENABLE_FAIRNESS_SCHEDULING", "true"),
            ("FAIRNESS_WINDOW_SIZE", "30s")
        ]),
        "invalid environment variable FAIRNESS_WINDOW_SIZE=\"30s\": must be between 1m and 1h"
    );
    assert_eq!(
        e(&[
            ("ENABLE_FAIRNESS_SCHEDULING", "true"),
            ("FAIRNESS_MAX_QPS", "0")
        ]),
        "invalid environment variable FAIRNESS_MAX_QPS=\"0\": must be greater than 0"
    );
    assert_eq!(
        e(&[
            ("ENABLE_FAIRNESS_SCHEDULING", "true"),
            ("FAIRNESS_PRIORITY_TOKEN_WEIGHT", "-1")
        ]),
        "invalid environment variable FAIRNESS_PRIORITY_TOKEN_WEIGHT=\"-1\": must be a \
             finite number ≥ 0"
    );
}
