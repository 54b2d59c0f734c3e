//! `seccompProfile: RuntimeDefault`: containerd's default profile
//! (`contrib/seccomp/seccomp_default.go`), which the kubelet asks containerd for. An
//! allowlist: every syscall not named fails with EPERM; a few more are allowed with the
//! capabilities that make them meaningful; `clone` may not create namespaces without
//! CAP_SYS_ADMIN, and `clone3` then fails with ENOSYS so that libc falls back to `clone`.
//!
//! Kubernetes' default (no `seccompProfile`) is `Unconfined`, as the kubelet's
//! `--seccomp-default` is off by default; so is wisp's.

use std::{
    collections::{BTreeMap, HashSet},
    sync::Mutex,
};

use oci_spec::{
    OciSpecError,
    runtime::{
        Arch, Capability, LinuxSeccomp, LinuxSeccompAction, LinuxSeccompArgBuilder,
        LinuxSeccompBuilder, LinuxSeccompOperator, LinuxSyscall, LinuxSyscallBuilder,
    },
};
use seccompiler::{BpfProgram, SeccompAction, TargetArch, sock_filter};
use serde_json::Value;
use wisp_api::serving::Container;
use wisp_sync::lock;

use crate::Failure;

/// Syscalls allowed to every container (`ptrace` too: containerd allows it on kernels from
/// 4.8, where seccomp can no longer be bypassed with it).
const ALLOWED: &str = "accept accept4 access adjtimex alarm bind brk capget capset chdir chmod \
    chown chown32 clock_adjtime clock_adjtime64 clock_getres clock_getres_time64 clock_gettime \
    clock_gettime64 clock_nanosleep clock_nanosleep_time64 close close_range connect \
    copy_file_range creat dup dup2 dup3 epoll_create epoll_create1 epoll_ctl epoll_ctl_old \
    epoll_pwait epoll_pwait2 epoll_wait epoll_wait_old eventfd eventfd2 execve execveat exit \
    exit_group faccessat faccessat2 fadvise64 fadvise64_64 fallocate fanotify_mark fchdir fchmod \
    fchmodat fchown fchown32 fchownat fcntl fcntl64 fdatasync fgetxattr flistxattr flock fork \
    fremovexattr fsetxattr fstat fstat64 fstatat64 fstatfs fstatfs64 fsync ftruncate ftruncate64 \
    futex futex_time64 futex_waitv futimesat getcpu getcwd getdents getdents64 getegid getegid32 \
    geteuid geteuid32 getgid getgid32 getgroups getgroups32 getitimer getpeername getpgid getpgrp \
    getpid getppid getpriority getrandom getresgid getresgid32 getresuid getresuid32 getrlimit \
    get_robust_list getrusage getsid getsockname getsockopt get_thread_area gettid gettimeofday \
    getuid getuid32 getxattr inotify_add_watch inotify_init inotify_init1 inotify_rm_watch \
    io_cancel ioctl io_destroy io_getevents io_pgetevents io_pgetevents_time64 ioprio_get \
    ioprio_set io_setup io_submit io_uring_enter io_uring_register io_uring_setup ipc kill \
    landlock_add_rule landlock_create_ruleset landlock_restrict_self lchown lchown32 lgetxattr \
    link linkat listen listxattr llistxattr _llseek lremovexattr lseek lsetxattr lstat lstat64 \
    madvise membarrier memfd_create memfd_secret mincore mkdir mkdirat mknod mknodat mlock mlock2 \
    mlockall mmap mmap2 mprotect mq_getsetattr mq_notify mq_open mq_timedreceive \
    mq_timedreceive_time64 mq_timedsend mq_timedsend_time64 mq_unlink mremap msgctl msgget msgrcv \
    msgsnd msync munlock munlockall munmap nanosleep newfstatat _newselect open openat openat2 \
    pause pidfd_open pidfd_send_signal pipe pipe2 poll ppoll ppoll_time64 prctl pread64 preadv \
    preadv2 prlimit64 process_mrelease pselect6 pselect6_time64 pwrite64 pwritev pwritev2 read \
    readahead readlink readlinkat readv recv recvfrom recvmmsg recvmmsg_time64 recvmsg \
    remap_file_pages removexattr rename renameat renameat2 restart_syscall rmdir rseq \
    rt_sigaction rt_sigpending rt_sigprocmask rt_sigqueueinfo rt_sigreturn rt_sigsuspend \
    rt_sigtimedwait rt_sigtimedwait_time64 rt_tgsigqueueinfo sched_getaffinity sched_getattr \
    sched_getparam sched_get_priority_max sched_get_priority_min sched_getscheduler \
    sched_rr_get_interval sched_rr_get_interval_time64 sched_setaffinity sched_setattr \
    sched_setparam sched_setscheduler sched_yield seccomp select semctl semget semop semtimedop \
    semtimedop_time64 send sendfile sendfile64 sendmmsg sendmsg sendto setfsgid setfsgid32 \
    setfsuid setfsuid32 setgid setgid32 setgroups setgroups32 setitimer setpgid setpriority \
    setregid setregid32 setresgid setresgid32 setresuid setresuid32 setreuid setreuid32 \
    setrlimit set_robust_list setsid setsockopt set_thread_area set_tid_address setuid setuid32 \
    setxattr shmat shmctl shmdt shmget shutdown sigaltstack signalfd signalfd4 sigprocmask \
    sigreturn socket socketcall socketpair splice stat stat64 statfs statfs64 statx symlink \
    symlinkat sync sync_file_range syncfs sysinfo tee tgkill time timer_create timer_delete \
    timer_getoverrun timer_gettime timer_gettime64 timer_settime timer_settime64 timerfd_create \
    timerfd_gettime timerfd_gettime64 timerfd_settime timerfd_settime64 times tkill truncate \
    truncate64 ugetrlimit umask uname unlink unlinkat utime utimensat utimensat_time64 utimes \
    vfork vmsplice wait4 waitid waitpid write writev ptrace";

