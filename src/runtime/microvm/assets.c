/* What a microVM boots from, made on the host: the initramfs (space-init as /init and the
 * virtio modules, written as a newc cpio here), the read-only ext4 image of a template
 * (cached per template, shared by every VM of it) and the per-session disk (a qcow2 with
 * an ext4 holding the guest overlay's upper/ and work/). Also the way back: the session
 * disk's upper/ copied into the daemon's upper_dir. */
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/fs.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/macros.h"
#include "runtime/fsutil.h"
#include "runtime/microvm/microvm.h"
#include "runtime/quota.h"
#include "runtime/runtime.h"
#include "runtime/template.h"

/* Fixed so that an image rebuilt from the same tree looks the same to a restored guest. */
#define MV_FS_UUID "5bace0de-0000-4000-8000-000000000001"

/* ---------------- running the tools ---------------- */

int mv_run(char *const argv[], bool unshift_ids, const int *fds, size_t nfds) {
        int sync_pipe[2], out_pipe[2];
        if (pipe2(sync_pipe, O_CLOEXEC) < 0)
                return -errno;
        if (pipe2(out_pipe, O_CLOEXEC) < 0) {
                int e = -errno;
                close(sync_pipe[0]);
                close(sync_pipe[1]);
                return e;
        }
        pid_t pid = fork();
        if (pid < 0) {
                int e = -errno;
                close(sync_pipe[0]);
                close(sync_pipe[1]);
                close(out_pipe[0]);
                close(out_pipe[1]);
                return e;
        }
        if (pid == 0) {
                close(sync_pipe[1]);
                int nul = open("/dev/null", O_RDWR);
                if (nul >= 0)
                        dup2(nul, 0);
                dup2(out_pipe[1], 1);
                dup2(out_pipe[1], 2);
                for (size_t i = 0; i < nfds && i < 8; i++)
                        if (fds[i] >= 0) {
                                int hi = fcntl(fds[i], F_DUPFD, MV_RUN_FD_BASE + 8);
                                dup2(hi, MV_RUN_FD_BASE + (int)i);
                                close(hi);
                        }
                if (unshift_ids) {
                        /* Host ids RT_ID_BASE.. are 0.. inside: the tool reads the stored
                         * (shifted) tree and writes the ids the guest must see. */
                        char c;
                        if (unshare(CLONE_NEWUSER) < 0)
                                _exit(126);
                        /* the parent writes our maps, then closes its end */
                        kill(getpid(), SIGSTOP);
                        if (read(sync_pipe[0], &c, 1) < 0) {
                        }
                        if (setresgid(0, 0, 0) < 0 || setgroups(0, NULL) < 0 || setresuid(0, 0, 0) < 0)
                                _exit(126);
                }
                execvp(argv[0], argv);
                _exit(127);
        }
        close(sync_pipe[0]);
        int st, r = 0;
        if (unshift_ids) {
                if (waitpid(pid, &st, WUNTRACED) < 0 || !WIFSTOPPED(st)) {
                        close(sync_pipe[1]);
                        runtime_set_error("microvm: %s: could not enter a user namespace", argv[0]);
                        return -EIO;
                }
                char path[64], map[64];
                snprintf(map, sizeof map, "0 %u %u\n", RT_ID_BASE, RT_ID_COUNT);
                snprintf(path, sizeof path, "/proc/%d/uid_map", (int)pid);
                r = rt_write_file(path, map);
                snprintf(path, sizeof path, "/proc/%d/gid_map", (int)pid);
                if (r == 0)
                        r = rt_write_file(path, map);
                kill(pid, SIGCONT);
                if (r < 0)
                        kill(pid, SIGKILL);
        }
        close(sync_pipe[1]);
        close(out_pipe[1]);
        /* the tail of what it said, for the error message */
        char said[512] = "";
        size_t used = 0;
        for (;;) {
                char chunk[4096];
                ssize_t k = read(out_pipe[0], chunk, sizeof chunk);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0)
                        break;
                size_t n = (size_t)k;
                if (n >= sizeof said - 1) {
                        memcpy(said, chunk + n - (sizeof said - 1), sizeof said - 1);
                        used = sizeof said - 1;
                } else {
                        if (used + n > sizeof said - 1) {
                                size_t drop = used + n - (sizeof said - 1);
                                memmove(said, said + drop, used - drop);
                                used -= drop;
                        }
                        memcpy(said + used, chunk, n);
                        used += n;
                }
                said[used] = 0;
        }
        close(out_pipe[0]);
        for (char *c = said; *c; c++)
                if (*c == '\n')
                        *c = ' ';
        while (waitpid(pid, &st, 0) < 0)
                if (errno != EINTR)
                        return -errno;
        if (r < 0) {
                runtime_set_error("microvm: %s: id map: %s", argv[0], strerror(-r));
                return r;
        }
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                runtime_set_error("microvm: %s failed (status 0x%x): %s", argv[0], st, said);
                return -EIO;
        }
        return 0;
}

