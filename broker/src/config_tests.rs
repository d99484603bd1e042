//! Config parsing: the embedded default, policies, and what is refused.

use super::*;

#[test]
fn embedded_default_has_one_ring() {
    let c = Config::embedded().expect("embedded default parses");
    assert_eq!(c.rings.keys().collect::<Vec<_>>(), ["default"]);
    assert_eq!(c.sweep_period(), Duration::from_millis(250));
}

#[test]
fn policies_and_errors() {
    let c = Config::parse(
        "[rings.orders]\ncapacity = 64\ndead_policy = \"release\"\n[rings.orders.policies]\naudit = \"stop-ring\"\n",
        "t",
    )
    .expect("parses");
    let spec = &c.rings["orders"];
    assert_eq!(spec.policy_for("audit"), Policy::StopRing);
    assert_eq!(spec.policy_for("other"), Policy::Release);
    for bad in [
        "[rings.x]\ncapacity = 100\n",
        "[rings.x]\nstall_threshold = \"fast\"\n",
        "[rings.x]\nbogus = 1\n",
        "[rings.\"a/b\"]\n",
        "[rings.x]\ndead_policy = \"shrug\"\n",
    ] {
        assert!(Config::parse(bad, "t").is_err(), "{bad:?} accepted");
    }
}

/// A stall threshold above a day is refused with a message that names the limit: the broker
/// sweeps every half of it, and a wait of weeks is not one every kernel takes (so a file
/// that asks for it could stop a running broker at a reload). A day is accepted.
#[test]
fn a_stall_threshold_above_a_day_is_refused() {
    for ok in ["24h", "3600s", "1ms"] {
        let text = format!("[rings.x]\ncapacity = 64\nstall_threshold = \"{ok}\"\n");
        Config::parse(&text, "t").unwrap_or_else(|e| panic!("{ok}: {e}"));
    }
    for bad in ["25h", "18446744073709551615s"] {
        let text = format!("[rings.x]\ncapacity = 64\nstall_threshold = \"{bad}\"\n");
        let e = Config::parse(&text, "t").expect_err(bad).to_string();
        assert!(e.contains("at most 24h"), "{bad}: {e}");
    }
}

/// An unblock timeout above 30 days is refused with a message that names the limit: the
/// status and the metrics give it in milliseconds, which a value of ages overflowed, and a
/// hole held longer than a month is not a wait anyone chooses. 30 days is accepted.
#[test]
fn an_unblock_timeout_above_thirty_days_is_refused() {
    for ok in ["720h", "1s", "1ms"] {
        let text = format!("[rings.x]\ncapacity = 64\nunblock_timeout = \"{ok}\"\n");
        Config::parse(&text, "t").unwrap_or_else(|e| panic!("{ok}: {e}"));
    }
    for bad in ["721h", "9999999999999h", "18446744073709551615s"] {
        let text = format!("[rings.x]\ncapacity = 64\nunblock_timeout = \"{bad}\"\n");
        let e = Config::parse(&text, "t").expect_err(bad).to_string();
        assert!(e.contains("at most 30 days"), "{bad}: {e}");
    }
}

/// `declared_consumers` reaches the ring's configuration; names that cannot be laid out are
/// refused when the config is read, with the ring named.
#[test]
fn declared_consumers_are_parsed_and_checked() {
    let c = Config::parse(
        "[rings.logs]\ncapacity = 64\ndeclared_consumers = [\"writer\", \"archive\"]\n",
        "t",
    )
    .expect("parses");
    let ring = c.rings["logs"].ring_config(None).expect("ring config");
    assert_eq!(ring.declared, ["writer", "archive"]);
    let c = Config::parse(
        "[rings.orders]\ndeclared_consumers = [\"journal\"]\ndeclared_groups = [\"notifiers\"]\n",
        "t",
    )
    .expect("parses");
    let ring = c.rings["orders"].ring_config(None).expect("ring config");
    assert_eq!(
        (ring.declared, ring.declared_groups),
        (vec!["journal".to_owned()], vec!["notifiers".to_owned()])
    );
    assert!(Config::embedded().unwrap().rings["default"]
        .declared_consumers
        .is_empty());
    for (bad, says) in [
        ("declared_consumers = [\"a\", \"a\"]", "declared twice"),
        ("declared_consumers = [\"\"]", "1 to 48 bytes"),
        (
            "max_consumers = 1\ndeclared_consumers = [\"a\", \"b\"]",
            "raise max_consumers",
        ),
        ("declared_consumers = \"a\"", "sequence"),
        (
            "declared_consumers = [\"a\"]\ndeclared_groups = [\"a\"]",
            "declared twice",
        ),
    ] {
        let text = format!("[rings.logs]\n{bad}\n");
        let msg = Config::parse(&text, "t")
            .expect_err(&format!("{bad:?} accepted"))
            .to_string();
        assert!(msg.contains(says), "{bad:?}: {msg}");
    }
}

