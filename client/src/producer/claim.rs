//! The claim guard: a slot written in place, committed or published as a tombstone.

use super::*;

impl Producer {
    /// Stamp the claimed sequence `seq` as an event of `len` bytes (`flags` 0) or a
    /// tombstone, and count it.
    fn finish_claim(&mut self, seq: u64, len: usize, flags: u32) {
        self.open_claim = None;
        let slot = self.seg.slot(seq);
        // Relaxed: published by the Release stamp store below.
        slot.header.len.store(len as u32, Ordering::Relaxed);
        slot.header.flags.store(flags, Ordering::Relaxed);
        Self::stamp(&slot, seq);
        self.notify();
        self.clear_in_flight();
        if flags == 0 {
            self.count_published(1);
        } else {
            self.tombstoned += 1;
            // Relaxed: a counter only this producer writes.
            self.entry()
                .tombstoned
                .store(self.tombstoned, Ordering::Relaxed);
        }
    }

    /// A [`Claim`] leaked without commit or drop still holds its sequence: publish it as a
    /// tombstone (this producer still owns the slot), so consumers do not wait at it.
    #[cold]
    pub(super) fn close_forgotten_claim(&mut self) {
        if let Some(seq) = self.open_claim {
            tracing::warn!(
                ring = self.seg.name(),
                sequence = seq,
                "a claim was leaked without commit or drop; publishing it as a tombstone"
            );
            self.finish_claim(seq, 0, SLOT_FLAG_TOMBSTONE);
        }
    }

    /// Claim the next sequence for a zero-copy write, waiting for room. Write into
    /// [`Claim::payload_mut`] (or [`Claim::write`]), then [`Claim::commit`]. Dropped without
    /// commit (or unwound by a panic), the claim publishes a tombstone that consumers skip
    /// and count.
    pub fn claim(&mut self) -> Result<Claim<'_>, PublishError> {
        let seq = self.claim_blocking(1)?;
        Self::begin_write(&self.seg.slot(seq), seq);
        self.open_claim = Some(seq);
        Ok(Claim {
            producer: self,
            seq,
            len: 0,
            done: false,
        })
    }
}

/// A claimed slot being written in place. Commit it, or drop it to publish a tombstone.
pub struct Claim<'p> {
    producer: &'p mut Producer,
    seq: u64,
    len: usize,
    done: bool,
}

impl Claim<'_> {
    /// The claimed sequence.
    pub fn sequence(&self) -> u64 {
        self.seq
    }

    /// The whole payload area of the slot (its length is the ring's max payload). Set the
    /// event's length with [`Claim::set_len`].
    pub fn payload_mut(&mut self) -> &mut [u8] {
        // SAFETY: this claim owns the slot (claimed and past the wrap gate) until it is
        // stamped in `commit` or `drop`, and the borrow is tied to `&mut self`.
        unsafe { self.producer.seg.slot(self.seq).payload_mut() }
    }

    /// Set the event's length (bytes of the payload area that are the event).
    pub fn set_len(&mut self, len: usize) -> Result<(), PublishError> {
        let max = self.producer.max_payload;
        if len > max {
            return Err(PublishError::TooLarge { len, max });
        }
        self.len = len;
        Ok(())
    }

    /// Copy `bytes` in and set the length.
    pub fn write(&mut self, bytes: &[u8]) -> Result<(), PublishError> {
        self.set_len(bytes.len())?;
        self.payload_mut()[..bytes.len()].copy_from_slice(bytes);
        Ok(())
    }

    /// Write a plain-old-data value and set the length.
    pub fn write_value<T: bytemuck::NoUninit>(&mut self, value: &T) -> Result<(), PublishError> {
        self.write(bytemuck::bytes_of(value))
    }

    /// Publish the event. Returns its sequence.
    pub fn commit(mut self) -> u64 {
        self.finish(0);
        self.seq
    }

    fn finish(&mut self, flags: u32) {
        self.done = true;
        let len = if flags == 0 { self.len } else { 0 };
        self.producer.finish_claim(self.seq, len, flags);
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.finish(SLOT_FLAG_TOMBSTONE);
        }
    }
}
