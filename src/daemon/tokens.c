/* `spaced token`: makes API bearer tokens (printed once; only their SHA-256 is stored in
 * DATA/meta.db), lists them and revokes them. Works whether or not the daemon runs: it
 * looks every token up per request, so a new or revoked one counts from the next request. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/macros.h"
#include "daemon/auth.h"
#include "daemon/tokens.h"
#include "daemon/util.h"
#include "meta/meta.h"
#include "runtime/fsutil.h"

/* A revoke by id needs at least this many hex digits of the hash, and they must name one token. */
#define TOKENS_ID_MIN 8
#define TOKENS_ID_SHOWN 16

static void usage(FILE *f) {
        fprintf(f,
                "Usage: spaced token add --tenant TENANT [--name NAME] [--e2b] [--data DIR]\n"
                "       spaced token list [--data DIR]\n"
                "       spaced token revoke [--data DIR] ID|TOKEN\n"
                "API bearer tokens of the daemon whose data directory is DIR (default $SPACE_DATA,\n"
                "else " TOKENS_DEFAULT_DATA "). A token is bound to one tenant: requests carrying it\n"
                "(Authorization: Bearer TOKEN) see only that tenant's sessions and snapshots.\n"
                "\n"
                "  add      make a token for TENANT ([A-Za-z0-9._:@-], at most 64) and print it on\n"
                "           stdout; it is shown only now, only its SHA-256 is stored. --e2b: in\n"
                "           the form e2b_ + 40 hex digits, which E2B's SDKs up to 2.45 insist on\n"
                "           for E2B_API_KEY (docs/e2b.md); it works as any other token\n"
                "  list     every token: id (the start of its hash), tenant, name, created, state\n"
                "  revoke   refuse the token from the next request on; ID is at least %d hex digits\n"
                "           of the id that list shows, or give the token itself\n"
                "\n"
                "spaced --listen needs at least one unrevoked token; without one it does not start.\n"
                "Tokens take effect at once, whether or not spaced runs.\n",
                TOKENS_ID_MIN);
}

static int open_meta(const char *data, struct meta **ret) {
        int r = rt_mkdir_p(data, 0755);
        if (r < 0) {
                fprintf(stderr, "spaced token: data directory %s: %s\n", data, strerror(-r));
                return r;
        }
        _cleanup_free_ char *path = NULL;
        if (asprintf(&path, "%s/meta.db", data) < 0)
                return -ENOMEM;
        char why[1024];
        r = util_meta_open(path, ret, why, sizeof why);
        if (r < 0)
                fprintf(stderr, "spaced token: %s\n", why);
        return r;
}

static int token_add(struct meta *m, const char *tenant, const char *name, bool e2b) {
        char token[AUTH_TOKEN_LEN + 1], hash[META_HASH_HEX + 1];
        int r = e2b ? auth_token_new_e2b(token) : auth_token_new(token);
        if (r < 0) {
                fprintf(stderr, "spaced token: getrandom: %s\n", strerror(-r));
                return 1;
        }
        r = meta_token_hash(token, hash);
        if (r >= 0)
                r = meta_token_create(m, hash, tenant, name);
        if (r < 0) {
                explicit_bzero(token, sizeof token);
                fprintf(stderr, "spaced token: %s\n", r == -EINVAL ? meta_last_error(m) : strerror(-r));
                return r == -EINVAL ? 2 : 1;
        }
        printf("%s\n", token);
        explicit_bzero(token, sizeof token);
        fprintf(stderr, "spaced token: id %.*s for tenant %s; the token is shown only now\n", TOKENS_ID_SHOWN, hash,
                tenant);
        return fflush(stdout) == 0 ? 0 : 1;
}

