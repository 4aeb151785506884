/* File helpers for the runtime: control-file read/write, mkdir -p and a careful rm -rf
 * (openat + O_NOFOLLOW all the way down, stops at mount points). */
#include "runtime/fsutil.h"

#include <fcntl.h>
#include <linux/nsfs.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include "common/fdio.h"
#include "common/macros.h"

int rt_write_file(const char *path, const char *s) {
        _cleanup_close_ int fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return -errno;
        size_t n = strlen(s);
        ssize_t w = write(fd, s, n);
        if (w < 0)
                return -errno;
        if ((size_t)w != n)
                return -EIO;
        return 0;
}

int rt_read_file(const char *path, char *buf, size_t size) {
        if (size == 0 || size > RT_FILE_MAX)
                return -EINVAL;
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return -errno;
        size_t len = 0;
        while (len < size - 1) {
                ssize_t r = fdio_read(fd, buf + len, size - 1 - len);
                if (r < 0)
                        return (int)r;
                if (r == 0)
                        break;
                len += (size_t)r;
        }
        buf[len] = 0;
        return (int)len;
}

int rt_mkdir_p(const char *path, mode_t mode) {
        if (!path || !*path)
                return -EINVAL;
        size_t n = strlen(path);
        if (n >= 4096)
                return -ENAMETOOLONG;
        char tmp[4096];
        memcpy(tmp, path, n + 1);
        for (char *p = tmp + 1;; p++) {
                if (*p == '/' || *p == 0) {
                        char c = *p;
                        *p = 0;
                        if (mkdir(tmp, mode) < 0 && errno != EEXIST)
                                return -errno;
                        *p = c;
                        if (c == 0)
                                break;
                }
        }
        struct stat st;
        if (stat(path, &st) < 0)
                return -errno;
        return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

/* Depth bound: a tree deeper than this is refused rather than exhausting the stack. */
#define RM_MAX_DEPTH 256

static int rm_children(int dfd, dev_t dev, unsigned depth) {
        if (depth > RM_MAX_DEPTH)
                return -ELOOP;
        _cleanup_closedir_ DIR *d = NULL;
        int ret = fdio_opendir(dfd, &d);
        if (ret < 0)
                return ret;
        struct dirent *de;
        while ((errno = 0, de = readdir(d))) {
                if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
                        continue;
                struct stat st;
                if (fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
                        if (errno != ENOENT && ret == 0)
                                ret = -errno;
                        continue;
                }
                if (S_ISDIR(st.st_mode)) {
                        if (st.st_dev != dev) { /* a mount point: never descend */
                                if (ret == 0)
                                        ret = -EBUSY;
                                continue;
                        }
                        _cleanup_close_ int sub = openat(dfd, de->d_name,
                                                          O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                        if (sub < 0) {
                                if (ret == 0)
                                        ret = -errno;
                                continue;
                        }
                        int r = rm_children(sub, dev, depth + 1);
                        if (r < 0 && ret == 0)
                                ret = r;
                        if (unlinkat(dfd, de->d_name, AT_REMOVEDIR) < 0 && ret == 0)
                                ret = -errno;
                } else if (unlinkat(dfd, de->d_name, 0) < 0 && errno != ENOENT && ret == 0) {
                        ret = -errno;
                }
        }
        if (errno != 0 && ret == 0)
                ret = -errno;
        return ret;
}

int rt_rm_rf_at(int dfd, const char *name) {
        struct stat st;
        if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return errno == ENOENT ? 0 : -errno;
        if (!S_ISDIR(st.st_mode))
                return unlinkat(dfd, name, 0) < 0 ? -errno : 0;
        _cleanup_close_ int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        int r = rm_children(fd, st.st_dev, 0);
        if (r < 0)
                return r;
        return unlinkat(dfd, name, AT_REMOVEDIR) < 0 ? -errno : 0;
}

int rt_rm_rf(const char *path) {
        return rt_rm_rf_at(AT_FDCWD, path);
}

int rt_pidfd_wait(int pidfd, bool block, int *status) {
        siginfo_t si = { 0 };
        int r;
        do
                r = waitid((idtype_t)P_PIDFD, (id_t)pidfd, &si, WEXITED | __WALL | (block ? 0 : WNOHANG));
        while (r < 0 && errno == EINTR);
        if (r < 0)
                return -errno;
        if (si.si_pid == 0)
                return 0;
        switch (si.si_code) {
        case CLD_EXITED:
                *status = (si.si_status & 0xff) << 8;
                break;
        case CLD_KILLED:
                *status = si.si_status & 0x7f;
                break;
        case CLD_DUMPED:
                *status = (si.si_status & 0x7f) | 0x80;
                break;
        default:
                *status = 0;
        }
        return 1;
}

bool rt_id_valid(const char *id) {
        size_t n = id ? strlen(id) : 0;
        if (n == 0 || n > RT_MAX_ID || id[0] == '-' || id[0] == '.')
                return false;
        for (size_t i = 0; i < n; i++) {
                char c = id[i];
                if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '_' || c == '-'))
                        return false;
        }
        return true;
}

