//! The claim guard: a slot written in place, committed or published as a tombstone.

use super::*;

impl Producer {
    /// Stamp the claimed sequence `seq` as an event of `len` bytes (`flags` 0) or a
    /// tombstone, and count it.
    fn finish_claim(&mut self, seq: u64, len: usize, flags: u32) {
        if self.fixed {
            if self.sized && flags == 0 {
                // This producer holds the claim (past the wrap gate); published when it ends.
                self.seg.events().set_len(seq, len);
            }
            // A fixed-size ring's event is the whole slot: no length to store.
            return self.finish_range(seq, 1, flags);
        }
        // Relaxed: published by the Release stamp store in `finish_range`.
        self.seg
            .slot(seq)
            .header
            .len
            .store(len as u32, Ordering::Relaxed);
        self.finish_range(seq, 1, flags);
    }

    /// Stamp the `n` claimed sequences from `first`, in order, as events (`flags` 0, their
    /// lengths already in the slot headers) or as tombstones; one wake, then count them.
    pub(super) fn finish_range(&mut self, first: u64, n: u64, flags: u32) {
        self.open_claim = None;
        if self.fixed {
            let events = self.seg.events();
            if flags == 0 {
                fixed::end_pending(&events);
            } else {
                // This producer holds the claim and passed the wrap gate for it.
                fixed::tombstone_pending(&events, first, first + n);
            }
            self.notify();
            if flags != 0 {
                self.count_tombstones(n);
            }
            return;
        }
        for seq in first..first + n {
            let slot = self.seg.slot(seq);
            if flags != 0 {
                // Relaxed: published by the Release stamp store below.
                slot.header.len.store(0, Ordering::Relaxed);
            }
            // Relaxed: published by the Release stamp store below.
            slot.header.flags.store(flags, Ordering::Relaxed);
            Self::stamp(&slot, seq);
        }
        self.notify();
        self.clear_in_flight();
        if flags == 0 {
            self.count_published(n);
        } else {
            self.count_tombstones(n);
        }
    }

    fn count_tombstones(&mut self, n: u64) {
        self.tombstoned += n;
        // Relaxed: a counter only this producer writes.
        self.entry()
            .tombstoned
            .store(self.tombstoned, Ordering::Relaxed);
    }

    /// Before the first write into a claim of `first..first + n`: the WRITING stamps of a
    /// stamped ring (their lengths 0 until set); a fixed-size ring's claim raised the write
    /// horizon over it already (`claim_single`).
    fn begin_claim(&self, first: u64, n: u64, lens: bool) {
        if self.fixed {
            let events = self.seg.events();
            for seq in first..first + n {
                // SAFETY: this producer holds the claim and passed the wrap gate for it.
                // Zeroed: an event committed without a write never carries another one's
                // bytes.
                unsafe { events.payload_mut(seq) }.fill(0);
                if events.sized() {
                    events.set_len(seq, 0);
                }
            }
            return;
        }
        for seq in first..first + n {
            let slot = self.seg.slot(seq);
            self.begin_write(&slot, seq);
            if lens {
                // Relaxed: published by the Release stamp store in `finish_range`.
                slot.header.len.store(0, Ordering::Relaxed);
            }
        }
    }

    /// The writable payload of the claimed `seq`: the slot's payload area, or a fixed-size
    /// ring's event.
    ///
    /// # Safety
    /// As for `Slot::payload_mut`: this producer holds `seq`'s claim (past the wrap gate)
    /// and the borrow ends before it is published.
    unsafe fn claimed_payload(&mut self, seq: u64) -> &mut [u8] {
        if self.fixed {
            // SAFETY: the caller's contract.
            unsafe { self.seg.events().payload_mut(seq) }
        } else {
            // SAFETY: the caller's contract.
            unsafe { self.seg.slot(seq).payload_mut() }
        }
    }

