use super::*;

fn listener(
    gw: &str,
    name: &str,
    port: u16,
    host: Option<&str>,
    from: AllowedFrom,
) -> CompiledListener {
    CompiledListener {
        gateway_namespace: "gw-ns".into(),
        gateway_name: gw.into(),
        name: name.into(),
        port,
        hostname: host.map(str::to_owned),
        from,
    }
}

fn parent(name: &str) -> ParentReference {
    ParentReference {
        namespace: Some("gw-ns".into()),
        name: name.into(),
        ..ParentReference::default()
    }
}

fn rule(matches: &[(&str, &str)], pool: &str) -> CompiledHttpRule {
    CompiledHttpRule {
        matches: matches
            .iter()
            .map(|(t, v)| PathMatch::compile(Some(t), Some(v)))
            .collect(),
        rewrite: None,
        backends: vec![(pool.to_owned(), 1)],
    }
}

fn route(ns: &str, name: &str, hosts: &[&str], rules: Vec<CompiledHttpRule>) -> CompiledHttpRoute {
    CompiledHttpRoute {
        namespace: ns.into(),
        name: name.into(),
        hostnames: hosts.iter().map(|h| (*h).to_owned()).collect(),
        parents: vec![parent("gw")],
        rules,
    }
}

fn any() -> CompiledListener {
    listener("gw", "http", 80, None, AllowedFrom::All)
}

/// `(route name, rule index, matched prefix)` of the best match.
fn best(routes: &[CompiledHttpRoute], host: &str, path: &str) -> Option<(String, usize, String)> {
    best_match(routes, &any(), host, path).map(|m| (m.route.name.clone(), m.rule, m.prefix))
}

#[test]
fn path_prefix_is_segment_based() {
    let p = PathMatch::compile(Some("PathPrefix"), Some("/v1")).unwrap();
    assert!(p.matches("/v1").is_some());
    assert!(p.matches("/v1/").is_some());
    assert!(p.matches("/v1/chat/completions").is_some());
    assert!(p.matches("/v10").is_none());
    assert!(p.matches("/v1x/chat").is_none());
    assert!(p.matches("/V1").is_none());
    // A trailing slash on the prefix is ignored.
    let p = PathMatch::compile(None, Some("/v1/")).unwrap();
    assert_eq!(p.matches("/v1").map(|m| m.1), Some("/v1".to_owned()));
    assert!(p.matches("/v10").is_none());
    let root = PathMatch::compile(None, None).unwrap();
    assert_eq!(root.matches("/anything").map(|m| m.1), Some("/".to_owned()));
}

#[test]
fn exact_and_regex_paths() {
    let e = PathMatch::compile(Some("Exact"), Some("/v1/models")).unwrap();
    assert!(e.matches("/v1/models").is_some());
    assert!(e.matches("/v1/models/").is_none());
    let r = PathMatch::compile(Some("RegularExpression"), Some("^/v[0-9]+/chat")).unwrap();
    assert!(r.matches("/v2/chat/completions").is_some());
    assert!(r.matches("/x/v2/chat").is_none());
    assert!(PathMatch::compile(Some("RegularExpression"), Some("(")).is_none());
    assert!(PathMatch::compile(Some("Glob"), Some("/")).is_none());
}

#[test]
fn within_a_route_exact_beats_longer_prefix_beats_shorter_beats_regex() {
    let routes = vec![route(
        "ns",
        "r",
        &[],
        vec![
            rule(&[("RegularExpression", "^/v1/.*")], "re"),
            rule(&[("PathPrefix", "/")], "root"),
            rule(&[("PathPrefix", "/v1")], "v1"),
            rule(&[("Exact", "/v1/models")], "exact"),
        ],
    )];
    assert_eq!(
        best(&routes, "h", "/v1/models"),
        Some(("r".into(), 3, String::new()))
    );
    assert_eq!(
        best(&routes, "h", "/v1/chat"),
        Some(("r".into(), 2, "/v1".into()))
    );
    assert_eq!(
        best(&routes, "h", "/v10"),
        Some(("r".into(), 1, "/".into()))
    );
}

#[test]
fn equal_specificity_keeps_rule_then_route_order() {
    let routes = vec![
        route("ns", "old", &[], vec![rule(&[("PathPrefix", "/a")], "p1")]),
        route(
            "ns",
            "new",
            &[],
            vec![
                rule(&[("PathPrefix", "/b")], "p2"),
                rule(&[("PathPrefix", "/a")], "p3"),
            ],
        ),
    ];
    assert_eq!(best(&routes, "h", "/a/x").unwrap().0, "old");
    // A longer prefix in a younger route wins across routes.
    let mut routes = routes;
    routes[1].rules.push(rule(&[("PathPrefix", "/a/x")], "p4"));
    assert_eq!(
        best(&routes, "h", "/a/x/y"),
        Some(("new".into(), 2, "/a/x".into()))
    );
}

