# Root inside a microVM tries to take over space-init (docs/security.md, item 5): one line
# "name:result ..." where result is "ok" or the errno's name. Run by test_daemon_microvm.sh.
import ctypes, errno, os, socket

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
libc.ptrace.restype = ctypes.c_long
out = []


def err():
    return errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))


def syscall(*args):
    return "ok" if libc.syscall(*args) >= 0 else err()


def try_open(path):
    try:
        os.close(os.open(path, os.O_RDONLY))
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))


PTRACE_SEIZE, SYS_pidfd_open, SYS_pidfd_getfd, SYS_finit_module = 0x4206, 434, 438, 313
out.append("seize:" + ("ok" if libc.ptrace(PTRACE_SEIZE, 1, 0, 0) == 0 else err()))
pidfd = libc.syscall(SYS_pidfd_open, 1, 0)
out.append("getfd:" + (syscall(SYS_pidfd_getfd, pidfd, 3, 0) if pidfd >= 0 else "pidfd_open-" + err()))
out.append("mem:" + try_open("/proc/1/mem"))
# listing /proc/1/fd shows numbers only (uid 0 owns it); following one needs ptrace access
try:
    os.readlink("/proc/1/fd/0")
    out.append("fd:ok")
except OSError as e:
    out.append("fd:" + errno.errorcode.get(e.errno, str(e.errno)))
out.append("fdopen:" + try_open("/proc/1/fd/0"))
# the capability check comes before the fd's: EPERM without CAP_SYS_MODULE, else EBADF
out.append("module:" + syscall(SYS_finit_module, -1, b"", 0))
out.append("uid:%d" % os.getuid())
s = socket.socket()
try:
    s.bind(("127.0.0.1", 80))
    out.append("bind80:ok")
except OSError as e:
    out.append("bind80:" + errno.errorcode.get(e.errno, str(e.errno)))
print(" ".join(out))