    /// A length a claimed event may have: at most the slot's payload, or on a fixed-size
    /// ring exactly the event size.
    fn check_claim_len(&self, len: usize) -> Result<(), PublishError> {
        let max = self.max_payload;
        if self.fixed && !self.sized && len != max {
            return Err(PublishError::WrongSize { len, size: max });
        }
        if len > max {
            return Err(PublishError::TooLarge { len, max });
        }
        Ok(())
    }

    /// A [`Claim`] or [`ClaimBatch`] leaked without commit or drop still holds its
    /// sequences: publish them as tombstones (this producer still owns the slots), so
    /// consumers do not wait at them.
    #[cold]
    pub(super) fn close_forgotten_claim(&mut self) {
        if let Some((first, n)) = self.open_claim {
            tracing::warn!(
                ring = self.seg.name(),
                sequence = first,
                count = n,
                "a claim was leaked without commit or drop; publishing it as tombstones"
            );
            self.finish_range(first, n, SLOT_FLAG_TOMBSTONE);
        }
    }

    /// Claim the next sequence for a zero-copy write, waiting for room. Write into
    /// [`Claim::payload_mut`] (or [`Claim::write`]), then [`Claim::commit`]. Dropped without
    /// commit (or unwound by a panic), the claim publishes a tombstone that consumers skip
    /// and count.
    pub fn claim(&mut self) -> Result<Claim<'_>, PublishError> {
        let seq = self.claim_blocking(1)?;
        self.begin_claim(seq, 1, false);
        self.open_claim = Some((seq, 1));
        self.fast_end = 0;
        Ok(Claim {
            producer: self,
            seq,
            len: 0,
            done: false,
        })
    }

    /// Claim `n` consecutive sequences for zero-copy writes, waiting for room (`n` in
    /// `1..=capacity/2`, as for [`Producer::publish_batch`]). Write each slot through
    /// [`ClaimBatch::payload_mut`] and [`ClaimBatch::set_len`] (or [`ClaimBatch::write`]),
    /// then [`ClaimBatch::commit`] publishes all `n` at once. Dropped without commit (or
    /// unwound by a panic), every slot of the batch is published as a tombstone that
    /// consumers skip and count.
    ///
    /// ```
    /// use shmring::{ConsumerOptions, Ring, RingConfig};
    /// # let ns = format!("doc-claim-batch-{}", std::process::id());
    /// let ring = Ring::create(&ns, "quotes", &RingConfig { capacity: 16, ..RingConfig::default() })?;
    /// let mut consumer = ring.consumer(ConsumerOptions::anonymous())?;
    /// let mut producer = ring.producer()?;
    /// let mut batch = producer.claim_batch(2)?;
    /// batch.write(0, b"bid 41")?;
    /// let slot = batch.payload_mut(1).ok_or("slot 1 is in a batch of 2")?;
    /// slot[..6].copy_from_slice(b"ask 43");
    /// batch.set_len(1, 6)?;
    /// assert_eq!(batch.commit(), 0);
    /// let mut seen = Vec::new();
    /// consumer.poll_once(|ev| seen.push(ev.bytes().to_vec()))?;
    /// assert_eq!(seen, [b"bid 41".to_vec(), b"ask 43".to_vec()]);
    /// # drop((consumer, producer));
    /// Ring::remove(&ns, "quotes")?;
    /// # std::fs::remove_dir(shmring::names::namespace_dir(&ns)?).ok();
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn claim_batch(&mut self, n: usize) -> Result<ClaimBatch<'_>, PublishError> {
        let max = (self.capacity / 2) as usize;
        if n == 0 || n > max {
            self.refuse();
            return Err(PublishError::BatchSize { len: n, max });
        }
        let first = self.claim_blocking(n as u64)?;
        self.begin_claim(first, n as u64, true);
        self.open_claim = Some((first, n as u64));
        self.fast_end = 0;
        Ok(ClaimBatch {
            producer: self,
            first,
            n,
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
    /// event's length with [`Claim::set_len`] (on a ring of sized events too). On a
    /// fixed-size ring, the event itself (every event is the whole area; no length to set).
    pub fn payload_mut(&mut self) -> &mut [u8] {
        // SAFETY: this claim owns the slot (claimed and past the wrap gate) until it is
        // stamped in `commit` or `drop`, and the borrow is tied to `&mut self`.
        unsafe { self.producer.claimed_payload(self.seq) }
    }

    /// Set the event's length (bytes of the payload area that are the event). On a
    /// fixed-size ring only the event size is accepted.
    pub fn set_len(&mut self, len: usize) -> Result<(), PublishError> {
        self.producer.check_claim_len(len)?;
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

/// `n` consecutive claimed slots being written in place, published together by
/// [`ClaimBatch::commit`]. Dropped without commit, every slot is published as a tombstone.
///
/// Each slot's event length starts at 0; set it with [`ClaimBatch::set_len`] or
/// [`ClaimBatch::write`].
pub struct ClaimBatch<'p> {
    producer: &'p mut Producer,
    first: u64,
    /// Slots in the batch, in `1..=capacity/2`.
    n: usize,
    done: bool,
}

impl ClaimBatch<'_> {
    /// Slots in the batch.
    pub fn len(&self) -> usize {
        self.n
    }

    /// Always false: a batch holds at least one slot.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// The sequence of slot 0; slot `i` carries `first_sequence() + i`.
    pub fn first_sequence(&self) -> u64 {
        self.first
    }

    fn check_index(&self, i: usize) -> Result<u64, PublishError> {
        if i < self.n {
            Ok(self.first + i as u64)
        } else {
            Err(PublishError::BatchIndex {
                index: i,
                len: self.n,
            })
        }
    }

    /// The whole payload area of slot `i` (its length is the ring's max payload), or
    /// `None` if `i >= len()`. Set the event's length with [`ClaimBatch::set_len`]. On a
    /// fixed-size ring, event `i` itself (no length to set).
    pub fn payload_mut(&mut self, i: usize) -> Option<&mut [u8]> {
        let seq = self.check_index(i).ok()?;
        // SAFETY: this batch owns every slot of `first..first + n` (claimed and past the
        // wrap gate) until they are stamped in `commit` or `drop`, and the borrow is tied to
        // `&mut self`.
        Some(unsafe { self.producer.claimed_payload(seq) })
    }

    /// Set the length of slot `i`'s event (bytes of its payload area that are the event).
    /// On a fixed-size ring only the event size is accepted.
    pub fn set_len(&mut self, i: usize, len: usize) -> Result<(), PublishError> {
        let seq = self.check_index(i)?;
        self.producer.check_claim_len(len)?;
        if self.producer.fixed {
            if self.producer.sized {
                // This batch holds the claim (past the wrap gate); published when the claim ends.
                self.producer.seg.events().set_len(seq, len);
            }
            return Ok(());
        }
        // Relaxed: published by the Release stamp store in `Producer::finish_range`.
        self.producer
            .seg
            .slot(seq)
            .header
            .len
            .store(len as u32, Ordering::Relaxed);
        Ok(())
    }

    /// Copy `bytes` into slot `i` and set its length.
    pub fn write(&mut self, i: usize, bytes: &[u8]) -> Result<(), PublishError> {
        self.set_len(i, bytes.len())?;
        if let Some(p) = self.payload_mut(i) {
            p[..bytes.len()].copy_from_slice(bytes);
        }
        Ok(())
    }

    /// Write a plain-old-data value into slot `i` and set its length.
    pub fn write_value<T: bytemuck::NoUninit>(
        &mut self,
        i: usize,
        value: &T,
    ) -> Result<(), PublishError> {
        self.write(i, bytemuck::bytes_of(value))
    }

    /// Publish every slot of the batch: stamps in sequence order, one wake. Returns the
    /// first sequence.
    pub fn commit(mut self) -> u64 {
        self.finish(0);
        self.first
    }

    fn finish(&mut self, flags: u32) {
        self.done = true;
        self.producer.finish_range(self.first, self.n as u64, flags);
    }
}

impl Drop for ClaimBatch<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.finish(SLOT_FLAG_TOMBSTONE);
        }
    }
}
