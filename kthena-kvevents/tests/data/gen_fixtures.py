"""Regenerates the msgspec-encoded fixtures of this directory (`pip install msgspec`).

The struct definitions are those of the engines' sources, so the bytes are what the engines
publish: SGLang's `python/sglang/srt/disaggregation/kv_events.py` and vLLM's original
`vllm/distributed/kv_events.py` (array_like events, before vLLM PR #42892).
"""

import base64
import json
from typing import Any, Optional, Union

import msgspec


class SglEventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list[Any]


class SglEvent(msgspec.Struct, array_like=True, omit_defaults=True, gc=False, tag=True):
    pass


class SglBlockStored(SglEvent, tag="BlockStored"):
    block_hashes: list[int]
    parent_block_hash: Optional[int]
    token_ids: list[int]
    block_size: int
    lora_id: Optional[int]


class SglBlockRemoved(SglEvent, tag="BlockRemoved"):
    block_hashes: list[int]


class SglAllBlocksCleared(SglEvent, tag="AllBlocksCleared"):
    pass


class SglKVEventBatch(SglEventBatch):
    events: list[Union[SglBlockStored, SglBlockRemoved, SglAllBlocksCleared]]


class VEventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list[Any]
    data_parallel_rank: Optional[int] = None


class VEvent(msgspec.Struct, array_like=True, omit_defaults=True, gc=False, tag=True):
    pass


class VBlockStored(VEvent, tag="BlockStored"):
    block_hashes: list[Union[int, bytes]]
    parent_block_hash: Optional[Union[int, bytes]]
    token_ids: list[int]
    block_size: int
    lora_id: Optional[int]
    medium: Optional[str]


class VBlockRemoved(VEvent, tag="BlockRemoved"):
    block_hashes: list[Union[int, bytes]]
    medium: Optional[str]


class VAllBlocksCleared(VEvent, tag="AllBlocksCleared"):
    pass


def frame(seq, topic, batch):
    payload = msgspec.msgpack.encode(batch)
    return {
        "topic": topic,
        "seq_be_u64_hex": seq.to_bytes(8, "big").hex(),
        "payload_msgpack_b64": base64.b64encode(payload).decode(),
    }


sglang = SglKVEventBatch(
    ts=1796040000.25,
    events=[
        SglBlockStored(
            block_hashes=[-6917529027641081856, 4611686018427387904],
            parent_block_hash=None,
            token_ids=[101, 102, 103, 104, 105, 106, 107, 108],
            block_size=4,
            lora_id=None,
        ),
        SglBlockStored(
            block_hashes=[-1],
            parent_block_hash=4611686018427387904,
            token_ids=[109, 110, 111, 112],
            block_size=4,
            lora_id=None,
        ),
        SglBlockRemoved(block_hashes=[-6917529027641081856]),
        SglAllBlocksCleared(),
    ],
)
vllm_array = VEventBatch(
    ts=1796040001.5,
    events=[
        VBlockStored(
            block_hashes=[18446744073709551615, b"\x00" * 24 + (7).to_bytes(8, "big")],
            parent_block_hash=None,
            token_ids=[1, 2, 3, 4],
            block_size=2,
            lora_id=None,
            medium="GPU",
        ),
        VBlockStored(
            block_hashes=[5],
            parent_block_hash=18446744073709551615,
            token_ids=[5, 6],
            block_size=2,
            lora_id=None,
            medium="CPU",
        ),
        VBlockRemoved(block_hashes=[5], medium="GPU"),
        VAllBlocksCleared(),
    ],
    data_parallel_rank=1,
)
with open("sglang-kv-events.json", "w") as f:
    json.dump([frame(0, "kv@10.0.0.7@qwen3", sglang)], f, indent=1)
    f.write("\n")
with open("vllm-array-kv-events.json", "w") as f:
    json.dump([frame(7, "kv@10.0.0.8@qwen3", vllm_array)], f, indent=1)
    f.write("\n")
