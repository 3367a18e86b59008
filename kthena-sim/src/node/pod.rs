//! What the simulated node reads from a pod (engine flags, test annotations) and the pod
//! statuses it writes. Pure functions: the times come in as parameters.

use std::net::IpAddr;

use clap::{CommandFactory as _, FromArgMatches as _, Parser};
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStatus,
    HostIP, Pod, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::{ARGS_ANNOTATION, EXIT_ANNOTATION, READY_ANNOTATION};
use crate::config::{Config, Flavor, KvEventsFormat};

/// Port an engine listens on when the pod declares none (vLLM's default).
const DEFAULT_PORT: u16 = 8000;

/// `kthena-sim` flags, for `sim.kthena.io/args` and containers that run `kthena-sim` itself.
#[derive(Debug, Parser)]
#[command(name = "kthena-sim", no_binary_name = true)]
struct EngineArgs {
    #[command(flatten)]
    config: Config,
}

/// The engine of `pod`: the container of [`engine_container`], with flags from the pod.
///
/// Every setting takes the first value found in:
/// 1. the `sim.kthena.io/args` annotation, when it writes that flag;
/// 2. the engine container: for a container that runs `kthena-sim`, every flag of its
///    args; for any other container, the model (`--served-model-name`, `--model`,
///    `--model-path`, `vllm serve <model>`, env `MODEL_NAME` or `MODEL`, in that order of
///    preference) and the SGLang flavor (a command or argument mentioning `sglang`); for
///    both, the port (the first `containerPort`, else `--port`, else 8000); for any other
///    container, the KV-event publisher of `--kv-events-config` (see [`apply_kv_events`]).
///    A `sh -c SCRIPT` command line is read with its script split as the shell would
///    (Kthena's examples start their engines that way);
/// 3. kthena-sim's own defaults when the pod has the annotation or runs `kthena-sim`,
///    else `base` (the node's defaults).
///
/// # Errors
/// A message when the pod has no container or its kthena-sim flags do not parse (the
/// container then fails).
pub(super) fn engine_config(pod: &Pod, base: &Config) -> Result<Config, String> {
    let container = engine_container(pod).ok_or("the pod has no container")?;
    let script_words = shell_words(container);
    let words: Vec<&str> = script_words.iter().map(String::as_str).collect();
    let annotation = annotation(pod, ARGS_ANNOTATION);
    let runs_sim = runs_sim(container);
    // The layers from the bottom up, each writing over the one below.
    let mut config = if runs_sim || annotation.is_some() {
        sim_defaults()?
    } else {
        base.clone()
    };
    if runs_sim {
        config = apply_flags(config, words.iter().skip(1).copied())?;
    } else {
        if let Some(model) = model_name(&words, container) {
            config.model = model;
        }
        if words.iter().any(|w| w.contains("sglang")) {
            config.flavor = Flavor::Sglang;
        }
        apply_kv_events(&mut config, &words, pod)?;
    }
    config.port = container_port(container)
        .or_else(|| flag_value(&words, "--port").and_then(|p| p.parse().ok()))
        .unwrap_or(DEFAULT_PORT);
    if let Some(args) = annotation {
        config = apply_flags(config, args.split_whitespace())?;
    }
    Ok(config)
}

/// kthena-sim's defaults, as `kthena-sim` without flags has them (the environment
/// variables some flags read included).
fn sim_defaults() -> Result<Config, String> {
    EngineArgs::try_parse_from(std::iter::empty::<&str>())
        .map(|a| a.config)
        .map_err(|e| render(&e))
}

