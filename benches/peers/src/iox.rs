//! iceoryx2 publish-subscribe between two processes: zero-copy shared memory with its own
//! discovery, the closest thing to shmring a user would pick instead.
//!
//! The subscriber busy-polls `receive()` (publish-subscribe has no blocking receive; a
//! sleeping subscriber needs an event service and a WaitSet on top, which is not measured
//! here). The service is non-overflowing with `RetryUntilDelivered`, and the subscriber
//! connects to the publisher before the run starts, so no sample is lost and the throughput
//! is what was delivered; a send that still reached nobody is counted, and the row shows it
//! as dropped. Every file iceoryx2 creates is under a root path and a prefix unique to the
//! run, and the harness removes them at exit.

use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use iceoryx2::port::{DegradationAction, DegradationCause, DegradationInfo};
use iceoryx2::prelude::*;

use crate::kit::{self, new_hist, now_ns, Args, Ctl, Measured, Pacer, Roles};
use crate::Plan;

type Msg = [u64; 2];

/// Subscriber queue (the shmring rows use 1024-slot rings).
const BUFFER: usize = 1024;

/// The root directory iceoryx2 keeps its bookkeeping in, for run `run_id`.
pub fn root_path(run_id: &str) -> String {
    format!("/tmp/shmring-ipcb-{run_id}-iox2/")
}

/// The prefix of every shared-memory file iceoryx2 creates, for run `run_id`.
pub fn prefix(run_id: &str) -> String {
    format!("iox2ipcb{}_", run_id.replace(['-', '.'], ""))
}

fn node(run_id: &str) -> Result<Node<ipc::Service>> {
    set_log_level(LogLevel::Error);
    let mut config = Config::default();
    config
        .global
        .set_root_path(&Path::new(root_path(run_id).as_bytes()).map_err(|e| anyhow!("{e:?}"))?);
    config.global.prefix =
        FileName::new(prefix(run_id).as_bytes()).map_err(|e| anyhow!("{e:?}"))?;
    NodeBuilder::new()
        .config(&config)
        .signal_handling_mode(SignalHandlingMode::Disabled)
        .create::<ipc::Service>()
        .map_err(|e| anyhow!("iceoryx2 node: {e:?}"))
}

type Pubsub =
    iceoryx2::service::port_factory::publish_subscribe::PortFactory<ipc::Service, Msg, ()>;

fn service(node: &Node<ipc::Service>, name: &str) -> Result<Pubsub> {
    let name: ServiceName = name.try_into().map_err(|e| anyhow!("{e:?}"))?;
    node.service_builder(&name)
        .publish_subscribe::<Msg>()
        .enable_safe_overflow(false)
        .subscriber_max_buffer_size(BUFFER)
        .history_size(0)
        .max_publishers(1)
        .max_subscribers(1)
        .open_or_create()
        .map_err(|e| anyhow!("iceoryx2 service {name}: {e:?}"))
}

/// A subscriber's answer to a connection it cannot establish: fail the call that found it
/// (iceoryx2's default only warns, at a log level these roles do not print, and the samples
/// of that publisher are then never received).
fn fail_on_degradation(_: DegradationCause, _: &DegradationInfo) -> DegradationAction {
    DegradationAction::DegradeAndFail
}

/// Hand-off latency, paced (`plan.interval`) or back-to-back ping-pong.
pub fn latency(plan: &Plan, pingpong: bool, tag: &str) -> Result<Measured> {
    let mode = if pingpong { "pingpong" } else { "paced" };
    run(plan, tag, mode)
}

/// 1P1C throughput for `plan.duration`, per-event `send_copy`.
pub fn throughput(plan: &Plan, tag: &str) -> Result<Measured> {
    run(plan, tag, "throughput")
}

