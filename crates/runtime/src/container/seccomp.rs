//! `seccompProfile: RuntimeDefault`: containerd's default profile
//! (`contrib/seccomp/seccomp_default.go`), which the kubelet asks containerd for. An
//! allowlist: every syscall not named fails with EPERM; a few more are allowed with the
//! capabilities that make them meaningful; `clone` may not create namespaces without
//! CAP_SYS_ADMIN, and `clone3` then fails with ENOSYS so that libc falls back to `clone`.
//!
//! Kubernetes' default (no `seccompProfile`) is `Unconfined`, as the kubelet's
//! `--seccomp-default` is off by default; so is wisp's.

use std::collections::HashSet;

use oci_spec::{
    OciSpecError,
    runtime::{
        Arch, Capability, LinuxSeccomp, LinuxSeccompAction, LinuxSeccompArgBuilder,
        LinuxSeccompBuilder, LinuxSeccompOperator, LinuxSyscall, LinuxSyscallBuilder,
    },
};
use serde_json::Value;
use wisp_api::serving::Container;

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
}
