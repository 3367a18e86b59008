use clap::Parser;

use super::*;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    config: Config,
}

#[test]
fn flag_defaults_equal_default_impl() {
    let cli = Cli::try_parse_from(["kthena-sim"]).unwrap();
    assert_eq!(cli.config, Config::default());
}

#[test]
fn validate_rejects_bad_values() {
    let c = Config::default().with_time_scale(0.0);
    assert!(matches!(c.validate(), Err(Error::Config { field, .. }) if field == "time_scale"));
    let c = Config::default().with_faults(Faults {
        error_rate: 1.5,
        ..Faults::default()
    });
    assert!(c.validate().is_err());
    let mut c = Config::default();
    c.profile.num_gpu_blocks = 100;
    assert!(matches!(c.validate(), Err(Error::Config { field, .. }) if field == "max_model_len"));
    assert!(Config::default().validate().is_ok());
}

#[test]
fn validate_rejects_empty_lora_module_names() {
    for modules in [
        vec![String::new()],
        vec!["a".to_owned(), "=/path".to_owned()],
    ] {
        let c = Config {
            lora_modules: modules,
            ..Config::default()
        };
        assert!(
            matches!(c.validate(), Err(Error::Config { field, .. }) if field == "lora_modules")
        );
    }
}
