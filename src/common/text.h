/* Base64 (RFC 4648, padded) and UTF-8 checks shared by the JSON codec, spaced and
 * libspace: command output travels as JSON text when it is UTF-8 and as base64 when not.
 * And the token lists of HTTP headers, which both ends of the API read. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "common/buf.h"

/* Appends the padded base64 of data[0..n). */
int text_b64_encode(struct buf *out, const void *data, size_t n);
/* Appends the decoded bytes of s[0..n); -EINVAL on a character outside the alphabet, a
 * length that is not a multiple of 4, or padding anywhere but at the end. */
int text_b64_decode(struct buf *out, const char *s, size_t n);

/* Length of the UTF-8 sequence at s (n bytes available): > 0 valid, 0 invalid (overlong,
 * surrogate, past U+10FFFF, stray continuation), -1 valid so far but cut short. */
int text_utf8_seq(const uint8_t *s, size_t n);
/* How many leading bytes of s form whole, valid UTF-8 sequences. */
size_t text_utf8_valid_prefix(const uint8_t *s, size_t n);
/* True when s[0..n) (n < 4) is the start of a valid sequence that more bytes would finish. */
bool text_utf8_incomplete_tail(const uint8_t *s, size_t n);
/* True when s[0..n) is well-formed UTF-8 without NUL bytes (JSON text can carry it as is). */
bool text_utf8_valid(const char *s, size_t n);

/* True when the comma-separated list (an HTTP header value: "keep-alive, Upgrade")
 * holds token, compared without case, blanks around items ignored. */
bool text_list_has_token(const char *list, const char *token);
/* The value of hex digit c (either case), or -1. */
int text_hex_digit(int c);
