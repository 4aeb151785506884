/* spaced: the SPACE host daemon. Parses options, takes the data directory (one daemon per
 * directory, enforced by a lock), opens the metadata and snapshot stores, brings every
 * durable session back (re-attached, recovered or paused), and runs the event loop until
 * SIGTERM/SIGINT, when it snapshots what changed, stops the sandboxes and exits. */
#include <ctype.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/timerfd.h>

#include "common/log.h"
#include "common/notify.h"
#include "daemon/auth.h"
#include "daemon/config.h"
#include "daemon/e2b/e2b.h"
#include "daemon/limits.h"
#include "daemon/routes.h"
#include "daemon/warmpool.h"
#include "daemon/replicate.h"
#include "daemon/spaced.h"
#include "daemon/tokens.h"
#include "daemon/util.h"
#include "daemon/server.h"
#include "daemon/session.h"
#include "daemon/durable.h"
#include "daemon/disk.h"
#include "daemon/templates.h"
#include "daemon/loop.h"
#include "daemon/metrics.h"
#include "daemon/net/ingress.h"
#include "runtime/fsutil.h"
#include "runtime/runtime.h"

#define DEFAULT_DATA TOKENS_DEFAULT_DATA

#define PORTS_DOMAIN_MAX 200

/* A DNS name: labels of letters, digits and '-', not starting or ending with '-' or '.'. */
static bool ports_domain_valid(const char *s) {
        size_t n = strlen(s);
        if (n == 0 || n > PORTS_DOMAIN_MAX || s[0] == '.' || s[n - 1] == '.' || s[0] == '-' || strstr(s, ".."))
                return false;
        for (size_t i = 0; i < n; i++)
                if (!isalnum((unsigned char)s[i]) && s[i] != '-' && s[i] != '.')
                        return false;
        return true;
}