/// Allowed on this architecture only.
#[cfg(target_arch = "x86_64")]
const ARCH_ALLOWED: &str = "arch_prctl modify_ldt";
#[cfg(target_arch = "aarch64")]
const ARCH_ALLOWED: &str =
    "arm_fadvise64_64 arm_sync_file_range sync_file_range2 breakpoint cacheflush set_tls";
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const ARCH_ALLOWED: &str = "";

#[cfg(target_arch = "x86_64")]
const ARCHES: &[Arch] = &[Arch::ScmpArchX86_64, Arch::ScmpArchX86, Arch::ScmpArchX32];
#[cfg(target_arch = "aarch64")]
const ARCHES: &[Arch] = &[Arch::ScmpArchArm, Arch::ScmpArchAarch64];
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const ARCHES: &[Arch] = &[];

/// Syscalls a capability in the bounding set allows.
fn by_capability(cap: Capability) -> &'static str {
    match cap {
        Capability::DacReadSearch => "open_by_handle_at",
        Capability::SysAdmin => {
            "bpf clone clone3 fanotify_init fsconfig fsmount fsopen fspick lookup_dcookie mount \
             mount_setattr move_mount name_to_handle_at open_tree perf_event_open quotactl \
             quotactl_fd setdomainname sethostname setns syslog umount umount2 unshare"
        }
        Capability::SysBoot => "reboot",
        Capability::SysChroot => "chroot",
        Capability::SysModule => "delete_module init_module finit_module",
        Capability::SysPacct => "acct",
        Capability::SysPtrace => {
            "kcmp pidfd_getfd process_madvise process_vm_readv process_vm_writev ptrace"
        }
        Capability::SysRawio => "iopl ioperm",
        Capability::SysTime => "settimeofday stime clock_settime clock_settime64",
        Capability::SysTtyConfig => "vhangup",
        Capability::Syslog => "syslog",
        Capability::Bpf => "bpf",
        Capability::Perfmon => "perf_event_open",
        _ => "",
    }
}

/// `CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET |
/// CLONE_NEWCGROUP`: the flags `clone` may not carry without CAP_SYS_ADMIN.
const CLONE_NAMESPACES: u64 =
    0x0002_0000 | 0x0400_0000 | 0x0800_0000 | 0x1000_0000 | 0x2000_0000 | 0x4000_0000 | 0x0200_0000;

const ENOSYS: u32 = 38;

/// Which profile a container asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Profile {
    Unconfined,
    RuntimeDefault,
}

