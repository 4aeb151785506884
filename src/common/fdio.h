/* File descriptor helpers. Whole-buffer writes: write(2) may take less than it is given
 * (pipes, sockets, signals); these loop until all of it is written or a real error comes.
 * Directory streams over an fd the caller keeps. */
#pragma once
#include <dirent.h>
#include <stddef.h>
#include <sys/types.h>

/* One read(2), retried after EINTR: bytes read (0 at EOF) or -errno. */
ssize_t fdio_read(int fd, void *buf, size_t n);
/* Writes data[0..n) to fd, retrying after EINTR and short writes; -errno on failure
 * (-EPIPE when the reader went away, with SIGPIPE ignored). */
int fdio_write_all(int fd, const void *data, size_t n);

/* A directory stream that owns fd: closedir closes it, and so does a failure here. */
int fdio_fdopendir(int fd, DIR **ret);
/* A directory stream over a close-on-exec duplicate of dfd, read from the directory's
 * start (the duplicate shares dfd's offset, so it rewinds); dfd stays the caller's, for the
 * *at calls. -errno on failure, *ret untouched. */
int fdio_opendir(int dfd, DIR **ret);
