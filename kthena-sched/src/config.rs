//! The `scheduler:` section of Kthena's router configuration file (Go Kthena
//! `pkg/kthena-router/scheduler/plugins/conf/conf.go`; user guide
//! `docs/kthena/docs/user-guide/config-router.md`).

use serde::de::Visitor;
use serde::{Deserialize, Deserializer, Serialize};

use crate::{Error, Result};

/// The scheduler configuration, in the format of the `scheduler:` section of Go Kthena's
/// `routerConfiguration.yaml` (`pkg/kthena-router/scheduler/plugins/conf/conf.go`):
///
/// ```yaml
/// pluginConfig:
/// - name: least-request
///   args: {maxWaitingRequests: 10}
/// plugins:
///   Filter:
///     enabled: [least-request]
///   Score:
///     enabled:
///     - {name: least-request, weight: 1}
/// ```
///
/// [`Config::default`] is the Kthena Helm chart's default
/// (`charts/kthena/charts/networking/templates/kthena-router/component/configmap.yaml`). Plugin
/// names and arguments are checked when a [`Scheduler`](crate::Scheduler) is built from the config;
/// [`Config::validate`] checks what can be checked without a plugin registry.
///
/// Every key Go Kthena reads is accepted (`pluginConfig[].{name,args}`,
/// `plugins.{Filter,Score}.{enabled,disabled}`, `enabled[].{name,weight}`); any other key,
/// such as a misspelled `wieght` or a lowercase `pluginconfig`, is a load-time
/// [`Error::UnknownKey`] naming its path and the closest known key, where Go Kthena would
/// silently ignore it. Plugin `args` are checked the same way when the scheduler is built
/// (`pluginConfig[0].args.blockSizeToHas`).
///
/// ```
/// let cfg = kthena_sched::Config::from_yaml(
///     "plugins:\n  Score:\n    enabled:\n    - {name: gpu-usage, weight: 2}\n",
/// )
/// .unwrap();
/// assert_eq!(cfg.plugins.score.enabled[0].weight, 2.0);
///
/// let err = kthena_sched::Config::from_yaml(
///     "plugins:\n  Score:\n    enabled:\n    - {name: gpu-usage, wieght: 5}\n",
/// )
/// .unwrap_err();
/// assert_eq!(err.path(), Some("plugins.Score.enabled[0].wieght"));
/// assert_eq!(
///     err.to_string(),
///     "unknown key `plugins.Score.enabled[0].wieght`: did you mean `weight`?"
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// Per-plugin arguments, `{name, args}`; a plugin without an entry uses its defaults.
    #[serde(default)]
    pub plugin_config: Vec<PluginConfig>,
    /// Which filter and score plugins run.
    #[serde(default)]
    pub plugins: Plugins,
}

/// Arguments of one plugin. `args` is kept as raw data and parsed by the plugin's factory;
/// unknown keys and out-of-range values are load-time errors.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginConfig {
    /// Plugin name, e.g. `prefix-cache`.
    pub name: String,
    /// Plugin arguments; `null` (absent) means all defaults.
    #[serde(default)]
    pub args: serde_json::Value,
}

/// The enabled filter and score plugins. The `disabled` lists are accepted for compatibility
/// and ignored, as in Go Kthena.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plugins {
    /// `plugins.Filter` (capital F, as in Kthena).
    #[serde(rename = "Filter", default)]
    pub filter: FilterPlugins,
    /// `plugins.Score` (capital S, as in Kthena).
    #[serde(rename = "Score", default)]
    pub score: ScorePlugins,
}

/// `plugins.Filter`: filter plugin names, run in order.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilterPlugins {
    /// Names of the filters to run, in order.
    #[serde(default)]
    pub enabled: Vec<String>,
    /// Ignored (as in Go Kthena).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disabled: Vec<serde_json::Value>,
}

/// `plugins.Score`: weighted score plugins.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScorePlugins {
    /// The score plugins and their weights.
    #[serde(default)]
    pub enabled: Vec<WeightedPlugin>,
    /// Ignored (as in Go Kthena).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disabled: Vec<serde_json::Value>,
}