int rt_match_upper_root(const char *lower_dirs, const char *upper) {
        char top[4096];
        size_t n = strcspn(lower_dirs, ":");
        if (n >= sizeof top)
                return -ENAMETOOLONG;
        memcpy(top, lower_dirs, n);
        top[n] = 0;
        struct stat st, ust;
        if (stat(top, &st) < 0 || stat(upper, &ust) < 0)
                return -errno;
        if ((ust.st_uid != st.st_uid || ust.st_gid != st.st_gid) && chown(upper, st.st_uid, st.st_gid) < 0)
                return -errno;
        if ((ust.st_mode & 07777) != (st.st_mode & 07777) && chmod(upper, st.st_mode & 07777) < 0)
                return -errno;
        return 0;
}

int rt_child_setids(uid_t uid, gid_t gid) {
        if (syscall(SYS_setresgid, gid, gid, gid) < 0 || syscall(SYS_setgroups, 0, NULL) < 0 ||
            syscall(SYS_setresuid, uid, uid, uid) < 0)
                return -errno;
        return 0;
}

bool rt_is_netns(int fd) {
        return fd >= 0 && ioctl(fd, NS_GET_NSTYPE) == CLONE_NEWNET;
}

#define COW_VEC_PAGES 4096
void rt_cow_take_back(void) {
        _cleanup_fclose_ FILE *f = fopen("/proc/self/maps", "re");
        if (!f)
                return;
        long page = sysconf(_SC_PAGESIZE);
        static __thread unsigned char vec[COW_VEC_PAGES];
        char line[512];
        while (fgets(line, sizeof line, f)) {
                unsigned long lo, hi, inode;
                char perms[8];
                if (sscanf(line, "%lx-%lx %7s %*s %*s %lu", &lo, &hi, perms, &inode) != 4 || perms[1] != 'w' ||
                    perms[3] != 'p' || inode != 0 || strstr(line, "[v") || hi - lo > RT_COW_MAP_MAX)
                        continue; /* larger: reserved, not heap (a sanitizer's shadow) */
                for (unsigned long at = lo; at < hi;) {
                        size_t n = MIN((hi - at) / (unsigned long)page, (unsigned long)COW_VEC_PAGES);
                        if (mincore((void *)at, n * (size_t)page, vec) < 0)
                                break;
                        for (size_t i = 0; i < n;) {
                                if (!(vec[i] & 1)) {
                                        i++;
                                        continue;
                                }
                                size_t k = i;
                                while (k < n && (vec[k] & 1))
                                        k++;
                                (void)madvise((void *)(at + i * (unsigned long)page), (k - i) * (size_t)page,
                                              MADV_POPULATE_WRITE);
                                i = k;
                        }
                        at += n * (unsigned long)page;
                }
        }
}
