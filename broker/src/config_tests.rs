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
