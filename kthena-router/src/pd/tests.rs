use kthena_api::networking::{KvConnector, ModelServerSpec};

use super::*;

#[test]
fn connector_follows_go_kthena_factory() {
    let spec = |engine, kv: Option<KvConnectorType>| ModelServerSpec {
        inference_engine: engine,
        kv_connector: kv.map(|t| KvConnector { type_: Some(t) }),
        ..ModelServerSpec::default()
    };
    let cases = [
        (InferenceEngine::VLlm, None, Connector::Http),
        (InferenceEngine::SgLang, None, Connector::Sglang),
        (
            InferenceEngine::VLlm,
            Some(KvConnectorType::Lmcache),
            Connector::Lmcache,
        ),
        (
            InferenceEngine::VLlm,
            Some(KvConnectorType::Nixl),
            Connector::Nixl,
        ),
        (
            InferenceEngine::VLlm,
            Some(KvConnectorType::Mooncake),
            Connector::Mooncake,
        ),
        // An explicit type wins over the SGLang default.
        (
            InferenceEngine::SgLang,
            Some(KvConnectorType::Http),
            Connector::Http,
        ),
    ];
    for (engine, kv, want) in cases {
        assert_eq!(Connector::of(&spec(engine, kv)), want, "{engine:?} {kv:?}");
    }
    assert!(Connector::Mooncake.hands_over_params() && Connector::Nixl.hands_over_params());
    assert!(!Connector::Lmcache.hands_over_params() && !Connector::Sglang.hands_over_params());
    assert_eq!(Connector::Mooncake.name(), "mooncake");
}
