/* What authenticating one API request costs spaced: parsing "Authorization: Bearer …"
 * and auth_verify (SHA-256 + one indexed SQLite lookup + the constant-time compare), with
 * 1 and 1,000 tokens stored, against the SHA-256 alone as the reference, in the same run.
 * Prints one JSON object per line. usage: bench_auth [ROUNDS] (default 20000) */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "daemon/auth.h"
#include "meta/meta.h"

static double now_us(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b) {
        double x = *(const double *)a, y = *(const double *)b;
        return x < y ? -1 : x > y;
}

enum what { HASH_ONLY, VERIFY };

/* p50 and p90 of one call of `what` over rounds calls, in microseconds. */
static int measure(struct meta *m, const char *header, enum what what, size_t rounds, double *p50, double *p90) {
        double *t = calloc(rounds, sizeof *t);
        if (!t)
                return -ENOMEM;
        for (size_t i = 0; i < rounds; i++) {
                char tok[AUTH_TOKEN_LEN + 1], h[META_HASH_HEX + 1];
                struct meta_token mt;
                double t0 = now_us();
                int r = auth_parse_bearer(header, tok);
                if (r == 0)
                        r = what == HASH_ONLY ? meta_token_hash(tok, h) : auth_verify(m, tok, &mt);
                t[i] = now_us() - t0;
                if (r < 0) {
                        free(t);
                        return r;
                }
        }
        qsort(t, rounds, sizeof *t, cmp_double);
        *p50 = t[rounds / 2];
        *p90 = t[rounds * 9 / 10];
        free(t);
        return 0;
}

static int add_token(struct meta *m, char tok[AUTH_TOKEN_LEN + 1]) {
        char h[META_HASH_HEX + 1];
        int r = auth_token_new(tok);
        if (r == 0)
                r = meta_token_hash(tok, h);
        if (r == 0)
                r = meta_token_create(m, h, "bench", NULL);
        return r;
}

int main(int argc, char **argv) {
        size_t rounds = argc > 1 ? strtoul(argv[1], NULL, 10) : 20000;
        if (rounds < 10) {
                fprintf(stderr, "usage: bench_auth [ROUNDS >= 10]\n");
                return 2;
        }
        char dir[] = "/tmp/bench_auth.XXXXXX", path[64];
        if (!mkdtemp(dir))
                return 1;
        snprintf(path, sizeof path, "%s/meta.db", dir);
        struct meta *m = NULL;
        char tok[AUTH_TOKEN_LEN + 1], header[AUTH_TOKEN_LEN + 16];
        int r = meta_open(path, NULL, &m);
        if (r == 0)
                r = add_token(m, tok);
        snprintf(header, sizeof header, "Bearer %s", tok);
        for (size_t stored = 1; r == 0; stored = 1000) {
                double h50, h90, v50, v90;
                r = measure(m, header, HASH_ONLY, rounds, &h50, &h90);
                if (r == 0)
                        r = measure(m, header, VERIFY, rounds, &v50, &v90);
                if (r < 0)
                        break;
                printf("{\"bench\":\"auth_verify\",\"tokens_stored\":%zu,\"rounds\":%zu,\"p50_us\":%.2f,\"p90_us\":%.2f,"
                       "\"ref_sha256_p50_us\":%.2f,\"ref_sha256_p90_us\":%.2f,\"ratio_p50\":%.2f}\n",
                       stored, rounds, v50, v90, h50, h90, v50 / h50);
                fflush(stdout);
                if (stored == 1000)
                        break;
                char other[AUTH_TOKEN_LEN + 1];
                for (int i = 1; i < 1000 && r == 0; i++)
                        r = add_token(m, other);
        }
        if (r < 0)
                fprintf(stderr, "bench_auth: %s (%s)\n", strerror(-r), m ? meta_last_error(m) : "");
        meta_free(m);
        char f[96];
        static const char *const sfx[] = { "", "-wal", "-shm" };
        for (size_t i = 0; i < 3; i++) {
                snprintf(f, sizeof f, "%s%s", path, sfx[i]);
                unlink(f);
        }
        rmdir(dir);
        return r < 0 ? 1 : 0;
}
