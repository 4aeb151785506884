/* API authentication (docs/security.md, "API clients"): the bearer tokens' text form, how
 * a request's Authorization header becomes a tenant, and whether a tenant may see a
 * resource. Kept apart from the server so the unit tests reach all of it without one. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include "daemon/session_rules.h"
#include "meta/meta.h"

/* "spt_" + 32 random bytes in url-safe base64 (43 characters). */
#define AUTH_TOKEN_PREFIX "spt_"
#define AUTH_TOKEN_PREFIX_LEN 4
#define AUTH_TOKEN_LEN (AUTH_TOKEN_PREFIX_LEN + DL_TOKEN_LEN)
/* Longest Authorization header value read; longer ones are refused (401) unparsed. */
#define AUTH_HEADER_MAX 512
/* The tenant of a request on the Unix socket without a token: the local operator. */
#define AUTH_LOCAL_TENANT "default"

/* The other form, for SDKs that insist on it (E2B's up to 2.45, docs/e2b.md): "e2b_" + 40
 * lowercase hex digits (20 random bytes). Either form is a token like the other: bound to
 * a tenant, sent as a bearer token or in X-API-KEY, stored as its SHA-256. */
#define AUTH_E2B_PREFIX "e2b_"
#define AUTH_E2B_PREFIX_LEN 4
#define AUTH_E2B_HEX 40
#define AUTH_E2B_LEN (AUTH_E2B_PREFIX_LEN + AUTH_E2B_HEX)

/* A new secret token, NUL-terminated. -errno if getrandom fails. */
int auth_token_new(char out[AUTH_TOKEN_LEN + 1]);
/* The same in the e2b_ form (fits the same buffer: AUTH_E2B_LEN < AUTH_TOKEN_LEN). */
int auth_token_new_e2b(char out[AUTH_TOKEN_LEN + 1]);
/* Shape check before hashing: the prefix and 43 url-safe base64 characters, or the e2b_
 * prefix and 40 lowercase hex digits. */
bool auth_token_well_formed(const char *token);
/* "Bearer <token>" (scheme case-insensitive, blanks between) -> the token copied to out.
 * -EMSGSIZE over AUTH_HEADER_MAX, -EPROTONOSUPPORT for another scheme, -EINVAL when the
 * token is missing or malformed; out is untouched on failure. */
int auth_parse_bearer(const char *header, char out[AUTH_TOKEN_LEN + 1]);
/* Two META_HASH_HEX hex strings equal, in a time that does not depend on where they differ. */
bool auth_hash_equal(const char *a, const char *b);
/* The tenant of a well-formed, known, unrevoked token: 0 and *ret filled; -EACCES for any
 * other token (unknown, revoked, malformed), other -errno if meta fails. */
int auth_verify(struct meta *m, const char *token, struct meta_token *ret);
/* Whether caller may see something owned by owner. Another tenant's resource must look
 * exactly like a missing one (404), so callers use this to decide "not found". */
bool auth_tenant_sees(const char *caller, const char *owner);
/* How many tokens are known and not revoked (the TCP listener needs at least one). */
int auth_usable_tokens(struct meta *m, size_t *ret);