fn run(plan: &Plan, tag: &str, mode: &str) -> Result<Measured> {
    let ctl_path = plan.dir.join(format!("{tag}.ctl"));
    let _ctl = Ctl::create(&ctl_path)?;
    let common = vec![
        format!("ctl={}", ctl_path.display()),
        format!("run_id={}", plan.run_id),
        format!("svc={tag}"),
        format!("mode={mode}"),
        format!("count={}", plan.count),
        format!("warmup={}", plan.warmup),
        format!("interval_ns={}", plan.interval.as_nanos()),
        format!("duration_ns={}", plan.duration.as_nanos()),
    ];
    let mut roles = Roles::new(&plan.dir, tag);
    let mut a = common.clone();
    a.extend(plan.cpu_arg(1));
    roles.spawn("peer-iox-sub", &a)?;
    let mut a = common;
    a.extend(plan.cpu_arg(0));
    roles.spawn("peer-iox-pub", &a)?;
    let mut parts = roles.finish(plan.timeout)?.into_iter();
    let (Some(sub), Some(publ)) = (parts.next(), parts.next()) else {
        bail!("missing results");
    };
    let mut m = Measured::default();
    if mode == "throughput" {
        let delivered = sub.need("delivered")?;
        let window = sub.need("t_end")? - publ.need("t_start")?;
        m.set("delivered", delivered)
            .set("published", publ.need("published")?)
            .set("ops_per_sec", delivered / (window.max(1.0) / 1e9));
        if let Some(r) = sub.get("best_ops_per_sec") {
            m.set("best_ops_per_sec", r);
        }
    }
    m.set("consumer_cpu", sub.need("cpu_share")?)
        .set("producer_cpu", publ.need("cpu_share")?);
    m.hist = sub.hist;
    for k in ["pacer_late_p99_ns", "pacer_held_p99_ns"] {
        if let Some(v) = publ.get(k) {
            m.set(k, v);
        }
    }
    std::fs::remove_file(&ctl_path).ok();
    Ok(m)
}

fn role_sub(args: &Args) -> Result<()> {
    args.pin();
    let ctl = args.ctl()?;
    let node = node(args.str("run_id")?)?;
    let svc = args.str("svc")?;
    let mode = args.str("mode")?;
    let there = service(&node, &format!("ipcb/{svc}/there"))?;
    let sub = there
        .subscriber_builder()
        .set_degradation_handler(fail_on_degradation)
        .create()
        .map_err(|e| anyhow!("{e:?}"))?;
    let back = if mode == "pingpong" {
        let s = service(&node, &format!("ipcb/{svc}/back"))?;
        Some(
            s.publisher_builder()
                .backpressure_strategy(BackpressureStrategy::RetryUntilDelivered)
                .create()
                .map_err(|e| anyhow!("{e:?}"))?,
        )
    } else {
        None
    };
    // iceoryx2 connects a subscriber to a publisher lazily, inside `receive()`; until then a
    // publisher whose subscriber buffer is full drops the sample (`send_copy` returns 0
    // recipients) instead of retrying. Report ready only once the publisher exists and this
    // subscriber has connected to it, so that the measured sends all have a receiver.
    let mut connected = Ok(false);
    kit::wait_for(
        || {
            connected = if there.dynamic_config().number_of_publishers() == 0 {
                Ok(false)
            } else {
                sub.has_samples().map(|_| true)
            };
            !matches!(connected, Ok(false))
        },
        Duration::from_secs(20),
    );
    match connected {
        Ok(true) => {}
        Ok(false) => bail!("the iceoryx2 publisher did not appear within 20 s"),
        Err(e) => bail!("cannot connect to the iceoryx2 publisher: {e:?}"),
    }
    let total = args.num::<u64>("count")? + args.num::<u64>("warmup")?;
    let warmup: u64 = args.num("warmup")?;
    let mut hist = new_hist();
    let (mut c0, mut w0) = (kit::thread_cpu_ns(), now_ns());
    ctl.arrive();
    let mut delivered = 0u64;
    let mut meter = kit::RateMeter::new();
    if mode == "throughput" {
        loop {
            match sub.receive().map_err(|e| anyhow!("{e:?}"))? {
                Some(s) => {
                    std::hint::black_box(s.payload()[0]);
                    delivered += 1;
                    meter.tick(delivered);
                }
                None => {
                    // Acquire: pairs with the publisher's Release store of `done`; line 0
                    // holds the number of sends that reached this subscriber.
                    if ctl.done().load(Ordering::Acquire) != 0
                        && delivered >= ctl.line(0).seq.load(Ordering::Relaxed)
                    {
                        break;
                    }
                    std::hint::spin_loop();
                }
            }
        }
    } else {
        while delivered < total {
            let Some(s) = sub.receive().map_err(|e| anyhow!("{e:?}"))? else {
                std::hint::spin_loop();
                continue;
            };
            let now = now_ns();
            let [seq, stamp] = *s.payload();
            drop(s);
            if seq >= warmup {
                hist.saturating_record(now.saturating_sub(stamp));
            }
            if seq == warmup {
                // CPU over the recorded part only.
                (c0, w0) = (kit::thread_cpu_ns(), now_ns());
            }
            delivered += 1;
            if let Some(p) = &back {
                if p.send_copy([seq, 0]).map_err(|e| anyhow!("{e:?}"))? == 0 {
                    bail!("iceoryx2 delivered echo {seq} to no subscriber");
                }
            }
        }
    }
    let (c1, w1) = (kit::thread_cpu_ns(), now_ns());
    // Release: the publisher may go now.
    ctl.line(1).seq.store(1, Ordering::Release);
    let mut m = Measured::default();
    if mode != "throughput" {
        m.hist = Some(hist);
    } else if let Some(r) = meter.best(kit::best_window(Duration::from_nanos(
        args.num("duration_ns")?,
    ))) {
        m.set("best_ops_per_sec", r);
    }
    m.set("delivered", delivered as f64)
        .set("t_end", w1 as f64)
        .set("cpu_share", (c1 - c0) as f64 / (w1 - w0).max(1) as f64);
    kit::report(args, &m)
}

