/* Unit tests of the small shared helpers: array_reserve/ARRAY_RESERVE (growth by doubling
 * from the first size, nothing changed when it fails) and sock_unix_addr (the longest path
 * that fits sun_path, and one byte more). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "common/macros.h"
#include "common/sock.h"

static void test_array_reserve(void **state) {
        (void)state;
        printf("checks: ARRAY_RESERVE grows an empty array to the first size, doubles as elements are "
               "added one by one, keeps what it holds, does nothing when there is room, and refuses an "
               "overflowing size leaving array and capacity as they were\n");
        uint32_t *v = NULL;
        size_t cap = 0;
        for (uint32_t i = 0; i < 1000; i++) {
                assert_int_equal(ARRAY_RESERVE(v, cap, i + 1, 16), 0);
                v[i] = i * 3;
                if (i < 16)
                        assert_int_equal(cap, 16);
        }
        assert_int_equal(cap, 1024);
        for (uint32_t i = 0; i < 1000; i++)
                assert_int_equal(v[i], i * 3);
        uint32_t *before = v;
        assert_int_equal(ARRAY_RESERVE(v, cap, 1024, 16), 0);
        assert_ptr_equal(v, before);
        assert_int_equal(cap, 1024);
        assert_int_equal(ARRAY_RESERVE(v, cap, SIZE_MAX / 2, 16), -ENOMEM); /* × 4 bytes overflows */
        assert_int_equal(ARRAY_RESERVE(v, cap, SIZE_MAX, 16), -ENOMEM);     /* no doubling reaches it */
        assert_ptr_equal(v, before);
        assert_int_equal(cap, 1024);
        assert_int_equal(v[999], 999 * 3);
        free(v);

        void *p = NULL;
        size_t c = 0;
        assert_int_equal(array_reserve(&p, &c, 5, 1, 4), 0);
        assert_int_equal(c, 8); /* 4 doubled once */
        free(p);
}

static void test_sock_unix_addr(void **state) {
        (void)state;
        struct sockaddr_un sa;
        char path[sizeof sa.sun_path + 1];
        printf("checks: sock_unix_addr takes a %zu-byte path (sun_path with its NUL) and refuses %zu bytes "
               "with -ENAMETOOLONG, leaving the address untouched\n",
               sizeof sa.sun_path - 1, sizeof sa.sun_path);
        memset(path, 'a', sizeof path);
        path[0] = '/';
        path[sizeof sa.sun_path - 1] = 0;
        memset(&sa, 0x55, sizeof sa);
        assert_int_equal(sock_unix_addr(path, &sa), 0);
        assert_int_equal(sa.sun_family, AF_UNIX);
        assert_string_equal(sa.sun_path, path);
        path[sizeof sa.sun_path - 1] = 'a';
        path[sizeof sa.sun_path] = 0;
        struct sockaddr_un before;
        memset(&before, 0x33, sizeof before);
        sa = before;
        assert_int_equal(sock_unix_addr(path, &sa), -ENAMETOOLONG);
        assert_memory_equal(&sa, &before, sizeof sa);
        assert_int_equal(sock_unix_addr("/run/x.sock", &sa), 0);
        assert_string_equal(sa.sun_path, "/run/x.sock");
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_array_reserve),
                cmocka_unit_test(test_sock_unix_addr),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
