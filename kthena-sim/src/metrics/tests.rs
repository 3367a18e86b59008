use super::*;

#[test]
fn one_two_five_buckets() {
    assert_eq!(
        buckets_1_2_5(2048),
        vec![
            1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0
        ]
    );
}

#[test]
fn vllm_names_and_labels() {
    let m = Metrics::new(&Config::default().with_model("m"));
    m.set_state(3, 2, 0.5, &["a".to_owned()], &[]);
    m.observe_ttft(0.02);
    m.observe_prefix(100, 32);
    let text = m.encode();
    assert!(
        text.contains("vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 3\n"),
        "{text}"
    );
    assert!(text.contains("vllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 2\n"));
    assert!(text.contains("vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.5\n"));
    assert!(text.contains("vllm:prefix_cache_hits_total{engine=\"0\",model_name=\"m\"} 32\n"));
    assert!(
        text.contains("vllm:time_to_first_token_seconds_count{engine=\"0\",model_name=\"m\"} 1\n")
    );
    assert!(text.contains("max_lora=\"1\",running_lora_adapters=\"a\",waiting_lora_adapters=\"\""));
    assert!(text.contains("num_gpu_blocks=\"62000\""));
}
