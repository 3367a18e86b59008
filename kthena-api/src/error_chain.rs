//! An error and its causes (`Error::source`) as one line for people.

use std::error::Error as StdError;

/// `e`'s message and those of its sources, outermost first, joined by `: `; a message the
/// text so far already ends with is left out (wrappers that repeat their source's message).
/// Example: `metric m from Prometheus http://p:9090: client error (Connect): tcp connect
/// error: Connection refused (os error 111)`.
#[must_use]
pub fn error_chain(e: &(dyn StdError + 'static)) -> String {
    error_chain_without(e, |_| false)
}

/// [`error_chain`] without the messages `skip` accepts (such as hyper's wrapper-only
/// `client error (Connect)`); `e`'s own message when every message is skipped.
#[must_use]
pub fn error_chain_without(e: &(dyn StdError + 'static), skip: impl Fn(&str) -> bool) -> String {
    let mut out = String::new();
    let mut cur = Some(e);
    while let Some(err) = cur {
        let msg = err.to_string();
        if !skip(&msg) && (out.is_empty() || !out.ends_with(&msg)) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&msg);
        }
        cur = err.source();
    }
    if out.is_empty() { e.to_string() } else { out }
}

/// The innermost error of `e`'s source chain (`e` itself when it has no source).
#[must_use]
pub fn root_cause<'a>(e: &'a (dyn StdError + 'static)) -> &'a (dyn StdError + 'static) {
    let mut last = e;
    while let Some(next) = last.source() {
        last = next;
    }
    last
}

#[cfg(test)]
mod tests;