/// `config` with the kthena-sim flags in `words` written over it: the settings the words
/// do not write keep their values.
///
/// # Errors
/// The argument parser's message when the words are not valid kthena-sim flags.
fn apply_flags<'a>(
    mut config: Config,
    words: impl IntoIterator<Item = &'a str>,
) -> Result<Config, String> {
    // Without defaults and environment variables, the matches hold what the words write,
    // and nothing else.
    let matches = EngineArgs::command()
        .mut_args(|a| a.default_value(None).env(None))
        .try_get_matches_from(words)
        .map_err(|e| render(&e))?;
    config
        .update_from_arg_matches(&matches)
        .map_err(|e| render(&e))?;
    Ok(config)
}

fn render(e: &clap::Error) -> String {
    e.render().to_string().trim().to_owned()
}

/// The command, then the args, of `c`.
fn words(c: &Container) -> Vec<&str> {
    c.command
        .iter()
        .chain(c.args.iter())
        .flatten()
        .map(String::as_str)
        .collect()
}

/// [`words`], with the script of `sh -c SCRIPT` (or bash, dash, ash, zsh) split as the
/// shell would ([`kthena_kvevents::shell_words`]); a script that cannot be split stays one
/// word.
fn shell_words(c: &Container) -> Vec<String> {
    let words = words(c);
    kthena_kvevents::shell_words(&words)
        .unwrap_or_else(|_| words.iter().map(|w| (*w).to_owned()).collect())
}

/// Makes the engine publish KV events as the container's `--kv-events-config` asks (vLLM's
/// `vllm/config/kv_events.py` `KVEventsConfig`, SGLang's same flag; read by
/// [`kthena_kvevents::PublisherConfig::from_command`]): with a `zmq` publisher whose
/// endpoint the engine binds (`tcp://*:PORT`), events go out on that port at the pod's
/// address with the configured topic (vLLM's default `""`), the replay socket listens on
/// the `replay_endpoint`'s port when one is set, and an SGLang engine encodes them in the
/// array form. Without the flag, the annotations the router reads
/// (`kthena.io/kv-events-endpoint`, `kthena.io/kv-events-replay-endpoint`) do the same.
/// With publisher `null`, or with an endpoint the engine would connect to or that is not TCP
/// (logged), nothing changes. `buffer_steps` is not
/// read: the buffer keeps kthena-sim's default (10,000 batches, vLLM's default too).
///
/// # Errors
/// A message when the flag's value is not a JSON object of the expected shape.
fn apply_kv_events(config: &mut Config, words: &[&str], pod: &Pod) -> Result<(), String> {
    let publisher = kthena_kvevents::PublisherConfig::from_command(words)
        .map_err(|e| format!("{}: {e}", kthena_kvevents::KV_EVENTS_FLAG))?;
    let publisher = match publisher {
        Some(p) => p,
        None => match annotation(pod, kthena_kvevents::ENDPOINT_ANNOTATION) {
            Some(endpoint) => kthena_kvevents::PublisherConfig::from_annotations(
                endpoint,
                annotation(pod, kthena_kvevents::REPLAY_ANNOTATION),
            )
            .map_err(|e| format!("{}: {e}", kthena_kvevents::ENDPOINT_ANNOTATION))?,
            None => return Ok(()),
        },
    };
    let ports = publisher
        .port()
        .and_then(|p| Ok((p, publisher.replay_port()?)));
    let (port, replay) = match ports {
        Ok(ports) if publisher.binds() => ports,
        Ok(_) | Err(_) => {
            tracing::warn!(endpoint = %publisher.endpoint, "The KV-event endpoint is not a bound TCP port; the simulated engine publishes no KV events.");
            return Ok(());
        }
    };
    config.kv_events_port = Some(port);
    config.kv_events_replay_port = replay;
    config.kv_events_topic = Some(publisher.topic);
    if config.flavor == Flavor::Sglang {
        config.kv_events_format = KvEventsFormat::Array;
    }
    Ok(())
}

/// Whether `c`'s command is the `kthena-sim` binary.
fn runs_sim(c: &Container) -> bool {
    c.command
        .as_ref()
        .and_then(|c| c.first())
        .is_some_and(|c| c.ends_with("kthena-sim"))
}

