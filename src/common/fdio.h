/* Whole-buffer writes to a file descriptor: write(2) may take less than it is given (pipes,
 * sockets, signals); these loop until all of it is written or a real error comes. */
#pragma once
#include <stddef.h>

/* Writes data[0..n) to fd, retrying after EINTR and short writes; -errno on failure
 * (-EPIPE when the reader went away, with SIGPIPE ignored). */
int fdio_write_all(int fd, const void *data, size_t n);
