//! ModelRoute matching (Go Kthena `datastore/store.go`: `MatchModelTarget`, `selectRule`,
//! `selectDestination`).
//!
//! Routes are compiled once per snapshot: regexes are built at load time and an invalid
//! one rejects the manifest, instead of Go's "never matches".

use std::collections::HashMap;
use std::sync::Arc;

use http::HeaderMap;
use kthena_api::ModelRoute;
use kthena_api::networking::StringMatch;
use rand::Rng;
use regex::Regex;

use crate::error::Error;

/// A string matcher: `exact` > `prefix` > `regex` when several are set; none set matches all.
#[derive(Debug, Clone)]
pub enum StringMatcher {
    /// Matches everything (no field set).
    Any,
    /// Equal strings.
    Exact(String),
    /// `value.starts_with(prefix)`.
    Prefix(String),
    /// Unanchored search, like Go RE2 `MatchString`.
    Regex(Regex),
}

impl StringMatcher {
    /// Compiles a `StringMatch`.
    ///
    /// # Errors
    /// The regex compiler's error for an invalid `regex`.
    pub fn compile(m: &StringMatch) -> Result<Self, regex::Error> {
        if let Some(e) = &m.exact {
            return Ok(Self::Exact(e.clone()));
        }
        if let Some(p) = &m.prefix {
            return Ok(Self::Prefix(p.clone()));
        }
        if let Some(r) = &m.regex {
            return Regex::new(r).map(Self::Regex);
        }
        Ok(Self::Any)
    }

    /// Whether `value` matches.
    #[must_use]
    pub fn matches(&self, value: &str) -> bool {
        match self {
            Self::Any => true,
            Self::Exact(e) => value == e,
            Self::Prefix(p) => value.starts_with(p.as_str()),
            Self::Regex(r) => r.is_match(value),
        }
    }
}

/// One weighted target of a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetRef {
    /// A ModelServer name in the route's namespace.
    ModelServer(String),
    /// An ExternalModelProvider name (not served yet).
    ExternalProvider(String),
}

/// A compiled rule.
#[derive(Debug, Clone)]
pub struct CompiledRule {
    /// Rule name (may be empty).
    pub name: String,
    /// `None` when the rule has no `modelMatch` (matches everything).
    matcher: Option<RuleMatcher>,
    /// Targets with weights; `weighted == false` means every weight is 1.
    targets: Vec<(TargetRef, u32)>,
}

#[derive(Debug, Clone)]
struct RuleMatcher {
    body_model: Option<String>,
    headers: Vec<(String, StringMatcher)>,
    uri: Option<StringMatcher>,
}

/// A ModelRoute compiled for matching.
#[derive(Debug, Clone)]
pub struct CompiledRoute {
    /// `metadata.namespace` (default `default`).
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `spec.modelName`.
    pub model_name: String,
    /// `spec.loraAdapters`.
    pub lora_adapters: Vec<String>,
    /// Rules in order.
    pub rules: Vec<CompiledRule>,
    /// Sort key: older first (creation time in ns since the epoch, then load sequence).
    pub age: (i128, u64),
    /// `spec.parentRefs`: the Gateways it serves through in Gateway API mode.
    pub parent_refs: Vec<kthena_api::networking::ParentReference>,
}

/// What a request matched.
#[derive(Debug, Clone)]
pub struct RouteMatch {
    /// The route.
    pub route: Arc<CompiledRoute>,
    /// Index of the matched rule.
    pub rule: usize,
    /// The chosen target.
    pub target: TargetRef,
    /// The request model matched one of `loraAdapters` (the model is then not rewritten).
    pub is_lora: bool,
}

/// Why no route matched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MatchError {
    /// No route has this model name or LoRA adapter.
    UnknownModel,
    /// Routes exist but no rule (or weighted target) matched.
    NoRule,
    /// Routes exist but none serves the request (`serves` refused them all: Gateway API
    /// attachment); the first (oldest) of them.
    NotAttached {
        /// `metadata.namespace` of the route.
        namespace: String,
        /// `metadata.name` of the route.
        name: String,
        /// Its `spec.parentRefs`.
        parent_refs: Vec<kthena_api::networking::ParentReference>,
    },
}

// === impl CompiledRoute ===