static void fmt_time(int64_t ms, char *out, size_t n) {
        time_t t = (time_t)(ms / 1000);
        struct tm tm;
        if (!gmtime_r(&t, &tm) || strftime(out, n, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
                snprintf(out, n, "-");
}

static int token_list(struct meta *m) {
        struct meta_token *v = NULL;
        size_t n = 0;
        int r = meta_token_list(m, &v, &n);
        if (r < 0) {
                fprintf(stderr, "spaced token: listing: %s\n", meta_last_error(m));
                return 1;
        }
        printf("%-*s  %-20s  %-20s  %-20s  %s\n", TOKENS_ID_SHOWN, "ID", "TENANT", "NAME", "CREATED", "STATE");
        for (size_t i = 0; i < n; i++) {
                char created[32], revoked[48] = "valid";
                fmt_time(v[i].created_ms, created, sizeof created);
                if (v[i].revoked_ms) {
                        char t[32];
                        fmt_time(v[i].revoked_ms, t, sizeof t);
                        snprintf(revoked, sizeof revoked, "revoked %s", t);
                }
                printf("%.*s  %-20s  %-20s  %-20s  %s\n", TOKENS_ID_SHOWN, v[i].hash, v[i].tenant,
                       v[i].name[0] ? v[i].name : "-", created, revoked);
        }
        free(v);
        return fflush(stdout) == 0 ? 0 : 1;
}

/* The hash of the token named by what: the token itself, or a unique hash prefix. */
static int resolve(struct meta *m, const char *what, char hash[META_HASH_HEX + 1]) {
        if (auth_token_well_formed(what))
                return meta_token_hash(what, hash);
        size_t len = strlen(what);
        if (len < TOKENS_ID_MIN || len > META_HASH_HEX || strspn(what, "0123456789abcdef") != len) {
                fprintf(stderr, "spaced token: '%s' is neither a token nor an id (%d to %u hex digits)\n", what,
                        TOKENS_ID_MIN, META_HASH_HEX);
                return -EINVAL;
        }
        struct meta_token *v = NULL;
        size_t n = 0, found = 0;
        int r = meta_token_list(m, &v, &n);
        if (r < 0) {
                fprintf(stderr, "spaced token: listing: %s\n", meta_last_error(m));
                return r;
        }
        for (size_t i = 0; i < n; i++)
                if (strncmp(v[i].hash, what, len) == 0 && found++ == 0)
                        memcpy(hash, v[i].hash, META_HASH_HEX + 1);
        free(v);
        if (found == 1)
                return 0;
        fprintf(stderr, "spaced token: %s token has the id %s\n", found ? "more than one" : "no", what);
        return found ? -EINVAL : -ENOENT;
}

static int token_revoke(struct meta *m, const char *what) {
        char hash[META_HASH_HEX + 1];
        int r = resolve(m, what, hash);
        if (r < 0)
                return r == -EINVAL ? 2 : 1;
        r = meta_token_revoke(m, hash);
        if (r < 0) {
                fprintf(stderr, "spaced token: %s\n", r == -ENOENT ? "no such token" : meta_last_error(m));
                return 1;
        }
        fprintf(stderr, "spaced token: %.*s revoked\n", TOKENS_ID_SHOWN, hash);
        return 0;
}

int tokens_main(int argc, char **argv) {
        enum { OPT_DATA = 256, OPT_TENANT, OPT_NAME, OPT_E2B };
        static const struct option opts[] = {
                { "data", required_argument, NULL, OPT_DATA },
                { "tenant", required_argument, NULL, OPT_TENANT },
                { "name", required_argument, NULL, OPT_NAME },
                { "e2b", no_argument, NULL, OPT_E2B },
                { "help", no_argument, NULL, 'h' },
                {},
        };
        if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
                usage(argc < 2 ? stderr : stdout);
                return argc < 2 ? 2 : 0;
        }
        const char *verb = argv[1];
        const char *data = getenv("SPACE_DATA"), *tenant = NULL, *name = NULL;
        bool e2b = false;
        optind = 0; /* GNU: full re-initialisation */
        int o;
        while ((o = getopt_long(argc - 1, argv + 1, "h", opts, NULL)) != -1) {
                switch (o) {
                case OPT_DATA: data = optarg; break;
                case OPT_TENANT: tenant = optarg; break;
                case OPT_NAME: name = optarg; break;
                case OPT_E2B: e2b = true; break;
                case 'h': usage(stdout); return 0;
                default: usage(stderr); return 2;
                }
        }
        int nargs = argc - 1 - optind;
        char **args = argv + 1 + optind;
        bool add = strcmp(verb, "add") == 0, list = strcmp(verb, "list") == 0, revoke = strcmp(verb, "revoke") == 0;
        if (!add && !list && !revoke) {
                fprintf(stderr, "spaced token: unknown command '%s' (add, list, revoke)\n", verb);
                return 2;
        }
        if ((add && (!tenant || nargs != 0)) || (list && (tenant || name || e2b || nargs != 0)) ||
            (revoke && (tenant || name || e2b || nargs != 1))) {
                fprintf(stderr, "spaced token %s: %s\n", verb,
                        add ? "needs --tenant TENANT and no other argument"
                            : revoke ? "needs one ID or TOKEN" : "takes only --data");
                usage(stderr);
                return 2;
        }
        if (!data || !*data)
                data = TOKENS_DEFAULT_DATA;
        _cleanup_meta_ struct meta *m = NULL;
        if (open_meta(data, &m) < 0)
                return 1;
        if (add)
                return token_add(m, tenant, name, e2b);
        if (list)
                return token_list(m);
        return token_revoke(m, args[0]);
}
