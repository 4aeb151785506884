/* Small helpers of spaced: random ids, sizes, times, and the
 * mapping of errno values that space-init reports to HTTP statuses. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include "common/buf.h"
#include "common/text.h"

/* n bytes from getrandom() (short reads and EINTR retried); -errno when there are none. */
int util_random_bytes(void *buf, size_t n);
/* prefix + 16 lowercase hex digits from getrandom(). out needs strlen(prefix) + 17 bytes. */
int util_random_id(const char *prefix, char *out, size_t outsz);
/* True for "ses_" + 16 lowercase hex. */
bool util_id_valid(const char *id, const char *prefix);

/* "512M", "1.5G", "64MiB", "1024" -> bytes (binary units). -EINVAL, -ERANGE. */
int util_parse_size(const char *s, uint64_t *ret);
struct json;
/* A size in a request body: a string util_parse_size takes, or a non-negative integer. */
int util_json_size(const struct json *v, uint64_t *ret);

/* Frees n strings of v and v itself (NULL: nothing). */
void util_strv_free(char **v, size_t n);

/* CLOCK_MONOTONIC in milliseconds: every deadline and timer of spaced. */
uint64_t util_now_ms(void);

/* "2026-11-30T05:14:07Z" */
void util_rfc3339(time_t t, char *out, size_t outsz);

/* The kernel's boot id (/proc/sys/kernel/random/boot_id), NUL-terminated. */
int util_boot_id(char out[64]);

struct meta;
/* Opens the metadata store at path (DATA/meta.db). On failure why says so for a human:
 * the path and the store's own reason, and for a schema newer than this spaced knows
 * (-EPROTO) that a newer spaced wrote it and is the one to use. */
int util_meta_open(const char *path, struct meta **ret, char *why, size_t why_size);

/* errno name ("ENOENT") or number from init -> HTTP status. */
int util_errno_status(int err);