#[test]
fn hostname_specificity_comes_before_path() {
    let routes = vec![
        route("ns", "none", &[], vec![rule(&[("Exact", "/v1/chat")], "a")]),
        route(
            "ns",
            "wild",
            &["*.example.com"],
            vec![rule(&[("PathPrefix", "/")], "b")],
        ),
        route(
            "ns",
            "exact",
            &["api.example.com"],
            vec![rule(&[("PathPrefix", "/")], "c")],
        ),
    ];
    assert_eq!(
        best(&routes, "api.example.com:8080", "/v1/chat").unwrap().0,
        "exact"
    );
    assert_eq!(
        best(&routes, "x.example.com", "/v1/chat").unwrap().0,
        "wild"
    );
    assert_eq!(best(&routes, "other.org", "/v1/chat").unwrap().0, "none");
    // A hostname-restricted route ignores other hosts.
    let only = vec![routes[2].clone()];
    assert_eq!(best(&only, "other.org", "/v1/chat"), None);
    assert_eq!(
        best(&only, "API.Example.com.", "/v1/chat").unwrap().0,
        "exact"
    );
}

#[test]
fn wildcards_need_a_nonempty_prefix() {
    assert!(hostname_matches("*.example.com", "a.b.example.com"));
    assert!(!hostname_matches("*.example.com", "example.com"));
    assert!(!hostname_matches("*.example.com", "badexample.com"));
    assert_eq!(normalize_host("[::1]:80"), "::1");
    assert_eq!(normalize_host("Host.Example.:8080"), "host.example");
}

#[test]
fn listener_selection_exact_then_longest_wildcard_then_catch_all() {
    let ls = vec![
        listener("g1", "all", 80, None, AllowedFrom::Same),
        listener("g2", "wild", 80, Some("*.example.com"), AllowedFrom::Same),
        listener(
            "g3",
            "wild-long",
            80,
            Some("*.api.example.com"),
            AllowedFrom::Same,
        ),
        listener(
            "g4",
            "exact",
            80,
            Some("a.api.example.com"),
            AllowedFrom::Same,
        ),
        listener(
            "g5",
            "other-port",
            81,
            Some("b.example.com"),
            AllowedFrom::Same,
        ),
    ];
    let name = |host: &str, port| select_listener(&ls, port, host).map(|l| l.name.clone());
    assert_eq!(name("a.api.example.com", 80).as_deref(), Some("exact"));
    assert_eq!(name("b.api.example.com", 80).as_deref(), Some("wild-long"));
    assert_eq!(name("b.example.com", 80).as_deref(), Some("wild"));
    assert_eq!(name("elsewhere", 80).as_deref(), Some("all"));
    assert_eq!(name("b.example.com", 81).as_deref(), Some("other-port"));
    assert_eq!(name("c.example.com", 81), None);
    assert_eq!(
        select_listener(&ls, 80, "x").unwrap().gateway_key(),
        "gw-ns/g1"
    );
}

#[test]
fn allowed_routes_and_parent_refs_decide_attachment() {
    let r = route("app-ns", "r", &[], vec![rule(&[("PathPrefix", "/")], "p")]);
    assert!(attaches(
        &r,
        &listener("gw", "http", 80, None, AllowedFrom::All)
    ));
    assert!(!attaches(
        &r,
        &listener("gw", "http", 80, None, AllowedFrom::Same)
    ));
    let picked =
        |names: &[&str]| AllowedFrom::Selector(names.iter().map(|n| (*n).to_owned()).collect());
    assert!(!attaches(
        &r,
        &listener("gw", "http", 80, None, picked(&[]))
    ));
    assert!(attaches(
        &r,
        &listener("gw", "http", 80, None, picked(&["app-ns"]))
    ));
    let mut same = r.clone();
    same.namespace = "gw-ns".into();
    assert!(attaches(
        &same,
        &listener("gw", "http", 80, None, AllowedFrom::Same)
    ));
    assert!(!attaches(
        &r,
        &listener("other", "http", 80, None, AllowedFrom::All)
    ));
    let mut sec = r.clone();
    sec.parents[0].section_name = Some("https".into());
    assert!(!attaches(
        &sec,
        &listener("gw", "http", 80, None, AllowedFrom::All)
    ));
    sec.parents[0].section_name = Some("http".into());
    sec.parents[0].port = Some(81);
    assert!(!attaches(
        &sec,
        &listener("gw", "http", 80, None, AllowedFrom::All)
    ));
    sec.parents[0].port = Some(80);
    assert!(attaches(
        &sec,
        &listener("gw", "http", 80, None, AllowedFrom::All)
    ));
    let mut svc = r;
    svc.parents[0].kind = Some("Service".into());
    assert!(!attaches(
        &svc,
        &listener("gw", "http", 80, None, AllowedFrom::All)
    ));
}