/// The container's `seccompProfile`, else the pod's (`pod_security_context` is the pod's
/// `securityContext` as stored, if any). `Localhost` profiles are refused: wisp has no
/// profile directory.
pub(crate) fn profile(
    c: &Container,
    pod_security_context: Option<&Value>,
) -> Result<Profile, Failure> {
    let from_container = c
        .security_context
        .as_ref()
        .and_then(|s| s.seccomp_profile.as_ref());
    let from_pod = pod_security_context.and_then(|s| s.get("seccompProfile"));
    let Some(p) = from_container.or(from_pod) else {
        return Ok(Profile::Unconfined);
    };
    match p.get("type").and_then(Value::as_str) {
        Some("RuntimeDefault") => Ok(Profile::RuntimeDefault),
        Some("Unconfined") => Ok(Profile::Unconfined),
        other => Err(Failure {
            reason: "CreateContainerConfigError".into(),
            message: format!(
                "container {}: seccompProfile type {:?} is not supported by wisp (use \
                 RuntimeDefault or Unconfined)",
                c.name,
                other.unwrap_or_default()
            ),
        }),
    }
}

fn allow(names: &str) -> Result<LinuxSyscall, OciSpecError> {
    LinuxSyscallBuilder::default()
        .names(
            names
                .split_whitespace()
                .map(String::from)
                .collect::<Vec<_>>(),
        )
        .action(LinuxSeccompAction::ScmpActAllow)
        .build()
}

/// containerd's default profile for a container with `bounding` capabilities.
pub(crate) fn runtime_default(
    bounding: &HashSet<Capability>,
) -> Result<LinuxSeccomp, OciSpecError> {
    let mut syscalls = vec![allow(ALLOWED)?];
    // personality(2) only with the personas glibc and Go use (PER_LINUX, UNAME26,
    // PER_LINUX32, PER_LINUX32|UNAME26, query).
    for persona in [0x0u64, 0x0008, 0x20000, 0x20008, 0xffff_ffff] {
        syscalls.push(
            LinuxSyscallBuilder::default()
                .names(vec!["personality".to_string()])
                .action(LinuxSeccompAction::ScmpActAllow)
                .args(vec![
                    LinuxSeccompArgBuilder::default()
                        .index(0usize)
                        .value(persona)
                        .op(LinuxSeccompOperator::ScmpCmpEq)
                        .build()?,
                ])
                .build()?,
        );
    }
    if !ARCH_ALLOWED.is_empty() {
        syscalls.push(allow(ARCH_ALLOWED)?);
    }
    // In a fixed order, so that the same container always gets the same config.json.
    let mut caps: Vec<&Capability> = bounding.iter().collect();
    caps.sort_by_key(|c| c.to_string());
    for cap in caps {
        let names = by_capability(*cap);
        if !names.is_empty() {
            syscalls.push(allow(names)?);
        }
    }
    if !bounding.contains(&Capability::SysAdmin) {
        syscalls.push(
            LinuxSyscallBuilder::default()
                .names(vec!["clone".to_string()])
                .action(LinuxSeccompAction::ScmpActAllow)
                .args(vec![
                    LinuxSeccompArgBuilder::default()
                        .index(0usize)
                        .value(CLONE_NAMESPACES)
                        .value_two(0u64)
                        .op(LinuxSeccompOperator::ScmpCmpMaskedEq)
                        .build()?,
                ])
                .build()?,
        );
        // ENOSYS, not EPERM: glibc then falls back to clone(2) (moby/moby#42681).
        syscalls.push(
            LinuxSyscallBuilder::default()
                .names(vec!["clone3".to_string()])
                .action(LinuxSeccompAction::ScmpActErrno)
                .errno_ret(ENOSYS)
                .build()?,
        );
    }
    LinuxSeccompBuilder::default()
        .default_action(LinuxSeccompAction::ScmpActErrno)
        .architectures(ARCHES.to_vec())
        .syscalls(syscalls)
        .build()
}

