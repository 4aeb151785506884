/* Small file helpers shared by the runtime pieces (cgroup files, template trees, run
 * dirs). Every function returns 0 or a negative errno and never follows a symlink it
 * was not asked to. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* Longest control-file content rt_read_file reads (cgroup files are small). */
#define RT_FILE_MAX (64u << 10)

/* Writes s to an existing file (O_TRUNC, no O_CREAT: kernel control files exist or not). */
int rt_write_file(const char *path, const char *s);
/* Reads at most size-1 bytes and NUL-terminates; returns the length read (an int, as
 * size is at most RT_FILE_MAX, so an error passes through an int return unchanged). */
int rt_read_file(const char *path, char *buf, size_t size);
/* Like mkdir -p; existing directories are fine. */
int rt_mkdir_p(const char *path, mode_t mode);
/* Reaps the child behind pidfd (our child, any exit_signal: __WALL): 1 with its wait
 * status (as waitpid encodes it) in *status once it has exited, 0 while it runs
 * (block false). */
int rt_pidfd_wait(int pidfd, bool block, int *status);
/* Removes a tree without following symlinks or crossing into other mounts. */
int rt_rm_rf(const char *path);
/* Same, for the entry name under the open directory dfd. */
int rt_rm_rf_at(int dfd, const char *name);

/* A fork (the runtime's clone3 of a sandbox's first process copies the caller's address
 * space) leaves every private page of the caller write-protected for copy-on-write until
 * its next write: each thread's next writes fault, with TLB shootdowns (1.5 ms of spaced's
 * next create, measured: docs/performance.md). Once the child has exec'd nothing shares
 * those pages, and this takes the faults now on the calling thread: MADV_POPULATE_WRITE
 * over the resident pages (mincore) of the process's writable private anonymous
 * mappings (up to RT_COW_MAP_MAX each), never touching what is not resident. Best
 * effort: nothing to report. */
void rt_cow_take_back(void);
#define RT_COW_MAP_MAX (1ul << 30) /* mappings larger than this are left alone */

/* Longest sandbox id: also a hostname (HOST_NAME_MAX is 64). */
#define RT_MAX_ID 64
/* A sandbox id: [A-Za-z0-9_-], at most RT_MAX_ID, not starting with '-'. */
bool rt_id_valid(const char *id);
/* The merged root directory of an overlay takes owner and mode from the upper layer's
 * root: gives upper those of the top template layer (owned by RT_ID_BASE), or root
 * inside could not create anything in "/". */
int rt_match_upper_root(const char *lower_dirs, const char *upper);

/* Sets real, effective and saved uid/gid and drops supplementary groups with the raw
 * system calls. For a child made by a raw clone3() in a multithreaded daemon: glibc's
 * set*id() would signal the daemon's other threads (which the child does not have) and
 * can wait forever on one that was half-created at the clone. -errno on failure. */
int rt_child_setids(uid_t uid, gid_t gid);

/* fd is a network namespace (rt_spec.netns_fd: NS_GET_NSTYPE says CLONE_NEWNET). */
bool rt_is_netns(int fd);
