//! The real `kthena` binary against a real API server (kthena-testenv): tables, describe,
//! `-o yaml|json`, `create manifest`, and the errors a person sees.

mod cli {
    pub(crate) mod support;

    mod create;
    mod describe;
    mod errors;
    mod get;
}