/// A score plugin and its weight: the candidate's total is `Σ weight × score`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WeightedPlugin {
    /// Plugin name.
    pub name: String,
    /// Weight in `0..=`[`Self::MAX_WEIGHT`]; `1` when omitted. In YAML it must be a number:
    /// a quoted `"2"` is an error, as in Go Kthena (whose weight is an `int`). (Go Kthena
    /// clamps negative weights to 0 and treats an omitted weight as 0; here a negative weight
    /// is an error.)
    #[serde(default = "one", deserialize_with = "number")]
    pub weight: f64,
}

impl WeightedPlugin {
    /// The largest accepted weight. Scores are in `0..=100`, so a weighted score stays below
    /// `1e8` and a total over any realistic number of plugins stays far below `2^53`: sums of
    /// integer weights times integer scores are exact, totals never overflow to `inf`, and
    /// equal totals compare equal (ties then go by endpoint id). A ratio of a million to one
    /// between two plugins is already beyond any useful configuration; Go Kthena's weights
    /// are integers multiplied into integer totals.
    pub const MAX_WEIGHT: f64 = 1_000_000.0;
}

fn one() -> f64 {
    1.0
}

/// Accepts a YAML (or JSON) number only, not a string that looks like one.
fn number<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    struct Number;
    impl Visitor<'_> for Number {
        type Value = f64;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a number")
        }
        fn visit_f64<E>(self, v: f64) -> Result<f64, E> {
            Ok(v)
        }
        fn visit_i64<E>(self, v: i64) -> Result<f64, E> {
            Ok(v as f64)
        }
        fn visit_u64<E>(self, v: u64) -> Result<f64, E> {
            Ok(v as f64)
        }
    }
    d.deserialize_any(Number)
}

// === impl Config ===

impl Default for Config {
    /// The Kthena Helm chart default:
    ///
    /// * args: `least-request {maxWaitingRequests: 10}`, `least-latency
    ///   {TTFTTPOTWeightFactor: 0.5}`, `prefix-cache {blockSizeToHash: 64, maxBlocksToMatch:
    ///   128, maxHashCacheSize: 50000, topKMatches: 5}`;
    /// * filters: `least-request`;
    /// * scores (weight 1 each): `least-request`, `gpu-usage`, `least-latency`, `prefix-cache`.
    fn default() -> Self {
        let args = |name: &str, v: serde_json::Value| PluginConfig {
            name: name.to_owned(),
            args: v,
        };
        let w = |name: &str| WeightedPlugin {
            name: name.to_owned(),
            weight: 1.0,
        };
        Self {
            plugin_config: vec![
                args(
                    "least-request",
                    serde_json::json!({"maxWaitingRequests": 10}),
                ),
                args(
                    "least-latency",
                    serde_json::json!({"TTFTTPOTWeightFactor": 0.5}),
                ),
                args(
                    "prefix-cache",
                    serde_json::json!({
                        "blockSizeToHash": 64,
                        "maxBlocksToMatch": 128,
                        "maxHashCacheSize": 50000,
                        "topKMatches": 5
                    }),
                ),
            ],
            plugins: Plugins {
                filter: FilterPlugins {
                    enabled: vec!["least-request".to_owned()],
                    disabled: Vec::new(),
                },
                score: ScorePlugins {
                    enabled: vec![
                        w("least-request"),
                        w("gpu-usage"),
                        w("least-latency"),
                        w("prefix-cache"),
                    ],
                    disabled: Vec::new(),
                },
            },
        }
    }
}

impl Config {
    /// The combination `kthena-bench` measured best on the published workloads
    /// (`docs/benchmarks.md`, virtual time, three seeds): no filter; scores `least-request`
    /// (weight 1), `kvcache-aware` (3) and `least-prefill` (1), each plugin with its default
    /// args (`kvcache-aware`: 16-token blocks, 128 blocks matched; `least-prefill`:
    /// `uncachedWeight` 2). An endpoint holding the prompt's prefix wins whatever the load
    /// scores say; among endpoints holding the same part of it, in-flight requests and queued
    /// prefill tokens pick the one that starts the request soonest.
    ///
    /// kthena-router's deploy ConfigMap ships it. [`Config::default`] stays Go Kthena's Helm
    /// chart default, and is what a router file without a `scheduler:` section means.
    #[must_use]
    pub fn recommended() -> Self {
        let w = |name: &str, weight: f64| WeightedPlugin {
            name: name.to_owned(),
            weight,
        };
        Self {
            plugin_config: Vec::new(),
            plugins: Plugins {
                filter: FilterPlugins::default(),
                score: ScorePlugins {
                    enabled: vec![
                        w("least-request", 1.0),
                        w("kvcache-aware", 3.0),
                        w("least-prefill", 1.0),
                    ],
                    disabled: Vec::new(),
                },
            },
        }
    }
}

