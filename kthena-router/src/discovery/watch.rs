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

use crate::config::env::ProcessEnv;
use crate::config::overrides::{Overrides, load_config};
use crate::discovery::Loader;
use crate::error::Result;
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
    started: crate::config::Config,
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
    let mut known = Known::now(&config_path, &shared);
    known.want(&started);
    sync_watches(&mut watcher, &mut watched, &known.dirs(&shared));
    tasks.spawn(async move {
        loop {
            let ev = tokio::select! {
                () = cancel.cancelled() => return,
                ev = rx.recv() => ev,
            };
            let Some(ev) = ev else { return };
            if !known.is_relevant(&ev, &shared) {
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
                        Some(ev) if known.is_relevant(&ev, &shared) => {
                            quiet_at = tokio::time::Instant::now() + DEBOUNCE;
                        }
                        Some(_) => {}
                        None => return,
                    },
                }
            }
            let mut cold_start = None;
            let result = load_config(&config_path, &ProcessEnv, overrides).and_then(|cfg| {
                warn_start_only(&started, &cfg);
                cold_start = Some(cfg.cold_start);
                // Watched even when this load fails: a listed path that does not exist yet
                // (a ConfigMap mounted later) reloads once it appears.
                known.want(&cfg);
                loader.load(&cfg, Some(&config_path))
            });
            match result {
                Ok(snap) => {
                    let generation = snap.generation;
                    shared.metrics.config_warnings(&snap.warnings);
                    if let Some(c) = cold_start {
                        shared.cold_start.set_config(c);
                    }
                    shared.store_snapshot(Arc::new(snap));
                    shared.metrics.reload(true);
                    tracing::info!(generation, "Routing snapshot reloaded");
                    let wanted = std::mem::take(&mut known.wanted);
                    known = Known::now(&config_path, &shared);
                    known.wanted = wanted;
                }
                Err(e) => {
                    shared.metrics.reload(false);
                    tracing::error!(error = %e, "Rejected configuration change; the previous snapshot keeps serving");
                }
            }
            sync_watches(&mut watcher, &mut watched, &known.dirs(&shared));
        }
    });
    Ok(())
}

/// Warns when the reloaded config changes settings read at start only.
fn warn_start_only(started: &crate::config::Config, cfg: &crate::config::Config) {
    let changed = started.start_only_changes(cfg);
    if !changed.is_empty() {
        tracing::warn!(
            settings = %changed.join(", "),
            "Settings read at start only changed in the config; the running values stay until a restart"
        );
    }
}

fn absolute(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

/// `p` with its folder's symlinks resolved but not its own: the path a change of `p`
/// itself (an editor's rename, a symlink replaced) is reported under.
fn as_linked(p: &Path) -> PathBuf {
    match (p.parent(), p.file_name()) {
        (Some(d), Some(name)) if !d.as_os_str().is_empty() => absolute(d).join(name),
        _ => absolute(p),
    }
}

/// The Kubernetes ConfigMap volume's link to its current data folder: the kubelet
/// updates a mounted ConfigMap by pointing `..data` at a new folder (one atomic rename) and
/// deleting the old one; the files are links through `..data`.
const CONFIGMAP_DATA: &str = "..data";

/// The files the last load read, as the kernel names them: the config file and manifest
/// files both as linked and as resolved at that load (after a ConfigMap update, the
/// events name the old resolved paths, which no longer resolve to the same place).
struct Known {
    /// The config file as linked.
    config: PathBuf,
    /// Every file of the last load: as linked and resolved.
    files: HashSet<PathBuf>,
    /// The `standalone.manifests` paths of the last config read (as linked), loaded or not:
    /// a folder deleted and made again, or a path that appears later, reloads.
    wanted: HashSet<PathBuf>,
}

impl Known {
    fn now(config: &Path, shared: &Shared) -> Self {
        let snap = shared.snapshot.load();
        let mut files = HashSet::new();
        for f in std::iter::once(config).chain(snap.files.iter().map(PathBuf::as_path)) {
            files.insert(absolute(f));
            files.insert(as_linked(f));
        }
        Self {
            config: as_linked(config),
            files,
            wanted: HashSet::new(),
        }
    }

    /// Notes `cfg`'s manifest paths as wanted.
    fn want(&mut self, cfg: &crate::config::Config) {
        self.wanted = cfg.manifest_paths().iter().map(|p| as_linked(p)).collect();
    }

    /// The folders to watch: those of the config file and the manifest files (as linked
    /// and resolved, so that both an edit and a ConfigMap update are seen) and the
    /// manifest folders the config lists.
    fn dirs(&self, shared: &Shared) -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = self
            .files
            .iter()
            .filter_map(|f| f.parent().map(Path::to_path_buf))
            .collect();
        if let Some(d) = self.config.parent() {
            dirs.push(d.to_path_buf());
        }
        // A wanted path's folder sees it made or deleted; a wanted folder, its files.
        dirs.extend(
            self.wanted
                .iter()
                .filter_map(|p| p.parent().map(Path::to_path_buf)),
        );
        dirs.extend(self.wanted.iter().filter(|p| p.is_dir()).cloned());
        dirs.extend(shared.snapshot.load().dirs.iter().map(|d| absolute(d)));
        dirs.sort();
        dirs.dedup();
        dirs
    }

    /// Whether an event touches the config file, a file of the last load (as linked or as
    /// resolved then or now), a ConfigMap's `..data` link beside one of them or in a
    /// manifest folder, or a YAML/JSON file in a manifest folder. Other files beside the
    /// config file (its folder is watched to see editors' atomic renames) do not trigger a
    /// reload.
    fn is_relevant(&self, ev: &notify::Event, shared: &Shared) -> bool {
        if ev.kind.is_access() {
            return false;
        }
        let snap = shared.snapshot.load();
        let in_manifest_dir = |d: &Path| snap.dirs.iter().any(|m| absolute(m) == d);
        ev.paths.iter().any(|p| {
            if *p == self.config
                || self.files.contains(p)
                || self.wanted.contains(p)
                || snap.files.iter().any(|f| absolute(f) == *p)
            {
                return true;
            }
            let Some(dir) = p.parent() else {
                return false;
            };
            if p.file_name().is_some_and(|n| n == CONFIGMAP_DATA) {
                return in_manifest_dir(dir) || self.files.iter().any(|f| f.parent() == Some(dir));
            }
            let manifest_like = p
                .extension()
                .and_then(|x| x.to_str())
                .is_some_and(|x| matches!(x, "yaml" | "yml" | "json"));
            manifest_like && (in_manifest_dir(dir) || self.wanted.contains(dir))
        })
    }
}

/// Watches `dirs` (again each time: a folder deleted and made again is a new one to the
/// kernel) and stops watching the folders no longer among them (a ConfigMap's old data
/// folder, a manifest folder removed from the config). A folder that does not exist is
/// skipped; its parent is watched to see it appear.
fn sync_watches(
    w: &mut notify::RecommendedWatcher,
    watched: &mut HashSet<PathBuf>,
    dirs: &[PathBuf],
) {
    watched.retain(|d| {
        if dirs.contains(d) {
            return true;
        }
        // A deleted folder's watch is already gone; there is nothing to report then.
        let _ = w.unwatch(d);
        false
    });
    for d in dirs {
        if d.as_os_str().is_empty() || !d.is_dir() {
            watched.remove(d);
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
