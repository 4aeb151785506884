/* A session's metadata (docs/api.md, "metadata"): string keys and values its client gives
 * at create, kept with the session (meta's metadata_json), copied by a fork, shown in the
 * session object, and matched by the list filters of SPACE's API and of the E2B API.
 * Pure: no daemon state, so the unit tests reach every rule. */
#pragma once
#include <stdbool.h>
#include <stddef.h>

#define MD_KEYS_MAX 64     /* keys of one session's metadata */
#define MD_KEY_MAX 64      /* bytes of a key (at least 1) */
#define MD_VALUE_MAX 512   /* bytes of a value */
#define MD_FILTER_MAX 8192 /* bytes of a ?metadata= filter as sent (decoded once) */

struct json;
struct json_writer;

/* v (absent or null: none) checked: an object of at most MD_KEYS_MAX members, each key
 * 1..MD_KEY_MAX bytes and unique, each value a string of at most MD_VALUE_MAX bytes.
 * *ret: its JSON text (malloc'd), NULL for none or {}. -EINVAL with why naming the bad
 * key (for a 400), -ENOMEM. */
int metadata_parse(const struct json *v, char **ret, char *why, size_t why_size);
/* text (NULL: none) as a JSON object: {} when none. */
void metadata_write_json(struct json_writer *w, const char *text);

/* A filter: every pair must be in the metadata (AND). */
struct md_filter {
        size_t n;
        char *keys[MD_KEYS_MAX];
        char *values[MD_KEYS_MAX];
};
/* "k=v&k2=v2" (a query value already decoded once) into *f: split on '&' and the first
 * '=', each side form-decoded ('+' a space, %XX), then, with twice, percent-decoded once
 * more (the E2B SDK's encoding, docs/e2b-wire.md §2.4). -EINVAL with why (a bad escape, an
 * empty key, over MD_KEYS_MAX pairs or MD_FILTER_MAX bytes), -ENOMEM; *f is then empty. */
int metadata_filter_parse(const char *text, bool twice, struct md_filter *f, char *why, size_t why_size);
void metadata_filter_clear(struct md_filter *f);
/* Whether the metadata text (NULL: none) holds every pair of f (an empty f: true). */
bool metadata_matches(const char *text, const struct md_filter *f);
