"""The system calls a sandboxed command may not make (DESIGN §4 "The shell"): a seccomp filter,
defense in depth under bubblewrap's namespaces, loaded by bwrap itself (`--seccomp FD`) just
before it runs the command, so it costs no process and well under a millisecond.

The namespaces already keep a command from the host's files, processes and network; what is
left is the kernel itself. The filter answers EPERM to the calls that reach the kernel's
least-hardened parts or that only an administrator or a debugger needs: `ptrace`, the key
rings (`add_key`, `request_key`, `keyctl`), `bpf`, `perf_event_open`, `userfaultfd` (the
favourite tool of kernel exploits), io_uring, every way to mount or move a mount, new
namespaces (`unshare`, `setns`, `clone` with a namespace flag; `clone3` answers ENOSYS, so
the C library falls back to `clone`, whose flags a filter can read), file handles
(`open_by_handle_at`: the classic container escape), modules, kexec, reboot, swap, clocks,
quotas, `syslog`, and the terminal ioctls that type into another program (`TIOCSTI`,
`TIOCLINUX`). Calls of another ABI (i386's `int 0x80`, x32) are refused whole.

Written by hand for x86-64, the server's architecture here; `program()` is None elsewhere,
and the sandbox then runs without it (its other layers hold; the log says so)."""

from __future__ import annotations

import errno
import functools
import platform
import struct

# Classic BPF (linux/filter.h, linux/seccomp.h).
_LD_W_ABS = 0x00 | 0x00 | 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ = 0x05 | 0x10  # BPF_JMP | BPF_JEQ | BPF_K
_JGE = 0x05 | 0x30
_JSET = 0x05 | 0x40
_RET = 0x06  # BPF_RET | BPF_K
ALLOW = 0x7FFF0000
ERRNO = 0x00050000
DENY = ERRNO | errno.EPERM
AUDIT_ARCH_X86_64 = 0xC000003E
X32_BIT = 0x40000000
# offsets in struct seccomp_data
_NR, _ARCH, _ARG0, _ARG1 = 0, 4, 16, 24

CLONE, CLONE3, IOCTL = 56, 435, 16
# CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET | NEWTIME
NAMESPACE_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 \
    | 0x20000000 | 0x40000000 | 0x00000080
TIOCSTI, TIOCLINUX = 0x5412, 0x541C

DENIED = {  # x86-64 numbers (arch/x86/entry/syscalls/syscall_64.tbl)
    "ptrace": 101, "syslog": 103, "uselib": 134, "ustat": 136, "sysfs": 139,
    "vhangup": 153, "pivot_root": 155, "_sysctl": 156, "adjtimex": 159, "acct": 163,
    "settimeofday": 164, "mount": 165, "umount2": 166, "swapon": 167, "swapoff": 168,
    "reboot": 169, "sethostname": 170, "setdomainname": 171, "iopl": 172, "ioperm": 173,
    "create_module": 174, "init_module": 175, "delete_module": 176, "get_kernel_syms": 177,
    "query_module": 178, "quotactl": 179, "nfsservctl": 180, "lookup_dcookie": 212,
    "clock_settime": 227, "kexec_load": 246, "add_key": 248, "request_key": 249,
    "keyctl": 250, "unshare": 272, "perf_event_open": 298, "fanotify_init": 300,
    "name_to_handle_at": 303, "open_by_handle_at": 304, "clock_adjtime": 305, "setns": 308,
    "finit_module": 313, "kexec_file_load": 320, "bpf": 321, "userfaultfd": 323,
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
    "fspick": 433, "mount_setattr": 442, "quotactl_fd": 443,
}


def _op(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


@functools.cache
def program() -> bytes | None:
    """The filter as bwrap's `--seccomp` reads it (struct sock_filter[], native byte order),
    or None where it is not written for this architecture."""
    if platform.machine() != "x86_64":
        return None
    ops = [
        _op(_LD_W_ABS, _ARCH), _op(_JEQ, AUDIT_ARCH_X86_64, 1, 0), _op(_RET, DENY),
        _op(_LD_W_ABS, _NR), _op(_JGE, X32_BIT, 0, 1), _op(_RET, DENY),
    ]
    for nr in sorted(DENIED.values()):
        ops += [_op(_JEQ, nr, 0, 1), _op(_RET, DENY)]
    ops += [_op(_JEQ, CLONE3, 0, 1), _op(_RET, ERRNO | errno.ENOSYS)]
    ops += [  # clone: refused with a namespace flag (its first argument's low word)
        _op(_JEQ, CLONE, 0, 4), _op(_LD_W_ABS, _ARG0), _op(_JSET, NAMESPACE_FLAGS, 0, 1),
        _op(_RET, DENY), _op(_RET, ALLOW),
    ]
    ops += [  # ioctl: no typing into the terminal (its request: an int, the low word)
        _op(_JEQ, IOCTL, 0, 5), _op(_LD_W_ABS, _ARG1), _op(_JEQ, TIOCSTI, 2, 0),
        _op(_JEQ, TIOCLINUX, 1, 0), _op(_RET, ALLOW), _op(_RET, DENY),
    ]
    ops.append(_op(_RET, ALLOW))
    return b"".join(ops)
