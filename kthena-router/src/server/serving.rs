//! Thread-per-core serving of the inference listener: `N` threads, each running its own
//! current-thread Tokio runtime, and each accepted connection handed to the thread with the
//! fewest open connections. A connection's socket reads, its requests, its client writes and
//! the engine connections its requests open then stay on one thread: no work stealing and no
//! wake-up of another thread per streamed chunk, as with Envoy's and nginx's workers.
//!
//! Each thread keeps its own engine connections per endpoint (`upstream`): a request served
//! on a thread takes an engine connection and drives it itself, in the task that serves the
//! client. Each thread also has its own pooled client, for endpoints given by host name and
//! for other upstream calls (tokenizer servers). Outside these threads (tests,
//! `kthena-bench`'s in-memory runs, the control plane) requests use the router's shared
//! client.

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::runtime::Handle;
use tokio_util::sync::CancellationToken;

/// The router's upstream client (`scrape::HttpClient`, spelled out here so that this module,
/// which the listener uses, depends on no router module but `upstream`).
type HttpClient =
    hyper_util::client::legacy::Client<kthena_memnet::Connector, crate::body::ReqBody>;

thread_local! {
    /// The upstream client of the serving thread this code runs on, if any.
    static CLIENT: std::cell::OnceCell<HttpClient> = const { std::cell::OnceCell::new() };
}

/// Calls `f` with the upstream client of the serving thread this runs on, else with
/// `shared` (the router's own client).
pub(crate) fn with_client<R>(shared: &HttpClient, f: impl FnOnce(&HttpClient) -> R) -> R {
    CLIENT.with(|c| f(c.get().unwrap_or(shared)))
}

/// The upstream client of the serving thread this runs on, else `shared`, as an owned
/// handle (a few reference counts) to hold across awaits.
pub(crate) fn client_or(shared: &HttpClient) -> HttpClient {
    with_client(shared, HttpClient::clone)
}

/// One serving thread: its runtime's handle and the connections it serves now.
#[derive(Debug)]
struct Worker {
    handle: Handle,
    open: Arc<AtomicUsize>,
}

/// The serving threads of a router (see the module docs).
#[derive(Debug)]
pub(crate) struct ServingThreads {
    workers: Vec<Worker>,
    stop: CancellationToken,
    joins: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

impl ServingThreads {
    /// Starts `n` threads (`kthena-serve-0`, ...), each with a current-thread runtime (I/O
    /// and timers on) and its own client from `client`.
    ///
    /// # Errors
    /// The runtime or thread could not be created (the OS is out of threads or memory).
    pub(crate) fn start(n: usize, client: fn() -> HttpClient) -> io::Result<Self> {
        let mut this = Self {
            workers: Vec::with_capacity(n),
            stop: CancellationToken::new(),
            joins: Mutex::new(Vec::with_capacity(n)),
        };
        for i in 0..n.max(1) {
            // On an error, dropping `this` stops the threads started so far.
            let (handle, join) = start_one(i, client, this.stop.clone())?;
            this.workers.push(Worker {
                handle,
                open: Arc::new(AtomicUsize::new(0)),
            });
            this.joins
                .get_mut()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(join);
        }
        Ok(this)
    }

    /// Runs `task` on the thread with the fewest open connections (the first of them on a
    /// tie), counting it open there until it ends. `task` is created on that thread, so
    /// that the sockets it registers belong to that thread's runtime.
    pub(crate) fn spawn<F, Fut>(&self, task: F)
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let Some(w) = self
            .workers
            .iter()
            .min_by_key(|w| w.open.load(Ordering::Relaxed))
        else {
            return;
        };
        w.open.fetch_add(1, Ordering::Relaxed);
        // Made here, so that the count goes down even when the runtime drops the task
        // before its first poll.
        let open = OpenGuard(Arc::clone(&w.open));
        w.handle.spawn(async move {
            let _open = open;
            task().await;
        });
    }

    /// Stops the threads (their runtimes drop any task left) and waits for them, up to
    /// the threads' own exit; call after the router's connections drained.
    pub(crate) fn stop(&self) {
        self.stop.cancel();
        let joins = std::mem::take(&mut *self.joins.lock().unwrap_or_else(|p| p.into_inner()));
        for j in joins {
            let _ = j.join();
        }
    }
}

/// How long a stopping thread waits for its runtime's blocking tasks (a DNS lookup, a
/// Redis call, a tokenization) before it leaves them behind.
const BLOCKING_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// Starts serving thread `i`: its runtime runs until `stop`.
fn start_one(
    i: usize,
    client: fn() -> HttpClient,
    stop: CancellationToken,
) -> io::Result<(Handle, std::thread::JoinHandle<()>)> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let handle = rt.handle().clone();
    let join = std::thread::Builder::new()
        .name(format!("kthena-serve-{i}"))
        .spawn(move || {
            CLIENT.with(|c| {
                let _ = c.set(client());
            });
            rt.block_on(async {
                crate::upstream::conn::enable_on_this_thread();
                tokio::select! {
                    () = stop.cancelled() => {}
                    () = crate::upstream::conn::sweep_idle() => {}
                }
                crate::upstream::conn::disable_on_this_thread();
            });
            // Connections still open here were already cut by the router's drain; the
            // runtime drops what is left of them.
            rt.shutdown_timeout(BLOCKING_GRACE);
        })?;
    Ok((handle, join))
}

impl Drop for ServingThreads {
    fn drop(&mut self) {
        // Without `stop` (a router dropped without shutdown): let the threads end on their
        // own, never block the dropping thread.
        self.stop.cancel();
    }
}

/// Counts a connection closed when its task ends or is dropped.
struct OpenGuard(Arc<AtomicUsize>);

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests;
