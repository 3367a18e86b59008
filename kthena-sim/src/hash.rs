//! vLLM's prefix-cache block hashes: the cache keys of the simulated KV cache and the
//! `block_hashes` of its KV events, bit for bit as vLLM 0.32 computes them
//! (`hash_block_tokens` and `init_none_hash` in `vllm/v1/core/kv_cache_utils.py`,
//! the hash functions in `vllm/utils/hashing.py`):
//!
//! ```text
//! NONE_HASH = H(seed)                      // seed = --hash-seed as a str (PYTHONHASHSEED);
//!                                          // 32 random bytes when unset
//! h_0 = H((NONE_HASH, tuple(block_0), extra_keys_0))
//! h_i = H((h_{i-1},   tuple(block_i), extra_keys_i))
//! ```
//!
//! `H` is the `--prefix-caching-hash-algo` ([`HashAlgo`]): SHA-256 or XXH3-128 over the
//! Python pickle (protocol 5) or the canonical CBOR of its argument. vLLM's default is
//! `sha256` (pickle). `extra_keys` is `None` or a tuple of, in this order, the LoRA adapter
//! name (every block of a LoRA request), `(mm_identifier, offset in block)` for each
//! multimodal item overlapping the block, and the request's `cache_salt` (first block only).
//! Only full blocks are hashed. A KV event carries the digest as an int, its low 64 bits
//! (last 8 bytes, big-endian), unless `VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0`, when it
//! carries the digest bytes.

mod pickle;

use std::fmt;

use clap::ValueEnum;
use rand::TryRngCore;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use pickle::Py;

/// vLLM's `--prefix-caching-hash-algo` (`PrefixCachingHashAlgo` in `vllm/config/cache.py`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ValueEnum, Default)]
#[serde(rename_all = "snake_case")]
pub enum HashAlgo {
    /// SHA-256 of `pickle.dumps(key, protocol=5)`: vLLM's default.
    #[default]
    #[value(name = "sha256")]
    Sha256,
    /// SHA-256 of `cbor2.dumps(key, canonical=True)`.
    #[value(name = "sha256_cbor")]
    Sha256Cbor,
    /// XXH3-128 (16-byte digest) of the pickle.
    #[value(name = "xxhash")]
    Xxhash,
    /// XXH3-128 of the canonical CBOR.
    #[value(name = "xxhash_cbor")]
    XxhashCbor,
}

/// One block hash: a SHA-256 (32 bytes) or XXH3-128 (16 bytes) digest, or a random 32-byte
/// `NONE_HASH`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockHash {
    len: u8,
    bytes: [u8; 32],
}

impl BlockHash {
    pub(crate) fn from_digest(d: &[u8]) -> Self {
        let mut bytes = [0; 32];
        let len = d.len().min(32);
        bytes[..len].copy_from_slice(&d[..len]);
        Self {
            len: len as u8,
            bytes,
        }
    }

    /// The digest bytes (what vLLM publishes with `VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0`).
    #[must_use]
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    /// vLLM's int block hash: `int.from_bytes(digest, "big") & (2**64 - 1)`, i.e. the last 8
    /// bytes read big-endian (`maybe_convert_block_hash`).
    #[must_use]
    pub fn to_u64(&self) -> u64 {
        let b = self.as_bytes();
        let mut tail = [0u8; 8];
        let n = b.len().min(8);
        tail[8 - n..].copy_from_slice(&b[b.len() - n..]);
        u64::from_be_bytes(tail)
    }
}

impl fmt::Debug for BlockHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.as_bytes() {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// One entry of a block's `extra_keys` tuple (`generate_block_hash_extra_keys`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExtraKey {
    /// A Python `str`: the LoRA adapter name or the request's `cache_salt`.
    Str(String),
    /// A multimodal item in the block: `(identifier, offset)`, the item's start relative to the
    /// block's first token (negative when it began in an earlier block).
    Mm {
        /// The item's hash identifier (vLLM `mm_feature.identifier`).
        identifier: String,
        /// Item start minus block start, in tokens.
        offset: i64,
    },
    /// A Python `bytes` (the SHA-256 of a block's prompt embeddings).
    Bytes(Vec<u8>),
}

impl ExtraKey {
    fn py(&self) -> Py<'_> {
        match self {
            Self::Str(s) => Py::Str(s),
            Self::Mm { identifier, offset } => {
                Py::Tuple(vec![Py::Str(identifier), Py::Int(*offset)])
            }
            Self::Bytes(b) => Py::Bytes(b),
        }
    }

    fn cbor(&self) -> ciborium::Value {
        use ciborium::Value;
        match self {
            Self::Str(s) => Value::Text(s.clone()),
            Self::Mm { identifier, offset } => Value::Array(vec![
                Value::Text(identifier.clone()),
                Value::Integer((*offset).into()),
            ]),
            Self::Bytes(b) => Value::Bytes(b.clone()),
        }
    }
}

/// The per-request inputs of the extra keys the simulator produces (it renders no multimodal
/// items, so blocks never get `Mm` keys from requests).
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestKeys<'a> {
    /// LoRA adapter name (vLLM `lora_request.lora_name`).
    pub lora: Option<&'a str>,
    /// The request's `cache_salt`; an empty salt is ignored, as in vLLM.
    pub cache_salt: Option<&'a str>,
}

