use rand::SeedableRng;
use rand::rngs::SmallRng;

use super::*;

fn route(yaml: &str, seq: u64) -> CompiledRoute {
    let docs = kthena_api::load_str("t.yaml", yaml).unwrap();
    let kthena_api::Object::ModelRoute(r) = docs.into_iter().next().unwrap().object else {
        panic!("not a route")
    };
    CompiledRoute::compile(&r.with_defaults(), (0, seq)).unwrap()
}

const MULTI: &str = r#"
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: multi, namespace: default}
spec:
  modelName: deepseek
  loraAdapters: [lora-A]
  rules:
  - name: premium
    modelMatch:
      headers:
        user-type: {exact: premium}
    targetModels: [{modelServerName: big}]
  - name: beta
    modelMatch:
      uri: {prefix: /v1/completions}
      headers:
        x-tier: {regex: "^gold|silver$"}
    targetModels: [{modelServerName: beta}]
  - name: default
    targetModels: [{modelServerName: small}]
"#;

fn hm(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.insert(*k, v.parse().unwrap());
    }
    h
}

#[test]
fn rules_headers_uri_lora() {
    let t = RouteTable::new(vec![route(MULTI, 0)]);
    let mut rng = SmallRng::seed_from_u64(1);
    let m = |h: &HeaderMap, p: &str, model: &str, rng: &mut SmallRng| {
        t.match_request(model, h, p, rng, |_| true)
            .map(|m| (m.target, m.is_lora, m.rule))
    };
    let big = TargetRef::ModelServer("big".into());
    let small = TargetRef::ModelServer("small".into());
    let beta = TargetRef::ModelServer("beta".into());
    assert_eq!(
        m(
            &hm(&[("user-type", "premium")]),
            "/v1/chat/completions",
            "deepseek",
            &mut rng
        ),
        Ok((big, false, 0))
    );
    assert_eq!(
        m(
            &hm(&[("user-type", "basic")]),
            "/v1/chat/completions",
            "deepseek",
            &mut rng
        ),
        Ok((small.clone(), false, 2))
    );
    assert_eq!(
        m(
            &hm(&[("user-type", "")]),
            "/v1/chat/completions",
            "deepseek",
            &mut rng
        ),
        Ok((small.clone(), false, 2))
    );
    assert_eq!(
        m(
            &hm(&[("x-tier", "golden")]),
            "/v1/completions",
            "deepseek",
            &mut rng
        ),
        Ok((beta, false, 1))
    );
    assert_eq!(
        m(
            &hm(&[("x-tier", "golden")]),
            "/v1/chat/completions",
            "deepseek",
            &mut rng
        ),
        Ok((small.clone(), false, 2))
    );
    assert_eq!(
        m(&HeaderMap::new(), "/v1/completions", "lora-A", &mut rng),
        Ok((small, true, 2))
    );
    assert_eq!(
        m(&HeaderMap::new(), "/v1/completions", "nope", &mut rng),
        Err(MatchError::UnknownModel)
    );
    assert_eq!(
        t.model_names(),
        vec!["deepseek".to_owned(), "lora-A".to_owned()]
    );
}

#[test]
fn weighted_split_and_oldest_wins() {
    let split = r#"
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: subset}
spec:
  modelName: ds
  rules:
  - targetModels: [{modelServerName: v1, weight: 70}, {modelServerName: v2, weight: 30}]
"#;
    let newer = split
        .replace("subset", "zz-newer")
        .replace("v1, weight: 70", "v3, weight: 70");
    let t = RouteTable::new(vec![route(&newer, 5), route(split, 1)]);
    let mut rng = SmallRng::seed_from_u64(7);
    let mut v1 = 0;
    for _ in 0..10_000 {
        let m = t
            .match_request("ds", &HeaderMap::new(), "/", &mut rng, |_| true)
            .unwrap();
        assert_eq!(m.route.name, "subset");
        if m.target == TargetRef::ModelServer("v1".into()) {
            v1 += 1;
        }
    }
    assert!((6800..=7200).contains(&v1), "{v1}");
}

#[test]
fn zero_weight_route_is_skipped() {
    let zero = r#"
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: a-zero}
spec:
  modelName: ds
  rules:
  - targetModels: [{modelServerName: v1, weight: 0}]
"#;
    let other = zero
        .replace("a-zero", "b-other")
        .replace("weight: 0", "weight: 10");
    let t = RouteTable::new(vec![route(zero, 0), route(&other, 1)]);
    let mut rng = SmallRng::seed_from_u64(1);
    let m = t
        .match_request("ds", &HeaderMap::new(), "/", &mut rng, |_| true)
        .unwrap();
    assert_eq!(m.route.name, "b-other");
    let t = RouteTable::new(vec![route(zero, 0)]);
    assert_eq!(
        t.match_request("ds", &HeaderMap::new(), "/", &mut rng, |_| true)
            .unwrap_err(),
        MatchError::NoRule
    );
}

/// Routes the caller's `serves` refuses (Gateway API attachment) are reported as not
/// attached, naming the oldest; when one was served, a miss is the rules'.
#[test]
fn routes_none_serves_are_not_attached() {
    let a = "apiVersion: networking.serving.volcano.sh/v1alpha1\nkind: ModelRoute\n\
                 metadata: {name: a, namespace: app}\nspec:\n  modelName: m\n  rules:\n  \
                 - modelMatch: {headers: {x: {exact: premium}}}\n    targetModels: [{modelServerName: s}]\n";
    let b = a.replace("name: a,", "name: b,");
    let t = RouteTable::new(vec![route(a, 0), route(&b, 1)]);
    let mut rng = SmallRng::seed_from_u64(1);
    let h = HeaderMap::new();
    assert_eq!(
        t.match_request("m", &h, "/", &mut rng, |_| false)
            .unwrap_err(),
        MatchError::NotAttached {
            namespace: "app".into(),
            name: "a".into(),
            parent_refs: Vec::new(),
        }
    );
    assert_eq!(
        t.match_request("m", &h, "/", &mut rng, |r| r.name == "b")
            .unwrap_err(),
        MatchError::NoRule
    );
}