static void usage(FILE *f) {
        fprintf(f,
                "Usage: spaced [OPTIONS]\n"
                "       spaced token add|list|revoke ...   (API tokens: spaced token --help)\n"
                "The SPACE host daemon: serves the HTTP API of docs/api.md and runs sandboxes.\n"
                "\n"
                "  --data DIR         data directory (default $SPACE_DATA, else " DEFAULT_DATA ");\n"
                "                     the API socket is DIR/spaced.sock (mode 0600); a request on\n"
                "                     it without a token acts as the local operator (tenant default)\n"
                "  --listen HOST:PORT also serve the API on TCP; every TCP request needs a bearer\n"
                "                     token ('spaced token add'), and spaced refuses to start with\n"
                "                     --listen while no unrevoked token exists. TCP is plain HTTP:\n"
                "                     put TLS in front of it off a trusted network\n"
                "  --pidfile PATH     write the daemon's pid to PATH\n"
                "  --init PATH        space-init binary (default: space-init next to spaced)\n"
                "  --runtime NAME     default sandbox runtime: ns (default), gvisor, microvm;\n"
        "                     a session may ask for another (space create --runtime)\n"
                "  --pool TEMPLATE=N  keep N sandboxes of TEMPLATE made ahead (warm pool; 0 = none,\n"
                "                     the default); repeatable; changeable at run time: PUT /v1/pool/TEMPLATE\n"
                "  --pool-quiet MS    a refill waits until no request came for MS milliseconds\n"
                "                     (default %d, 0 to %d; 0 = at once), unless a pool is below\n"
                "                     half its size or requests did not pause for %d x MS: a\n"
                "                     replacement is not made beside the first commands of the\n"
                "                     sandbox just taken\n"
                "  --disk-volume-size SIZE\n"
                "                     size of DIR/vol.img, the sparse volume (btrfs with qgroups,\n"
                "                     or ext4 with project quotas) mounted on DIR/vol that holds\n"
                "                     the sessions' writable layers and enforces their disk\n"
                "                     limits; made at the first start (default half the free\n"
                "                     space, at most 64G), reused as it is later; 0 = no volume,\n"
                "                     no disk limits\n"
                "  --disk-default SIZE\n"
                "                     disk limit of a session that asks none (default 10G; 0 = none)\n"
                "  --snapshot-bytes-factor N\n"
                "                     a session's snapshots may add at most N times its disk limit\n"
                "                     (or --disk-default's) to the snapshot store (default 4, at\n"
                "                     most 1000; 0 = no limit): older rolling snapshots make room,\n"
                "                     a manual snapshot past it is refused (507)\n"
                "  --tenant-snapshot-bytes SIZE\n"
                "                     the same for all of a tenant's sessions together (default\n"
                "                     0 = no limit)\n"
                "  --limit NAME=VALUE set one of the limits on what clients hold and write\n"
                "                     (docs/security.md \"Hostile tenants\"); repeatable:\n",
                WPOOL_QUIET_DEFAULT_MS, WPOOL_QUIET_MAX_MS, WPOOL_QUIET_WAIT_MAX);
        limits_usage(f);
        fprintf(f,
                "  --ports-domain DOMAIN\n"
                "                     serve a session's exposed ports also by Host header:\n"
                "                     http://PORT-ses_ID.DOMAIN/ (wildcard DNS for *.DOMAIN to\n"
                "                     spaced's listener is the operator's); default: none, ports\n"
                "                     are served by path only (/v1/sessions/ID/ports/PORT/)\n"
                "  --egress on|off    network egress for sandboxes (docs/network.md; default off:\n"
                "                     nothing on the host's network changes, every sandbox has\n"
                "                     loopback only). on: every ns sandbox gets a prepared network\n"
                "                     namespace behind spaced's nftables table 'inet space', and\n"
                "                     spaced sets net.ipv4.ip_forward and net.ipv6.conf.all.forwarding\n"
                "  --egress-default on|off\n"
                "                     whether a session that asks nothing gets egress (default off;\n"
                "                     on needs --egress on)\n"
                "  --egress-open CIDR open one of the always-closed ranges (private, link-local,\n"
                "                     ...) to every session; repeatable (at most %u)\n"
                "  --sandbox-net4 CIDR\n"
                "                     the sandboxes' IPv4 network, a /30 each (default " NET_DEFAULT_NET4 ",\n"
                "                     /8 to /28)\n"
                "  --sandbox-net6 CIDR\n"
                "                     the sandboxes' IPv6 network, a /64 each (default " NET_DEFAULT_NET6 ",\n"
                "                     /16 to /48)\n"
                "  --bandwidth-max RATE\n"
                "                     the most bandwidth a session may ask, each direction (\"20mbit\",\n"
                "                     bits/s; default none)\n"
                "  --dns-port PORT    the sandboxes' resolver's port on the host ends (default %u;\n"
                "                     their port 53 is redirected to it)\n"
                "  --dns-upstream IP[:PORT]\n"
                "                     the resolver's upstream servers; repeatable (at most %u;\n"
                "                     default: the nameservers of /etc/resolv.conf)\n",
                NET_OPEN_MAX, NET_DNS_PORT_DEFAULT, NET_UPSTREAMS_MAX);
        fprintf(f,
                "  --s3-endpoint URL  replicate every snapshot to an S3 bucket at URL (http://HOST:PORT,\n"
                "                     path-style; docs/daemon.md \"Replication\"); the keys come from\n"
                "                     $" REPL_ENV_ACCESS " and $" REPL_ENV_SECRET ", never from the command\n"
                "                     line; default: none, no replication\n"
                "  --s3-bucket NAME   the bucket (needed with --s3-endpoint; spaced does not create it)\n"
                "  --s3-region R      the region requests are signed for (default " REPL_REGION_DEFAULT ")\n"
                "  --replicate-jobs N snapshots pushed at once (default %u, 1 to %u)\n",
                REPL_JOBS_DEFAULT, REPL_JOBS_MAX);
        fprintf(f,
                "  --metrics-interval SECONDS\n"
                "                     how often every running session's CPU, memory, disk and\n"
                "                     network use is sampled (default %d, 1 to %d); each keeps its\n"
                "                     last %d samples (GET /v1/sessions/ID/metrics, space top)\n",
                METRICS_INTERVAL_DEFAULT_MS / 1000, METRICS_INTERVAL_MAX_S, METRICS_RING_MAX);
        fprintf(f,
                "  --e2b on|off       serve the E2B-compatible API (docs/e2b.md; default off) on\n"
                "                     spaced's listeners: requests carrying X-API-KEY (a token of\n"
                "                     'spaced token add', e2b_ form with --e2b) or E2b-Sandbox-Id\n"
                "  --e2b-listen HOST:PORT\n"
                "                     a TCP listener of the E2B API's own (implies --e2b on); it\n"
                "                     serves both APIs and, like --listen, needs a token to exist\n"
                "  --log-level LEVEL  error, warn, info (default) or debug\n"
                "  --config PATH      the configuration file (default $SPACE_CONFIG, else\n"
                "                     " CONFIG_DEFAULT_PATH ", which may be missing)\n"
                "  --check-config     check the configuration file and the options, print the\n"
                "                     settings in effect and where each comes from, and exit\n"
                "  --help             this text\n"
                "  --version          the version\n"
                "\n"
                "The configuration file sets any option above but --config, --check-config, --help\n"
                "and --version: one 'key = value' per line, the key an option's name without its\n"
                "dashes ('pool = base=2', repeatable like --pool; a flag takes yes or no); '#' starts\n"
                "a comment at the start of a line or after a blank. An unknown key is an error that\n"
                "names its line. The command line wins over $SPACE_DATA and $SPACE_LOG, which win\n"
                "over the file. 'spaced token' reads the file's data too.\n"
                "\n"
                "SPACE_MICROVM_ACCEL=auto|kvm|tcg: the microvm runtime's accelerator (default auto:\n"
                "KVM when a probe of milliseconds finds it runs guest kernel code at hardware speed,\n"
                "else TCG; the verdict and why: 'space health', microvm_accel).\n"
                "\n"
                "Exit status: 0 after SIGTERM or SIGINT, 1 a failure, 2 a bad option or configuration\n"
                "file, 3 a data directory this spaced does not read (one a newer spaced wrote).\n"
                "\n"
                "Sessions are durable (DIR/meta.db, DIR/store): after a restart, even after kill -9,\n"
                "running sessions are re-attached to their sandboxes or recovered from their newest\n"
                "snapshot, paused ones stay paused. SIGTERM or SIGINT takes a last snapshot of every\n"
                "changed session, stops the sandboxes and exits; the next start brings them back.\n");
}

static int parse_level(const char *s, enum log_level *ret) {
        static const char *const names[] = { "error", "warn", "info", "debug" };
        for (size_t i = 0; i < ELEMENTSOF(names); i++)
                if (strcmp(s, names[i]) == 0) {
                        *ret = (enum log_level)i;
                        return 0;
                }
        return -EINVAL;
}

