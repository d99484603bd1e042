//! Seccomp filters, for a test or a benchmark process that must meet certain system calls
//! head-on: one action per listed system call, another for the rest, installed on the
//! calling thread (and the threads it starts later; threads already running are not under
//! it). The data-path test kills its role at any system call but `exit_group`; the
//! benchmark harness makes `membarrier` fail to measure the client's fallback.

use std::io;

/// Let the system call through.
pub const ALLOW: u32 = 0x7fff_0000;
/// Kill the whole process with SIGSYS (`SECCOMP_RET_KILL_PROCESS`, Linux 4.14).
pub const KILL_PROCESS: u32 = 0x8000_0000;

/// Fail the system call with `errno` (`SECCOMP_RET_ERRNO`).
pub const fn errno(errno: i32) -> u32 {
    0x0005_0000 | (errno as u32 & 0xffff)
}

/// The `AUDIT_ARCH_*` value of `struct seccomp_data` for this build's architecture: a
/// filter applies its rules only to system calls made with this calling convention.
#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

/// Classic BPF over `struct seccomp_data { int nr; u32 arch; ... }`.
const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
const JEQ_K: u16 = 0x05 | 0x10; // BPF_JMP | BPF_JEQ | BPF_K
const RET_K: u16 = 0x06; // BPF_RET | BPF_K
const OFFSET_NR: u32 = 0;
const OFFSET_ARCH: u32 = 4;

fn insn(code: u16, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// The program: each `(system call number, action)` of `rules` in turn, `otherwise` for
/// every other call, and for every call made with another architecture's convention.
pub fn program(rules: &[(libc::c_long, u32)], otherwise: u32) -> Vec<libc::sock_filter> {
    let mut prog = vec![
        insn(LD_W_ABS, 0, 0, OFFSET_ARCH),
        // Equal: skip the next instruction (the return of `otherwise`).
        insn(JEQ_K, 1, 0, AUDIT_ARCH),
        insn(RET_K, 0, 0, otherwise),
        insn(LD_W_ABS, 0, 0, OFFSET_NR),
    ];
    for &(nr, action) in rules {
        // Equal: the next instruction returns `action`; otherwise jump over it.
        prog.push(insn(JEQ_K, 0, 1, nr as u32));
        prog.push(insn(RET_K, 0, 0, action));
    }
    prog.push(insn(RET_K, 0, 0, otherwise));
    prog
}

/// Install `prog` on the calling thread (after `PR_SET_NO_NEW_PRIVS`, which an
/// unprivileged process needs for it).
pub fn install(prog: &[libc::sock_filter]) -> io::Result<()> {
    rustix::thread::set_no_new_privs(true)?;
    let fprog = libc::sock_fprog {
        len: u16::try_from(prog.len()).map_err(|_| io::Error::other("filter too long"))?,
        filter: prog.as_ptr().cast_mut(),
    };
    // SAFETY: PR_SET_SECCOMP reads `fprog`, which points at `prog`; both live across the
    // call, and the kernel copies the program.
    let rc = unsafe {
        libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER,
            &fprog as *const libc::sock_fprog,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