/// The container that runs the engine. Kthena's runtime sidecar (a container with the
/// `--engine-base-url` flag: it reaches the engine, it is not one) is skipped unless every
/// container is one. Of the others: the first that looks like an engine (it runs
/// `kthena-sim`, its command or args mention `vllm` or `sglang`, or it passes
/// `--served-model-name`, `--model` or `--model-path`), else the first that declares a
/// `containerPort`, else the first.
pub(super) fn engine_container(pod: &Pod) -> Option<&Container> {
    let all = &pod.spec.as_ref()?.containers;
    let mut candidates: Vec<&Container> = all.iter().filter(|c| !is_runtime(c)).collect();
    if candidates.is_empty() {
        candidates = all.iter().collect();
    }
    let has_port = |c: &&&Container| c.ports.as_ref().is_some_and(|p| !p.is_empty());
    candidates
        .iter()
        .find(|c| looks_like_engine(c))
        .or_else(|| candidates.iter().find(has_port))
        .or_else(|| candidates.first())
        .copied()
}

/// Kthena's runtime sidecar (`python/kthena/runtime`, ModelBooster's `runtime` container):
/// it is told where the engine is with `--engine-base-url`.
fn is_runtime(c: &Container) -> bool {
    has_flag(&words(c), "--engine-base-url")
}

fn looks_like_engine(c: &Container) -> bool {
    let words = words(c);
    runs_sim(c)
        || words
            .iter()
            .any(|w| w.contains("vllm") || w.contains("sglang"))
        || ["--served-model-name", "--model", "--model-path"]
            .iter()
            .any(|f| has_flag(&words, f))
}

fn container_port(c: &Container) -> Option<u16> {
    let port = c.ports.as_ref()?.first()?.container_port;
    u16::try_from(port).ok().filter(|p| *p != 0)
}

/// Whether `words` pass `flag` (`--flag`, `--flag value` or `--flag=value`).
fn has_flag(words: &[&str], flag: &str) -> bool {
    words.iter().any(|w| {
        *w == flag
            || w.strip_prefix(flag)
                .is_some_and(|rest| rest.starts_with('='))
    })
}

/// `--flag value` or `--flag=value`.
fn flag_value<'a>(words: &[&'a str], flag: &str) -> Option<&'a str> {
    words.iter().enumerate().find_map(|(i, w)| {
        if *w == flag {
            words.get(i + 1).copied()
        } else {
            w.strip_prefix(flag).and_then(|rest| rest.strip_prefix('='))
        }
    })
}

fn model_name(words: &[&str], c: &Container) -> Option<String> {
    let from_flags = ["--served-model-name", "--model", "--model-path"]
        .iter()
        .find_map(|f| flag_value(words, f));
    let positional = words
        .iter()
        .position(|w| *w == "serve")
        .and_then(|i| words.get(i + 1))
        .filter(|w| !w.starts_with('-'))
        .copied();
    let env = |name: &str| {
        c.env
            .iter()
            .flatten()
            .find(|e| e.name == name)
            .and_then(|e| e.value.clone())
    };
    from_flags
        .or(positional)
        .map(str::to_owned)
        .or_else(|| env("MODEL_NAME"))
        .or_else(|| env("MODEL"))
}

fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

/// Whether the test wants the pod Ready: anything but `sim.kthena.io/ready: "false"`.
pub(super) fn ready_wanted(pod: &Pod) -> bool {
    annotation(pod, READY_ANNOTATION) != Some("false")
}

/// The exit code asked for by `sim.kthena.io/exit-code` (an integer), if any.
pub(super) fn exit_requested(pod: &Pod) -> Option<i32> {
    annotation(pod, EXIT_ANNOTATION).and_then(|v| v.trim().parse().ok())
}

/// Whether the pod is finished (`Succeeded` or `Failed`): the node leaves it alone.
pub(super) fn is_finished(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    matches!(phase, Some("Succeeded" | "Failed"))
}