/* A whole decimal number from 0 to max. */
static int parse_count(const char *s, uint64_t max, uint64_t *ret) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(s, &end, 10);
        if (!*s || *end || errno || *s == '-' || v > max)
                return -EINVAL;
        *ret = v;
        return 0;
}

static void signal_event(struct loop_src *src, uint32_t revents) {
        (void)revents;
        struct daemon *d = (struct daemon *)((char *)src - offsetof(struct daemon, sig_src));
        struct signalfd_siginfo si;
        while (read(src->fd, &si, sizeof si) == (ssize_t)sizeof si) {
                if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT) {
                        log_info("signal %d: shutting down", (int)si.ssi_signo);
                        d->stopping = true;
                }
        }
}

static void timer_event(struct loop_src *src, uint32_t revents) {
        (void)revents;
        struct daemon *d = (struct daemon *)((char *)src - offsetof(struct daemon, timer_src));
        uint64_t ticks;
        (void)!read(src->fd, &ticks, sizeof ticks);
        ses_tick(d);
        dur_tick(d);
        lifetime_tick(d);
        wpool_tick(d->pool);
        srv_tick(d);
        if (d->ingress)
                ingress_tick(d->ingress);
        e2b_tick(d);
        repl_tick(d->repl);
}

static int write_pidfile(const char *path) {
        _cleanup_free_ char *tmp = NULL;
        if (asprintf(&tmp, "%s.tmp", path) < 0)
                return -ENOMEM;
        _cleanup_close_ int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0)
                return -errno;
        if (dprintf(fd, "%d\n", (int)getpid()) < 0)
                return -EIO;
        if (rename(tmp, path) < 0)
                return -errno;
        return 0;
}

/* Before anything is written to the data directory: its snapshot store is of a format
 * this spaced reads, and its metadata store opens (migrated forward when an older spaced
 * wrote it); or spaced stops here and says why. A directory a newer spaced wrote is
 * refused and left as it is (docs/install.md "Upgrades"). */
static int check_data_dir(const char *data_dir) {
        _cleanup_free_ char *mpath = NULL, *spath = NULL;
        if (asprintf(&mpath, "%s/meta.db", data_dir) < 0 || asprintf(&spath, "%s/store", data_dir) < 0)
                return -ENOMEM;
        int r = store_probe(spath);
        if (r == -EBADMSG) {
                log_error("snapshot store: %s", store_error_detail());
                log_error("refusing the data directory %s, nothing in it was changed", data_dir);
                return r;
        }
        if (r < 0 && r != -ENOENT) {
                log_error("snapshot store %s: %s", spath, store_error_detail());
                return r;
        }
        char why[1024];
        _cleanup_meta_ struct meta *m = NULL;
        r = util_meta_open(mpath, &m, why, sizeof why);
        if (r < 0)
                log_error("metadata store %s", why);
        if (r == -EPROTO)
                log_error("refusing the data directory %s, nothing in it was changed (run a newer spaced on it, "
                          "or this one on another --data)", data_dir);
        return r;
}

/* A TCP listener without tokens would be an open door (or, before this check, one that
 * nobody could use): refuse to start instead. */
static int check_tcp_tokens(const char *data_dir) {
        _cleanup_free_ char *path = NULL;
        if (asprintf(&path, "%s/meta.db", data_dir) < 0)
                return -ENOMEM;
        _cleanup_meta_ struct meta *m = NULL;
        size_t n = 0;
        char why[1024];
        int r = util_meta_open(path, &m, why, sizeof why);
        if (r < 0) {
                log_error("metadata store %s", why);
                return r;
        }
        if ((r = auth_usable_tokens(m, &n)) < 0) {
                log_error("reading the API tokens: %s", meta_last_error(m));
                return r;
        }
        if (n == 0) {
                log_error("--listen needs at least one API token, and %s has none that is not revoked: "
                          "create one with 'spaced token add --data %s --tenant NAME'", path, data_dir);
                return -ENOKEY;
        }
        return 0;
}

/* The connection slots must be real: a soft RLIMIT_NOFILE of 1024 would make accept fail
 * long before the slots are full. Raised to what the slots, sandboxes' sockets and the
 * stores need, as far as the hard limit allows. */
static void raise_nofile(const struct spaced_limits *l) {
        struct rlimit rl;
        rlim_t want = (rlim_t)(l->tcp_conns + l->unix_conns + 2 * SPACED_MAX_SESSIONS + 1024);
        if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur >= want)
                return;
        struct rlimit nl = { .rlim_cur = want, .rlim_max = rl.rlim_max };
        if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < want) {
                /* root may raise the hard limit too, up to fs.nr_open */
                nl.rlim_max = want;
                if (setrlimit(RLIMIT_NOFILE, &nl) == 0)
                        return;
                nl.rlim_cur = nl.rlim_max = rl.rlim_max;
                log_warn("open files limit %llu is below the %llu the connection slots need",
                         (unsigned long long)rl.rlim_max, (unsigned long long)want);
        }
        if (setrlimit(RLIMIT_NOFILE, &nl) < 0)
                log_warn("raising the open files limit: %m");
}

/* Which accelerator microvm sessions get, and why (decided by its host_init). */
static void log_microvm_accel(void) {
        struct rt_accel_info ai;
        if (rt_microvm_accel_info(&ai) == 0)
                log_info("microvm accelerator: %s (%s)", ai.name, ai.reason);
}

