//! What a controller remembers of an object between its reconciles, for the object's
//! current generation: the Warning events already published (a reconcile that fails is
//! retried every 5 s and re-triggered by every watch event of the object's children, the
//! event is published once) and the pods whose create the API server refused.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, PoisonError};

use kube::{Resource, ResourceExt as _};

/// A `T` per object (by UID), reset when the object's `metadata.generation` changes and
/// dropped when the object is deleted ([`Memo::forget`]).
#[derive(Debug)]
pub(crate) struct Memo<T> {
    by_uid: Mutex<HashMap<String, Entry<T>>>,
}

impl<T> Default for Memo<T> {
    fn default() -> Self {
        Self {
            by_uid: Mutex::default(),
        }
    }
}

#[derive(Debug)]
struct Entry<T> {
    namespace: Option<String>,
    name: String,
    generation: Option<i64>,
    value: T,
}

impl<T: Default> Memo<T> {
    /// Runs `f` on the value of `obj`'s current generation (a new default one when `obj` is
    /// new or its generation changed since the last call) and returns what `f` returns.
    pub(crate) fn with<K: Resource, R>(&self, obj: &K, f: impl FnOnce(&mut T) -> R) -> R {
        let mut map = self.by_uid.lock().unwrap_or_else(PoisonError::into_inner);
        let generation = obj.meta().generation;
        let entry = map
            .entry(obj.uid().unwrap_or_default())
            .or_insert_with(|| Entry {
                namespace: obj.namespace(),
                name: obj.name_any(),
                generation,
                value: T::default(),
            });
        if entry.generation != generation {
            entry.generation = generation;
            entry.value = T::default();
        }
        f(&mut entry.value)
    }

    /// Forgets the object `namespace/name` (deleted; every UID it had).
    pub(crate) fn forget(&self, namespace: Option<&str>, name: &str) {
        let mut map = self.by_uid.lock().unwrap_or_else(PoisonError::into_inner);
        map.retain(|_, e| e.namespace.as_deref() != namespace || e.name != name);
    }

    /// How many objects are remembered.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.by_uid
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

/// The Warning events published for an object's generation: `(reason, note)`.
pub(crate) type Warnings = BTreeSet<(&'static str, String)>;

impl Memo<Warnings> {
    /// Whether the Warning `reason` with `note` has not been published for this generation
    /// of `obj` yet (it is now, as far as the memo is concerned): once per distinct note and
    /// generation.
    pub(crate) fn first_warning<K: Resource>(
        &self,
        obj: &K,
        reason: &'static str,
        note: &str,
    ) -> bool {
        self.with(obj, |seen| seen.insert((reason, note.to_owned())))
    }
}

/// The pods of an object's generation whose create the API server refused, or that were not
/// tried after such a refusal, and that have not been seen since.
pub(crate) type NotCreated = BTreeSet<String>;

impl Memo<NotCreated> {
    /// Remembers that `pods` of `obj` were not created.
    pub(crate) fn not_created<K: Resource>(&self, obj: &K, pods: impl IntoIterator<Item = String>) {
        self.with(obj, |record| record.extend(pods));
    }

    /// The pods of `obj` not created at this generation and not in `existing` (pod names):
    /// those that exist now are forgotten.
    pub(crate) fn still_missing<'a, K: Resource>(
        &self,
        obj: &K,
        existing: impl IntoIterator<Item = &'a str>,
    ) -> BTreeSet<String> {
        self.with(obj, |record| {
            for name in existing {
                record.remove(name);
            }
            record.clone()
        })
    }
}

#[cfg(test)]
mod tests;