impl CompiledRoute {
    /// Compiles a (defaulted) ModelRoute. `age` orders duplicates: older first.
    ///
    /// # Errors
    /// [`Error::InvalidRegex`] with the JSON path of an invalid regex
    /// (`spec.rules[0].modelMatch.uri.regex`).
    pub fn compile(route: &ModelRoute, age: (i128, u64)) -> Result<Self, Error> {
        let mut rules = Vec::with_capacity(route.spec.rules.len());
        for (i, r) in route.spec.rules.iter().enumerate() {
            let matcher = match &r.model_match {
                None => None,
                Some(mm) => {
                    let mut headers = Vec::new();
                    for (k, sm) in &mm.headers {
                        let m =
                            StringMatcher::compile(sm).map_err(|source| Error::InvalidRegex {
                                path: format!("spec.rules[{i}].modelMatch.headers[{k}].regex"),
                                source,
                            })?;
                        headers.push((k.to_ascii_lowercase(), m));
                    }
                    let uri = match &mm.uri {
                        Some(sm) => Some(StringMatcher::compile(sm).map_err(|source| {
                            Error::InvalidRegex {
                                path: format!("spec.rules[{i}].modelMatch.uri.regex"),
                                source,
                            }
                        })?),
                        None => None,
                    };
                    let body_model = mm.body.as_ref().and_then(|b| b.model.clone());
                    Some(RuleMatcher {
                        body_model,
                        headers,
                        uri,
                    })
                }
            };
            let weighted = r.target_models.first().is_some_and(|t| t.weight.is_some());
            let mut targets = Vec::new();
            for t in &r.target_models {
                let target = match (&t.model_server_name, &t.external_model_provider_name) {
                    (Some(s), _) => TargetRef::ModelServer(s.clone()),
                    (None, Some(p)) => TargetRef::ExternalProvider(p.clone()),
                    (None, None) => continue,
                };
                let w = if weighted { t.weight.unwrap_or(0) } else { 1 };
                targets.push((target, w));
            }
            let weighted_ok = !weighted || r.target_models.iter().all(|t| t.weight.is_some());
            if !weighted_ok {
                // Go skips such a route at match time; an empty target list does the same.
                targets.clear();
            }
            rules.push(CompiledRule {
                name: r.name.clone(),
                matcher,
                targets,
            });
        }
        Ok(Self {
            namespace: route
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into()),
            name: route.metadata.name.clone().unwrap_or_default(),
            model_name: route.spec.model_name.clone(),
            lora_adapters: route.spec.lora_adapters.clone(),
            rules,
            age,
            parent_refs: route.spec.parent_refs.clone(),
        })
    }

    /// `namespace/name`.
    #[must_use]
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    fn select_rule(&self, model: &str, headers: &HeaderMap, path: &str) -> Option<usize> {
        self.rules.iter().position(|r| match &r.matcher {
            None => true,
            Some(m) => {
                m.body_model.as_deref().is_none_or(|bm| bm == model)
                    && m.headers.iter().all(|(k, sm)| {
                        let v = headers
                            .get(k.as_str())
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or("");
                        sm.matches(v)
                    })
                    && m.uri.as_ref().is_none_or(|u| u.matches(path))
            }
        })
    }
}

impl CompiledRule {
    /// A weighted random target ([`super::weighted::pick`]); `None` when the total weight
    /// is 0.
    fn pick(&self, rng: &mut impl Rng) -> Option<&TargetRef> {
        super::weighted::pick(&self.targets, rng)
    }
}

/// Routes indexed by model name and LoRA adapter, each list oldest first.
#[derive(Debug, Clone, Default)]
pub struct RouteTable {
    by_model: HashMap<String, Vec<Arc<CompiledRoute>>>,
    by_lora: HashMap<String, Vec<Arc<CompiledRoute>>>,
    all: Vec<Arc<CompiledRoute>>,
}

impl RouteTable {
    /// Indexes compiled routes; duplicates are ordered by age, then `namespace/name`.
    #[must_use]
    pub fn new(routes: Vec<CompiledRoute>) -> Self {
        let mut all: Vec<Arc<CompiledRoute>> = routes.into_iter().map(Arc::new).collect();
        all.sort_by(|a, b| a.age.cmp(&b.age).then_with(|| a.key().cmp(&b.key())));
        let mut by_model: HashMap<String, Vec<Arc<CompiledRoute>>> = HashMap::new();
        let mut by_lora: HashMap<String, Vec<Arc<CompiledRoute>>> = HashMap::new();
        for r in &all {
            if !r.model_name.is_empty() {
                by_model
                    .entry(r.model_name.clone())
                    .or_default()
                    .push(Arc::clone(r));
            }
            for l in &r.lora_adapters {
                by_lora.entry(l.clone()).or_default().push(Arc::clone(r));
            }
        }
        Self {
            by_model,
            by_lora,
            all,
        }
    }

    /// Every route, oldest first.
    #[must_use]
    pub fn routes(&self) -> &[Arc<CompiledRoute>] {
        &self.all
    }

    /// Whether any route serves `model` (as model name or LoRA adapter).
    #[must_use]
    pub fn knows(&self, model: &str) -> bool {
        self.by_model.contains_key(model) || self.by_lora.contains_key(model)
    }

    /// Sorted, deduplicated model names and LoRA adapters (for `GET /v1/models`).
    #[must_use]
    pub fn model_names(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .by_model
            .keys()
            .chain(self.by_lora.keys())
            .cloned()
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// Matches a request: routes by model name, else by LoRA adapter; in each route the first
    /// matching rule; a weighted target of that rule. A route whose rule has no pickable
    /// target is skipped, and the next (newer) route is tried.
    ///
    /// # Errors
    /// [`MatchError::UnknownModel`] or [`MatchError::NoRule`].
    pub fn match_request(
        &self,
        model: &str,
        headers: &HeaderMap,
        path: &str,
        rng: &mut impl Rng,
        serves: impl Fn(&CompiledRoute) -> bool,
    ) -> Result<RouteMatch, MatchError> {
        let (routes, is_lora) = match self.by_model.get(model) {
            Some(r) => (r, false),
            None => match self.by_lora.get(model) {
                Some(r) => (r, true),
                None => return Err(MatchError::UnknownModel),
            },
        };
        let mut refused = None;
        let mut served = false;
        for route in routes {
            if !serves(route) {
                refused.get_or_insert(route);
                continue;
            }
            served = true;
            let Some(rule) = route.select_rule(model, headers, path) else {
                continue;
            };
            let Some(target) = route.rules[rule].pick(rng) else {
                continue;
            };
            return Ok(RouteMatch {
                route: Arc::clone(route),
                rule,
                target: target.clone(),
                is_lora,
            });
        }
        match refused {
            Some(r) if !served => Err(MatchError::NotAttached {
                namespace: r.namespace.clone(),
                name: r.name.clone(),
                parent_refs: r.parent_refs.clone(),
            }),
            _ => Err(MatchError::NoRule),
        }
    }
}

#[cfg(test)]
mod tests;
