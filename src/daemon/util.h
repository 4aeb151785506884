/* Small helpers of spaced: random ids, base64, UTF-8 checks, sizes, times, and the
 * mapping of errno values that space-init reports to HTTP statuses. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include "common/buf.h"

/* prefix + 16 lowercase hex digits from getrandom(). out needs strlen(prefix) + 17 bytes. */
int util_random_id(const char *prefix, char *out, size_t outsz);
/* True for "ses_" + 16 lowercase hex. */
bool util_id_valid(const char *id, const char *prefix);

int util_b64_encode(struct buf *out, const void *data, size_t n);
/* Standard alphabet, '=' padding optional, no whitespace. -EINVAL on bad input. */
int util_b64_decode(const char *in, size_t n, struct buf *out);

/* Length of the longest prefix of s[0..n) that is valid UTF-8 (no overlongs, no
 * surrogates, nothing over U+10FFFF). */
size_t util_utf8_valid_prefix(const uint8_t *s, size_t n);
/* True if s[0..n) is an incomplete but so far valid UTF-8 sequence (1..3 bytes). */
bool util_utf8_incomplete_tail(const uint8_t *s, size_t n);

/* "512M", "1.5G", "64MiB", "1024" -> bytes (binary units). -EINVAL, -ERANGE. */
int util_parse_size(const char *s, uint64_t *ret);

/* "2026-11-30T05:14:07Z" */
void util_rfc3339(time_t t, char *out, size_t outsz);

/* errno name ("ENOENT") or number from init -> HTTP status. */
int util_errno_status(int err);