/// Status of a pod whose engine runs at `ip`: phase `Running`, every container running,
/// `Ready`/`ContainersReady` as `ready`.
pub(super) fn running_status(
    pod: &Pod,
    ip: IpAddr,
    ready: bool,
    started: &Time,
    now: &Time,
) -> PodStatus {
    let state = ContainerState {
        running: Some(ContainerStateRunning {
            started_at: Some(started.clone()),
        }),
        ..ContainerState::default()
    };
    PodStatus {
        phase: Some("Running".to_owned()),
        container_statuses: Some(container_statuses(pod, &state, ready)),
        conditions: Some(conditions(ready, started, now)),
        ..base_status(ip, started)
    }
}

/// Status of a pod whose engine exited with `exit_code`: phase `Failed` (`Succeeded` for
/// 0), containers terminated, not Ready.
pub(super) fn terminated_status(
    pod: &Pod,
    ip: Option<IpAddr>,
    exit_code: i32,
    message: &str,
    started: &Time,
    now: &Time,
) -> PodStatus {
    let state = ContainerState {
        terminated: Some(ContainerStateTerminated {
            exit_code,
            reason: Some(if exit_code == 0 { "Completed" } else { "Error" }.to_owned()),
            message: Some(message.to_owned()).filter(|m| !m.is_empty()),
            started_at: Some(started.clone()),
            finished_at: Some(now.clone()),
            ..ContainerStateTerminated::default()
        }),
        ..ContainerState::default()
    };
    let base = match ip {
        Some(ip) => base_status(ip, started),
        None => PodStatus {
            start_time: Some(started.clone()),
            ..PodStatus::default()
        },
    };
    PodStatus {
        phase: Some(
            if exit_code == 0 {
                "Succeeded"
            } else {
                "Failed"
            }
            .to_owned(),
        ),
        container_statuses: Some(container_statuses(pod, &state, false)),
        conditions: Some(conditions(false, started, now)),
        ..base
    }
}

fn base_status(ip: IpAddr, started: &Time) -> PodStatus {
    PodStatus {
        host_ip: Some("127.0.0.1".to_owned()),
        host_ips: Some(vec![HostIP {
            ip: "127.0.0.1".to_owned(),
        }]),
        pod_ip: Some(ip.to_string()),
        pod_ips: Some(vec![PodIP { ip: ip.to_string() }]),
        start_time: Some(started.clone()),
        ..PodStatus::default()
    }
}

fn container_statuses(pod: &Pod, state: &ContainerState, ready: bool) -> Vec<ContainerStatus> {
    let containers = pod
        .spec
        .as_ref()
        .map(|s| s.containers.as_slice())
        .unwrap_or_default();
    containers
        .iter()
        .map(|c| ContainerStatus {
            name: c.name.clone(),
            image: c.image.clone().unwrap_or_default(),
            image_id: String::new(),
            container_id: Some(format!("kthena-sim://{}", c.name)),
            ready,
            started: Some(state.running.is_some()),
            restart_count: 0,
            state: Some(state.clone()),
            ..ContainerStatus::default()
        })
        .collect()
}

/// `PodScheduled` and `Initialized` since `started`; `ContainersReady` and `Ready` as `ready`
/// since `now`.
fn conditions(ready: bool, started: &Time, now: &Time) -> Vec<PodCondition> {
    let status = |b: bool| if b { "True" } else { "False" }.to_owned();
    [
        ("PodScheduled", true, started),
        ("Initialized", true, started),
        ("ContainersReady", ready, now),
        ("Ready", ready, now),
    ]
    .into_iter()
    .map(|(type_, ok, since)| PodCondition {
        type_: type_.to_owned(),
        status: status(ok),
        last_transition_time: Some(since.clone()),
        ..PodCondition::default()
    })
    .collect()
}

#[cfg(test)]
mod tests;