fn role_pub(args: &Args) -> Result<()> {
    args.pin();
    let ctl = args.ctl()?;
    let node = node(args.str("run_id")?)?;
    let svc = args.str("svc")?;
    let mode = args.str("mode")?;
    let there = service(&node, &format!("ipcb/{svc}/there"))?;
    let publ = there
        .publisher_builder()
        .backpressure_strategy(BackpressureStrategy::RetryUntilDelivered)
        .create()
        .map_err(|e| anyhow!("{e:?}"))?;
    let back = if mode == "pingpong" {
        let s = service(&node, &format!("ipcb/{svc}/back"))?;
        Some(
            s.subscriber_builder()
                .set_degradation_handler(fail_on_degradation)
                .create()
                .map_err(|e| anyhow!("{e:?}"))?,
        )
    } else {
        None
    };
    ctl.wait_ready(1, Duration::from_secs(20))?;
    let total = args.num::<u64>("count")? + args.num::<u64>("warmup")?;
    let mut pacer = Pacer::new(Duration::from_nanos(args.num("interval_ns")?));
    let (c0, t_start) = (kit::thread_cpu_ns(), now_ns());
    let mut m = Measured::default();
    let send = |v: Msg| publ.send_copy(v).map_err(|e| anyhow!("{e:?}"));
    // The latency modes count every sample: one that reached nobody ends the run with an
    // error instead of a subscriber waiting for it until the harness kills the run.
    let send_all = |v: Msg| match send(v)? {
        0 => bail!("iceoryx2 delivered sample {} to no subscriber", v[0]),
        _ => Ok(()),
    };
    match mode {
        "throughput" => {
            let end = t_start + args.num::<u64>("duration_ns")?;
            let (mut n, mut reached) = (0u64, 0u64);
            while now_ns() < end {
                for _ in 0..256 {
                    // The number of subscribers the sample went to: 0 when iceoryx2 dropped it.
                    reached += send([n, 0])?.min(1) as u64;
                    n += 1;
                }
            }
            // The subscriber waits for what reached it, not for what was sent: a dropped
            // sample shows as published but not delivered instead of a subscriber waiting
            // for it until the harness kills the run.
            ctl.line(0).seq.store(reached, Ordering::Relaxed);
            // Release: the count is visible with `done`.
            ctl.done().store(1, Ordering::Release);
            m.set("published", n as f64);
        }
        "pingpong" => {
            let Some(back) = &back else {
                bail!("no echo subscriber")
            };
            for i in 0..total {
                send_all([i, now_ns()])?;
                loop {
                    if back.receive().map_err(|e| anyhow!("{e:?}"))?.is_some() {
                        break;
                    }
                    std::hint::spin_loop();
                }
            }
        }
        _ => {
            for i in 0..total {
                let due = pacer.wait(i);
                send_all([i, due])?;
            }
            m.set("pacer_late_p99_ns", kit::pct(&pacer.late, 0.99) as f64)
                .set("pacer_held_p99_ns", kit::pct(&pacer.held, 0.99) as f64);
        }
    }
    let (c1, w1) = (kit::thread_cpu_ns(), now_ns());
    m.set("t_start", t_start as f64)
        .set("cpu_share", (c1 - c0) as f64 / (w1 - t_start).max(1) as f64);
    // Keep the publisher (whose data segment holds the samples) until the subscriber has
    // taken everything.
    let _ = kit::wait_for(
        || ctl.line(1).seq.load(Ordering::Acquire) != 0,
        Duration::from_secs(30),
    );
    kit::report(args, &m)
}

/// Run an iceoryx2 role, if `role` is one.
pub fn run_role(role: &str, args: &Args) -> Option<Result<()>> {
    Some(match role {
        "peer-iox-sub" => role_sub(args),
        "peer-iox-pub" => role_pub(args),
        _ => return None,
    })
}
