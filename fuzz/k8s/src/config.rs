//! Files a user writes: Kthena manifests and the router's config.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;

use kthena_api::{Object, load_str_each};
use kthena_router::routing::CompiledRoute;
use kthena_router::sched::build_scheduler;
use kthena_router::{Config, parse_go_duration};

/// Loads `data` as a multi-document manifest file the way the router and `kthena validate`
/// do: each document decoded by kind, defaulted, validated and written back as JSON; a
/// ModelRoute that validates is compiled into the router's route table (its regexes
/// included). The defaulted object must validate the same way when defaulted again.
pub fn manifests(data: &[u8]) {
    for doc in load_str_each("fuzz.yaml", &crate::text(data))
        .into_iter()
        .flatten()
    {
        let object = doc.object.with_defaults();
        let valid = object.validate().is_ok();
        let _ = object.to_json();
        let again = object.clone().with_defaults();
        assert_eq!(
            again.validate().is_ok(),
            valid,
            "defaulting twice changed validity"
        );
        if let (true, Object::ModelRoute(route)) = (valid, &object) {
            let _ = CompiledRoute::compile(route, (0, 0));
        }
    }
}

/// Loads `data` as `router.yaml`, applies an environment with every variable the router
/// reads set from the file's `env:` strings when present, and validates. Validation is
/// skipped for configs naming an endpoint by host name (it would resolve it over DNS); their
/// scheduler section is still built.
pub fn router_config(data: &[u8]) {
    let text = crate::text(data);
    let path = Path::new("fuzz/router.yaml");
    let Ok(cfg) = Config::from_yaml(path, &text) else {
        for word in text.split_whitespace().take(8) {
            let _ = parse_go_duration(word);
        }
        return;
    };
    let env: HashMap<String, String> = HashMap::new();
    let Ok(cfg) = cfg.apply_env(&env) else {
        return;
    };
    let literal = cfg
        .endpoints()
        .iter()
        .all(|e| e.address.parse::<SocketAddr>().is_ok());
    if literal {
        let _ = cfg.validate(path);
    } else {
        let _ = build_scheduler(&cfg.scheduler);
    }
}
