use super::*;

fn req(arrival: f64, seed: u32, prompt: usize, out: usize) -> OfflineRequest {
    OfflineRequest {
        arrival,
        prompt: (0..prompt as u32).map(|i| seed * 100_000 + i).collect(),
        max_tokens: out,
        lora: None,
    }
}

#[test]
fn single_request_latency_is_the_formula() {
    let p = Profile::default();
    let r = simulate(&p, 0, &[req(0.0, 1, 4096, 3)]).unwrap();
    // Prefill step, then two decode steps of one sequence.
    let prefill = (5.0 + 4096.0 * 0.03) / 1e3;
    let decode = (6.0 + 0.05) / 1e3;
    assert!((r.ttft[0] - prefill).abs() < 1e-12);
    assert!((r.makespan - (prefill + 2.0 * decode)).abs() < 1e-12);
    assert_eq!(r.output_tokens, 3);
    assert_eq!(r.steps, 3);
}

#[test]
fn chunked_prefill_splits_long_prompts() {
    let p = Profile::default();
    let r = simulate(&p, 0, &[req(0.0, 1, 10_000, 1)]).unwrap();
    let expected = (5.0 + 8192.0 * 0.03 + 5.0 + 1808.0 * 0.03) / 1e3;
    assert!((r.ttft[0] - expected).abs() < 1e-12);
    assert_eq!(r.steps, 2);
}

#[test]
fn deterministic_and_queueing_raises_ttft() {
    let p = Profile {
        max_num_seqs: 2,
        ..Profile::default()
    };
    let reqs: Vec<_> = (0..6).map(|i| req(0.0, i, 100, 20)).collect();
    let a = simulate(&p, 7, &reqs).unwrap();
    let b = simulate(&p, 7, &reqs).unwrap();
    assert_eq!(a, b);
    // Requests 4 and 5 wait for two full batches.
    assert!(a.ttft[5] > 2.0 * 19.0 * 0.006);
    assert!(a.ttft[0] < 0.02);
}

#[test]
fn kv_pressure_preempts_and_still_finishes() {
    let p = Profile {
        num_gpu_blocks: 20, // 320 tokens
        max_model_len: 320,
        ..Profile::default()
    };
    // Two 150-token prompts each growing by 100 tokens cannot both stay resident.
    let reqs = vec![req(0.0, 1, 150, 100), req(0.0, 2, 150, 100)];
    let r = simulate(&p, 0, &reqs).unwrap();
    assert_eq!(r.output_tokens, 200);
    assert!(r.preemptions >= 1);
    assert!(simulate(&p, 0, &[req(0.0, 1, 0, 1)]).is_err());
}

#[test]
fn lora_load_cost_and_slot_limit() {
    let p = Profile::default(); // max_loras = 1, lora_load_ms = 50
    let mut a = req(0.0, 1, 16, 1);
    a.lora = Some("a".to_owned());
    let mut b = req(0.0, 2, 16, 1);
    b.lora = Some("b".to_owned());
    let r = simulate(&p, 0, &[a.clone(), b]).unwrap();
    let step = (5.0 + 16.0 * 0.03 + 50.0) / 1e3;
    // Adapter b waits for a's slot, then pays its own load.
    assert!((r.ttft[0] - step).abs() < 1e-12);
    assert!((r.ttft[1] - 2.0 * step).abs() < 1e-12);
    // A resident adapter is not loaded again.
    let r = simulate(&p, 0, &[a.clone(), OfflineRequest { arrival: 1.0, ..a }]).unwrap();
    assert!((r.ttft[1] - (5.0 + 16.0 * 0.03) / 1e3).abs() < 1e-12);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

    /// Any workload on a small cache finishes with exactly the requested tokens: no
    /// request is lost or stuck, whatever the preemptions, prefix sharing and LoRA mix.
    #[test]
    fn every_request_finishes(
        reqs in proptest::collection::vec(
            (0u32..4, 1usize..120, 1usize..40, 0.0f64..0.5, proptest::option::of(0u8..3)),
            1..24,
        ),
        blocks in 40usize..80,
        max_seqs in 1usize..8,
        budget in 8usize..256,
    ) {
        let p = Profile {
            num_gpu_blocks: blocks,
            block_size: 4,
            max_model_len: 160,
            max_num_seqs: max_seqs,
            max_num_batched_tokens: budget,
            ..Profile::default()
        };
        let reqs: Vec<OfflineRequest> = reqs
            .into_iter()
            .map(|(group, prompt, out, arrival, lora)| OfflineRequest {
                arrival,
                // Requests of a group share a prefix.
                prompt: (0..prompt as u32).map(|i| group * 1000 + i).collect(),
                max_tokens: out,
                lora: lora.map(|l| format!("lora-{l}")),
            })
            .collect();
        let want: usize = reqs.iter().map(|r| r.max_tokens).sum();
        let r = simulate(&p, 3, &reqs).unwrap();
        proptest::prop_assert_eq!(r.output_tokens, want);
        proptest::prop_assert!(r.ttft.iter().all(|t| t.is_finite() && *t > 0.0));
    }
}

#[test]
fn l40s_profile_prefills_in_2048_token_chunks_at_its_own_speed() {
    let p = Profile::l40s();
    let r = simulate(&p, 0, &[req(0.0, 1, 4352, 3)]).unwrap();
    // 4352 tokens in chunks of the 2048-token budget: 2048, 2048, 256.
    let prefill = (3.0 * 17.6 + 4352.0 * 0.084) / 1e3;
    let decode = (22.8 + 0.15) / 1e3;
    assert!((r.ttft[0] - prefill).abs() < 1e-12);
    assert!((r.makespan - (prefill + 2.0 * decode)).abs() < 1e-12);
    assert_eq!(r.steps, 5);
    let fast = simulate(&Profile::default(), 0, &[req(0.0, 1, 4352, 3)]).unwrap();
    assert!((fast.ttft[0] - (5.0 + 4352.0 * 0.03) / 1e3).abs() < 1e-12);
}
