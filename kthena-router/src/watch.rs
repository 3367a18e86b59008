//! Hot reload: watches the config file and the manifest files and folders; a valid change
//! swaps the routing snapshot atomically, an invalid one is logged with file, path and
//! reason while the previous snapshot keeps serving.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::discovery::Loader;
use crate::env::ProcessEnv;
use crate::error::Result;
use crate::overrides::{Overrides, load_config};
use crate::shared::Shared;

/// Quiet time after the last file event before reloading (editors write in several steps).
pub(crate) const DEBOUNCE: Duration = Duration::from_millis(150);

/// Starts watching and reloading; the returned unit only tells that the watcher started.
///
/// # Errors
/// [`crate::Error::Watch`] when the platform watcher cannot be created.
pub(crate) fn spawn_watcher(
    shared: Arc<Shared>,
    mut loader: Loader,
    config_path: PathBuf,
    overrides: Overrides,
    cancel: CancellationToken,
    tasks: &TaskTracker,
) -> Result<()> {
    let (tx, mut rx) = mpsc::unbounded_channel::<notify::Event>();
    let mut watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
        if let Ok(ev) = res {
            let _ = tx.send(ev);
        }
    })?;
    let mut watched: HashSet<PathBuf> = HashSet::new();
    let cfg_abs = absolute(&config_path);
    watch_all(&mut watcher, &mut watched, &watch_dirs(&cfg_abs, &shared));
    tasks.spawn(async move {
        loop {
            let ev = tokio::select! {
                () = cancel.cancelled() => return,
                ev = rx.recv() => ev,
            };
            let Some(ev) = ev else { return };
            if !is_relevant(&ev, &cfg_abs, &shared) {
                continue;
            }
            // Debounce: wait until the watched files are quiet. Only relevant events extend
            // the wait: an access log written beside the config under steady traffic must
            // not postpone the reload for ever.
            let mut quiet_at = tokio::time::Instant::now() + DEBOUNCE;
            loop {
                tokio::select! {
                    () = cancel.cancelled() => return,
                    () = tokio::time::sleep_until(quiet_at) => break,
                    more = rx.recv() => match more {
                        Some(ev) if is_relevant(&ev, &cfg_abs, &shared) => {
                            quiet_at = tokio::time::Instant::now() + DEBOUNCE;
                        }
                        Some(_) => {}
                        None => return,
                    },
                }
            }
            let result = load_config(&config_path, &ProcessEnv, overrides).and_then(|cfg| loader.load(&cfg, Some(&config_path)));
            match result {
                Ok(snap) => {
                    let generation = snap.generation;
                    shared.metrics.config_warnings(&snap.warnings);
                    shared.store_snapshot(Arc::new(snap));
                    shared.metrics.reload(true);
                    tracing::info!(generation, "Routing snapshot reloaded");
                    watch_all(&mut watcher, &mut watched, &watch_dirs(&cfg_abs, &shared));
                }
                Err(e) => {
                    shared.metrics.reload(false);
                    tracing::error!(error = %e, "Rejected configuration change; the previous snapshot keeps serving");
                }
            }
        }
    });
    Ok(())
}

fn absolute(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

fn watch_dirs(cfg: &Path, shared: &Shared) -> Vec<PathBuf> {
    let mut dirs = vec![cfg.parent().map(Path::to_path_buf).unwrap_or_default()];
    let snap = shared.snapshot.load();
    for f in &snap.files {
        let f = absolute(f);
        if let Some(d) = f.parent() {
            dirs.push(d.to_path_buf());
        }
    }
    // Folders listed in the config are watched too, so new files are seen.
    dirs.extend(snap.dirs.iter().map(|d| absolute(d)));
    dirs
}

fn watch_all(w: &mut notify::RecommendedWatcher, watched: &mut HashSet<PathBuf>, dirs: &[PathBuf]) {
    for d in dirs {
        if d.as_os_str().is_empty() || watched.contains(d) {
            continue;
        }
        match w.watch(d, RecursiveMode::NonRecursive) {
            Ok(()) => {
                watched.insert(d.clone());
            }
            Err(err) => tracing::warn!(dir = %d.display(), %err, "Cannot watch folder"),
        }
    }
}

/// Whether an event touches the config file, a manifest file of the current snapshot, or a
/// YAML/JSON file in a manifest folder it lists. Other files beside the config file (the
/// config's folder is watched to see editors' atomic renames) do not trigger a reload.
fn is_relevant(ev: &notify::Event, cfg: &Path, shared: &Shared) -> bool {
    if ev.kind.is_access() {
        return false;
    }
    let snap = shared.snapshot.load();
    ev.paths.iter().any(|p| {
        if p == cfg || snap.files.iter().any(|f| absolute(f) == *p) {
            return true;
        }
        let manifest_like = p
            .extension()
            .and_then(|x| x.to_str())
            .is_some_and(|x| matches!(x, "yaml" | "yml" | "json"));
        manifest_like
            && p.parent()
                .is_some_and(|d| snap.dirs.iter().any(|m| absolute(m) == d))
    })
}
