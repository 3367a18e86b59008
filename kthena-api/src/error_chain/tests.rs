use super::*;

#[derive(Debug, thiserror::Error)]
#[error("{text}")]
struct E {
    text: &'static str,
    #[source]
    source: Option<Box<Self>>,
}

fn chain(texts: &[&'static str]) -> E {
    texts
        .iter()
        .rev()
        .fold(None, |source, text| {
            Some(E {
                text,
                source: source.map(Box::new),
            })
        })
        .unwrap_or(E {
            text: "",
            source: None,
        })
}

#[test]
fn joins_the_causes_once() {
    let e = chain(&[
        "GET /x",
        "client error (Connect)",
        "tcp connect error",
        "refused",
    ]);
    assert_eq!(
        error_chain(&e),
        "GET /x: client error (Connect): tcp connect error: refused"
    );
    let e = chain(&["wrapper: inner", "inner", "io"]);
    assert_eq!(error_chain(&e), "wrapper: inner: io");
    let e = chain(&["client error (Connect)", "tcp connect error"]);
    assert_eq!(
        error_chain_without(&e, |m| m.starts_with("client error (")),
        "tcp connect error"
    );
    let e = chain(&["client error (Connect)"]);
    assert_eq!(
        error_chain_without(&e, |m| m.starts_with("client error (")),
        "client error (Connect)"
    );
    assert_eq!(root_cause(&chain(&["a", "b", "c"])).to_string(), "c");
    assert_eq!(root_cause(&chain(&["a"])).to_string(), "a");
}
