"""Drives kthena-router with the official `openai` Python client and prints what it saw.

Usage: python3 openai_client.py BASE_URL MODEL
Prints one JSON object; the Rust test `openai_client.rs` asserts on it.
"""
import json
import sys

import openai

base_url, model = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=base_url + "/v1", api_key="unused", max_retries=0, timeout=30)
out = {}

out["models"] = [m.id for m in client.models.list().data]

chat = client.chat.completions.create(
    model=model, messages=[{"role": "user", "content": "Say hello"}], max_tokens=7
)
out["chat"] = {
    "model": chat.model,
    "content_len": len(chat.choices[0].message.content or ""),
    "finish_reason": chat.choices[0].finish_reason,
    "completion_tokens": chat.usage.completion_tokens,
}

comp = client.completions.create(model=model, prompt="Once upon a time", max_tokens=5)
out["completion"] = {
    "model": comp.model,
    "text_len": len(comp.choices[0].text),
    "completion_tokens": comp.usage.completion_tokens,
}

chunks = 0
text = ""
finish = None
usage_chunks = 0
for chunk in client.chat.completions.create(
    model=model, messages=[{"role": "user", "content": "Stream please"}], max_tokens=9, stream=True
):
    chunks += 1
    if not chunk.choices:
        usage_chunks += 1
        continue
    delta = chunk.choices[0].delta
    text += delta.content or ""
    finish = chunk.choices[0].finish_reason or finish
out["stream"] = {"chunks": chunks, "text_len": len(text), "finish_reason": finish, "usage_chunks": usage_chunks}

try:
    client.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "x"}])
    out["error"] = None
except openai.NotFoundError as e:
    out["error"] = {
        "status": e.status_code,
        "code": e.code,
        "type": e.type,
        "message_has_model": "no-such-model" in str(e.message),
    }

print(json.dumps(out))
