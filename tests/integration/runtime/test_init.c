/* A stand-in for space-init in the runtime tests: PID 1 of a test sandbox. It reads
 * commands on fd 3 (u32 length + text), runs each with /bin/sh -c, and answers with the
 * wait status and the merged output. Also a multi-call helper: "hog MIB" eats memory,
 * "forkbomb" forks until the kernel refuses and prints how many children it made,
 * "filebomb DIR" creates empty files until the kernel refuses and prints "COUNT ERRNO",
 * "setproj PATH ID" tries to move PATH to another quota project and prints the errno. */
#include <errno.h>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <linux/fs.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_CMD 4096
#define MAX_OUT (64 * 1024)

static int read_full(int fd, void *buf, size_t n) {
        size_t got = 0;
        while (got < n) {
                ssize_t r = read(fd, (char *)buf + got, n - got);
                if (r < 0 && errno == EINTR)
                        continue;
                if (r <= 0)
                        return -1;
                got += (size_t)r;
        }
        return 0;
}

static int write_full(int fd, const void *buf, size_t n) {
        size_t put = 0;
        while (put < n) {
                ssize_t r = write(fd, (const char *)buf + put, n - put);
                if (r < 0 && errno == EINTR)
                        continue;
                if (r <= 0)
                        return -1;
                put += (size_t)r;
        }
        return 0;
}

static int hog(long mib) {
        for (long i = 0; i < mib; i++) {
                char *p = malloc(1 << 20);
                if (!p)
                        return 2;
                memset(p, 0x5a, 1 << 20);
        }
        printf("survived %ld MiB\n", mib);
        return 0;
}

/* Forks until the pids limit refuses, reports the count, then kills the children so the
 * sandbox is usable again. */
static int forkbomb(void) {
        static pid_t kids[100000];
        int n = 0;
        while (n < (int)(sizeof kids / sizeof kids[0])) {
                pid_t p = fork();
                if (p < 0)
                        break;
                if (p == 0) {
                        close(1);
                        close(2);
                        pause();
                        _exit(0);
                }
                kids[n++] = p;
        }
        printf("%d\n", n);
        fflush(stdout);
        for (int i = 0; i < n; i++)
                kill(kids[i], SIGKILL);
        for (int i = 0; i < n; i++)
                waitpid(kids[i], NULL, 0);
        return 0;
}

#define FILEBOMB_MAX 2000000

static int filebomb(const char *dir) {
        char p[4096];
        int n = 0, err = 0;
        for (; n < FILEBOMB_MAX; n++) {
                snprintf(p, sizeof p, "%s/f%d", dir, n);
                int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
                if (fd < 0) {
                        err = errno;
                        break;
                }
                close(fd);
        }
        printf("%d %d\n", n, err);
        return 0;
}

static int setproj(const char *path, const char *id) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        struct fsxattr fa;
        int err = 0;
        if (fd < 0 || ioctl(fd, FS_IOC_FSGETXATTR, &fa) < 0) {
                err = errno;
        } else {
                fa.fsx_projid = (unsigned)atoi(id);
                fa.fsx_xflags &= ~FS_XFLAG_PROJINHERIT;
                if (ioctl(fd, FS_IOC_FSSETXATTR, &fa) < 0)
                        err = errno;
        }
        printf("%d\n", err);
        return 0;
}

static void run(const char *cmd, int sock) {
        int pfd[2];
        int32_t status = -1;
        static char out[MAX_OUT];
        uint32_t len = 0;
        if (pipe(pfd) == 0) {
                pid_t pid = fork();
                if (pid == 0) {
                        dup2(pfd[1], 1);
                        dup2(pfd[1], 2);
                        close(pfd[0]);
                        close(pfd[1]);
                        close(sock);
                        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
                        _exit(127);
                }
                close(pfd[1]);
                for (;;) {
                        ssize_t r = read(pfd[0], out + len, sizeof out - len);
                        if (r < 0 && errno == EINTR)
                                continue;
                        if (r <= 0)
                                break;
                        len += (uint32_t)r;
                        if (len == sizeof out)
                                break;
                }
                close(pfd[0]);
                int st;
                if (pid > 0 && waitpid(pid, &st, 0) == pid)
                        status = st;
        }
        while (waitpid(-1, NULL, WNOHANG) > 0)
                ;
        write_full(sock, &status, sizeof status);
        write_full(sock, &len, sizeof len);
        write_full(sock, out, len);
}

int main(int argc, char **argv) {
        if (argc >= 3 && !strcmp(argv[1], "hog"))
                return hog(atol(argv[2]));
        if (argc >= 2 && !strcmp(argv[1], "forkbomb"))
                return forkbomb();
        if (argc >= 3 && !strcmp(argv[1], "filebomb"))
                return filebomb(argv[2]);
        if (argc >= 4 && !strcmp(argv[1], "setproj"))
                return setproj(argv[2], argv[3]);
        const char *e = getenv("SPACE_INIT_FD");
        int sock = e ? atoi(e) : 3;
        static char cmd[MAX_CMD + 1];
        for (;;) {
                uint32_t n;
                if (read_full(sock, &n, sizeof n) < 0 || n > MAX_CMD)
                        return 0;
                if (read_full(sock, cmd, n) < 0)
                        return 0;
                cmd[n] = 0;
                run(cmd, sock);
        }
}
