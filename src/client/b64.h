/* Base64 (RFC 4648, with padding) and a UTF-8 check for libspace: exec output arrives as
 * "data_b64" when it isn't valid UTF-8, and stdin goes out the same way. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include "common/buf.h"

int client_b64_encode(struct buf *out, const void *data, size_t n);
/* Appends the decoded bytes; -EINVAL on a character outside the alphabet or bad padding. */
int client_b64_decode(struct buf *out, const char *s, size_t n);
/* True when s[0..n) is well-formed UTF-8 without NUL bytes (so JSON text can carry it). */
bool client_utf8_valid(const char *s, size_t n);