impl RequestKeys<'_> {
    /// Extra keys of block `index` (0-based): LoRA name, then the salt on block 0.
    #[must_use]
    pub fn for_block(&self, index: usize) -> Vec<ExtraKey> {
        let mut keys = Vec::new();
        if let Some(l) = self.lora {
            keys.push(ExtraKey::Str(l.to_owned()));
        }
        if let Some(s) = self.cache_salt.filter(|s| index == 0 && !s.is_empty()) {
            keys.push(ExtraKey::Str(s.to_owned()));
        }
        keys
    }
}

/// Computes block hashes for one engine: the algorithm plus the engine's `NONE_HASH`.
#[derive(Debug, Clone)]
pub struct BlockHasher {
    algo: HashAlgo,
    none_hash: BlockHash,
}

impl BlockHasher {
    /// `NONE_HASH` is `H(seed)` for a seed (vLLM reads `PYTHONHASHSEED` as a string), else 32
    /// bytes from the OS RNG (`os.urandom(32)`), so two engines without a seed never share
    /// hashes.
    #[must_use]
    pub fn new(algo: HashAlgo, seed: Option<&str>) -> Self {
        let none_hash = match seed {
            Some(s) => digest(algo, &Py::Str(s), || ciborium::Value::Text(s.to_owned())),
            None => {
                let mut b = [0u8; 32];
                // The OS RNG does not fail on supported platforms; zeros would still be valid.
                let _ = rand::rngs::OsRng.try_fill_bytes(&mut b);
                BlockHash::from_digest(&b)
            }
        };
        Self { algo, none_hash }
    }

    /// The hash chained before the first block.
    #[must_use]
    pub fn none_hash(&self) -> BlockHash {
        self.none_hash
    }

    /// Hash of one full block given its parent (`None` for the first block) and extra keys
    /// (empty is Python `None`).
    #[must_use]
    pub fn block_hash(
        &self,
        parent: Option<&BlockHash>,
        tokens: &[u32],
        extra: &[ExtraKey],
    ) -> BlockHash {
        let parent = parent.unwrap_or(&self.none_hash);
        let py = || {
            let extra = if extra.is_empty() {
                Py::None
            } else {
                Py::Tuple(extra.iter().map(ExtraKey::py).collect())
            };
            Py::Tuple(vec![
                Py::Bytes(parent.as_bytes()),
                Py::IntTuple(tokens),
                extra,
            ])
        };
        let cbor = || {
            use ciborium::Value;
            let extra = if extra.is_empty() {
                Value::Null
            } else {
                Value::Array(extra.iter().map(ExtraKey::cbor).collect())
            };
            let ids = tokens.iter().map(|t| Value::Integer((*t).into())).collect();
            Value::Array(vec![
                Value::Bytes(parent.as_bytes().to_vec()),
                Value::Array(ids),
                extra,
            ])
        };
        match self.algo {
            HashAlgo::Sha256 | HashAlgo::Xxhash => {
                digest(self.algo, &py(), || ciborium::Value::Null)
            }
            HashAlgo::Sha256Cbor | HashAlgo::XxhashCbor => digest_cbor(self.algo, &cbor()),
        }
    }

    /// Hashes of every full block of `tokens` (a trailing partial block is not hashed):
    /// `tokens.len() / block_size` hashes, empty if `block_size == 0`.
    #[must_use]
    pub fn block_hashes(
        &self,
        tokens: &[u32],
        block_size: usize,
        keys: RequestKeys<'_>,
    ) -> Vec<BlockHash> {
        if block_size == 0 {
            return Vec::new();
        }
        let mut parent: Option<BlockHash> = None;
        tokens
            .chunks_exact(block_size)
            .enumerate()
            .map(|(i, block)| {
                let h = self.block_hash(parent.as_ref(), block, &keys.for_block(i));
                parent = Some(h);
                h
            })
            .collect()
    }
}

/// `H(v)` for a pickle algorithm, or for a CBOR one with `cbor()` as the value.
fn digest(algo: HashAlgo, v: &Py<'_>, cbor: impl FnOnce() -> ciborium::Value) -> BlockHash {
    match algo {
        HashAlgo::Sha256 => BlockHash::from_digest(&Sha256::digest(pickle::dumps(v))),
        HashAlgo::Xxhash => {
            let h = xxhash_rust::xxh3::xxh3_128(&pickle::dumps(v));
            BlockHash::from_digest(&h.to_be_bytes())
        }
        HashAlgo::Sha256Cbor | HashAlgo::XxhashCbor => digest_cbor(algo, &cbor()),
    }
}

fn digest_cbor(algo: HashAlgo, v: &ciborium::Value) -> BlockHash {
    let mut buf = Vec::new();
    // Writing a `Value` into a `Vec` cannot fail.
    let _ = ciborium::into_writer(v, &mut buf);
    match algo {
        HashAlgo::Xxhash | HashAlgo::XxhashCbor => {
            BlockHash::from_digest(&xxhash_rust::xxh3::xxh3_128(&buf).to_be_bytes())
        }
        HashAlgo::Sha256 | HashAlgo::Sha256Cbor => BlockHash::from_digest(&Sha256::digest(&buf)),
    }
}

#[cfg(test)]
mod tests;
