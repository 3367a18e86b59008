use super::*;

#[test]
fn numbers_print_as_go_prints_a_float64() {
    let cases = [
        (2048.0, "2048"),
        (0.35, "0.35"),
        (32768.0, "32768"),
        (999_999.0, "999999"),
        (1e6, "1e+06"),
        (1_048_576.0, "1.048576e+06"),
        (0.0001, "0.0001"),
        (0.000_025, "2.5e-05"),
        (0.0, "0"),
    ];
    for (f, want) in cases {
        assert_eq!(go_float(f), want, "{f}");
    }
}

#[test]
fn args_are_sorted_dashed_and_bare_for_empty_strings() -> Result<()> {
    let config =
        json!({"max_model_len": 2048, "enforce-eager": "", "dtype": "float16", "trust": true});
    assert_eq!(
        engine_args(Some(&config))?,
        [
            "--dtype",
            "float16",
            "--enforce-eager",
            "--max-model-len",
            "2048",
            "--trust",
            "true"
        ]
    );
    Ok(())
}

#[test]
fn cache_paths_and_model_dirs_follow_go() {
    assert_eq!(cache_path("hostpath://tmp/cache"), "/tmp/cache");
    assert_eq!(cache_path("hostpath://cache/"), "/cache");
    assert_eq!(cache_path("pvc://my-pvc"), "/my-pvc");
    assert_eq!(cache_path(""), "");
    // md5("s3://aios_models/deepseek-ai/DeepSeek-V3-W8A8/vllm-ascend"), Go's test data.
    assert_eq!(
        model_dir("s3://aios_models/deepseek-ai/DeepSeek-V3-W8A8/vllm-ascend"),
        "/13a7c4d58031cdc502ca1bb4a592f2b9"
    );
}
