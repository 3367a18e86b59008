//! The `kthena-sim` binary: `--help` documents every knob with its default, and the process
//! serves the API on the requested port with plain (uncoloured) logs when piped.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::json;

use crate::common;

const BIN: &str = env!("CARGO_BIN_EXE_kthena-sim");

#[test]
fn help_documents_every_knob_and_default() {
    let out = Command::new(BIN).arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for (flag, default) in [
        ("--host", Some("127.0.0.1")),
        ("--port", Some("8000")),
        ("--model", Some("Qwen/Qwen2.5-7B-Instruct")),
        ("--flavor", Some("vllm")),
        ("--role", Some("both")),
        ("--time-scale", Some("1")),
        ("--seed", Some("0")),
        ("--tokenizer", None),
        ("--default-max-tokens", Some("128")),
        ("--kv-events-port", None),
        ("--kv-events-format", Some("map")),
        ("--kv-events-topic", None),
        ("--shutdown-timeout", Some("5")),
        ("--lora-modules", None),
        ("--max-body-bytes", Some("67108864")),
        ("--max-num-seqs", Some("1024")),
        ("--max-num-batched-tokens", Some("8192")),
        ("--block-size", Some("16")),
        ("--num-gpu-blocks", Some("62000")),
        ("--max-model-len", Some("32768")),
        ("--prefill-overhead-ms", Some("5")),
        ("--prefill-per-token-ms", Some("0.03")),
        ("--decode-base-ms", Some("6")),
        ("--decode-per-seq-ms", Some("0.05")),
        ("--max-loras", Some("1")),
        ("--lora-load-ms", Some("50")),
        ("--kv-transfer-base-ms", Some("2")),
        ("--kv-transfer-per-token-ms", Some("0.00115")),
        ("--fault-error-rate", Some("0")),
        ("--fault-error-codes", Some("500")),
        ("--fault-first-byte-delay-ms", Some("0")),
        ("--fault-drop-after-chunks", None),
    ] {
        let start = help
            .find(&format!("{flag} <"))
            .unwrap_or_else(|| panic!("{flag} missing"));
        let section = &help[start..];
        let end = section[2..]
            .find("\n      --")
            .map_or(section.len(), |e| e + 2);
        let section = &section[..end];
        // Every flag has a description line.
        assert!(section.lines().count() >= 2, "{flag} has no description");
        if let Some(d) = default {
            assert!(
                section.contains(&format!("[default: {d}]")),
                "{flag}: {section}"
            );
        }
    }
}

#[tokio::test]
async fn binary_serves_on_the_given_port() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = tokio::process::Command::new(BIN)
        .args([
            "--port",
            &port.to_string(),
            "--model",
            "cli-model",
            "--time-scale",
            "10",
        ])
        .env_remove("NO_COLOR")
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // Logs go to stdout; piped, they carry no ANSI colour codes.
    let mut lines =
        tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(child.stdout.take().unwrap()));
    let first = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(first.contains("INFO"), "{first}");
    assert!(first.contains("Engine simulator started."), "{first}");
    assert!(
        !first.contains('\u{1b}'),
        "ANSI escape in piped logs: {first:?}"
    );
    let base = format!("http://127.0.0.1:{port}");
    let mut up = false;
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(up, "kthena-sim did not start");
    let (status, body) = common::post_json(
        &format!("{base}/v1/completions"),
        &json!({"model": "cli-model", "prompt": "hi", "max_tokens": 2}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(body["usage"]["completion_tokens"], 2);
    child.kill().await.unwrap();
}

#[test]
fn config_errors_print_one_line_and_exit_64() {
    let out = Command::new(BIN)
        .args(["--port", "0", "--time-scale", "0"])
        .env("RUST_BACKTRACE", "1")
        .env("RUST_LIB_BACKTRACE", "1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert_eq!(
        String::from_utf8(out.stderr).unwrap(),
        "error: invalid --time-scale (config field `time_scale`): must be a positive number\n"
    );
    // A socket that cannot be bound is not a configuration error; its cause is printed.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let out = Command::new(BIN)
        .args(["--port", &port.to_string()])
        .env("RUST_BACKTRACE", "1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8(out.stderr).unwrap(),
        format!("error: cannot bind 127.0.0.1:{port}: Address already in use (os error 98)\n")
    );
}

/// SIGTERM drains, as vLLM with `--shutdown-timeout`: the stream in flight ends with
/// `[DONE]`, new connections are refused meanwhile, and the process exits 0 once it is done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_the_stream_in_flight_then_exits_0() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = tokio::process::Command::new(BIN)
        .args([
            "--port",
            &port.to_string(),
            "--model",
            "m",
            "--shutdown-timeout",
            "30",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut up = false;
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(up, "kthena-sim did not start");
    let url = format!("http://127.0.0.1:{port}/v1/chat/completions");
    // About 2 s of decoding at time scale 1.
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                      "max_tokens": 300, "stream": true});
    let mut streaming = tokio::task::JoinSet::new();
    streaming.spawn(async move { common::stream(&url, &body).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let pid = child.id().unwrap().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err(),
        "a draining engine accepted a new connection"
    );
    let (status, events, clean) = streaming.join_next().await.unwrap().unwrap();
    assert_eq!(status, 200);
    assert!(clean, "the stream was cut after {} events", events.len());
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let exit = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .expect("kthena-sim did not exit after draining")
        .unwrap();
    assert_eq!(exit.code(), Some(0));
}
