"""Drives kthena-router's `/v1/embeddings` with the official `openai` Python client (which
asks for base64 vectors and decodes them) and prints what it saw.

Usage: python3 openai_embeddings.py BASE_URL MODEL_A,MODEL_B
Prints one JSON object; the Rust test `openai_paths.rs` asserts on it.
"""
import json
import sys

import openai

base_url, models = sys.argv[1], sys.argv[2]
model_a, model_b = models.split(",")
client = openai.OpenAI(base_url=base_url + "/v1", api_key="unused", max_retries=0, timeout=30)
out = {}

one = client.embeddings.create(model=model_a, input="hello world")
out["one"] = {
    "model": one.model,
    "vectors": [d.embedding for d in one.data],
    "prompt_tokens": one.usage.prompt_tokens,
}
many = client.embeddings.create(model=model_a, input=["red fox", "blue sky now"], encoding_format="float")
out["many"] = {"model": many.model, "vectors": [d.embedding for d in many.data]}
ids = client.embeddings.create(model=model_b, input=[[1, 2, 3], [4]])
out["ids"] = {"model": ids.model, "vectors": [d.embedding for d in ids.data]}

doc = "the same long document to embed, sentence after sentence. " * 30
out["same"] = [
    client.embeddings.create(model=model_a, input=doc).data[0].embedding for _ in range(4)
]

try:
    client.embeddings.create(model="no-such-model", input="x")
    out["error"] = None
except openai.APIStatusError as e:
    out["error"] = {"status": e.status_code, "code": e.body.get("code") if isinstance(e.body, dict) else None}

print(json.dumps(out))
