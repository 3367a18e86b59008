//! The `scheduler:` section of Kthena's router configuration file (spec §2.3).

use serde::{Deserialize, Serialize};

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
/// [`Config::default`] is the Kthena Helm chart's default (spec §2.3). Plugin names and
/// arguments are checked when a [`Scheduler`](crate::Scheduler) is built from the config;
/// [`Config::validate`] checks what can be checked without a plugin registry.
///
/// ```
/// let cfg = kthena_sched::Config::from_yaml(
///     "plugins:\n  Score:\n    enabled:\n    - {name: gpu-usage, weight: 2}\n",
/// )
/// .unwrap();
/// assert_eq!(cfg.plugins.score.enabled[0].weight, 2.0);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
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
pub struct WeightedPlugin {
    /// Plugin name.
    pub name: String,
    /// Weight, finite and `>= 0`; `1` when omitted. (Go Kthena clamps negative weights to 0
    /// and treats an omitted weight as 0; here a negative weight is an error.)
    #[serde(default = "one")]
    pub weight: f64,
}

fn one() -> f64 {
    1.0
}

// === impl Config ===

impl Default for Config {
    /// The Kthena Helm chart default (spec §2.3):
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

#[derive(Deserialize)]
struct RouterFile {
    scheduler: Option<Config>,
}

impl Config {
    /// Parses the scheduler section alone (the value under `scheduler:`) from YAML.
    ///
    /// # Errors
    /// [`Error::Yaml`] when the text is not YAML of this shape.
    pub fn from_yaml(text: &str) -> Result<Self> {
        serde_saphyr::from_str(text).map_err(|e| Error::Yaml(Box::new(e)))
    }

    /// Parses a whole router configuration file and returns its `scheduler:` section; other
    /// top-level keys are ignored.
    ///
    /// # Errors
    /// [`Error::Yaml`] for malformed YAML, [`Error::NoPlugins`] when the file has no
    /// `scheduler:` section (Go Kthena would then answer every request with 503).
    pub fn from_router_yaml(text: &str) -> Result<Self> {
        let file: RouterFile =
            serde_saphyr::from_str(text).map_err(|e| Error::Yaml(Box::new(e)))?;
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
    /// * [`Error::InvalidWeight`]: a weight that is negative or not finite;
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
            if !p.weight.is_finite() || p.weight < 0.0 {
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
