"""Drives the router in front of two llama.cpp servers with the official `openai` client.

Usage: openai_llama.py ROUTER_URL MODEL. Prints one JSON object with what the client saw.
Requests carry an `x-request-id` so the test can find them in the router's access log.
"""
import json
import sys
import threading
import time

from openai import OpenAI

url, model = sys.argv[1], sys.argv[2]
client = OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=120)
out = {}


def rid(name):
    return {"x-request-id": name}


chat = client.chat.completions.create(
    model=model, messages=[{"role": "user", "content": "Say hello."}], max_tokens=8, extra_headers=rid("chat")
)
out["chat"] = {
    "model": chat.model,
    "content_len": len(chat.choices[0].message.content or ""),
    "prompt_tokens": chat.usage.prompt_tokens,
    "completion_tokens": chat.usage.completion_tokens,
}

comp = client.completions.create(model=model, prompt="The capital of France is", max_tokens=6, extra_headers=rid("completion"))
out["completion"] = {"text_len": len(comp.choices[0].text), "completion_tokens": comp.usage.completion_tokens}

chunks, text = 0, ""
for ch in client.chat.completions.create(
    model=model, messages=[{"role": "user", "content": "Count to five."}], max_tokens=12, stream=True, extra_headers=rid("stream")
):
    chunks += 1
    if ch.choices and ch.choices[0].delta.content:
        text += ch.choices[0].delta.content
out["stream"] = {"chunks": chunks, "text_len": len(text)}

# Keep one engine busy with a long streaming answer, then send a long prompt: least-request
# sends it to the other engine. Its repetition must follow it there (prefix cache).
first_chunk = threading.Event()


def busy():
    for _ in client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Write a long story about a lighthouse keeper."}],
        max_tokens=160,
        stream=True,
        extra_headers=rid("busy"),
    ):
        first_chunk.set()


t = threading.Thread(target=busy)
t.start()
first_chunk.wait(60)
system = " ".join(f"Guideline {i}: keep answers about the railway timetable short, exact and polite." for i in range(40))
msgs = [{"role": "system", "content": system}, {"role": "user", "content": "When does the first train leave?"}]
a1 = client.chat.completions.create(model=model, messages=msgs, max_tokens=4, extra_headers=rid("A1"))
t.join()
a2 = client.chat.completions.create(model=model, messages=msgs, max_tokens=4, extra_headers=rid("A2"))


def cached(resp):
    d = getattr(resp.usage, "prompt_tokens_details", None)
    return (getattr(d, "cached_tokens", None) or 0) if d else 0


out["A1"] = {"prompt_tokens": a1.usage.prompt_tokens, "cached_tokens": cached(a1)}
out["A2"] = {"prompt_tokens": a2.usage.prompt_tokens, "cached_tokens": cached(a2)}
print(json.dumps(out))