#[derive(Deserialize)]
struct RouterFile {
    scheduler: Option<Config>,
}

/// Parses YAML text into a value; every error is a YAML error (syntax, a key twice).
fn yaml_value(text: &str) -> Result<serde_json::Value> {
    serde_saphyr::from_str(text).map_err(|e| Error::Yaml(Box::new(e)))
}

/// What a non-mapping value is, for [`Error::NotAMapping`].
fn kind_of(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(n) if n.is_f64() => "a float",
        serde_json::Value::Number(_) => "an integer",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "a sequence",
        serde_json::Value::Object(_) => "a mapping",
    }
}

impl Config {
    /// Parses the scheduler section alone (the value under `scheduler:`) from YAML.
    ///
    /// # Errors
    /// * [`Error::Yaml`]: the text is not YAML;
    /// * [`Error::RouterFile`]: the text has a top-level `scheduler` key, i.e. it is a whole
    ///   router file (use [`Config::from_router_yaml`]);
    /// * [`Error::NotAMapping`]: the text is a scalar or a sequence;
    /// * [`Error::Field`]: an unknown key or a value of the wrong type, with its path.
    pub fn from_yaml(text: &str) -> Result<Self> {
        match yaml_value(text)? {
            serde_json::Value::Null => crate::from_value(&serde_json::json!({}), ""),
            serde_json::Value::Object(m) if m.contains_key("scheduler") => Err(Error::RouterFile),
            v @ serde_json::Value::Object(_) => crate::from_value(&v, ""),
            v => Err(Error::NotAMapping { found: kind_of(&v) }),
        }
    }

    /// Parses a whole router configuration file and returns its `scheduler:` section; other
    /// top-level keys are ignored.
    ///
    /// # Errors
    /// [`Error::Yaml`] for malformed YAML, [`Error::Field`] for an unknown key or a wrong
    /// type inside the `scheduler:` section (path from the top of the file, e.g.
    /// `scheduler.plugins.Score.enabled[0].wieght`), [`Error::NoPlugins`] when the file has
    /// no `scheduler:` section (Go Kthena would then answer every request with 503).
    pub fn from_router_yaml(text: &str) -> Result<Self> {
        let file: RouterFile = crate::from_value(&yaml_value(text)?, "")?;
        file.scheduler.ok_or(Error::NoPlugins)
    }

    /// The `args` of plugin `name` (`null` when it has no `pluginConfig` entry).
    pub fn args(&self, name: &str) -> &serde_json::Value {
        static NULL: serde_json::Value = serde_json::Value::Null;
        self.plugin_config
            .iter()
            .find(|p| p.name == name)
            .map_or(&NULL, |p| &p.args)
    }

    /// Checks what needs no plugin registry.
    ///
    /// # Errors
    /// * [`Error::NoPlugins`]: no filter and no score plugin enabled;
    /// * [`Error::Duplicate`]: a name listed twice in one list or in `pluginConfig`;
    /// * [`Error::InvalidWeight`]: a weight outside `0..=`[`WeightedPlugin::MAX_WEIGHT`] or
    ///   NaN;
    /// * [`Error::RandomMixed`]: `random` together with another score plugin (Go Kthena
    ///   silently drops `random` then).
    pub fn validate(self) -> Result<Self> {
        if self.plugins.filter.enabled.is_empty() && self.plugins.score.enabled.is_empty() {
            return Err(Error::NoPlugins);
        }
        if self.plugins.score.enabled.is_empty() {
            // Go Kthena: pods absent from every score map are never selected, so no score
            // plugin means every request fails.
            return Err(Error::NoPlugins);
        }
        dup_check("plugins.Filter.enabled", self.plugins.filter.enabled.iter())?;
        dup_check(
            "plugins.Score.enabled",
            self.plugins.score.enabled.iter().map(|p| &p.name),
        )?;
        dup_check("pluginConfig", self.plugin_config.iter().map(|p| &p.name))?;
        for p in &self.plugins.score.enabled {
            if !(0.0..=WeightedPlugin::MAX_WEIGHT).contains(&p.weight) {
                return Err(Error::InvalidWeight {
                    plugin: p.name.clone(),
                    weight: p.weight,
                });
            }
        }
        let scores = &self.plugins.score.enabled;
        if scores.len() > 1 && scores.iter().any(|p| p.name == "random") {
            return Err(Error::RandomMixed {
                others: scores
                    .iter()
                    .filter(|p| p.name != "random")
                    .map(|p| p.name.clone())
                    .collect(),
            });
        }
        Ok(self)
    }
}