/// A seccomp profile compiled to BPF for wisp's own runtime: the programs to install, in
/// order. One BPF program has one action for every rule that matches (seccompiler's model),
/// while a profile may give each rule its own: the rules that allow go into the first
/// program, whose mismatch is the profile's default action; each other action gets a program
/// of its own installed after it, which answers its syscalls with that action and allows
/// the rest. The kernel runs every program and keeps the most restrictive answer, the last
/// installed winning among equals: so `clone3` gets ENOSYS from its own program over the
/// first program's EPERM, as from libseccomp's single filter.
///
/// Syscalls the target architecture does not have (`chown32` on x86_64) are left out, as
/// libseccomp leaves them out. Only this architecture's native calls pass: the BPF starts
/// with seccompiler's architecture check, which kills a process making 32-bit calls
/// (containerd's profile also allows x86 and x32; see docs/differences.md).
pub(crate) fn compile(profile: &LinuxSeccomp) -> Result<Vec<BpfProgram>, String> {
    let arch = TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|e| format!("seccomp on {}: {e}", std::env::consts::ARCH))?;
    let default = action(
        profile.default_action(),
        profile.default_errno_ret(),
        "defaultAction",
    )?;
    // Per action, per syscall: None if unconditional, else the OR of AND-ed conditions.
    type Rules = BTreeMap<String, Option<Vec<Value>>>;
    let mut groups: Vec<(SeccompAction, Rules)> = vec![(SeccompAction::Allow, Rules::new())];
    for rule in profile.syscalls().iter().flatten() {
        let act = action(rule.action(), rule.errno_ret(), "syscalls[].action")?;
        let index = match groups.iter().position(|(a, _)| *a == act) {
            Some(i) => i,
            None => {
                groups.push((act, Rules::new()));
                groups.len() - 1
            }
        };
        let args = rule.args().as_deref().unwrap_or_default();
        let condition: Option<Value> = if args.is_empty() {
            None
        } else {
            let conds = args.iter().map(condition).collect::<Result<Vec<_>, _>>()?;
            Some(serde_json::json!({ "args": conds }))
        };
        for name in rule.names() {
            if !known_syscall(arch, name) {
                continue;
            }
            let entry = groups[index].1.entry(name.clone()).or_insert(Some(vec![]));
            match (&condition, entry.as_mut()) {
                // Unconditional wins over any condition.
                (None, _) => *entry = None,
                (Some(c), Some(list)) => list.push(c.clone()),
                (Some(_), None) => {}
            }
        }
    }
    let mut programs = Vec::new();
    for (i, (act, rules)) in groups.iter().enumerate() {
        if rules.is_empty() {
            continue;
        }
        let filter: Vec<Value> = rules
            .iter()
            .flat_map(|(name, conds)| match conds {
                None => vec![serde_json::json!({ "syscall": name })],
                Some(list) => list
                    .iter()
                    .map(|c| serde_json::json!({ "syscall": name, "args": c["args"] }))
                    .collect(),
            })
            .collect();
        let (mismatch, matched) = if i == 0 {
            (&default, act)
        } else {
            (&SeccompAction::Allow, act)
        };
        let json = serde_json::json!({
            "p": {
                "mismatch_action": action_json(mismatch),
                "match_action": action_json(matched),
                "filter": filter,
            }
        });
        let mut map = seccompiler::compile_from_json(json.to_string().as_bytes(), arch)
            .map_err(|e| format!("compiling the seccomp profile: {e}"))?;
        programs.push(map.remove("p").ok_or("seccompiler returned no program")?);
    }
    Ok(programs)
}

/// Whether `arch` has a syscall of that name (cached: asking compiles a filter).
fn known_syscall(arch: TargetArch, name: &str) -> bool {
    static KNOWN: Mutex<BTreeMap<String, bool>> = Mutex::new(BTreeMap::new());
    if let Some(known) = lock(&KNOWN).get(name) {
        return *known;
    }
    // Any two actions: seccompiler refuses a filter whose two are the same.
    let probe = serde_json::json!({
        "p": { "mismatch_action": "allow", "match_action": "trap", "filter": [{ "syscall": name }] }
    });
    let known = seccompiler::compile_from_json(probe.to_string().as_bytes(), arch).is_ok();
    lock(&KNOWN).insert(name.to_owned(), known);
    known
}

fn action(a: LinuxSeccompAction, errno: Option<u32>, field: &str) -> Result<SeccompAction, String> {
    const EPERM: u32 = 1;
    Ok(match a {
        LinuxSeccompAction::ScmpActAllow => SeccompAction::Allow,
        LinuxSeccompAction::ScmpActErrno => SeccompAction::Errno(errno.unwrap_or(EPERM)),
        LinuxSeccompAction::ScmpActKill | LinuxSeccompAction::ScmpActKillThread => {
            SeccompAction::KillThread
        }
        LinuxSeccompAction::ScmpActKillProcess => SeccompAction::KillProcess,
        LinuxSeccompAction::ScmpActTrap => SeccompAction::Trap,
        LinuxSeccompAction::ScmpActLog => SeccompAction::Log,
        other => {
            return Err(format!(
                "seccomp {field} {other:?} is not supported by wisp's runtime"
            ));
        }
    })
}

