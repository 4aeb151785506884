/* Unit tests of API authentication (src/daemon/auth.c): the token's text form, parsing
 * the Authorization header (schemes, blanks, limits), the constant-time hash compare,
 * verification against a real SQLite meta store (known, unknown, revoked, malformed),
 * the count of usable tokens that gates --listen, and the tenant filter. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/auth.h"
#include "meta/meta.h"

static void test_token_form(void **state) {
        (void)state;
        char a[AUTH_TOKEN_LEN + 1], b[AUTH_TOKEN_LEN + 1];
        printf("check: a new token is spt_ + 43 url-safe characters, fresh each time\n");
        assert_int_equal(auth_token_new(a), 0);
        assert_int_equal(auth_token_new(b), 0);
        assert_int_equal(strlen(a), AUTH_TOKEN_LEN);
        assert_memory_equal(a, "spt_", 4);
        assert_string_not_equal(a, b);
        assert_true(auth_token_well_formed(a));
        printf("check: without the prefix, with another prefix, cut or extended, it is malformed\n");
        assert_false(auth_token_well_formed(a + 4));
        char t[AUTH_TOKEN_LEN + 2];
        memcpy(t, a, sizeof a);
        t[0] = 'x';
        assert_false(auth_token_well_formed(t));
        memcpy(t, a, sizeof a);
        t[AUTH_TOKEN_LEN - 1] = '\0';
        assert_false(auth_token_well_formed(t));
        memcpy(t, a, sizeof a);
        t[AUTH_TOKEN_LEN] = 'A';
        t[AUTH_TOKEN_LEN + 1] = '\0';
        assert_false(auth_token_well_formed(t));
        assert_false(auth_token_well_formed(NULL));
        assert_false(auth_token_well_formed("spt_"));
        printf("check: the e2b_ form is e2b_ + 40 lowercase hex, fresh each time, and nothing else\n");
        assert_int_equal(auth_token_new_e2b(a), 0);
        assert_int_equal(auth_token_new_e2b(b), 0);
        assert_int_equal(strlen(a), AUTH_E2B_LEN);
        assert_memory_equal(a, "e2b_", 4);
        assert_string_not_equal(a, b);
        assert_true(auth_token_well_formed(a));
        for (size_t i = 4; i < AUTH_E2B_LEN; i++)
                assert_non_null(strchr("0123456789abcdef", a[i]));
        memcpy(t, a, AUTH_E2B_LEN + 1);
        t[10] = 'A'; /* upper case is not the form */
        assert_false(auth_token_well_formed(t));
        memcpy(t, a, AUTH_E2B_LEN + 1);
        t[AUTH_E2B_LEN - 1] = '\0';
        assert_false(auth_token_well_formed(t));
        memcpy(t, a, AUTH_E2B_LEN + 1);
        t[AUTH_E2B_LEN] = '0';
        t[AUTH_E2B_LEN + 1] = '\0';
        assert_false(auth_token_well_formed(t));
        printf("check: an e2b_ token is a bearer token like the other\n");
        char h[128], out[AUTH_TOKEN_LEN + 1];
        snprintf(h, sizeof h, "Bearer %s", a);
        assert_int_equal(auth_parse_bearer(h, out), 0);
        assert_string_equal(out, a);
}

static void test_parse_bearer(void **state) {
        (void)state;
        char tok[AUTH_TOKEN_LEN + 1], out[AUTH_TOKEN_LEN + 1], h[AUTH_HEADER_MAX + 64];
        assert_int_equal(auth_token_new(tok), 0);
        printf("check: 'Bearer T', any case of the scheme, blanks between, gives T\n");
        snprintf(h, sizeof h, "Bearer %s", tok);
        assert_int_equal(auth_parse_bearer(h, out), 0);
        assert_string_equal(out, tok);
        snprintf(h, sizeof h, "bEARER \t  %s", tok);
        memset(out, 0, sizeof out);
        assert_int_equal(auth_parse_bearer(h, out), 0);
        assert_string_equal(out, tok);
        printf("check: other schemes, no blank, no token, a malformed token are refused; out untouched\n");
        memset(out, 'z', sizeof out);
        snprintf(h, sizeof h, "Basic %s", tok);
        assert_int_equal(auth_parse_bearer(h, out), -EPROTONOSUPPORT);
        snprintf(h, sizeof h, "Bearer%s", tok);
        assert_int_equal(auth_parse_bearer(h, out), -EPROTONOSUPPORT);
        assert_int_equal(auth_parse_bearer("Bearer", out), -EPROTONOSUPPORT);
        assert_int_equal(auth_parse_bearer("Bearer ", out), -EINVAL);
        assert_int_equal(auth_parse_bearer("Bearer spt_abc", out), -EINVAL);
        snprintf(h, sizeof h, "Bearer %s extra", tok);
        assert_int_equal(auth_parse_bearer(h, out), -EINVAL);
        assert_int_equal(auth_parse_bearer(NULL, out), -EINVAL);
        for (size_t i = 0; i < sizeof out; i++)
                assert_int_equal(out[i], 'z');
        printf("check: a header over AUTH_HEADER_MAX (%d) is refused before parsing\n", AUTH_HEADER_MAX);
        memset(h, 'A', sizeof h);
        memcpy(h, "Bearer ", 7);
        h[AUTH_HEADER_MAX + 1] = '\0';
        assert_int_equal(auth_parse_bearer(h, out), -EMSGSIZE);
        h[AUTH_HEADER_MAX] = '\0';
        assert_int_equal(auth_parse_bearer(h, out), -EINVAL); /* at the limit: parsed, malformed */
}

