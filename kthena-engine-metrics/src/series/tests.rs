use super::*;

#[test]
fn every_series_with_its_labels_quoting_included() {
    let text = "# HELP g a gauge\n# TYPE g gauge\n\
        g{model=\"a,b\",model_server=\"ns/x\"} 2\n\
        g{model_server=\"ns/y\", model=\"q\\\"}\\n\"} 0 1700000000\n\
        other{model_server=\"ns/x\"} 9\n\
        g 1.5\n";
    let s = series(text, "g").expect("metrics text");
    assert_eq!(s.len(), 3);
    assert_eq!(s[0].labels["model"], "a,b");
    assert_eq!(s[0].labels["model_server"], "ns/x");
    assert_eq!(s[0].value, 2.0);
    assert_eq!(s[1].labels["model"], "q\"}\n");
    assert_eq!(s[1].labels["model_server"], "ns/y");
    assert_eq!(s[1].value, 0.0);
    assert!(s[2].labels.is_empty());
    assert_eq!(s[2].value, 1.5);
}

#[test]
fn a_counter_matches_its_total_and_a_missing_family_is_empty() {
    let text = "# TYPE c counter\nc_total{outcome=\"released\"} 3\n# EOF\n";
    let s = series(text, "c").expect("metrics text");
    assert_eq!(s.len(), 1);
    assert_eq!(s[0].labels["outcome"], "released");
    assert_eq!(series(text, "absent"), Some(vec![]));
}

#[test]
fn text_that_is_not_metrics_is_refused() {
    assert_eq!(series("{\"json\": true}\n", "g"), None);
    assert_eq!(series("g{model=\"open 1\n", "g"), None);
    assert_eq!(series("g{model=unquoted} 1\n", "g"), None);
    assert_eq!(series("g{} nope\n", "g"), None);
}