/// seccompiler's JSON for an action.
fn action_json(a: &SeccompAction) -> Value {
    match a {
        SeccompAction::Allow => "allow".into(),
        SeccompAction::Errno(n) => serde_json::json!({ "errno": n }),
        SeccompAction::KillThread => "kill_thread".into(),
        SeccompAction::KillProcess => "kill_process".into(),
        SeccompAction::Log => "log".into(),
        SeccompAction::Trace(n) => serde_json::json!({ "trace": n }),
        SeccompAction::Trap => "trap".into(),
    }
}

/// seccompiler's JSON for a runtime-spec argument condition (always the full 64 bits, as
/// libseccomp compares).
fn condition(arg: &oci_spec::runtime::LinuxSeccompArg) -> Result<Value, String> {
    let op: Value = match arg.op() {
        LinuxSeccompOperator::ScmpCmpNe => "ne".into(),
        LinuxSeccompOperator::ScmpCmpLt => "lt".into(),
        LinuxSeccompOperator::ScmpCmpLe => "le".into(),
        LinuxSeccompOperator::ScmpCmpEq => "eq".into(),
        LinuxSeccompOperator::ScmpCmpGe => "ge".into(),
        LinuxSeccompOperator::ScmpCmpGt => "gt".into(),
        LinuxSeccompOperator::ScmpCmpMaskedEq => {
            // libseccomp: (arg & value) == valueTwo.
            let compared = arg.value_two().unwrap_or(0);
            return Ok(serde_json::json!({
                "index": arg.index(), "type": "qword",
                "op": { "masked_eq": arg.value() }, "val": compared,
            }));
        }
    };
    Ok(serde_json::json!({
        "index": arg.index(), "type": "qword", "op": op, "val": arg.value(),
    }))
}

/// Compiled programs as the bytes of a bundle's `seccomp.bpf`: per program its length in
/// instructions (u32), then each `sock_filter` (code u16, jt u8, jf u8, k u32), little-endian.
pub(crate) fn encode(programs: &[BpfProgram]) -> Vec<u8> {
    let mut out = Vec::new();
    for p in programs {
        out.extend_from_slice(&(p.len() as u32).to_le_bytes());
        for i in p {
            out.extend_from_slice(&i.code.to_le_bytes());
            out.push(i.jt);
            out.push(i.jf);
            out.extend_from_slice(&i.k.to_le_bytes());
        }
    }
    out
}

/// The programs [`encode`] wrote.
pub(crate) fn decode(mut bytes: &[u8]) -> Result<Vec<BpfProgram>, String> {
    let truncated = || "seccomp.bpf is truncated".to_string();
    let mut programs = Vec::new();
    while !bytes.is_empty() {
        let (len, rest) = bytes.split_first_chunk::<4>().ok_or_else(truncated)?;
        let len = u32::from_le_bytes(*len) as usize;
        let size = len.checked_mul(8).ok_or_else(truncated)?;
        if rest.len() < size {
            return Err(truncated());
        }
        let (body, rest) = rest.split_at(size);
        let program = body
            .chunks_exact(8)
            .map(|c| sock_filter {
                code: u16::from_le_bytes([c[0], c[1]]),
                jt: c[2],
                jf: c[3],
                k: u32::from_le_bytes([c[4], c[5], c[6], c[7]]),
            })
            .collect();
        programs.push(program);
        bytes = rest;
    }
    Ok(programs)
}

#[cfg(test)]
mod tests {
    use wisp_api::serving::SecurityContext;

    use super::*;

    fn with_profile(p: Option<Value>) -> Container {
        Container {
            name: "c".into(),
            security_context: Some(SecurityContext {
                seccomp_profile: p,
                ..SecurityContext::default()
            }),
            ..Container::default()
        }
    }