/* ---------------- the initramfs ---------------- */

static int cpio_entry(FILE *f, const char *name, mode_t mode, unsigned rmaj, unsigned rmin, int data_fd, uint64_t size) {
        static _Thread_local unsigned ino = 1;
        size_t nlen = strlen(name) + 1;
        if (fprintf(f, "070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08zX%08X", ino++, (unsigned)mode, 0u, 0u,
                    S_ISDIR(mode) ? 2u : 1u, 0u, (unsigned)size, 0u, 0u, rmaj, rmin, nlen, 0u) < 0)
                return -EIO;
        fwrite(name, 1, nlen, f);
        static const char zero[4];
        fwrite(zero, 1, (4 - (110 + nlen) % 4) % 4, f);
        if (data_fd >= 0) {
                char buf[65536];
                uint64_t left = size;
                while (left > 0) {
                        ssize_t k = read(data_fd, buf, MIN(sizeof buf, left));
                        if (k <= 0)
                                return k < 0 ? -errno : -EIO;
                        fwrite(buf, 1, (size_t)k, f);
                        left -= (uint64_t)k;
                }
                fwrite(zero, 1, (4 - size % 4) % 4, f);
        }
        return ferror(f) ? -EIO : 0;
}

static int cpio_file(FILE *f, const char *name, const char *src, mode_t mode) {
        _cleanup_close_ int fd = open(src, O_RDONLY | O_CLOEXEC);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0)
                return -errno;
        return cpio_entry(f, name, S_IFREG | mode, 0, 0, fd, (uint64_t)st.st_size);
}

int mv_initramfs(const char *guest_dir, const char *init_path, const char *dst) {
        _cleanup_fclose_ FILE *f = fopen(dst, "wbe");
        if (!f)
                return -errno;
        static const char *const dirs[] = { "dev", "proc", "sys", "mnt", "newroot", "modules" };
        int r = 0;
        for (size_t i = 0; i < ELEMENTSOF(dirs) && r == 0; i++)
                r = cpio_entry(f, dirs[i], S_IFDIR | 0755, 0, 0, -1, 0);
        if (r == 0) /* the kernel opens it for init's stdio: the serial console */
                r = cpio_entry(f, "dev/console", S_IFCHR | 0600, 5, 1, -1, 0);
        if (r == 0)
                r = cpio_file(f, "init", init_path, 0755);
        char mdir[MV_MAX_PATH];
        snprintf(mdir, sizeof mdir, "%s/modules", guest_dir);
        _cleanup_closedir_ DIR *d = opendir(mdir);
        if (!d)
                return -errno;
        struct dirent *de;
        while (r == 0 && (de = readdir(d))) {
                size_t n = strlen(de->d_name);
                if (n < 4 || strcmp(de->d_name + n - 3, ".ko") != 0 || n > 200)
                        continue;
                char src[MV_MAX_PATH + 256], name[sizeof "modules/" + 256];
                snprintf(src, sizeof src, "%s/%s", mdir, de->d_name);
                snprintf(name, sizeof name, "modules/%s", de->d_name);
                r = cpio_file(f, name, src, 0644);
        }
        if (r == 0)
                r = cpio_entry(f, "TRAILER!!!", 0, 0, 0, -1, 0);
        if (r == 0 && fflush(f) != 0)
                r = -errno;
        return r;
}

