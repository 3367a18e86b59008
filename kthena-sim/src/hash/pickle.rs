//! The bytes CPython's `pickle.dumps(obj, protocol=5)` writes for the few types vLLM puts in a
//! block-hash key: `None`, `int`, `bytes`, `str` and `tuple`.
//!
//! vLLM's default `--prefix-caching-hash-algo sha256` hashes the pickle of
//! `(parent_hash, tuple(token_ids), extra_keys)` (`vllm/utils/hashing.py`), so the simulator must
//! produce the same bytes. No maintained crate writes protocol 5 (`serde-pickle` writes
//! protocol 3, which has no `FRAME`/`MEMOIZE` opcodes and so hashes differently); this module
//! follows the C pickler (`Modules/_pickle.c`) for the subset above:
//!
//! | value | opcodes |
//! |---|---|
//! | header | `PROTO 5` (`80 05`) |
//! | `None` | `N` |
//! | int in 0..=255 / 256..=65535 / other i32 | `K` u8 / `M` u16 LE / `J` i32 LE |
//! | other int | `LONG1` (`8a`) n, n bytes LE two's complement (shortest) |
//! | bytes, len < 256 / else | `SHORT_BINBYTES` (`C`) u8 len / `BINBYTES` (`B`) u32 LE len, then `MEMOIZE` (`94`) |
//! | str (UTF-8), len < 256 / else | `SHORT_BINUNICODE` (`8c`) u8 len / `BINUNICODE` (`X`) u32 LE len, then `MEMOIZE` |
//! | tuple of 0 | `EMPTY_TUPLE` (`)`) |
//! | tuple of 1..=3 | items, `TUPLE1..3` (`85`..`87`), `MEMOIZE` |
//! | longer tuple | `MARK` (`(`), items, `TUPLE` (`t`), `MEMOIZE` |
//! | end | `STOP` (`.`) |
//!
//! Protocol 4+ groups opcodes into frames: `FRAME` (`95`) with a u64 LE length opens each
//! frame; a frame is closed once it holds at least 64 KiB after a complete object, and a frame
//! shorter than 4 bytes gets no header. Objects are never shared by reference here (the memo
//! counts up but `BINGET` is never needed: every key object is distinct).

/// A value of the pickled subset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Py<'a> {
    None,
    Int(i64),
    Bytes(&'a [u8]),
    Str(&'a str),
    Tuple(Vec<Self>),
    /// A tuple of ints, without building one [`Py`] per item (token ids).
    IntTuple(&'a [u32]),
}

const FRAME_HEADER: usize = 9;
const FRAME_SIZE_MIN: usize = 4;
const FRAME_SIZE_TARGET: usize = 64 * 1024;

struct Pickler {
    out: Vec<u8>,
    /// Start of the open frame's header.
    frame_start: Option<usize>,
}

impl Pickler {
    fn write(&mut self, bytes: &[u8]) {
        if self.frame_start.is_none() {
            self.frame_start = Some(self.out.len());
            self.out.extend_from_slice(&[0; FRAME_HEADER]);
        }
        self.out.extend_from_slice(bytes);
    }

    fn commit_frame(&mut self) {
        let Some(start) = self.frame_start.take() else {
            return;
        };
        let len = self.out.len() - start - FRAME_HEADER;
        if len >= FRAME_SIZE_MIN {
            self.out[start] = 0x95;
            self.out[start + 1..start + FRAME_HEADER].copy_from_slice(&(len as u64).to_le_bytes());
        } else {
            self.out.drain(start..start + FRAME_HEADER);
        }
    }

    /// After each complete object: closes a frame that reached the target size.
    fn boundary(&mut self) {
        if let Some(start) = self.frame_start
            && self.out.len() - start - FRAME_HEADER >= FRAME_SIZE_TARGET
        {
            self.commit_frame();
        }
    }

    /// A length-prefixed payload; payloads of 64 KiB or more go outside frames, as CPython's
    /// `_Pickler_write_bytes` does.
    fn write_sized(&mut self, short: u8, long: u8, payload: &[u8]) {
        let mut header = Vec::with_capacity(5);
        match u8::try_from(payload.len()) {
            Ok(n) => header.extend_from_slice(&[short, n]),
            Err(_) => {
                header.push(long);
                header.extend_from_slice(&(payload.len() as u32).to_le_bytes());
            }
        }
        if payload.len() >= FRAME_SIZE_TARGET {
            self.commit_frame();
            self.out.extend_from_slice(&header);
            self.out.extend_from_slice(payload);
        } else {
            self.write(&header);
            self.write(payload);
        }
        self.write(&[0x94]);
    }

    fn int(&mut self, v: i64) {
        if let Ok(b) = u8::try_from(v) {
            self.write(&[b'K', b]);
        } else if let Ok(w) = u16::try_from(v) {
            let [a, b] = w.to_le_bytes();
            self.write(&[b'M', a, b]);
        } else if let Ok(d) = i32::try_from(v) {
            let [a, b, c, e] = d.to_le_bytes();
            self.write(&[b'J', a, b, c, e]);
        } else {
            // Shortest little-endian two's complement that keeps the sign.
            let bytes = v.to_le_bytes();
            let mut n = bytes.len();
            while n > 1 {
                let (last, prev) = (bytes[n - 1], bytes[n - 2]);
                let redundant =
                    (last == 0 && prev & 0x80 == 0) || (last == 0xff && prev & 0x80 != 0);
                if !redundant {
                    break;
                }
                n -= 1;
            }
            self.write(&[0x8a, n as u8]);
            self.write(&bytes[..n]);
        }
    }

    fn tuple_end(&mut self, len: usize) {
        match len {
            1 => self.write(&[0x85]),
            2 => self.write(&[0x86]),
            3 => self.write(&[0x87]),
            _ => self.write(b"t"),
        }
        self.write(&[0x94]);
    }

    fn save(&mut self, v: &Py<'_>) {
        match v {
            Py::None => self.write(b"N"),
            Py::Int(i) => self.int(*i),
            Py::Bytes(b) => self.write_sized(b'C', b'B', b),
            Py::Str(s) => self.write_sized(0x8c, b'X', s.as_bytes()),
            Py::Tuple(items) if items.is_empty() => self.write(b")"),
            Py::IntTuple([]) => self.write(b")"),
            Py::Tuple(items) => {
                if items.len() > 3 {
                    self.write(b"(");
                }
                for item in items {
                    self.save(item);
                }
                self.tuple_end(items.len());
            }
            Py::IntTuple(items) => {
                if items.len() > 3 {
                    self.write(b"(");
                }
                for t in *items {
                    self.int(i64::from(*t));
                    self.boundary();
                }
                self.tuple_end(items.len());
            }
        }
        self.boundary();
    }
}

/// `pickle.dumps(v, protocol=5)`.
pub(crate) fn dumps(v: &Py<'_>) -> Vec<u8> {
    let mut p = Pickler {
        out: vec![0x80, 5],
        frame_start: None,
    };
    p.save(v);
    p.write(b".");
    p.commit_frame();
    p.out
}

#[cfg(test)]
mod tests;