#[test]
fn model_routes_serve_the_listeners_their_parent_refs_name() {
    let l = listener("gw", "http", 80, None, AllowedFrom::Same);
    // Outside Gateway API mode: only routes without parentRefs.
    assert!(model_route_serves("app-ns", &[], None));
    assert!(!model_route_serves("app-ns", &[parent("gw")], None));
    // Without parentRefs: Gateways of the route's namespace.
    assert!(!model_route_serves("app-ns", &[], Some(&l)));
    assert!(model_route_serves("gw-ns", &[], Some(&l)));
    // With parentRefs: the named Gateway (and listener, and port) only.
    assert!(model_route_serves("app-ns", &[parent("gw")], Some(&l)));
    assert!(!model_route_serves("app-ns", &[parent("other")], Some(&l)));
    let mut sec = parent("gw");
    sec.section_name = Some("https".into());
    assert!(!model_route_serves("app-ns", &[sec.clone()], Some(&l)));
    sec.section_name = Some("http".into());
    assert!(model_route_serves("app-ns", &[sec], Some(&l)));
    let mut local = parent("gw");
    local.namespace = None;
    assert!(model_route_serves("gw-ns", &[local.clone()], Some(&l)));
    assert!(!model_route_serves("app-ns", &[local], Some(&l)));
}

#[test]
fn unsupported_predicates_never_select_and_empty_matches_are_root() {
    let mut r = route("ns", "r", &[], vec![rule(&[("PathPrefix", "/v1")], "p")]);
    r.rules[0].matches[0] = None;
    assert_eq!(best(&[r.clone()], "h", "/v1/x"), None);
    r.rules[0].matches.clear();
    assert_eq!(best(&[r], "h", "/v1/x"), Some(("r".into(), 0, "/".into())));
}

#[test]
fn url_rewrite() {
    let full = Rewrite {
        full_path: Some("/v1/completions".into()),
        ..Rewrite::default()
    };
    assert_eq!(rewrite_path("/any/thing", &full, "/any"), "/v1/completions");
    let pre = |p: &str| Rewrite {
        prefix: Some(p.into()),
        ..Rewrite::default()
    };
    assert_eq!(
        rewrite_path("/llm/v1/chat", &pre("/v1"), "/llm"),
        "/v1/v1/chat"
    );
    assert_eq!(rewrite_path("/llm/v1/chat", &pre("/"), "/llm"), "/v1/chat");
    assert_eq!(rewrite_path("/llm", &pre("/"), "/llm"), "/");
    assert_eq!(rewrite_path("/llm", &pre("/x"), "/llm"), "/x");
    assert_eq!(rewrite_path("/a/b", &pre("/x"), "/"), "/x/a/b");
    assert_eq!(rewrite_path("/a", &Rewrite::default(), "/"), "/a");
}

/// The table of the Gateway API's `HTTPPathModifier` reference
/// (<https://gateway-api.sigs.k8s.io/reference/spec/#httppathmodifier>): the matched prefix
/// (compiled without its trailing slash), the request path, the replacement, the result.
#[test]
fn replace_prefix_match_follows_the_specification_table() {
    let cases = [
        ("/foo", "/foo/bar", "/xyz", "/xyz/bar"),
        ("/foo", "/foo/bar", "/xyz/", "/xyz/bar"),
        ("/foo/", "/foo/bar", "/xyz", "/xyz/bar"),
        ("/foo/", "/foo/bar", "/xyz/", "/xyz/bar"),
        ("/foo", "/foo", "/xyz", "/xyz"),
        ("/foo/", "/foo", "/xyz", "/xyz"),
        ("/foo", "/foo/", "/xyz", "/xyz/"),
        ("/foo", "/foo/", "/xyz/", "/xyz/"),
        ("/foo/", "/foo/", "/xyz", "/xyz/"),
        ("/foo/", "/foo/", "/xyz/", "/xyz/"),
        ("/foo", "/foo", "/", "/"),
        ("/foo", "/foo/", "/", "/"),
        ("/foo/", "/foo/bar", "/", "/bar"),
        (
            "/llm",
            "/llm/v1/chat/completions",
            "/",
            "/v1/chat/completions",
        ),
    ];
    for (prefix, path, repl, want) in cases {
        let m = PathMatch::compile(Some("PathPrefix"), Some(prefix)).unwrap();
        let (_, matched) = m.matches(path).unwrap();
        let rw = Rewrite {
            prefix: Some(repl.into()),
            ..Rewrite::default()
        };
        assert_eq!(
            rewrite_path(path, &rw, &matched),
            want,
            "{prefix} {path} {repl}"
        );
    }
}

