//! ZMQ message frames and sequence numbers.

use crate::{Error, Result};

/// The end-of-replay marker of vLLM's and SGLang's replay (ROUTER) socket: `-1` as an 8-byte
/// big-endian signed integer, sent in place of a sequence number after the last batch.
pub const END_SEQ: [u8; 8] = [0xff; 8];

/// Splits a ZMQ message `[topic, seq, payload]` into the topic frame, the sequence number
/// (8 bytes big-endian) and the payload frame.
///
/// # Errors
/// [`Error::FrameCount`] unless there are exactly three frames, [`Error::SeqLength`] unless
/// the second is 8 bytes long.
pub fn split_frames<F: AsRef<[u8]>>(frames: &[F]) -> Result<(&F, u64, &F)> {
    let [topic, seq, payload] = frames else {
        return Err(Error::FrameCount(frames.len()));
    };
    let seq = seq.as_ref();
    let seq: [u8; 8] = seq.try_into().map_err(|_| Error::SeqLength(seq.len()))?;
    Ok((topic, u64::from_be_bytes(seq), payload))
}

/// How a sequence number relates to the previous one of the same publisher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeqStep {
    /// The first message seen: the baseline.
    First,
    /// `last + 1`.
    InOrder,
    /// `last + 1 + missed`: `missed` batches were lost.
    Gap {
        /// The first missing sequence number (`last + 1`).
        from: u64,
        /// How many batches are missing.
        missed: u64,
    },
    /// Equal to the last one: a duplicate, to drop.
    Duplicate,
    /// Smaller than the last one (or not larger, across a reconnection): the publisher
    /// restarted, so what it published before is gone.
    Rollback,
}

/// Tracks the sequence numbers of one publisher.
///
/// The next value is in order; a larger one is a gap (a host replays the missing batches
/// when the engine has a replay address, else treats its index entries as uncertain); a
/// smaller one is a rollback, which only happens when the engine restarted (a host clears its
/// entries before applying the batch); an equal one is a duplicate.
#[derive(Debug, Clone, Copy, Default)]
pub struct SeqTracker {
    last: Option<u64>,
    reconnected: bool,
}

impl SeqTracker {
    /// Classifies `seq` and, unless it is a duplicate, makes it the last one seen.
    pub fn observe(&mut self, seq: u64) -> SeqStep {
        let reconnected = std::mem::take(&mut self.reconnected);
        let step = match self.last {
            None => SeqStep::First,
            Some(last) if seq == last.wrapping_add(1) => SeqStep::InOrder,
            Some(last) if seq > last => SeqStep::Gap {
                from: last + 1,
                missed: seq - last - 1,
            },
            // Across a reconnection the same number comes from a new publisher.
            Some(last) if seq == last && !reconnected => SeqStep::Duplicate,
            Some(_) => SeqStep::Rollback,
        };
        if step != SeqStep::Duplicate {
            self.last = Some(seq);
        }
        step
    }

    /// The connection to the publisher was lost and re-established: if the next number is
    /// not larger than the last one, the publisher restarted (a [`SeqStep::Rollback`], even
    /// when it is equal).
    pub fn reconnected(&mut self) {
        self.reconnected = true;
    }

    /// The last sequence number seen.
    #[must_use]
    pub fn last(&self) -> Option<u64> {
        self.last
    }
}

#[cfg(test)]
mod tests;
