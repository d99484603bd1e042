//! How a process is judged alive, which every takeover relies on (a lifecycle transition, a
//! table entry, a claim): a process is dead only once none of its threads runs.

use shmring::process;
use shmring_testkit::{eventually, testkit, Namespace};

/// The state letter of `/proc/PID/stat` (the main thread's).
fn main_thread_state(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().next().map(str::to_owned)
}

/// A process whose main thread has exited while another thread runs reads as a zombie in
/// `/proc/PID/stat`. It still runs (it can be halfway through a stop or a start): judged
/// dead, another process would take over a transition it is still making. Once killed,
/// it is dead.
#[test]
fn a_process_whose_main_thread_exited_is_alive_while_another_thread_runs() {
    let ns = Namespace::new("mainexits");
    let mut child = testkit!(ns, "main exits", "main-exits");
    child.expect("ready");
    let pid = child.pid();
    eventually("the child's main thread to exit", || {
        main_thread_state(pid).as_deref() == Some("Z")
    });
    let start = process::start_time(pid);
    assert!(
        start.is_some(),
        "a process with a running thread was judged dead"
    );
    assert!(process::is_alive(pid, start.unwrap_or_default()));
    child.kill();
    assert_eq!(
        process::start_time(pid),
        None,
        "a killed process judged alive"
    );
}