/// A ring mode that gives others any access (read or write: the slots are the events) is
/// refused with a clear error unless the ring opts in; bits beyond 0o777 are refused always.
#[test]
fn modes_open_to_others_need_the_opt_in() {
    for bad in ["0o666", "0o664", "0o604", "0o602", "0o4660", "0o1660"] {
        let text = format!("[rings.x]\nmode = {bad}\n");
        let e = Config::parse(&text, "t").expect_err(&format!("mode {bad} accepted"));
        let msg = e.to_string();
        assert!(msg.contains("ring \"x\"") && msg.contains("mode"), "{msg}");
    }
    let e = Config::parse("[rings.x]\nmode = 0o666\n", "t").expect_err("refused");
    assert!(e.to_string().contains("allow_world_access = true"), "{e}");
    for good in ["0o600", "0o660", "0o640"] {
        Config::parse(&format!("[rings.x]\nmode = {good}\n"), "t")
            .unwrap_or_else(|e| panic!("mode {good} refused: {e}"));
    }
    let c = Config::parse("[rings.x]\nmode = 0o666\nallow_world_access = true\n", "t")
        .expect("the opt-in allows it");
    assert_eq!(c.rings["x"].ring_config(None).expect("config").mode, 0o666);
    assert!(
        Config::parse("[rings.x]\nmode = 0o4666\nallow_world_access = true\n", "t").is_err(),
        "setuid is refused even with the opt-in"
    );
}

/// `event_size` makes a ring of fixed-size events; the shapes such a ring cannot have are
/// refused when the config is read, with the reason.
#[test]
fn event_size_makes_a_fixed_size_ring_and_its_limits_are_checked() {
    let c = Config::parse(
        "[rings.ticks]\nproducer_mode = \"single\"\nevent_size = 16\n",
        "t",
    )
    .expect("parses");
    let ring = c.rings["ticks"].ring_config(None).expect("ring config");
    assert_eq!(ring.event_size, Some(16));
    assert!(ring.geometry().expect("geometry").fixed);
    assert_eq!(
        Config::embedded().unwrap().rings["default"].event_size,
        None
    );
    for (bad, says) in [
        ("event_size = 8", "single producer"),
        (
            "producer_mode = \"single\"\nevent_size = 12",
            "multiple of 8",
        ),
        (
            "producer_mode = \"single\"\nevent_size = 8\ndeclared_groups = [\"w\"]",
            "carries no worker groups",
        ),
    ] {
        let err = Config::parse(&format!("[rings.x]\n{bad}\n"), "t")
            .expect_err(bad)
            .to_string();
        assert!(err.contains(says), "{bad:?}: {err}");
    }
}

/// `max_event_size` makes a ring of sized events; its limits, and a ring section with both
/// sizes, are refused when the config is read, with the reason.
#[test]
fn max_event_size_makes_a_ring_of_sized_events_and_its_limits_are_checked() {
    let c = Config::parse(
        "[rings.log]\nproducer_mode = \"single\"\nmax_event_size = 40\n",
        "t",
    )
    .expect("parses");
    let ring = c.rings["log"].ring_config(None).expect("ring config");
    assert_eq!(ring.max_event_size, Some(40));
    let geo = ring.geometry().expect("geometry");
    assert!(geo.fixed && geo.sized);
    // The length word and 40 bytes, rounded up to a whole line: 56 bytes of payload.
    assert_eq!((geo.slot_size, geo.max_payload()), (64, 56));
    for (bad, says) in [
        ("max_event_size = 8", "single producer"),
        (
            "producer_mode = \"single\"\nmax_event_size = 12",
            "max event size 12 is not a multiple of 8",
        ),
        (
            "producer_mode = \"single\"\nmax_event_size = 16\nevent_size = 8",
            "are both set",
        ),
        (
            "producer_mode = \"single\"\nmax_event_size = 8\ndeclared_groups = [\"w\"]",
            "carries no worker groups",
        ),
    ] {
        let err = Config::parse(&format!("[rings.x]\n{bad}\n"), "t")
            .expect_err(bad)
            .to_string();
        assert!(err.contains(says), "{bad:?}: {err}");
    }
}

/// What a ring section that names nothing but its capacity gets (README, "Running the
/// broker" and "What a dead process leaves"): dead consumers alerted, not released; a hole
/// repaired after 1 s.
#[test]
fn a_ring_that_names_nothing_gets_the_documented_defaults() {
    let c = Config::parse("[rings.r]\ncapacity = 64\n", "t").expect("parses");
    let spec = &c.rings["r"];
    assert_eq!(spec.policy_for("anyone"), Policy::Alert);
    assert_eq!(spec.unblock_timeout, Duration::from_secs(1));
    assert_eq!(
        spec.optional_slack, None,
        "the client's default slack applies"
    );
}

/// gid 4294967295 is `(gid_t)-1`, which `fchown` takes as "leave the group as it is": a
/// broker or ring group of that number would give nothing to any group. It is refused when
/// the config is read, as the broker's group and as a ring's; the gid below it is taken.
#[test]
fn the_gid_that_means_no_change_is_refused() {
    for text in [
        "[broker]\ngroup = 4294967295\n",
        "[rings.x]\ncapacity = 64\ngroup = 4294967295\n",
    ] {
        let e = Config::parse(text, "broker.toml")
            .expect_err(text)
            .to_string();
        assert!(
            e.contains("4294967295") && e.contains("broker.toml"),
            "{text:?}: {e}"
        );
    }
    let c = Config::parse("[broker]\ngroup = 4294967294\n", "t").expect("gid 4294967294");
    assert_eq!(c.broker_gid().expect("resolves"), Some(4_294_967_294));
}

/// A consumer name in `policies` holding NUL is refused with the ring named: no consumer's
/// name holds NUL, so the policy would never apply.
#[test]
fn a_policy_for_a_name_with_nul_is_refused() {
    let text =
        "[rings.orders]\ncapacity = 64\n[rings.orders.policies]\n\"au\\u0000dit\" = \"release\"\n";
    let e = Config::parse(text, "t")
        .expect_err("NUL accepted")
        .to_string();
    assert!(e.contains("orders") && e.contains("NUL"), "{e}");
}
