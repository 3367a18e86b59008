use std::collections::HashMap;

use super::*;

/// Regression: a port clash made by the flags was reported as a mistake of the file.
#[test]
fn a_port_clash_from_the_flags_names_the_flags() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.yaml");
    std::fs::write(&path, "standalone: {endpoints: []}\n").unwrap();
    let env = HashMap::new();
    let flags = Overrides {
        port: Some(22080),
        metrics_port: Some(22080),
        ..Overrides::default()
    };
    let e = load_config(&path, &env, flags).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "invalid config {}: with the flags --port 22080, --metrics-port 22080: port and \
                 metricsPort are both 22080: each listener needs a port of its own",
            path.display()
        )
    );
    // A clash in the file itself is still the file's.
    std::fs::write(
        &path,
        "port: 9000\nmetricsPort: 9000\nstandalone: {endpoints: []}\n",
    )
    .unwrap();
    let e = load_config(&path, &env, Overrides::default()).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "invalid config {}: port and metricsPort are both 9000: each listener needs a \
                 port of its own",
            path.display()
        )
    );
}
