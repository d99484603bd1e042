//! Running one shmring measurement: make the ring(s), start the consumer and producer
//! processes, collect their results, remove the rings.

use std::time::Duration;

use anyhow::Result;
use shmring::ProducerMode;
use shmring_peers::kit::Measured;

use crate::run::Ctx;

/// The processes and rings of one measurement.
pub struct Setup {
    /// Slots.
    pub capacity: u64,
    /// Bytes per slot (header included).
    pub slot: u32,
    /// Single or multi producer.
    pub mode: ProducerMode,
    /// A ring of fixed-size events of this many bytes (`RingConfig::event_size`; `slot` is
    /// then unused), or stamped slots (`None`).
    pub event_size: Option<u32>,
    /// A ring of sized events of up to this many bytes (`RingConfig::max_event_size`; `slot`
    /// is then unused).
    pub max_event_size: Option<u32>,
    /// Each consumer process's arguments (`wait=`, `mode=`, ...).
    pub consumers: Vec<Vec<String>>,
    /// Each producer process's arguments.
    pub producers: Vec<Vec<String>>,
    /// Make an echo ring (ping-pong) and pass `echo=<name>` to everyone.
    pub echo: bool,
    /// Kill everything after this long.
    pub timeout: Duration,
}

impl Setup {
    /// One consumer, one producer, 1024 slots of 64 bytes.
    pub fn one_to_one(consumer: Vec<String>, producer: Vec<String>, timeout: Duration) -> Self {
        Self {
            capacity: 1024,
            slot: 64,
            mode: ProducerMode::Single,
            event_size: None,
            max_event_size: None,
            consumers: vec![consumer],
            producers: vec![producer],
            echo: false,
            timeout,
        }
    }
}

/// What the processes measured.
pub struct Parts {
    /// One per consumer process, in order.
    pub consumers: Vec<Measured>,
    /// One per producer process, in order.
    pub producers: Vec<Measured>,
}

/// Run `setup`. The first consumer is pinned to CPU 1 and the first producer to CPU 0
/// with `--pin`; any others float.
pub fn run(ctx: &mut Ctx, what: &str, setup: Setup) -> Result<Parts> {
    let (ring, _r) = ctx.ring_of(
        setup.capacity,
        setup.slot,
        setup.mode,
        (setup.event_size, setup.max_event_size),
    )?;
    let echo = if setup.echo {
        Some(ctx.ring(setup.capacity, setup.slot, ProducerMode::Single)?)
    } else {
        None
    };
    let result = (|| {
        let (mut roles, _ctl, ctl_path) = ctx.roles(what)?;
        let mut common = vec![
            format!("ns={}", ctx.namespace),
            format!("ring={ring}"),
            format!("ctl={}", ctl_path.display()),
            format!("consumers={}", setup.consumers.len()),
            format!("producers={}", setup.producers.len()),
        ];
        if let Some((e, _)) = &echo {
            common.push(format!("echo={e}"));
        }
        for (i, c) in setup.consumers.iter().enumerate() {
            let mut a = common.clone();
            a.extend(c.iter().cloned());
            if i == 0 {
                a.extend(ctx.cpu(1));
            }
            roles.spawn("shm-consumer", &a)?;
        }
        for (i, p) in setup.producers.iter().enumerate() {
            let mut a = common.clone();
            a.extend(p.iter().cloned());
            if i == 0 {
                a.extend(ctx.cpu(0));
            }
            roles.spawn("shm-producer", &a)?;
        }
        let mut all = roles.finish(setup.timeout)?;
        let _ = std::fs::remove_file(&ctl_path);
        let producers = all.split_off(setup.consumers.len());
        Ok(Parts {
            consumers: all,
            producers,
        })
    })();
    ctx.drop_ring(&ring);
    if let Some((e, _)) = &echo {
        ctx.drop_ring(e);
    }
    result
}

/// `key=value`.
pub fn kv(k: &str, v: impl std::fmt::Display) -> String {
    format!("{k}={v}")
}
