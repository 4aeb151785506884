/* API bearer tokens (auth.h): made from getrandom, shown once, stored only as their
 * SHA-256 (meta tokens table), and checked per request against that hash. */
#include "daemon/auth.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "daemon/util.h"

int auth_token_new(char out[AUTH_TOKEN_LEN + 1]) {
        char raw[DL_TOKEN_LEN + 1];
        int r = dl_token_new(raw);
        if (r < 0)
                return r;
        memcpy(out, AUTH_TOKEN_PREFIX, AUTH_TOKEN_PREFIX_LEN);
        memcpy(out + AUTH_TOKEN_PREFIX_LEN, raw, DL_TOKEN_LEN + 1);
        explicit_bzero(raw, sizeof raw);
        return 0;
}

int auth_token_new_e2b(char out[AUTH_TOKEN_LEN + 1]) {
        uint8_t raw[AUTH_E2B_HEX / 2];
        int r = util_random_bytes(raw, sizeof raw);
        if (r < 0)
                return r;
        static const char hex[] = "0123456789abcdef";
        memcpy(out, AUTH_E2B_PREFIX, AUTH_E2B_PREFIX_LEN);
        for (size_t i = 0; i < sizeof raw; i++) {
                out[AUTH_E2B_PREFIX_LEN + 2 * i] = hex[raw[i] >> 4];
                out[AUTH_E2B_PREFIX_LEN + 2 * i + 1] = hex[raw[i] & 15];
        }
        out[AUTH_E2B_LEN] = '\0';
        explicit_bzero(raw, sizeof raw);
        return 0;
}

static bool e2b_well_formed(const char *t) {
        if (strncmp(t, AUTH_E2B_PREFIX, AUTH_E2B_PREFIX_LEN) != 0)
                return false;
        for (size_t i = 0; i < AUTH_E2B_HEX; i++) {
                char ch = t[AUTH_E2B_PREFIX_LEN + i];
                if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f')))
                        return false;
        }
        return t[AUTH_E2B_LEN] == '\0';
}

bool auth_token_well_formed(const char *token) {
        return token && ((strncmp(token, AUTH_TOKEN_PREFIX, AUTH_TOKEN_PREFIX_LEN) == 0 &&
                          dl_token_well_formed(token + AUTH_TOKEN_PREFIX_LEN)) ||
                         e2b_well_formed(token));
}

int auth_parse_bearer(const char *header, char out[AUTH_TOKEN_LEN + 1]) {
        if (!header)
                return -EINVAL;
        if (strnlen(header, AUTH_HEADER_MAX + 1) > AUTH_HEADER_MAX)
                return -EMSGSIZE;
        static const char scheme[] = "Bearer";
        if (strncasecmp(header, scheme, sizeof scheme - 1) != 0 ||
            (header[sizeof scheme - 1] != ' ' && header[sizeof scheme - 1] != '\t'))
                return -EPROTONOSUPPORT;
        const char *t = header + sizeof scheme - 1;
        while (*t == ' ' || *t == '\t')
                t++;
        /* The server strips trailing blanks of header values; what is left is the token. */
        if (!auth_token_well_formed(t))
                return -EINVAL;
        memcpy(out, t, strlen(t) + 1);
        return 0;
}

bool auth_hash_equal(const char *a, const char *b) {
        unsigned char diff = 0;
        for (size_t i = 0; i < META_HASH_HEX; i++)
                diff |= (unsigned char)(a[i] ^ b[i]);
        return diff == 0;
}

int auth_verify(struct meta *m, const char *token, struct meta_token *ret) {
        char h[META_HASH_HEX + 1];
        if (!auth_token_well_formed(token))
                return -EACCES;
        int r = meta_token_hash(token, h);
        if (r < 0)
                return r;
        struct meta_token t;
        r = meta_token_lookup(m, h, &t);
        if (r == -ENOENT || r == -EKEYREVOKED)
                return -EACCES;
        if (r < 0)
                return r;
        /* The lookup found the row by its key; the final word is a constant-time compare
         * of the whole hash, so no early-exit comparison decides on a secret. */
        if (!auth_hash_equal(h, t.hash))
                return -EACCES;
        *ret = t;
        return 0;
}

bool auth_tenant_sees(const char *caller, const char *owner) {
        return caller && owner && strcmp(caller, owner) == 0;
}

int auth_usable_tokens(struct meta *m, size_t *ret) {
        struct meta_token *v = NULL;
        size_t n = 0, usable = 0;
        int r = meta_token_list(m, &v, &n);
        if (r < 0)
                return r;
        for (size_t i = 0; i < n; i++)
                usable += v[i].revoked_ms == 0;
        free(v);
        *ret = usable;
        return 0;
}
