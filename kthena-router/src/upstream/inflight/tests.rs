use std::collections::HashMap;

use crate::config::redis_url_from_env;

#[test]
fn go_kthenas_variables_name_the_redis_server() {
    let env = |pairs: &[(&str, &str)]| -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    };
    assert_eq!(redis_url_from_env(&env(&[])), None);
    assert_eq!(
        redis_url_from_env(&env(&[("REDIS_HOST", "redis-server")])).as_deref(),
        Some("redis://redis-server:6379/0")
    );
    assert_eq!(
        redis_url_from_env(&env(&[
            ("REDIS_HOST", "10.0.0.5"),
            ("REDIS_PORT", "6380"),
            ("REDIS_PASSWORD", "pw"),
        ]))
        .as_deref(),
        Some("redis://:pw@10.0.0.5:6380/0")
    );
}
