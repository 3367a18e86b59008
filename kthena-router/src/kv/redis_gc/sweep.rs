//! The Redis calls of one garbage-collection round: the bounded `SCAN` over the block keys
//! and the in-flight hash, each stale field deleted with [`DELETE_IF_UNCHANGED`].

use std::time::Duration;

use super::{
    BLOCKS, DELETE_IF_UNCHANGED, GcReport, GcRules, GcVerdict, IN_FLIGHT, Link, MAPPING,
    SCAN_BATCH, mapping_owner,
};
use crate::kv::redis::KEY_PREFIX;
use crate::upstream::inflight::ON_FLIGHT_KEY;

/// The fields of one hash to delete: `(field, value as read, verdict)`.
type Stale = Vec<(String, String, GcVerdict)>;

/// Runs `f` on `link`'s connection (opened with `timeout` when needed); on an error the
/// connection is dropped and the error counted under `(hash, stage)`.
fn call<T>(
    link: &mut Link,
    timeout: Duration,
    report: &mut GcReport,
    hash: &'static str,
    stage: &'static str,
    f: impl FnOnce(&mut redis::Connection) -> redis::RedisResult<T>,
) -> Option<T> {
    if link.conn.is_none() {
        let opened = link
            .client
            .get_connection_with_timeout(timeout)
            .and_then(|c| {
                c.set_read_timeout(Some(timeout))?;
                c.set_write_timeout(Some(timeout))?;
                Ok(c)
            });
        match opened {
            Ok(c) => link.conn = Some(c),
            Err(e) => {
                tracing::debug!(error = %e, "Redis garbage collection cannot connect");
                *report.errors.entry((hash, "connect")).or_default() += 1;
                return None;
            }
        }
    }
    let conn = link.conn.as_mut()?;
    match f(conn) {
        Ok(v) => Some(v),
        Err(e) => {
            tracing::debug!(error = %e, stage, "Redis garbage collection call failed");
            link.conn = None;
            *report.errors.entry((hash, stage)).or_default() += 1;
            None
        }
    }
}

/// Continues the `SCAN` walk at `cursor` for at most `budget` keys (the sum of the `COUNT`s)
/// and deletes the stale owner fields of the block keys it returns and the hash-mapping
/// keys of deleted pods; stops at the first failed call.
pub(super) fn blocks(
    link: &mut Link,
    timeout: Duration,
    cursor: &mut u64,
    budget: usize,
    rules: &mut GcRules,
    report: &mut GcReport,
) {
    let pattern = "*:kv:block:*";
    let block_prefix = format!("{KEY_PREFIX}:");
    let mut left = budget;
    while left > 0 {
        let count = left.min(SCAN_BATCH);
        left -= count;
        let at = *cursor;
        let Some((next, keys)) = call(link, timeout, report, BLOCKS, "scan", |c| {
            redis::cmd("SCAN")
                .arg(at)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(count)
                .query::<(u64, Vec<String>)>(c)
        }) else {
            return;
        };
        report.scanned += keys.len() as u64;
        let (blocks, others): (Vec<String>, Vec<String>) =
            keys.into_iter().partition(|k| k.starts_with(&block_prefix));
        if !blocks.is_empty() {
            collect_keys(link, timeout, &blocks, rules, report);
        }
        collect_mappings(link, timeout, &others, rules, report);
        if !report.errors.is_empty() {
            // Redis failed: the next round reads these keys again.
            return;
        }
        *cursor = next;
        if next == 0 {
            report.pass_done = true;
            return;
        }
    }
}