static void test_hash_equal(void **state) {
        (void)state;
        char a[META_HASH_HEX + 1], b[META_HASH_HEX + 1];
        printf("check: equal hashes compare equal; a difference at the first or the last digit does not\n");
        assert_int_equal(meta_token_hash("x", a), 0);
        memcpy(b, a, sizeof a);
        assert_true(auth_hash_equal(a, b));
        b[0] = b[0] == '0' ? '1' : '0';
        assert_false(auth_hash_equal(a, b));
        memcpy(b, a, sizeof a);
        b[META_HASH_HEX - 1] = b[META_HASH_HEX - 1] == '0' ? '1' : '0';
        assert_false(auth_hash_equal(a, b));
}

static void test_verify(void **state) {
        (void)state;
        char dir[] = "/tmp/test_auth.XXXXXX", path[64];
        assert_non_null(mkdtemp(dir));
        snprintf(path, sizeof path, "%s/meta.db", dir);
        struct meta *m = NULL;
        assert_int_equal(meta_open(path, NULL, &m), 0);
        size_t n = 99;
        printf("check: an empty store has no usable token (--listen would refuse)\n");
        assert_int_equal(auth_usable_tokens(m, &n), 0);
        assert_int_equal(n, 0);

        char ta[AUTH_TOKEN_LEN + 1], tb[AUTH_TOKEN_LEN + 1], unknown[AUTH_TOKEN_LEN + 1];
        char ha[META_HASH_HEX + 1], hb[META_HASH_HEX + 1];
        assert_int_equal(auth_token_new(ta), 0);
        assert_int_equal(auth_token_new(tb), 0);
        assert_int_equal(auth_token_new(unknown), 0);
        assert_int_equal(meta_token_hash(ta, ha), 0);
        assert_int_equal(meta_token_hash(tb, hb), 0);
        assert_int_equal(meta_token_create(m, ha, "alpha", "a"), 0);
        assert_int_equal(meta_token_create(m, hb, "beta", NULL), 0);
        assert_int_equal(auth_usable_tokens(m, &n), 0);
        assert_int_equal(n, 2);

        printf("check: a known token gives its tenant\n");
        struct meta_token t = { 0 };
        assert_int_equal(auth_verify(m, ta, &t), 0);
        assert_string_equal(t.tenant, "alpha");
        assert_int_equal(auth_verify(m, tb, &t), 0);
        assert_string_equal(t.tenant, "beta");
        printf("check: unknown, malformed and the bare hash are -EACCES, *ret untouched\n");
        memset(&t, 0, sizeof t);
        assert_int_equal(auth_verify(m, unknown, &t), -EACCES);
        assert_int_equal(auth_verify(m, "spt_short", &t), -EACCES);
        assert_int_equal(auth_verify(m, ha, &t), -EACCES);
        assert_int_equal(t.tenant[0], '\0');
        printf("check: a revoked token is -EACCES and no longer counts as usable\n");
        assert_int_equal(meta_token_revoke(m, ha), 0);
        assert_int_equal(auth_verify(m, ta, &t), -EACCES);
        assert_int_equal(auth_usable_tokens(m, &n), 0);
        assert_int_equal(n, 1);
        printf("check: meta_token_list still shows both, the revoked one with its time\n");
        struct meta_token *v = NULL;
        assert_int_equal(meta_token_list(m, &v, &n), 0);
        assert_int_equal(n, 2);
        int revoked = 0;
        for (size_t i = 0; i < n; i++)
                revoked += v[i].revoked_ms != 0 && strcmp(v[i].tenant, "alpha") == 0;
        assert_int_equal(revoked, 1);
        free(v);
        meta_free(m);
        unlink(path);
        char wal[80];
        snprintf(wal, sizeof wal, "%s-wal", path);
        unlink(wal);
        snprintf(wal, sizeof wal, "%s-shm", path);
        unlink(wal);
        assert_int_equal(rmdir(dir), 0);
}

static void test_tenant_sees(void **state) {
        (void)state;
        printf("check: a tenant sees its own, not another's, and nothing without a tenant\n");
        assert_true(auth_tenant_sees("alpha", "alpha"));
        assert_false(auth_tenant_sees("alpha", "beta"));
        assert_false(auth_tenant_sees("alpha", "alph"));
        assert_false(auth_tenant_sees("alpha", "Alpha"));
        assert_false(auth_tenant_sees(NULL, "alpha"));
        assert_false(auth_tenant_sees("alpha", NULL));
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_token_form),  cmocka_unit_test(test_parse_bearer),
                cmocka_unit_test(test_hash_equal),  cmocka_unit_test(test_verify),
                cmocka_unit_test(test_tenant_sees),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
