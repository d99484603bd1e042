//! Requests about one durable consumer, by name: `release` (it stops gating producers) and
//! `unsubscribe` (its entry is freed for good). A worker group is refused both: its entry
//! is its members' work sequence. Both change the entry with the client
//! library's CAS on the entry's state, checked against the process that owns it, so a
//! consumer attaching or being taken over in between is never touched.

use std::sync::Mutex;

use shmring::process::is_alive;
use shmring::{ConsumerInfo, Ring};
use shmring_layout::consumer_state;
use tracing::info;

use super::ops::{lock, too_late, truncated, unknown, unless_truncated};
use super::registry::Broker;
use crate::protocol::{Deadline, Reply};

/// The ring and consumer `consumer` of ring `name`, or the reply saying why not.
fn find(shared: &Mutex<Broker>, name: &str, consumer: &str) -> Result<(Ring, ConsumerInfo), Reply> {
    let ring = {
        let mut b = lock(shared);
        b.rescan(true);
        match b.rings.get(name) {
            Some(t) => t.ring.clone(),
            None => return Err(unknown(&b, name)),
        }
    };
    let info = ring.info();
    if let Some(e) = truncated(&ring) {
        return Err(Reply::error(format!("ring {name:?}: {e}")));
    }
    match info
        .consumers
        .iter()
        .find(|c| c.durable && c.name == consumer)
    {
        Some(c) => Ok((ring, c.clone())),
        None => {
            let names: Vec<String> = info
                .consumers
                .iter()
                .filter(|c| c.durable)
                // Quoted and escaped: names other processes chose, printed to a terminal.
                .map(|c| format!("{:?}", c.name))
                .collect();
            Err(Reply::error(format!(
                "ring {name:?} has no durable consumer named {consumer:?} (durable consumers: {})",
                if names.is_empty() {
                    "none".to_owned()
                } else {
                    names.join(", ")
                }
            )))
        }
    }
}

fn done(message: String) -> Reply {
    Reply::Done {
        message,
        sequence: None,
        run: None,
    }
}

fn changed_meanwhile(name: &str, consumer: &str) -> Reply {
    Reply::error(format!(
        "ring {name:?}: consumer {consumer:?} changed hands while this request ran (it attached, detached or was taken over); nothing was changed: look at `broker status` and try again"
    ))
}

/// What `op` does with durable consumer `consumer` of ring `name`, or the reply saying why
/// it could not be found; told as a truncation if the ring's file shrank under it.
fn on_consumer(
    shared: &Mutex<Broker>,
    name: &str,
    consumer: &str,
    deadline: Option<Deadline>,
    op: fn(&Ring, &ConsumerInfo, &str, &str, Option<Deadline>) -> Reply,
) -> Reply {
    let (ring, c) = match find(shared, name, consumer) {
        Ok(found) => found,
        Err(reply) => return reply,
    };
    let reply = op(&ring, &c, name, consumer, deadline);
    unless_truncated(&ring, name, reply)
}

/// Stop consumer `consumer` of ring `name` from gating producers.
pub fn release(
    shared: &Mutex<Broker>,
    name: &str,
    consumer: &str,
    deadline: Option<Deadline>,
) -> Reply {
    on_consumer(shared, name, consumer, deadline, release_found)
}

fn release_found(
    ring: &Ring,
    c: &ConsumerInfo,
    name: &str,
    consumer: &str,
    deadline: Option<Deadline>,
) -> Reply {
    if c.is_group {
        return Reply::error(format!(
            "ring {name:?}: {consumer:?} is a worker group: its entry holds the events no member has claimed yet, so it is not released; start a member of the group to consume them"
        ));
    }
    match c.state_code {
        consumer_state::RELEASED => {
            return done(format!(
                "ring {name:?}: consumer {consumer:?} is already released (not gating)"
            ))
        }
        consumer_state::CLAIMED | consumer_state::RESUMING | consumer_state::REATTACHING => {
            return Reply::error(format!(
                "ring {name:?}: consumer {consumer:?} is attaching right now; try again"
            ))
        }
        _ => {}
    }
    if let Some(late) = too_late(deadline) {
        return late;
    }
    if !ring.release_consumer(c.index, c.word) {
        return changed_meanwhile(name, consumer);
    }
    info!(
        ring = name,
        consumer, "consumer released by request: it no longer gates producers"
    );
    done(format!(
        "ring {name:?}: consumer {consumer:?} released at sequence {}: producers no longer wait for it; it resumes at the head and counts the gap as dropped (a live consumer at its next poll, a detached one when it attaches again)",
        c.next
    ))
}

/// Free the entry of consumer `consumer` of ring `name`, which must not be attached.
pub fn unsubscribe(
    shared: &Mutex<Broker>,
    name: &str,
    consumer: &str,
    deadline: Option<Deadline>,
) -> Reply {
    on_consumer(shared, name, consumer, deadline, unsubscribe_found)
}

fn unsubscribe_found(
    ring: &Ring,
    c: &ConsumerInfo,
    name: &str,
    consumer: &str,
    deadline: Option<Deadline>,
) -> Reply {
    if c.is_group {
        return Reply::error(format!(
            "ring {name:?}: {consumer:?} is a worker group: its entry is the work sequence its members claim from, and a member may attach at any moment, so it is not freed by request; it goes with the ring (stop the producers, drain and remove the ring to be rid of it)"
        ));
    }
    let attached = match c.state_code {
        consumer_state::ACTIVE => is_alive(c.pid, c.start_time),
        consumer_state::CLAIMED | consumer_state::RESUMING | consumer_state::REATTACHING => true,
        _ => false,
    };
    if attached {
        return Reply::error(format!(
            "ring {name:?}: consumer {consumer:?} is attached by live process {}: stop that process first (or `{}` to stop it gating)",
            c.pid,
            shmring::names::broker_command(ring.namespace(), "release", &[name, consumer], &[])
        ));
    }
    if let Some(late) = too_late(deadline) {
        return late;
    }
    if !ring.free_consumer(c.index, c.word) {
        return changed_meanwhile(name, consumer);
    }
    info!(
        ring = name,
        consumer, "durable consumer unsubscribed by request: entry freed"
    );
    done(format!(
        "ring {name:?}: consumer {consumer:?} unsubscribed at sequence {}: its entry is freed and it gates nothing; attaching under that name again starts a new consumer at the head",
        c.next
    ))
}
