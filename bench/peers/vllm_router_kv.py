#!/usr/bin/env python3
"""vllm-router's `kv_aware` policy against its `random` policy, on kthena-sim engines.

Starts N kthena-sim engines that publish vLLM KV events (vLLM's block hashes, seed 0, on
vLLM's default empty topic: vllm-router's static `--kv-event-source` applies no other), puts
`vllm-router` (PyPI `vllm-router`) in front of them, sends a long-shared-prefix workload
through it, and reports the engines' prefix-cache hit rate
(`vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total`, summed over engines) for
each policy. Engines are restarted (cold caches) for every policy.

    python3 bench/peers/vllm_router_kv.py --sim target/release/kthena-sim [--quick] [--json out.json]

The workload is SGLang's generated-shared-prefix shape: `--groups` system prompts of
`--system-tokens` tokens, `--prompts-per-group` questions of `--question-tokens` each,
shuffled, sent as `/v1/completions` with `--concurrency` clients. With the simulator's
built-in tokenizer one three-letter word is one token, so lengths are exact.
"""

import argparse
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

MODEL = "sim-model"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(method, url, body=None, timeout=120):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.status, r.read()


def wait_ready(url, proc, what, deadline_s=60):
    end = time.time() + deadline_s
    while time.time() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        try:
            if http("GET", url, timeout=2)[0] == 200:
                return
        except (urllib.error.URLError, ConnectionError, OSError):
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{what} not ready at {url}")


def words(rng, n):
    letters = "abcdefghijklmnopqrstuvwxyz"
    return " ".join("".join(rng.choice(letters) for _ in range(3)) for _ in range(n))


def workload(args):
    rng = random.Random(args.seed)
    prompts = []
    for _ in range(args.groups):
        system = words(rng, args.system_tokens)
        for _ in range(args.prompts_per_group):
            prompts.append(system + " " + words(rng, args.question_tokens))
    rng.shuffle(prompts)
    return prompts


def metric_sum(text, name):
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


class Stack:
    """Engines plus one vllm-router, all on free loopback ports."""

    def __init__(self, args, policy, log_dir):
        self.procs = []
        self.engines = []
        for i in range(args.engines):
            port, zport = free_port(), free_port()
            cmd = [args.sim, "--port", str(port), "--model", MODEL,
                   "--time-scale", str(args.time_scale), "--seed", str(i),
                   "--kv-events-port", str(zport), "--kv-events-topic", "",
                   "--hash-seed", "0",
                   "--block-size", str(args.block_size),
                   "--num-gpu-blocks", str(args.num_gpu_blocks),
                   "--max-model-len", str(args.max_model_len)]
            log = open(os.path.join(log_dir, f"{policy}-engine{i}.log"), "w")
            p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
            self.procs.append(p)
            self.engines.append((f"http://127.0.0.1:{port}", zport, p))
        for url, _, p in self.engines:
            wait_ready(url + "/health", p, "kthena-sim")
        self.port = free_port()
        cmd = [args.router, "--host", "127.0.0.1", "--port", str(self.port),
               "--policy", policy, "--worker-urls", *[u for u, _, _ in self.engines],
               "--log-level", args.router_log_level, "--prometheus-port", str(free_port())]
        if policy == "kv_aware":
            for url, zport, _ in self.engines:
                cmd += ["--kv-event-source", f"{url}=tcp://127.0.0.1:{zport}"]
            cmd += ["--kv-event-block-size", str(args.block_size), "--kv-event-model", MODEL]
        log = open(os.path.join(log_dir, f"{policy}-router.log"), "w")
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(p)
        self.url = f"http://127.0.0.1:{self.port}"
        wait_ready(self.url + "/health", p, "vllm-router")

    def close(self):
        for p in reversed(self.procs):
            p.terminate()
        for p in self.procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()


def run_policy(args, policy, prompts, log_dir):
    stack = Stack(args, policy, log_dir)
    try:
        # Let the KV-event subscriptions come up before the first request.
        time.sleep(1.0)
        lock = threading.Lock()
        queue = list(enumerate(prompts))
        failures = []

        def client():
            while True:
                with lock:
                    if not queue:
                        return
                    _, prompt = queue.pop(0)
                body = {"model": MODEL, "prompt": prompt, "max_tokens": args.output_tokens}
                try:
                    status, _ = http("POST", stack.url + "/v1/completions", body)
                    if status != 200:
                        failures.append(status)
                except (urllib.error.URLError, OSError) as e:
                    failures.append(str(e))

        t0 = time.time()
        threads = [threading.Thread(target=client) for _ in range(args.concurrency)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.time() - t0
        hits = queries = 0.0
        per_engine = []
        for url, _, _ in stack.engines:
            text = http("GET", url + "/metrics")[1].decode()
            hits += metric_sum(text, "vllm:prefix_cache_hits_total")
            queries += metric_sum(text, "vllm:prefix_cache_queries_total")
            per_engine.append(int(metric_sum(text, "vllm:request_success_total")))
        return {"policy": policy, "requests": len(prompts), "failed": len(failures),
                "cache_hit_rate": hits / queries if queries else 0.0,
                "requests_per_engine": per_engine, "wall_s": round(wall, 1)}
    finally:
        stack.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sim", default="target/release/kthena-sim")
    ap.add_argument("--router", default=shutil.which("vllm-router") or "vllm-router")
    ap.add_argument("--policies", default="random,kv_aware")
    ap.add_argument("--engines", type=int, default=3)
    ap.add_argument("--groups", type=int, default=48)
    ap.add_argument("--prompts-per-group", type=int, default=8)
    ap.add_argument("--system-tokens", type=int, default=1024)
    ap.add_argument("--question-tokens", type=int, default=64)
    ap.add_argument("--output-tokens", type=int, default=4)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--num-gpu-blocks", type=int, default=1200)
    ap.add_argument("--max-model-len", type=int, default=4096)
    ap.add_argument("--time-scale", type=float, default=20.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="16 groups x 4 prompts")
    ap.add_argument("--log-dir", default=None)
    ap.add_argument("--router-log-level", default="info")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if args.quick:
        args.groups, args.prompts_per_group, args.num_gpu_blocks = 16, 4, 400
    log_dir = args.log_dir or os.path.join("target", "vllm-router-bench")
    os.makedirs(log_dir, exist_ok=True)
    prompts = workload(args)
    results = [run_policy(args, p, prompts, log_dir) for p in args.policies.split(",")]
    base = next((r for r in results if r["policy"] == "random"), None)
    print("| policy | ok/sent | cache hit | vs random | req per engine |")
    print("|---|---|---|---|---|")
    for r in results:
        ratio = (r["cache_hit_rate"] / base["cache_hit_rate"]
                 if base and base["cache_hit_rate"] else float("nan"))
        r["hit_rate_vs_random"] = ratio
        print(f"| {r['policy']} | {r['requests'] - r['failed']}/{r['requests']} | "
              f"{100 * r['cache_hit_rate']:.1f}% | {ratio:.2f}x | "
              f"{'/'.join(map(str, r['requests_per_engine']))} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0 if all(r["failed"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