fn dup_check<'a>(list: &'static str, names: impl Iterator<Item = &'a String>) -> Result<()> {
    let mut seen: Vec<&str> = Vec::new();
    for n in names {
        if seen.contains(&n.as_str()) {
            return Err(Error::Duplicate {
                list,
                name: n.clone(),
            });
        }
        seen.push(n);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field_error(yaml: &str) -> (String, String) {
        match Config::from_yaml(yaml) {
            Err(e) if e.path().is_some() => {
                (e.path().unwrap_or_default().to_owned(), e.to_string())
            }
            other => panic!("{yaml}: expected a field error, got {other:?}"),
        }
    }

    #[test]
    fn unknown_keys_are_errors_naming_path_and_suggestion() {
        let cases = [
            (
                "plugins: {Score: {enabled: [{name: gpu-usage, wieght: 5}]}}",
                "unknown key `plugins.Score.enabled[0].wieght`: did you mean `weight`?",
            ),
            (
                "pluginconfig: [{name: least-request, args: {maxWaitingRequests: 3}}]\nplugins: {Score: {enabled: [{name: least-request}]}}",
                "unknown key `pluginconfig`: did you mean `pluginConfig`?",
            ),
            (
                "plugins: {filter: {enabled: [least-request]}, Score: {enabled: [{name: least-request}]}}",
                "unknown key `plugins.filter`: did you mean `Filter`?",
            ),
            (
                "plugins: {Score: {enabeld: [{name: gpu-usage}]}}",
                "unknown key `plugins.Score.enabeld`: did you mean `enabled`?",
            ),
            (
                "pluginConfig: [{name: least-request, arg: {maxWaitingRequests: 3}}]\nplugins: {Score: {enabled: [{name: least-request}]}}",
                "unknown key `pluginConfig[0].arg`: did you mean `args`?",
            ),
            (
                "plugins: {Score: {enabled: [{name: gpu-usage}]}, extra: 1}",
                "unknown key `plugins.extra`: expected one of `Filter`, `Score`",
            ),
        ];
        for (yaml, want) in cases {
            let (_, msg) = field_error(yaml);
            assert_eq!(msg, want, "{yaml}");
        }
        // Through a whole router file the path starts at `scheduler`.
        let e = Config::from_router_yaml(
            "auth: {issuer: x}\nscheduler:\n  plugins:\n    Score:\n      enabled:\n      - {name: gpu-usage, wieght: 5}\n",
        )
        .unwrap_err();
        assert_eq!(e.path(), Some("scheduler.plugins.Score.enabled[0].wieght"));
        // Plugin args: checked when the scheduler is built, under `pluginConfig[i].args`.
        let cfg = Config::from_yaml(
            "pluginConfig:\n- name: least-request\n- name: prefix-cache\n  args: {blockSizeToHas: 16}\nplugins: {Score: {enabled: [{name: prefix-cache}]}}",
        )
        .unwrap();
        let e = crate::Scheduler::from_config(&cfg).unwrap_err();
        assert_eq!(
            e.under("scheduler").to_string(),
            "unknown key `scheduler.pluginConfig[1].args.blockSizeToHas`: did you mean `blockSizeToHash`?"
        );
    }

    #[test]
    fn duplicate_keys_name_no_parser_option() {
        let e =
            Config::from_yaml("plugins:\n  Score: {enabled: [{name: gpu-usage}]}\n  Score: {}\n")
                .unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid YAML: duplicate mapping key `Score` is not allowed here at line 3, column 3"
        );
    }

    #[test]
    fn every_key_go_kthena_reads_is_accepted() {
        // Go's `conf.go`, including both `disabled` lists (strings for Filter, {name, weight} for
        // Score) and `args` left out.
        let cfg = Config::from_yaml(
            "pluginConfig:\n- name: least-request\n  args: {maxWaitingRequests: 10}\n- name: gpu-usage\nplugins:\n  Filter:\n    enabled: [least-request]\n    disabled: [lora-affinity]\n  Score:\n    enabled:\n    - {name: least-request, weight: 1}\n    disabled:\n    - {name: random, weight: 1}\n",
        )
        .unwrap();
        assert_eq!(
            cfg.plugins.filter.disabled,
            vec![serde_json::json!("lora-affinity")]
        );
        assert_eq!(cfg.plugins.score.disabled.len(), 1);
        assert_eq!(cfg.plugin_config[1].args, serde_json::Value::Null);
    }

    #[test]
    fn example_router_files_load() {
        for (text, scores) in [
            (include_str!("../../examples/standalone/router.yaml"), 4),
            (include_str!("../../examples/kv-events/router.yaml"), 3),
        ] {
            let cfg = Config::from_router_yaml(text).unwrap().validate().unwrap();
            assert_eq!(cfg.plugins.score.enabled.len(), scores);
        }
    }

    #[test]
    fn weight_must_be_a_number() {
        let (path, msg) =
            field_error("plugins: {Score: {enabled: [{name: gpu-usage, weight: \"2\"}]}}");
        assert_eq!(path, "plugins.Score.enabled[0].weight");
        assert_eq!(
            msg,
            "`plugins.Score.enabled[0].weight`: invalid type: string \"2\", expected a number"
        );
        let (path, _) =
            field_error("plugins: {Score: {enabled: [{name: gpu-usage, weight: true}]}}");
        assert_eq!(path, "plugins.Score.enabled[0].weight");
        let cfg = Config::from_yaml("plugins: {Score: {enabled: [{name: gpu-usage, weight: 3}, {name: least-request, weight: 0.5}]}}").unwrap();
        assert_eq!(cfg.plugins.score.enabled[0].weight, 3.0);
        assert_eq!(cfg.plugins.score.enabled[1].weight, 0.5);
    }

    #[test]
    fn weight_is_bounded() {
        let with = |w: &str| {
            Config::from_yaml(&format!(
                "plugins: {{Score: {{enabled: [{{name: gpu-usage, weight: {w}}}]}}}}"
            ))
            .unwrap()
            .validate()
        };
        assert_eq!(
            with("1000000").unwrap().plugins.score.enabled[0].weight,
            1e6
        );
        for (w, shown) in [("1e7", "10000000"), ("1000001", "1000001"), ("-1", "-1")] {
            assert_eq!(
                with(w).unwrap_err().to_string(),
                format!(
                    "invalid weight {shown} for score plugin \"gpu-usage\": must be a number in [0, 1000000]"
                ),
            );
        }
        assert!(
            matches!(with("1e308"), Err(Error::InvalidWeight { weight, .. }) if weight == 1e308)
        );
        let mut cfg = Config::default();
        cfg.plugins.score.enabled[0].weight = f64::INFINITY;
        assert!(
            matches!(cfg.validate(), Err(Error::InvalidWeight { weight, .. }) if weight == f64::INFINITY)
        );
    }

    #[test]
    fn whole_router_file_is_not_a_section() {
        let want = "expected the scheduler section alone, but the text has a top-level `scheduler` key: \
                    pass the value under `scheduler:`, or read the whole router file with Config::from_router_yaml";
        for yaml in [
            "scheduler:\n  plugins: {Score: {enabled: [{name: gpu-usage}]}}\nauth: {issuer: x}\n",
            "scheduler: 3",
            "scheduler:",
        ] {
            let e = Config::from_yaml(yaml).unwrap_err();
            assert!(matches!(e, Error::RouterFile), "{yaml}: {e:?}");
            assert_eq!(e.to_string(), want);
        }
        let e = Config::from_yaml("3").unwrap_err();
        assert_eq!(
            e.to_string(),
            "the scheduler section must be a mapping (keys `pluginConfig`, `plugins`), found an integer"
        );
        let e = Config::from_yaml("[a, b]").unwrap_err();
        assert_eq!(
            e.to_string(),
            "the scheduler section must be a mapping (keys `pluginConfig`, `plugins`), found a sequence"
        );
        // A whole file whose `scheduler:` is not a mapping names the key.
        let e = Config::from_router_yaml("scheduler: 3").unwrap_err();
        assert_eq!(e.path(), Some("scheduler"));
        // Malformed YAML stays a YAML error.
        assert!(matches!(
            Config::from_yaml("plugins: [1"),
            Err(Error::Yaml(_))
        ));
    }
}