#[test]
fn weighted_pick_walks_the_weights() {
    let b = vec![("a".to_owned(), 1), ("b".to_owned(), 3)];
    assert_eq!(crate::routing::weighted::total(&b), 4);
    let picks: Vec<_> = (0..4)
        .map(|d| crate::routing::weighted::pick_at(&b, d).unwrap().as_str())
        .collect();
    assert_eq!(picks, vec!["a", "b", "b", "b"]);
    assert_eq!(crate::routing::weighted::pick_at(&b, 4), None);
    assert_eq!(crate::routing::weighted::pick_at::<String>(&[], 0), None);
}

#[test]
fn namespace_selectors_pick_namespaces_by_label() {
    use std::sync::Arc;

    use k8s_openapi::api::core::v1::Namespace;
    use kthena_api::gateway::RouteNamespaces;

    use crate::gateway::table::allowed_from;

    let ns = |name: &str, team: Option<&str>| {
        let mut n = Namespace::default();
        n.metadata.name = Some(name.into());
        n.metadata.labels = team.map(|t| [("team".to_owned(), t.to_owned())].into());
        Arc::new(n)
    };
    let all = [ns("a", Some("x")), ns("b", Some("y")), ns("c", None)];
    let field = |from: &str, selector: serde_json::Value| RouteNamespaces {
        from: Some(from.into()),
        selector: Some(selector),
    };
    let picked =
        |names: &[&str]| AllowedFrom::Selector(names.iter().map(|n| (*n).to_owned()).collect());
    let by_labels = field(
        "Selector",
        serde_json::json!({"matchLabels": {"team": "x"}}),
    );
    assert_eq!(allowed_from(Some(&by_labels), &all), picked(&["a"]));
    let by_expr = field(
        "Selector",
        serde_json::json!({"matchExpressions": [{"key": "team", "operator": "Exists"}]}),
    );
    assert_eq!(allowed_from(Some(&by_expr), &all), picked(&["a", "b"]));
    let bad = field(
        "Selector",
        serde_json::json!({"matchExpressions": [{"key": "team", "operator": "Nope"}]}),
    );
    assert_eq!(allowed_from(Some(&bad), &all), picked(&[]));
    assert_eq!(allowed_from(None, &all), AllowedFrom::Same);
    let everyone = field("All", serde_json::Value::Null);
    assert_eq!(allowed_from(Some(&everyone), &all), AllowedFrom::All);
}

/// Regression: the 404 of a ModelRoute the Gateway does not take blamed its rules. The
/// reason now says what is missing.
#[test]
fn the_reason_a_model_route_is_not_attached() {
    let l = listener("gw", "http", 80, None, AllowedFrom::Same);
    assert_eq!(
        why_not_attached("app-ns", &[], Some(&l)),
        "it has no parentRefs, so it attaches only to Gateways of its own namespace \
         \"app-ns\", and this request came through listener \"http\" of Gateway gw-ns/gw \
         (add a parentRef naming Gateway gw-ns/gw)"
    );
    let mut side = parent("side");
    side.section_name = Some("a".into());
    side.port = Some(8081);
    let mut svc = parent("svc");
    svc.kind = Some("Service".into());
    svc.namespace = None;
    assert_eq!(
        why_not_attached("app-ns", &[side, svc], Some(&l)),
        "its parentRefs (gw-ns/side/a:8081, Service app-ns/svc) do not name listener \"http\" \
         of Gateway gw-ns/gw, which this request came through"
    );
    assert_eq!(
        why_not_attached("app-ns", &[parent("gw")], None),
        "its parentRefs bind it to a Gateway and Gateway API mode is off (enable it with \
         --enable-gateway-api, or remove the parentRefs)"
    );
}
