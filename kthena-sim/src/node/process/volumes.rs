//! A pod's volumes on the local disk: ConfigMap, Secret and emptyDir volumes written under
//! `<pod dir>/volumes/<volume>/`, each volumeMount a symbolic link at
//! `<pod dir>/root/<mountPath>` to its volume (or the volume's `subPath`), and paths under a
//! mount rewritten to the link.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, KeyToPath, Pod, Volume};

use super::env::Sources;
use super::io_message;

/// Writes every volume of `pod` under `dir/volumes/`: a ConfigMap or Secret volume gets one
/// file per key (or per `items` entry, at its `path`), an emptyDir an empty directory; any
/// other kind an empty directory too (logged). File modes are `defaultMode`/`mode`, else
/// 0644.
///
/// # Errors
/// A message when a ConfigMap or Secret (or an `items` key) is missing and the volume is
/// not `optional`, an item's path leaves the volume, or writing fails.
pub(super) fn write_volumes(dir: &Path, pod: &Pod, sources: &Sources) -> Result<(), String> {
    for v in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
        let target = dir.join("volumes").join(&v.name);
        std::fs::create_dir_all(&target).map_err(|e| io_message("creating", &target, &e))?;
        let (kind, name, data, items, optional, mode) = if let Some(cm) = &v.config_map {
            let data = sources.config_maps.get(&cm.name).and_then(Option::as_ref);
            (
                "ConfigMap",
                cm.name.clone(),
                data,
                &cm.items,
                cm.optional,
                cm.default_mode,
            )
        } else if let Some(s) = &v.secret {
            let name = s.secret_name.clone().unwrap_or_default();
            let data = sources.secrets.get(&name).and_then(Option::as_ref);
            ("Secret", name, data, &s.items, s.optional, s.default_mode)
        } else {
            warn_unsupported(v);
            continue;
        };
        let Some(data) = data else {
            if optional.unwrap_or(false) {
                continue;
            }
            return Err(format!("volume {}: {kind} {name} not found", v.name));
        };
        write_files(&target, data, items.as_deref(), mode)
            .map_err(|e| format!("volume {}: {e}", v.name))?;
    }
    Ok(())
}

fn warn_unsupported(v: &Volume) {
    if v.empty_dir.is_none() {
        tracing::warn!(volume = %v.name, "Volume kind not supported by the simulated node: an empty directory instead.");
    }
}

fn write_files(
    target: &Path,
    data: &BTreeMap<String, Vec<u8>>,
    items: Option<&[KeyToPath]>,
    default_mode: Option<i32>,
) -> Result<(), String> {
    let files: Vec<(&str, &[u8], Option<i32>)> = match items {
        Some(items) => items
            .iter()
            .map(|i| {
                let value = data
                    .get(&i.key)
                    .ok_or_else(|| format!("key {:?} not found", i.key))?;
                Ok((i.path.as_str(), value.as_slice(), i.mode))
            })
            .collect::<Result<_, String>>()?,
        None => data
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_slice(), None))
            .collect(),
    };
    for (path, value, mode) in files {
        let rel = relative(path).ok_or_else(|| format!("path {path:?} leaves the volume"))?;
        let file = target.join(rel);
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent).map_err(|e| io_message("creating", parent, &e))?;
        }
        std::fs::write(&file, value).map_err(|e| io_message("writing", &file, &e))?;
        set_mode(&file, mode.or(default_mode).unwrap_or(0o644))?;
    }
    Ok(())
}

fn set_mode(file: &Path, mode: i32) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt as _;
    let mode = u32::try_from(mode).unwrap_or(0o644) & 0o777;
    std::fs::set_permissions(file, std::fs::Permissions::from_mode(mode))
        .map_err(|e| io_message("setting the mode of", file, &e))
}

/// `path` as a relative path without `..`, or `None`.
fn relative(path: &str) -> Option<PathBuf> {
    let p = Path::new(path);
    p.components()
        .all(|c| matches!(c, Component::Normal(_)))
        .then(|| p.to_owned())
        .filter(|p| !p.as_os_str().is_empty())
}

/// Links each volumeMount of `c` into `dir/root` and returns the mount paths (longest
/// first, for [`rewrite`]).
///
/// # Errors
/// A message when a mount names no volume of the pod's directory, its `subPath` leaves the
/// volume, or the link cannot be made.
pub(super) fn mount(dir: &Path, c: &Container) -> Result<Vec<String>, String> {
    let root = dir.join("root");
    let mut paths = Vec::new();
    for m in c.volume_mounts.iter().flatten() {
        let mut source = dir.join("volumes").join(&m.name);
        if !source.is_dir() {
            return Err(format!(
                "volumeMount {}: no volume {:?}",
                m.mount_path, m.name
            ));
        }
        if let Some(sub) = m.sub_path.as_deref().filter(|s| !s.is_empty()) {
            let rel = relative(sub).ok_or_else(|| format!("subPath {sub:?} leaves the volume"))?;
            source = source.join(rel);
        }
        let mount_path = m.mount_path.trim_end_matches('/');
        let rel = relative(mount_path.trim_start_matches('/'))
            .ok_or_else(|| format!("mountPath {:?} is not a plain absolute path", m.mount_path))?;
        let link = root.join(rel);
        if let Some(parent) = link.parent() {
            std::fs::create_dir_all(parent).map_err(|e| io_message("creating", parent, &e))?;
        }
        if std::fs::symlink_metadata(&link).is_ok() {
            std::fs::remove_file(&link).map_err(|e| io_message("replacing", &link, &e))?;
        }
        std::os::unix::fs::symlink(&source, &link).map_err(|e| io_message("linking", &link, &e))?;
        paths.push(mount_path.to_owned());
    }
    paths.sort_by_key(|p| std::cmp::Reverse(p.len()));
    Ok(paths)
}

/// `word` with a path under one of `mounts` moved under `root`: the whole word
/// (`/etc/tls/tls.crt`) or the value of a `--flag=PATH` word. Other words are unchanged.
pub(super) fn rewrite(word: &str, mounts: &[String], root: &Path) -> String {
    let (head, path) = match word.split_once('=') {
        Some((flag, value)) if flag.starts_with('-') => (Some(flag), value),
        _ => (None, word),
    };
    let under = mounts.iter().any(|m| {
        path == m
            || path
                .strip_prefix(m.as_str())
                .is_some_and(|rest| rest.starts_with('/'))
    });
    if !under {
        return word.to_owned();
    }
    let moved = format!("{}{path}", root.display());
    match head {
        Some(flag) => format!("{flag}={moved}"),
        None => moved,
    }
}
