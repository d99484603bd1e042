//! The event a handler sees: borrowed from the slot for the duration of one handler call.

/// One event, borrowed for one handler call. The borrow cannot outlive the call (the
/// handler is `for<'a> FnMut(Event<'a>)`), so the slot-reuse bug of keeping a reference to
/// an event the producer will overwrite does not compile:
///
/// ```compile_fail
/// # fn demo(consumer: &mut shmring::Consumer) {
/// let mut kept: Option<&[u8]> = None;
/// let _ = consumer.poll_once(|ev| kept = Some(ev.bytes()));
/// # }
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Event<'a> {
    pub(crate) seq: u64,
    pub(crate) bytes: &'a [u8],
    pub(crate) end_of_batch: bool,
}

impl<'a> Event<'a> {
    /// The event's sequence in the ring (unique for the life of the segment).
    pub fn sequence(&self) -> u64 {
        self.seq
    }

    /// The payload.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// True for the last event of the batch this `poll_once` delivers: the moment to flush
    /// what the handler buffered.
    pub fn is_end_of_batch(&self) -> bool {
        self.end_of_batch
    }

    /// Copy the payload out as a plain-old-data value (`None` if the length differs).
    pub fn read<T: bytemuck::AnyBitPattern>(&self) -> Option<T> {
        (self.bytes.len() == std::mem::size_of::<T>())
            .then(|| bytemuck::pod_read_unaligned(self.bytes))
    }

    /// View the payload as a plain-old-data value in place (`None` if the length or the
    /// alignment does not fit; payloads are 16-byte aligned in the slot).
    pub fn view<T: bytemuck::AnyBitPattern>(&self) -> Option<&'a T> {
        bytemuck::try_from_bytes(self.bytes).ok()
    }
}
