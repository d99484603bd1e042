//! How a process is judged alive, which every takeover relies on (a lifecycle transition, a
//! table entry, a claim): a process is dead only once none of its threads runs.

use shmring::process;
use shmring_testkit::{eventually, procfs, testkit, Namespace};

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
        procfs::main_thread_state(pid) == Some('Z')
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

/// A process whose main thread has exited creates a ring from another thread as any
/// process does. (The create names its file through its own thread's `/proc` entry: the
/// process's, `/proc/self`, is the exited main thread's and has no open files.)
#[test]
fn a_process_whose_main_thread_exited_creates_a_ring() {
    let ns = Namespace::new("mainexits-create");
    let mut child = testkit!(ns, "main exits", "main-exits --create {}", ns.name());
    assert_eq!(child.expect_line("create"), "created");
    child.expect("ready");
    let ring = shmring::Ring::open(ns.name(), "r").expect("the ring the child created");
    assert_eq!(ring.capacity(), shmring::RingConfig::default().capacity);
    child.kill();
}

/// `/proc` mounted with `hidepid` hides other users' processes: `hidepid=2` as if they were
/// absent, `hidepid=1` with their files unreadable. A live process hidden that way is
/// alive (taken over as dead, its entries and half-made transitions would be finished
/// under it); a process that has exited is still dead. The judging process runs in its
/// own mount namespace with such a `/proc`, as another user; it needs root, `unshare` and
/// `setpriv` to set that up, and a test binary that user may run, and says why it was
/// skipped otherwise.
#[test]
fn a_process_hidden_by_hidepid_is_alive_and_an_exited_one_is_not() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: mounting a hidepid /proc needs root");
        return;
    }
    let ns = Namespace::new("hidepid");
    let me = process::current();
    let (exited, never_started) = shmring_testkit::fault::dead_process();
    for mode in ["1", "2"] {
        let mut cmd = std::process::Command::new("unshare");
        cmd.args(["--mount", "--propagation", "private", "sh", "-c"])
            .arg(concat!(
                "m=$1; shift; ",
                "command -v setpriv > /dev/null || exit 77; ",
                "mount -t proc -o hidepid=$m proc /proc || exit 77; ",
                r#"exec setpriv --reuid 65534 --regid 65534 --clear-groups "$0" "$@""#,
            ))
            .arg(env!("CARGO_BIN_EXE_shmring-testkit"))
            .arg(mode)
            .args(["--timeout-secs", "30", "liveness"])
            .arg(format!("--process={}:{}", me.pid, me.start_time))
            .arg(format!("--process={exited}:{never_started}"));
        let mut child = ns.spawn(&format!("judge under hidepid={mode}"), cmd);
        let status = child.wait_status();
        let lines = child.rest_of_stdout();
        // 77: no `setpriv`, or the mount was refused; 126: the other user may not run the
        // test binary (a private target directory).
        if matches!(status.code(), Some(77 | 126)) || child.stderr_has("unshare failed") {
            eprintln!(
                "skipped: no hidepid /proc and other user could be set up here: {}",
                child.stderr_so_far()
            );
            return;
        }
        assert!(status.success(), "judge exited with {status}: {lines:?}");
        assert_eq!(
            lines,
            [
                format!("seen pid={} visible=false alive=true exists=true", me.pid),
                format!("seen pid={exited} visible=false alive=false exists=false"),
            ],
            "hidepid={mode}"
        );
    }
}