/* ---------------- ext4 images ---------------- */

/* mkfs.ext4 -d src into img (made here), ids unshifted. mkfs runs as the user
 * namespace's root, which may not traverse our directories: it gets both as fds. */
static int mkfs_from(const char *src, const char *img, const char *size, char *const *opts, size_t nopts) {
        _cleanup_close_ int out = open(img, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        _cleanup_close_ int in = open(src, O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (out < 0 || in < 0 || fchown(out, RT_ID_BASE, RT_ID_BASE) < 0)
                return -errno;
        char *argv[24] = { "mkfs.ext4", "-q", "-F", "-b", "4096" };
        size_t a = 5;
        for (size_t i = 0; i < nopts && a < ELEMENTSOF(argv) - 5; i++)
                argv[a++] = opts[i];
        argv[a++] = "-d";
        argv[a++] = MV_RUN_FD_PATH(0);
        argv[a++] = MV_RUN_FD_PATH(1);
        argv[a++] = (char *)size;
        argv[a] = NULL;
        int fds[] = { in, out };
        return mv_run(argv, true, fds, 2);
}

/* ---------------- the template image ---------------- */

static _Thread_local uint64_t tree_bytes; /* nftw has no user pointer */
static _Thread_local uint64_t tree_inodes;

static int tree_add(const char *p, const struct stat *st, int flag, struct FTW *ftw) {
        (void)p;
        (void)flag;
        (void)ftw;
        tree_bytes += (uint64_t)st->st_blocks * 512;
        tree_inodes++;
        return 0;
}

static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
        const unsigned char *b = p;
        for (size_t i = 0; i < n; i++) {
                h ^= b[i];
                h *= 1099511628211ull;
        }
        return h;
}

/* The layers are immutable once built, so their paths plus the identity of each top
 * directory name the image. */
static int strdup_to(const char *s, char **ret) {
        char *p = strdup(s);
        if (!p)
                return -ENOMEM;
        *ret = p;
        return 0;
}

const char *mv_template_dir(const char *lower_dirs) {
        const char *c = strrchr(lower_dirs, ':');
        return c ? c + 1 : lower_dirs;
}

/* A template is immutable once built, so its path plus the identity of its directory
 * name the image. */
int mv_image_key(const char *lower_dirs, char *buf, size_t n) {
        const char *tpl = mv_template_dir(lower_dirs);
        uint64_t h = 1469598103934665603ull;
        h = fnv1a(h, tpl, strlen(tpl));
        struct stat st;
        if (stat(tpl, &st) < 0)
                return -errno;
        uint64_t id[3] = { st.st_dev, st.st_ino, (uint64_t)st.st_ctim.tv_sec };
        h = fnv1a(h, id, sizeof id);
        snprintf(buf, n, "%016llx", (unsigned long long)h);
        return 0;
}

int mv_template_image(const char *guest_dir, const char *lower_dirs, char **ret) {
        char key[32], dir[MV_MAX_PATH], path[MV_MAX_PATH + 64];
        const char *src = mv_template_dir(lower_dirs);
        int r = mv_image_key(lower_dirs, key, sizeof key);
        if (r < 0) {
                runtime_set_error("microvm: template %s: %s", src, strerror(-r));
                return r;
        }
        snprintf(dir, sizeof dir, "%s/images", guest_dir);
        snprintf(path, sizeof path, "%s/%s.ext4", dir, key);
        if (access(path, R_OK) == 0)
                return strdup_to(path, ret);
        if ((r = rt_mkdir_p(dir, 0755)) < 0)
                return r;
        /* one builder per image; the others wait and find it made */
        char lockp[MV_MAX_PATH + 64];
        snprintf(lockp, sizeof lockp, "%s/%s.lock", dir, key);
        _cleanup_close_ int lock = open(lockp, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (lock < 0 || flock(lock, LOCK_EX) < 0)
                return -errno;
        if (access(path, R_OK) == 0)
                return strdup_to(path, ret);

        tree_bytes = tree_inodes = 0;
        if (nftw(src, tree_add, 64, FTW_PHYS | FTW_MOUNT) != 0)
                r = -EIO;
        uint64_t mib = (tree_bytes + tree_inodes * 4096) / (1u << 20) * 5 / 4 + 64;
        char tmp[MV_MAX_PATH + 64], size[32], inodes[32];
        snprintf(tmp, sizeof tmp, "%s/%s.tmp", dir, key);
        snprintf(size, sizeof size, "%lluM", (unsigned long long)mib);
        snprintf(inodes, sizeof inodes, "%llu", (unsigned long long)(tree_inodes * 2 + 1024));
        if (r == 0) {
                char *opts[] = { "-N", inodes, "-U", MV_FS_UUID, "-E",
                                 "hash_seed=" MV_FS_UUID ",root_owner=0:0,lazy_itable_init=0,lazy_journal_init=0",
                                 "-L", "space-lower" };
                r = mkfs_from(src, tmp, size, opts, ELEMENTSOF(opts));
        }
        if (r == 0 && (chown(tmp, 0, 0) < 0 || rename(tmp, path) < 0))
                r = -errno;
        if (r < 0) {
                (void)unlink(tmp);
                return r;
        }
        return strdup_to(path, ret);
}

/* ---------------- the session disk ---------------- */

static bool dir_empty(const char *path) {
        _cleanup_closedir_ DIR *d = opendir(path);
        if (!d)
                return true;
        struct dirent *de;
        while ((de = readdir(d)))
                if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
                        return false;
        return true;
}

/* ext4 of `mib` MiB holding upper/ (the seed trees merged, bottom first, or empty) and
 * work/, as qcow2 at dst. */
static int make_disk(const char *const *seeds, size_t n, const char *scratch, uint64_t mib, const char *dst) {
        char raw[MV_MAX_PATH + 16], stage[MV_MAX_PATH + 16], sub[MV_MAX_PATH + 32], size[32];
        snprintf(raw, sizeof raw, "%s/disk.raw", scratch);
        snprintf(stage, sizeof stage, "%s/stage", scratch);
        snprintf(size, sizeof size, "%lluM", (unsigned long long)mib);
        int r = 0;
        bool bound = false;
        (void)rt_rm_rf(stage);
        if (mkdir(stage, 0755) < 0 || chown(stage, RT_ID_BASE, RT_ID_BASE) < 0)
                return -errno;
        snprintf(sub, sizeof sub, "%s/work", stage);
        if (mkdir(sub, 0700) < 0 || chown(sub, RT_ID_BASE, RT_ID_BASE) < 0)
                r = -errno;
        snprintf(sub, sizeof sub, "%s/upper", stage);
        if (r == 0 && (mkdir(sub, 0755) < 0 || chown(sub, RT_ID_BASE, RT_ID_BASE) < 0))
                r = -errno;
        if (r == 0 && n == 1) {
                if (mount(seeds[0], sub, NULL, MS_BIND | MS_REC, NULL) < 0)
                        r = -errno;
                else
                        bound = true;
        }
        /* several: copied over each other, so a higher one's files and whiteouts win */
        for (size_t i = 0; r == 0 && n > 1 && i < n; i++) {
                char from[MV_MAX_PATH + 8];
                snprintf(from, sizeof from, "%s/.", seeds[i]);
                char *argv[] = { "cp", "-a", "--remove-destination", from, sub, NULL };
                r = mv_run(argv, false, NULL, 0);
        }
        if (r == 0) {
                char *opts[] = { "-E", "root_owner=0:0,lazy_itable_init=0,lazy_journal_init=0", "-L", "space-session" };
                r = mkfs_from(stage, raw, size, opts, ELEMENTSOF(opts));
        }
        if (bound)
                (void)umount2(sub, MNT_DETACH);
        (void)rt_rm_rf(stage);
        if (r == 0) {
                char *argv[] = { "qemu-img", "convert", "-q", "-f", "raw", "-O", "qcow2", raw, (char *)dst, NULL };
                r = mv_run(argv, false, NULL, 0);
        }
        (void)unlink(raw);
        return r;
}

#define MV_MAX_SEEDS 32

int mv_session_disk(const char *guest_dir, const char *lower_dirs, const char *upper_dir, const char *run_dir,
                    uint64_t mib, const char *dst) {
        /* The session's files: the layers above the template (snapshot layers the daemon
         * stacks there, top first) and upper_dir over them; bottom first here. */
        const char *seeds[MV_MAX_SEEDS];
        size_t n = 0;
        _cleanup_free_ char *copy = strdup(lower_dirs);
        if (!copy)
                return -ENOMEM;
        char *tpl = (char *)mv_template_dir(copy);
        if (tpl != copy) {
                tpl[-1] = 0;
                char *layers[MV_MAX_SEEDS];
                size_t nl = 0;
                for (char *save = NULL, *p = strtok_r(copy, ":", &save); p; p = strtok_r(NULL, ":", &save)) {
                        if (nl == MV_MAX_SEEDS - 1)
                                return -E2BIG;
                        layers[nl++] = p;
                }
                while (nl > 0)
                        if (!dir_empty(layers[--nl]))
                                seeds[n++] = layers[nl];
        }
        if (upper_dir && !dir_empty(upper_dir))
                seeds[n++] = upper_dir;
        if (n > 0)
                return make_disk(seeds, n, run_dir, mib, dst);
        /* An empty disk is the same for everyone: made once, copied. */
        char blank[MV_MAX_PATH + 64];
        snprintf(blank, sizeof blank, "%s/blank-%llu.qcow2", guest_dir, (unsigned long long)mib);
        if (access(blank, R_OK) != 0) {
                char lockp[MV_MAX_PATH + 80], tmp[MV_MAX_PATH + 80];
                snprintf(lockp, sizeof lockp, "%s.lock", blank);
                _cleanup_close_ int lock = open(lockp, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
                if (lock < 0 || flock(lock, LOCK_EX) < 0)
                        return -errno;
                if (access(blank, R_OK) != 0) {
                        snprintf(tmp, sizeof tmp, "%s.tmp", blank);
                        int r = make_disk(NULL, 0, run_dir, mib, tmp);
                        if (r == 0 && rename(tmp, blank) < 0)
                                r = -errno;
                        if (r < 0) {
                                (void)unlink(tmp);
                                return r;
                        }
                }
        }
        return mv_copy_file(blank, dst);
}

int mv_copy_file(const char *src, const char *dst) {
        _cleanup_close_ int in = open(src, O_RDONLY | O_CLOEXEC);
        if (in < 0)
                return -errno;
        _cleanup_close_ int out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (out < 0)
                return -errno;
        if (ioctl(out, FICLONE, in) == 0)
                return 0;
        struct stat st;
        if (fstat(in, &st) < 0)
                return -errno;
        /* sparse-aware: the holes of a qcow2 stay holes */
        off_t pos = 0;
        while (pos < st.st_size) {
                off_t data = lseek(in, pos, SEEK_DATA);
                if (data < 0)
                        break;
                off_t hole = lseek(in, data, SEEK_HOLE);
                if (hole < 0)
                        return -errno;
                off_t o_in = data, o_out = data;
                while (o_in < hole) {
                        ssize_t k = copy_file_range(in, &o_in, out, &o_out, (size_t)(hole - o_in), 0);
                        if (k < 0 && (errno == EXDEV || errno == EOPNOTSUPP || errno == EINVAL)) {
                                /* across filesystems (tmpfs RAM -> image dir) */
                                char buf[1 << 16];
                                k = pread(in, buf, (size_t)MIN((off_t)sizeof buf, hole - o_in), o_in);
                                if (k > 0 && pwrite(out, buf, (size_t)k, o_out) != k)
                                        return -EIO;
                                if (k > 0) {
                                        o_in += k;
                                        o_out += k;
                                }
                        }
                        if (k <= 0)
                                return k < 0 ? -errno : -EIO;
                }
                pos = hole;
        }
        if (ftruncate(out, st.st_size) < 0)
                return -errno;
        return 0;
}

/* ---------------- files back to the host ---------------- */

int mv_export_upper(const char *disk_qcow2, const char *run_dir, const char *upper_dir) {
        char raw[MV_MAX_PATH + 16], mnt[MV_MAX_PATH + 16], from[MV_MAX_PATH + 32], tmp[MV_MAX_PATH + 32];
        snprintf(raw, sizeof raw, "%s/export.raw", run_dir);
        snprintf(mnt, sizeof mnt, "%s/export", run_dir);
        snprintf(from, sizeof from, "%s/upper", mnt);
        snprintf(tmp, sizeof tmp, "%s/.microvm-export", upper_dir);
        char *conv[] = { "qemu-img", "convert", "-q", "-U", "-f", "qcow2", "-O", "raw", (char *)disk_qcow2, raw, NULL };
        int r = mv_run(conv, false, NULL, 0);
        if (r < 0)
                return r;
        _cleanup_close_ int img = open(raw, O_RDWR | O_CLOEXEC);
        _cleanup_close_ int lfd = -EBADF;
        char dev[64];
        bool mounted = false;
        if (img < 0)
                r = -errno;
        if (r == 0)
                r = rt_loop_attach(img, dev, sizeof dev, &lfd);
        (void)mkdir(mnt, 0700);
        /* read-only, but the journal the guest left is replayed (into our copy) */
        if (r == 0) {
                if (mount(dev, mnt, "ext4", MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) < 0)
                        r = -errno;
                else
                        mounted = true;
        }
        lfd = safe_close(lfd);
        img = safe_close(img);
        (void)rt_rm_rf(tmp);
        if (r == 0)
                r = template_copy_tree(from, tmp);
        if (mounted)
                (void)umount2(mnt, MNT_DETACH);
        (void)rmdir(mnt);
        (void)unlink(raw);
        if (r < 0) {
                (void)rt_rm_rf(tmp);
                runtime_set_error("microvm: export the session files: %s", strerror(-r));
                return r;
        }
        /* swap the contents: everything old goes, then the copy's entries move up */
        _cleanup_closedir_ DIR *d = opendir(upper_dir);
        if (!d)
                return -errno;
        struct dirent *de;
        while ((de = readdir(d)))
                if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") && strcmp(de->d_name, ".microvm-export"))
                        if ((r = rt_rm_rf_at(dirfd(d), de->d_name)) < 0)
                                return r;
        _cleanup_closedir_ DIR *t = opendir(tmp);
        if (!t)
                return -errno;
        while ((de = readdir(t)))
                if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
                        if (renameat(dirfd(t), de->d_name, dirfd(d), de->d_name) < 0)
                                return -errno;
        /* the root of the session's files keeps the mode and owner it had in the guest */
        struct stat st;
        if (stat(tmp, &st) < 0 || chown(upper_dir, st.st_uid, st.st_gid) < 0 ||
            chmod(upper_dir, st.st_mode & 07777) < 0) {
                r = -errno;
                runtime_set_error("microvm: export the session files: the owner and mode of %s: %s", upper_dir,
                                  strerror(-r));
                return r;
        }
        return rmdir(tmp) < 0 ? -errno : 0;
}
