//! What the client's hostile-input test files share.

/// `poll_once` with a handler that cannot panic, on a consumer this test owns. Such a
/// handler never makes `poll_once` report `HandlerPanicked` (only the handler's own panic
/// does), so that error, or the `Failed` that follows it, is the client panicking inside
/// its delivery loop: fail the test. The consumer's entry must not be FAILED afterwards.
pub fn poll_quiet(
    ring: &shmring::Ring,
    c: &mut shmring::Consumer,
    handler: impl FnMut(shmring::Event<'_>),
) -> Result<usize, shmring::PollError> {
    let r = c.poll_once(handler);
    assert!(
        !matches!(
            r,
            Err(shmring::PollError::HandlerPanicked { .. } | shmring::PollError::Failed)
        ),
        "poll_once with a handler that cannot panic returned {r:?}: the client panicked"
    );
    let index = c.index();
    if let Some(e) = ring.info().consumers.iter().find(|e| e.index == index) {
        assert_ne!(e.state, "FAILED", "consumer {index} left FAILED: {e:?}");
    }
    r
}
