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
    /// The combination `kthena-bench` measured best across its scenarios
    /// (`docs/benchmarks.md`, virtual time, three seeds): no filter; scores `least-request`
    /// (weight 1), `kvcache-aware` (1) and `least-prefill` (3), each plugin with its default
    /// args (`kvcache-aware`: 16-token blocks, 128 blocks matched; `least-prefill`:
    /// `uncachedWeight` 2, 1,024 blocks matched). `least-prefill` weighs the prefill an
    /// endpoint's cache saves against the prefill queued there, so a long cached prefix (a
    /// conversation's history) keeps its endpoint while a short shared one (a hot system
    /// prompt) spills to a less loaded endpoint.
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
                        w("kvcache-aware", 1.0),
                        w("least-prefill", 3.0),
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
mod tests;