/// Reads `keys` (one pipelined `HGETALL` each) and deletes their stale fields.
fn collect_keys(
    link: &mut Link,
    timeout: Duration,
    keys: &[String],
    rules: &mut GcRules,
    report: &mut GcReport,
) {
    let mut pipe = redis::pipe();
    for k in keys {
        pipe.cmd("HGETALL").arg(k);
    }
    let Some(maps) = call(link, timeout, report, BLOCKS, "read", |c| {
        pipe.query::<Vec<Vec<(String, String)>>>(c)
    }) else {
        return;
    };
    let doomed: Vec<(&String, Stale)> = keys
        .iter()
        .zip(maps)
        .map(|(k, fields)| {
            let stale: Stale = fields
                .into_iter()
                .map(|(f, v)| {
                    let verdict = rules.block_field(&f, &v);
                    (f, v, verdict)
                })
                .filter(|(_, _, v)| *v != GcVerdict::Keep)
                .collect();
            (k, stale)
        })
        .filter(|(_, s)| !s.is_empty())
        .collect();
    delete(link, timeout, BLOCKS, &doomed, report);
}

/// Deletes the hash-mapping keys among `keys` whose pod is gone (`DEL`, pipelined).
fn collect_mappings(
    link: &mut Link,
    timeout: Duration,
    keys: &[String],
    rules: &mut GcRules,
    report: &mut GcReport,
) {
    let doomed: Vec<&String> = keys
        .iter()
        .filter(|k| mapping_owner(k).is_some_and(|o| rules.mapping_key(o) != GcVerdict::Keep))
        .collect();
    if doomed.is_empty() {
        return;
    }
    let mut pipe = redis::pipe();
    for k in &doomed {
        pipe.cmd("DEL").arg(*k);
    }
    let Some(gone) = call(link, timeout, report, MAPPING, "delete", |c| {
        pipe.query::<Vec<u64>>(c)
    }) else {
        return;
    };
    let n: u64 = gone.iter().sum();
    if n > 0 {
        *report.removed.entry((MAPPING, "deleted_pod")).or_default() += n;
        *report.keys_removed.entry(MAPPING).or_default() += n;
    }
}

/// Deletes the fields of the in-flight hash whose pod is gone.
pub(super) fn in_flight(
    link: &mut Link,
    timeout: Duration,
    rules: &mut GcRules,
    report: &mut GcReport,
) {
    let Some(fields) = call(link, timeout, report, IN_FLIGHT, "read", |c| {
        redis::cmd("HGETALL")
            .arg(ON_FLIGHT_KEY)
            .query::<Vec<(String, String)>>(c)
    }) else {
        return;
    };
    let stale: Stale = fields
        .into_iter()
        .map(|(f, v)| {
            let verdict = rules.in_flight_field(&f);
            (f, v, verdict)
        })
        .filter(|(_, _, v)| *v != GcVerdict::Keep)
        .collect();
    if !stale.is_empty() {
        let key = ON_FLIGHT_KEY.to_owned();
        delete(link, timeout, IN_FLIGHT, &[(&key, stale)], report);
    }
}

/// Runs [`DELETE_IF_UNCHANGED`] for each key (pipelined) and counts what went.
fn delete(
    link: &mut Link,
    timeout: Duration,
    hash: &'static str,
    doomed: &[(&String, Stale)],
    report: &mut GcReport,
) {
    if doomed.is_empty() {
        return;
    }
    let mut pipe = redis::pipe();
    for (key, stale) in doomed {
        let cmd = pipe.cmd("EVAL").arg(DELETE_IF_UNCHANGED).arg(1).arg(*key);
        for (f, v, _) in stale {
            cmd.arg(f).arg(v);
        }
    }
    let Some(replies) = call(link, timeout, report, hash, "delete", |c| {
        pipe.query::<Vec<Vec<i64>>>(c)
    }) else {
        return;
    };
    for ((_, stale), reply) in doomed.iter().zip(replies) {
        let Some((exists, flags)) = reply.split_first() else {
            continue;
        };
        let mut any = false;
        for ((_, _, verdict), deleted) in stale.iter().zip(flags) {
            if let (1, Some(reason)) = (*deleted, verdict.reason()) {
                *report.removed.entry((hash, reason)).or_default() += 1;
                any = true;
            }
        }
        if any && *exists == 0 {
            *report.keys_removed.entry(hash).or_default() += 1;
        }
    }
}