int main(int argc, char **argv) {
        enum { OPT_DATA = 256, OPT_LISTEN, OPT_PIDFILE, OPT_INIT, OPT_RUNTIME, OPT_LOG, OPT_VERSION, OPT_POOL,
               OPT_VOL_SIZE, OPT_DISK_DEFAULT, OPT_SNAP_FACTOR, OPT_TENANT_SNAP, OPT_CONFIG, OPT_CHECK_CONFIG, OPT_LIMIT,
               OPT_PORTS_DOMAIN,
               OPT_EGRESS, OPT_EGRESS_DEFAULT, OPT_EGRESS_OPEN, OPT_NET4, OPT_NET6, OPT_BW_MAX, OPT_DNS_PORT,
               OPT_DNS_UPSTREAM,
               OPT_METRICS_INTERVAL, OPT_E2B, OPT_E2B_LISTEN, OPT_POOL_QUIET, OPT_S3_ENDPOINT, OPT_S3_BUCKET,
               OPT_S3_REGION, OPT_REPL_JOBS };
        static const struct option opts[] = {
                { "data", required_argument, NULL, OPT_DATA },
                { "listen", required_argument, NULL, OPT_LISTEN },
                { "pidfile", required_argument, NULL, OPT_PIDFILE },
                { "init", required_argument, NULL, OPT_INIT },
                { "runtime", required_argument, NULL, OPT_RUNTIME },
                { "log-level", required_argument, NULL, OPT_LOG },
                { "pool", required_argument, NULL, OPT_POOL },
                { "pool-quiet", required_argument, NULL, OPT_POOL_QUIET },
                { "disk-volume-size", required_argument, NULL, OPT_VOL_SIZE },
                { "disk-default", required_argument, NULL, OPT_DISK_DEFAULT },
                { "snapshot-bytes-factor", required_argument, NULL, OPT_SNAP_FACTOR },
                { "tenant-snapshot-bytes", required_argument, NULL, OPT_TENANT_SNAP },
                { "config", required_argument, NULL, OPT_CONFIG },
                { "check-config", no_argument, NULL, OPT_CHECK_CONFIG },
                { "limit", required_argument, NULL, OPT_LIMIT },
                { "ports-domain", required_argument, NULL, OPT_PORTS_DOMAIN },
                { "egress", required_argument, NULL, OPT_EGRESS },
                { "egress-default", required_argument, NULL, OPT_EGRESS_DEFAULT },
                { "egress-open", required_argument, NULL, OPT_EGRESS_OPEN },
                { "sandbox-net4", required_argument, NULL, OPT_NET4 },
                { "sandbox-net6", required_argument, NULL, OPT_NET6 },
                { "bandwidth-max", required_argument, NULL, OPT_BW_MAX },
                { "dns-port", required_argument, NULL, OPT_DNS_PORT },
                { "dns-upstream", required_argument, NULL, OPT_DNS_UPSTREAM },
                { "metrics-interval", required_argument, NULL, OPT_METRICS_INTERVAL },
                { "e2b", required_argument, NULL, OPT_E2B },
                { "e2b-listen", required_argument, NULL, OPT_E2B_LISTEN },
                { "s3-endpoint", required_argument, NULL, OPT_S3_ENDPOINT },
                { "s3-bucket", required_argument, NULL, OPT_S3_BUCKET },
                { "s3-region", required_argument, NULL, OPT_S3_REGION },
                { "replicate-jobs", required_argument, NULL, OPT_REPL_JOBS },
                { "help", no_argument, NULL, 'h' },
                { "version", no_argument, NULL, OPT_VERSION },
                {},
        };
        char cerr[CONFIG_ERR_SIZE];
        _cleanup_config_ struct config *cfg = NULL;
        if (argc >= 2 && strcmp(argv[1], "token") == 0) {
                /* the daemon's data directory, when the file names it */
                const char *cdata;
                if (config_load(opts, 1, argv, &cfg, &(int){ 0 }, &(char **){ NULL }, cerr) < 0) {
                        fprintf(stderr, "spaced: %s\n", cerr);
                        return 2;
                }
                if ((cdata = config_get(cfg, "data")) && setenv("SPACE_DATA", cdata, 1) < 0)
                        return 1;
                return tokens_main(argc - 1, argv + 1);
        }
        const char *data = getenv("SPACE_DATA"), *listen_addr = NULL, *pidfile = NULL, *init = NULL,
                   *runtime = "ns", *ports_domain = NULL, *e2b_listen = NULL;
        bool e2b = false;
        struct repl_cfg rcfg = { .region = REPL_REGION_DEFAULT, .jobs = REPL_JOBS_DEFAULT };
        uint64_t repl_jobs = REPL_JOBS_DEFAULT;
        const char *pool_args[WPOOL_MAX_TEMPLATES];
        uint64_t pool_quiet_ms = WPOOL_QUIET_DEFAULT_MS;
        size_t n_pool = 0;
        enum log_level level = LOG_INFO;
        uint64_t metrics_interval_s = METRICS_INTERVAL_DEFAULT_MS / 1000;
        uint64_t vol_size = 0, disk_default = SES_DEFAULT_DISK, snap_factor = SES_DEFAULT_SNAPSHOT_FACTOR,
                 tenant_snap = 0;
        bool vol_size_given = false, check_config = false;
        struct spaced_limits limits = SPACED_LIMITS_INIT;
        char why[256];
        struct net_cfg ncfg;
        net_cfg_init(&ncfg);
        /* Before any thread or child: none of them may speak for spaced. */
        struct notify nt;
        if (notify_open(&nt) < 0)
                fprintf(stderr, "spaced: NOTIFY_SOCKET is not a socket address: no readiness is sent\n");
        const char *env_level = getenv("SPACE_LOG");
        if (env_level)
                (void)parse_level(env_level, &level);
        /* The file's settings go before the command line's options, parsed as theirs. */
        if (config_load(opts, argc, argv, &cfg, &argc, &argv, cerr) < 0) {
                fprintf(stderr, "spaced: %s\n", cerr);
                return 2;
        }
        int o;
        while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
                switch (o) {
                case OPT_DATA: data = optarg; break;
                case OPT_LISTEN: listen_addr = optarg; break;
                case OPT_E2B:
                        if (strcmp(optarg, "on") != 0 && strcmp(optarg, "off") != 0) {
                                fprintf(stderr, "spaced: %sbad --e2b %s (on or off)\n", config_origin(cfg, optind - 1),
                                        optarg);
                                return 2;
                        }
                        e2b = strcmp(optarg, "on") == 0;
                        break;
                case OPT_E2B_LISTEN: e2b_listen = optarg; break;
                case OPT_PIDFILE: pidfile = optarg; break;
                case OPT_INIT: init = optarg; break;
                case OPT_RUNTIME:
                        if (!runtime_find(optarg)) {
                                fprintf(stderr, "spaced: %sno runtime named %s\n", config_origin(cfg, optind - 1), optarg);
                                return 2;
                        }
                        runtime = optarg;
                        break;
                case OPT_CONFIG: break; /* read before this loop */
                case OPT_CHECK_CONFIG: check_config = true; break;
                case OPT_POOL:
                        if (wpool_set_arg(NULL, optarg) < 0 || n_pool >= WPOOL_MAX_TEMPLATES) {
                                fprintf(stderr, "spaced: %sbad --pool %s (TEMPLATE=N, N at most %d, at most %d templates)\n",
                                        config_origin(cfg, optind - 1), optarg, WPOOL_MAX_SIZE, WPOOL_MAX_TEMPLATES);
                                return 2;
                        }
                        pool_args[n_pool++] = optarg;
                        break;
                case OPT_POOL_QUIET:
                        if (parse_count(optarg, WPOOL_QUIET_MAX_MS, &pool_quiet_ms) < 0) {
                                fprintf(stderr, "spaced: %sbad --pool-quiet %s (milliseconds from 0 to %d)\n",
                                        config_origin(cfg, optind - 1), optarg, WPOOL_QUIET_MAX_MS);
                                return 2;
                        }
                        break;
                case OPT_LOG:
                        if (parse_level(optarg, &level) < 0) {
                                fprintf(stderr, "spaced: %sbad --log-level %s (error, warn, info, debug)\n",
                                        config_origin(cfg, optind - 1), optarg);
                                return 2;
                        }
                        break;
                case OPT_VOL_SIZE:
                        if (util_parse_size(optarg, &vol_size) < 0) {
                                fprintf(stderr, "spaced: %sbad --disk-volume-size %s (a size like 64G, or 0)\n",
                                        config_origin(cfg, optind - 1), optarg);
                                return 2;
                        }
                        vol_size_given = true;
                        break;
                case OPT_DISK_DEFAULT:
                        if (util_parse_size(optarg, &disk_default) < 0 ||
                            (disk_default && (disk_default < SES_MIN_DISK || disk_default > SES_MAX_DISK))) {
                                fprintf(stderr, "spaced: %sbad --disk-default %s (0, or a size from 16M to 16T)\n",
                                        config_origin(cfg, optind - 1), optarg);
                                return 2;
                        }
                        break;
                case OPT_LIMIT:
                        if (limits_set_arg(&limits, optarg, why, sizeof why) < 0) {
                                fprintf(stderr, "spaced: %sbad --limit %s: %s\n", config_origin(cfg, optind - 1), optarg, why);
                                return 2;
                        }
                        break;
                case OPT_SNAP_FACTOR:
                        if (parse_count(optarg, SES_MAX_SNAPSHOT_FACTOR, &snap_factor) < 0) {
                                fprintf(stderr, "spaced: %sbad --snapshot-bytes-factor %s (a whole number from 0 to %u)\n",
                                        config_origin(cfg, optind - 1), optarg, SES_MAX_SNAPSHOT_FACTOR);
                                return 2;
                        }
                        break;
                case OPT_TENANT_SNAP:
                        if (util_parse_size(optarg, &tenant_snap) < 0 || tenant_snap > SES_MAX_TENANT_SNAPSHOT_BYTES ||
                            (tenant_snap && tenant_snap < SES_MIN_DISK)) {
                                fprintf(stderr, "spaced: %sbad --tenant-snapshot-bytes %s (0, or a size from 16M to 1024T)\n",
                                        config_origin(cfg, optind - 1), optarg);
                                return 2;
                        }
                        break;
                case OPT_PORTS_DOMAIN:
                        if (!ports_domain_valid(optarg)) {
                                fprintf(stderr, "spaced: %sbad --ports-domain %s: a DNS name (letters, digits, '-', '.'; at most %d bytes)\n",
                                        config_origin(cfg, optind - 1), optarg, PORTS_DOMAIN_MAX);
                                return 2;
                        }
                        ports_domain = optarg;
                        break;
                case OPT_EGRESS:
                case OPT_EGRESS_DEFAULT: {
                        bool on = strcmp(optarg, "on") == 0;
                        if (!on && strcmp(optarg, "off") != 0) {
                                fprintf(stderr, "spaced: %sbad --%s %s (on or off)\n", config_origin(cfg, optind - 1),
                                        o == OPT_EGRESS ? "egress" : "egress-default", optarg);
                                return 2;
                        }
                        if (o == OPT_EGRESS)
                                ncfg.egress = on;
                        else
                                ncfg.op.default_egress = on;
                        break;
                }
                case OPT_EGRESS_OPEN:
                case OPT_NET4:
                case OPT_NET6:
                case OPT_DNS_PORT:
                case OPT_DNS_UPSTREAM: {
                        int k = o == OPT_EGRESS_OPEN ? net_cfg_open(&ncfg, optarg, why, sizeof why)
                                : o == OPT_NET4      ? net_cfg_net4(&ncfg, optarg, why, sizeof why)
                                : o == OPT_NET6      ? net_cfg_net6(&ncfg, optarg, why, sizeof why)
                                : o == OPT_DNS_PORT  ? net_cfg_dns_port(&ncfg, optarg, why, sizeof why)
                                                     : net_cfg_upstream(&ncfg, optarg, why, sizeof why);
                        if (k < 0) {
                                const char *nm = o == OPT_EGRESS_OPEN ? "egress-open"
                                                 : o == OPT_NET4      ? "sandbox-net4"
                                                 : o == OPT_NET6      ? "sandbox-net6"
                                                 : o == OPT_DNS_PORT  ? "dns-port"
                                                                      : "dns-upstream";
                                fprintf(stderr, "spaced: %sbad --%s: %s\n", config_origin(cfg, optind - 1), nm, why);
                                return 2;
                        }
                        break;
                }
                case OPT_BW_MAX:
                        if (net_bandwidth_parse(optarg, &ncfg.op.max_bandwidth_bps) < 0) {
                                fprintf(stderr, "spaced: %sbad --bandwidth-max %s (like 20mbit, 1.5gbit, or bits/s: 8000 to 100 Gbit/s)\n",
                                        config_origin(cfg, optind - 1), optarg);
                                return 2;
                        }
                        break;
                case OPT_METRICS_INTERVAL:
                        if (parse_count(optarg, METRICS_INTERVAL_MAX_S, &metrics_interval_s) < 0 ||
                            metrics_interval_s < METRICS_INTERVAL_MIN_S) {
                                fprintf(stderr, "spaced: %sbad --metrics-interval %s (whole seconds from %d to %d)\n",
                                        config_origin(cfg, optind - 1), optarg, METRICS_INTERVAL_MIN_S,
                                        METRICS_INTERVAL_MAX_S);
                                return 2;
                        }
                        break;
                case OPT_S3_ENDPOINT:
                        if (!repl_endpoint_valid(optarg)) {
                                fprintf(stderr, "spaced: %sbad --s3-endpoint %s (http://HOST:PORT or https://..., at most %u bytes)\n",
                                        config_origin(cfg, optind - 1), optarg, REPL_ENDPOINT_MAX);
                                return 2;
                        }
                        rcfg.endpoint = optarg;
                        break;
                case OPT_S3_BUCKET:
                        if (!repl_bucket_valid(optarg)) {
                                fprintf(stderr, "spaced: %sbad --s3-bucket %s (3 to 63 of a-z, 0-9, '.', '-')\n",
                                        config_origin(cfg, optind - 1), optarg);
                                return 2;
                        }
                        rcfg.bucket = optarg;
                        break;
                case OPT_S3_REGION:
                        if (!repl_region_valid(optarg)) {
                                fprintf(stderr, "spaced: %sbad --s3-region %s (1 to %u of a-z, 0-9, '-')\n",
                                        config_origin(cfg, optind - 1), optarg, REPL_REGION_MAX);
                                return 2;
                        }
                        rcfg.region = optarg;
                        break;
                case OPT_REPL_JOBS:
                        if (parse_count(optarg, REPL_JOBS_MAX, &repl_jobs) < 0 || repl_jobs < 1) {
                                fprintf(stderr, "spaced: %sbad --replicate-jobs %s (a whole number from 1 to %u)\n",
                                        config_origin(cfg, optind - 1), optarg, REPL_JOBS_MAX);
                                return 2;
                        }
                        rcfg.jobs = (unsigned)repl_jobs;
                        break;
                case 'h': usage(stdout); return 0;
                case OPT_VERSION: printf("spaced %s\n", SPACED_VERSION); return 0;
                default: usage(stderr); return 2;
                }
        }
        if (optind < argc) {
                fprintf(stderr, "spaced: unexpected argument %s\n", argv[optind]);
                usage(stderr);
                return 2;
        }
        if (ncfg.op.default_egress && !ncfg.egress) {
                fprintf(stderr, "spaced: --egress-default on needs --egress on\n");
                return 2;
        }
        ncfg.op.egress_enabled = ncfg.egress;
        if (rcfg.endpoint) {
                if (!rcfg.bucket) {
                        fprintf(stderr, "spaced: --s3-endpoint needs --s3-bucket\n");
                        return 2;
                }
                rcfg.access_key = getenv(REPL_ENV_ACCESS);
                rcfg.secret_key = getenv(REPL_ENV_SECRET);
                if (!rcfg.access_key || !*rcfg.access_key || !rcfg.secret_key || !*rcfg.secret_key ||
                    strlen(rcfg.access_key) > REPL_KEY_MAX || strlen(rcfg.secret_key) > REPL_KEY_MAX) {
                        fprintf(stderr, "spaced: --s3-endpoint needs the bucket's keys in $" REPL_ENV_ACCESS
                                        " and $" REPL_ENV_SECRET " (1 to %u bytes each; never on the command line)\n",
                                REPL_KEY_MAX);
                        return 2;
                }
#ifndef SPACE_HAVE_S3
                fprintf(stderr, "spaced: --s3-endpoint: this spaced was built without libcurl (no S3 client)\n");
                return 2;
#endif
        }
        if (limits_check(&limits, why, sizeof why) < 0) {
                fprintf(stderr, "spaced: bad --limit: %s\n", why);
                return 2;
        }
        if (!data || !*data)
                data = DEFAULT_DATA;
        log_set_ident("spaced");
        log_set_level(level);

        struct daemon dm = { .unix_src.fd = -1, .tcp_src.fd = -1, .e2b_src.fd = -1, .sig_src.fd = -1, .timer_src.fd = -1,
                             .accept_src.fd = -1, .tpl_src.fd = -1, .tpl_wfd = -1, .job_src.fd = -1, .reaper_src.fd = -1,
                             .starter_src.fd = -1 };
        struct daemon *d = &dm;
        d->limits = limits;
        if (ports_domain) {
                d->ports_domain = strdup(ports_domain);
                for (char *p = d->ports_domain; p && *p; p++)
                        *p = (char)tolower((unsigned char)*p);
        }
        d->net_cfg = ncfg;
        d->net_op = ncfg.op; /* the policy checks' view; the open ranges stay net_cfg's */
        d->rt = runtime_find(runtime);
        if (!d->rt) {
                fprintf(stderr, "spaced: no runtime named %s\n", runtime);
                return 2;
        }
        if (check_config) {
                config_print(cfg, stdout);
                return 0;
        }
        int r = rt_mkdir_p(data, 0755);
        char real[PATH_MAX];
        if (r < 0 || !realpath(data, real)) {
                log_error("data directory %s: %s", data, strerror(r < 0 ? -r : errno));
                return 1;
        }
        d->data_dir = strdup(real);
        d->init_path = init ? strdup(init) : config_default_init();
        if (!d->data_dir || !d->init_path || asprintf(&d->sock_path, "%s/spaced.sock", d->data_dir) < 0) {
                log_error("out of memory");
                return 1;
        }
        if (access(d->init_path, X_OK) < 0)
                log_warn("space-init %s: %m (sessions can't start until it is there)", d->init_path);

        _cleanup_free_ char *lock_path = NULL, *sbx_dir = NULL;
        if (asprintf(&lock_path, "%s/spaced.lock", d->data_dir) < 0 ||
            asprintf(&sbx_dir, "%s/sandboxes", d->data_dir) < 0)
                return 1;
        _cleanup_close_ int lock_fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (lock_fd < 0 || flock(lock_fd, LOCK_EX | LOCK_NB) < 0) {
                log_error("another spaced uses %s (%s is locked): %m", d->data_dir, lock_path);
                return 1;
        }
        if ((r = check_data_dir(d->data_dir)) < 0) {
                free(d->data_dir);
                free(d->init_path);
                free(d->sock_path);
                return r == -EPROTO || r == -EBADMSG ? 3 : 1;
        }
        if ((r = rt_mkdir_p(sbx_dir, 0700)) < 0) {
                log_error("%s: %s", sbx_dir, strerror(-r));
                return 1;
        }
        /* Before anything starts: a refused TCP listener must not have resumed sessions. */
        if ((listen_addr || e2b_listen) && check_tcp_tokens(d->data_dir) < 0)
                return 1;
        d->disk_default = disk_default;
        d->snap_factor = (unsigned)snap_factor;
        d->tenant_snap_max = tenant_snap;
        /* Whatever way main returns from here, the volume is unmounted if nothing uses it. */
        _unused_ _cleanup_(disk_teardownp) struct daemon *vol_owner = d;
        if ((r = disk_setup(d, vol_size, vol_size_given)) < 0) {
                log_error("disk limits: %s", strerror(-r));
                return 1;
        }

        sigset_t mask;
        sigemptyset(&mask);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGINT);
        /* Blocked before any thread starts, so template workers inherit the mask. */
        if (sigprocmask(SIG_BLOCK, &mask, NULL) < 0) {
                log_error("sigprocmask: %m");
                return 1;
        }
        signal(SIGPIPE, SIG_IGN);
        raise_nofile(&limits);

        if ((r = loop_new(&d->loop)) < 0) {
                log_error("epoll: %s", strerror(-r));
                return 1;
        }
        if ((r = metrics_new(d, metrics_interval_s * 1000, &d->metrics)) < 0) {
                log_error("metrics sampler: %s", strerror(-r));
                return 1;
        }
        if ((r = d->rt->host_init(d->data_dir)) < 0) {
                log_error("runtime %s: host setup failed: %s", d->rt->name, *runtime_last_error() ? runtime_last_error() : strerror(-r));
                return 1;
        }
        /* The other drivers serve sessions that ask for them; one missing (no runsc) only
         * makes those creates fail, with the driver's reason. */
        const struct runtime_ops *ort;
        for (size_t i = 0; (ort = runtime_nth(i)); i++)
                if (ort != d->rt && ort->host_init(d->data_dir) < 0)
                        log_info("runtime %s unavailable: %s", ort->name, runtime_last_error());
                else if (ort == &rt_microvm_ops)
                        log_microvm_accel();
        if ((r = ingress_new(d->loop, &d->ingress)) < 0) {
                log_error("ingress: spaced's network namespace: %s", strerror(-r));
                return 1;
        }
        /* Before the sessions come back: a re-attached sandbox finds its lease. */
        char nerr[NET_ERR_MAX] = "";
        if ((r = net_open(&d->net_cfg, &d->net, nerr, sizeof nerr)) < 0) {
                log_error("--egress on: %s", nerr[0] ? nerr : strerror(-r));
                return 1;
        }
        if (d->net)
                log_info("network room open: egress on, resolver port %u", d->net_cfg.dns_port);
        if ((r = dur_open(d)) < 0) {
                log_error("opening the stores in %s failed: %s", d->data_dir, strerror(-r));
                return 1;
        }
        if ((r = dur_load(d)) < 0) {
                log_error("loading sessions failed: %s", strerror(-r));
                return 1;
        }
        dur_settle(d, SPACED_SETTLE_MS);
        /* After dur_load: its sweep of unheld sandbox directories must not see pooled ones. */
        if ((r = wpool_new(d, (unsigned)pool_quiet_ms, &d->pool)) < 0) {
                log_error("warm pool: %s", strerror(-r));
                return 1;
        }
        if (rcfg.endpoint) {
                if ((r = repl_new(d, &rcfg, &d->repl)) < 0) {
                        log_error("replication to %s: %s", rcfg.endpoint, strerror(-r));
                        return 1;
                }
                log_info("replicating snapshots to %s, bucket %s (%u at once)", rcfg.endpoint, rcfg.bucket, rcfg.jobs);
        }
        for (size_t i = 0; i < n_pool; i++)
                if ((r = wpool_set_arg(d->pool, pool_args[i])) < 0)
                        log_warn("--pool %s: %s", pool_args[i],
                                 r == -EOPNOTSUPP ? "this runtime has no warm pool" : strerror(-r));

        d->sig_src.fd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
        d->sig_src.cb = signal_event;
        d->timer_src.fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
        d->timer_src.cb = timer_event;
        struct itimerspec its = { .it_interval = { .tv_sec = 1 }, .it_value = { .tv_sec = 1 } };
        if (d->sig_src.fd < 0 || d->timer_src.fd < 0 || timerfd_settime(d->timer_src.fd, 0, &its, NULL) < 0 ||
            loop_add(d->loop, &d->sig_src, EPOLLIN) < 0 || loop_add(d->loop, &d->timer_src, EPOLLIN) < 0) {
                log_error("signalfd/timerfd: %m");
                return 1;
        }
        if ((r = tpl_init(d)) < 0) {
                log_error("template worker pipe: %s", strerror(-r));
                return 1;
        }
        if ((e2b || e2b_listen) && (r = e2b_open(d)) < 0) {
                log_error("the E2B API: %s", strerror(-r));
                return 1;
        }
        if ((r = srv_serve_unix(d, &api_router, d->sock_path)) < 0) {
                log_error("listening on %s: %s", d->sock_path, strerror(-r));
                return 1;
        }
        if (listen_addr && (r = srv_listen_tcp(d, listen_addr)) < 0) {
                log_error("listening on %s: %s", listen_addr, strerror(-r));
                (void)unlink(d->sock_path);
                return 1;
        }
        if (e2b_listen && (r = srv_listen_tcp_e2b(d, e2b_listen)) < 0) {
                log_error("listening on %s (--e2b-listen): %s", e2b_listen, strerror(-r));
                (void)unlink(d->sock_path);
                return 1;
        }
        if (d->e2b)
                log_info("the E2B API is served%s%s", e2b_listen ? " on " : " on spaced's listeners",
                         e2b_listen ? e2b_listen : "");
        if (pidfile && (r = write_pidfile(pidfile)) < 0) {
                log_error("pidfile %s: %s", pidfile, strerror(-r));
                (void)unlink(d->sock_path);
                return 1;
        }
        log_info("spaced %s ready: data %s, socket %s%s%s, runtime %s, init %s", SPACED_VERSION, d->data_dir,
                 d->sock_path, listen_addr ? ", tcp " : "", listen_addr ? listen_addr : "", d->rt->name, d->init_path);
        (void)notify_send(&nt, "READY=1\nSTATUS=ready");

        while (!d->stopping) {
                r = loop_run_once(d->loop, -1);
                if (r < 0) {
                        log_error("event loop: %s", strerror(-r));
                        break;
                }
        }

        (void)notify_send(&nt, "STOPPING=1\nSTATUS=taking the last snapshots and stopping the sandboxes");
        srv_close_all(d);
        d->ingress = ingress_free(d->ingress);
        d->pool = wpool_free(d->pool);
        dur_shutdown(d);
        /* before the stores close: a push under way finishes, the rest waits in meta */
        d->repl = repl_free(d->repl);
        while (d->sessions)
                ses_free(d->sessions);
        loop_run_once(d->loop, 0);
        dur_close(d);
        disk_teardown(d);
        /* the table and the leases of sandboxes that outlive us stay */
        d->net = net_close(d->net);
        net_cfg_clear(&d->net_cfg);
        if (d->jobs)
                log_warn("template builds still running are abandoned");
        if (pidfile)
                (void)unlink(pidfile);
        d->metrics = metrics_free(d->metrics);
        e2b_close(d);
        d->loop = loop_free(d->loop);
        safe_close(d->sig_src.fd);
        safe_close(d->timer_src.fd);
        free(d->data_dir);
        free(d->init_path);
        free(d->sock_path);
        free(d->ports_domain);
        notify_close(&nt);
        log_info("stopped");
        return r < 0 ? 1 : 0;
}
