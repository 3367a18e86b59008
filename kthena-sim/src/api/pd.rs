//! Prefill/decode disaggregation: SGLang's bootstrap rooms (the prefill side marks a room done,
//! the decode side long-polls the prefill peer for it) and vLLM's NIXL-style
//! `kv_transfer_params` returned by a prefill.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use http::StatusCode;

use super::body::ApiError;
use super::request::Gen;
use super::shared::Shared;
use super::wire::KvTransferOut;
use crate::config::Role;
use crate::engine::Finished;

/// SGLang bootstrap: answers once the prefill of `room` has finished here (long poll, up to
/// 30 s of wall time); 404 on timeout.
pub(super) async fn bootstrap_wait(
    State(s): State<Arc<Shared>>,
    axum::extract::Path(room): axum::extract::Path<u64>,
) -> StatusCode {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let notified = s.room_notify.notified();
        if s.rooms_done
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(&room)
        {
            return StatusCode::OK;
        }
        if tokio::time::timeout_at(deadline, notified).await.is_err() {
            return StatusCode::NOT_FOUND;
        }
    }
}

/// Waits on the prefill peer for an SGLang bootstrap room (decode role).
pub(super) async fn wait_bootstrap(
    s: &Shared,
    room: u64,
    host: Option<&str>,
) -> Result<(), ApiError> {
    let Some(host) = host else {
        return Err(ApiError::bad_request(
            "bootstrap_host is required with bootstrap_room on a decode engine",
        )
        .with_param("bootstrap_host"));
    };
    let addr = if host.contains(':')
        && !host.starts_with('[')
        && host.parse::<std::net::Ipv6Addr>().is_err()
    {
        host.to_owned()
    } else {
        format!("{host}:{}", s.addr.port())
    };
    let Ok(uri) = format!("http://{addr}/bootstrap/{room}").parse::<http::Uri>() else {
        return Err(
            ApiError::bad_request(format!("invalid bootstrap_host {host}"))
                .with_param("bootstrap_host"),
        );
    };
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Empty<Bytes>>();
    match client.get(uri).await {
        Ok(resp) if resp.status() == StatusCode::OK => Ok(()),
        Ok(_) => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("bootstrap room {room} was not prefilled"),
        )),
        Err(e) => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("cannot reach bootstrap host {addr}: {e}"),
        )),
    }
}

/// SGLang prefill side: marks the bootstrap room as done.
pub(super) fn finish_pd(s: &Shared, g: &Gen) {
    if let Some((room, _)) = g.bootstrap
        && s.cfg.role != Role::Decode
    {
        let mut rooms = s
            .rooms_done
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        rooms.push(room);
        if rooms.len() > 4096 {
            rooms.remove(0);
        }
        s.room_notify.notify_waiters();
    }
}

/// The `kv_transfer_params` a prefill asked to `do_remote_decode` returns: this engine's
/// address and id, and the KV blocks holding the prompt.
pub(super) fn kv_transfer_out(s: &Shared, g: &Gen, f: &Finished) -> Option<KvTransferOut> {
    if !g.remote_decode {
        return None;
    }
    Some(KvTransferOut {
        do_remote_prefill: true,
        do_remote_decode: false,
        remote_block_ids: f.block_ids.clone(),
        remote_engine_id: s.engine_id(),
        remote_host: s.addr.ip().to_string(),
        remote_port: s.addr.port(),
        tp_size: 1,
    })
}