    #[test]
    fn profile_choice_follows_kubernetes() {
        let rd = serde_json::json!({"type": "RuntimeDefault"});
        let un = serde_json::json!({"type": "Unconfined"});
        let pod = serde_json::json!({"seccompProfile": rd});
        let cases = [
            (
                "unset: unconfined",
                with_profile(None),
                None,
                Ok(Profile::Unconfined),
            ),
            (
                "container",
                with_profile(Some(rd.clone())),
                None,
                Ok(Profile::RuntimeDefault),
            ),
            (
                "pod",
                with_profile(None),
                Some(&pod),
                Ok(Profile::RuntimeDefault),
            ),
            (
                "container over pod",
                with_profile(Some(un)),
                Some(&pod),
                Ok(Profile::Unconfined),
            ),
            (
                "localhost refused",
                with_profile(Some(serde_json::json!({"type": "Localhost"}))),
                None,
                Err("CreateContainerConfigError"),
            ),
        ];
        for (what, c, pod, want) in cases {
            assert_eq!(
                profile(&c, pod).map_err(|f| f.reason),
                want.map_err(String::from),
                "{what}"
            );
        }
    }

    #[test]
    fn runtime_default_is_containerds_allowlist() {
        let caps: HashSet<Capability> = super::super::spec::DEFAULT_CAPS.into_iter().collect();
        let json = serde_json::to_value(runtime_default(&caps).unwrap()).unwrap();
        assert_eq!(json["defaultAction"], "SCMP_ACT_ERRNO");
        let rules = json["syscalls"].as_array().unwrap();
        let allowed = |name: &str| {
            rules.iter().any(|r| {
                r["action"] == "SCMP_ACT_ALLOW"
                    && r.get("args")
                        .is_none_or(|a| a.as_array().is_none_or(Vec::is_empty))
                    && r["names"].as_array().unwrap().iter().any(|n| n == name)
            })
        };
        assert!(
            allowed("read") && allowed("chroot"),
            "CAP_SYS_CHROOT is a default cap"
        );
        assert!(!allowed("mount") && !allowed("unshare") && !allowed("reboot"));
        let clone3 = rules.iter().find(|r| r["names"][0] == "clone3").unwrap();
        assert_eq!(
            (&clone3["action"], &clone3["errnoRet"]),
            (&"SCMP_ACT_ERRNO".into(), &38.into())
        );
        let admin: HashSet<Capability> = [Capability::SysAdmin].into();
        let json = serde_json::to_value(runtime_default(&admin).unwrap()).unwrap();
        let names: Vec<&Value> = json["syscalls"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|r| r["names"].as_array().unwrap())
            .collect();
        assert!(names.contains(&&Value::from("mount")));
        assert_eq!(
            names.iter().filter(|n| **n == "clone3").count(),
            1,
            "allowed, not ENOSYS"
        );
    }

    #[test]
    fn runtime_default_compiles_to_bpf_once_per_action() {
        let caps: HashSet<Capability> = super::super::spec::DEFAULT_CAPS.into_iter().collect();
        let profile = runtime_default(&caps).unwrap();
        let programs = compile(&profile).unwrap();
        // The allowlist (default EPERM), then clone3's ENOSYS.
        assert_eq!(programs.len(), 2);
        let ret = |p: &BpfProgram, k: u32| {
            p.iter()
                .any(|i| i.code == 0x06 /* BPF_RET|BPF_K */ && i.k == k)
        };
        const ALLOW: u32 = 0x7fff_0000;
        const ERRNO: u32 = 0x0005_0000;
        assert!(ret(&programs[0], ALLOW) && ret(&programs[0], ERRNO | 1));
        assert!(ret(&programs[1], ERRNO | 38) && ret(&programs[1], ALLOW));
        assert_eq!(decode(&encode(&programs)).unwrap(), programs);
        assert!(decode(&encode(&programs)[..10]).is_err());
        // Names this architecture lacks are left out rather than refused.
        #[cfg(target_arch = "x86_64")]
        assert!(!known_syscall(TargetArch::x86_64, "chown32"));
        #[cfg(target_arch = "x86_64")]
        assert!(known_syscall(TargetArch::x86_64, "chown"));
    }

    #[test]
    fn unsupported_actions_are_named() {
        let profile = LinuxSeccompBuilder::default()
            .default_action(LinuxSeccompAction::ScmpActNotify)
            .build()
            .unwrap();
        let err = compile(&profile).unwrap_err();
        assert!(err.contains("defaultAction"), "{err}");
    }
}
