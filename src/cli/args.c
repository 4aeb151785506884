/* Parsing and formatting helpers of the `space` CLI (see args.h); no I/O here so each one
 * can be unit-tested with plain strings. */
#include "cli/args.h"

#include <ctype.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "common/json.h"

int cli_parse_uint(const char *s, uint64_t min, uint64_t max, uint64_t *ret) {
        if (!s || !isdigit((unsigned char)s[0]))
                return -EINVAL;
        uint64_t v = 0;
        for (const char *p = s; *p; p++) {
                if (!isdigit((unsigned char)*p))
                        return -EINVAL;
                if (v > (UINT64_MAX - 9) / 10)
                        return -ERANGE;
                v = v * 10 + (uint64_t)(*p - '0');
        }
        if (v < min || v > max)
                return -ERANGE;
        *ret = v;
        return 0;
}

/* A plain decimal: digits with at most one '.', no sign, no exponent, no hex. */
static int parse_decimal(const char *s, const char **end, double *ret) {
        const char *p = s;
        bool digits = false, dot = false;
        for (; *p; p++) {
                if (isdigit((unsigned char)*p))
                        digits = true;
                else if (*p == '.' && !dot)
                        dot = true;
                else
                        break;
        }
        if (!digits)
                return -EINVAL;
        char tmp[64];
        size_t n = (size_t)(p - s);
        if (n >= sizeof tmp)
                return -ERANGE;
        memcpy(tmp, s, n);
        tmp[n] = '\0';
        *ret = strtod(tmp, NULL);
        *end = p;
        return 0;
}

int cli_parse_positive(const char *s, double max, double *ret) {
        const char *end;
        double v;
        if (!s || parse_decimal(s, &end, &v) < 0 || *end)
                return -EINVAL;
        if (!isfinite(v) || v <= 0 || v > max)
                return -ERANGE;
        *ret = v;
        return 0;
}

int cli_parse_duration_ms(const char *s, uint64_t *ret) {
        const char *end;
        double v;
        if (!s || parse_decimal(s, &end, &v) < 0 || !isfinite(v))
                return -EINVAL;
        double mult;
        if (!*end || strcmp(end, "s") == 0)
                mult = 1000;
        else if (strcmp(end, "ms") == 0)
                mult = 1;
        else if (strcmp(end, "m") == 0 || strcmp(end, "min") == 0)
                mult = 60 * 1000.0;
        else if (strcmp(end, "h") == 0)
                mult = 3600 * 1000.0;
        else
                return -EINVAL;
        double ms = v * mult;
        if (ms > CLI_MAX_DURATION_MS)
                return -ERANGE;
        if (v > 0 && ms < 1)
                return -ERANGE; /* "0.1ms" would silently become 0, which means "off" */
        *ret = (uint64_t)(ms + 0.5);
        return 0;
}

int cli_parse_size(const char *s, uint64_t *ret) {
        const char *end;
        double v;
        if (!s || parse_decimal(s, &end, &v) < 0)
                return -EINVAL;
        double mult = 1;
        if (*end) {
                switch (toupper((unsigned char)*end)) {
                case 'B': mult = 1; break;
                case 'K': mult = 1024.0; break;
                case 'M': mult = 1024.0 * 1024; break;
                case 'G': mult = 1024.0 * 1024 * 1024; break;
                case 'T': mult = 1024.0 * 1024 * 1024 * 1024; break;
                default: return -EINVAL;
                }
                const char *rest = end + 1;
                if (toupper((unsigned char)*end) != 'B') {
                        if (*rest == 'i' || *rest == 'I')
                                rest++;
                        if (*rest == 'b' || *rest == 'B')
                                rest++;
                }
                if (*rest)
                        return -EINVAL;
        }
        double bytes = v * mult;
        if (!isfinite(bytes) || bytes < 1 || bytes > (double)CLI_MAX_SIZE)
                return -ERANGE;
        *ret = (uint64_t)bytes;
        return 0;
}

static const struct {
        const char *name;
        int sig;
} signals[] = {
        { "HUP", SIGHUP },   { "INT", SIGINT },   { "QUIT", SIGQUIT }, { "ILL", SIGILL },   { "TRAP", SIGTRAP },
        { "ABRT", SIGABRT }, { "BUS", SIGBUS },   { "FPE", SIGFPE },   { "KILL", SIGKILL }, { "USR1", SIGUSR1 },
        { "SEGV", SIGSEGV }, { "USR2", SIGUSR2 }, { "PIPE", SIGPIPE }, { "ALRM", SIGALRM }, { "TERM", SIGTERM },
        { "CHLD", SIGCHLD }, { "CONT", SIGCONT }, { "STOP", SIGSTOP }, { "TSTP", SIGTSTP }, { "TTIN", SIGTTIN },
        { "TTOU", SIGTTOU }, { "URG", SIGURG },   { "XCPU", SIGXCPU }, { "XFSZ", SIGXFSZ }, { "VTALRM", SIGVTALRM },
        { "PROF", SIGPROF }, { "WINCH", SIGWINCH }, { "IO", SIGIO },   { "SYS", SIGSYS },
};

int cli_parse_signal(const char *s, int *ret) {
        if (!s || !*s)
                return -EINVAL;
        uint64_t v;
        if (isdigit((unsigned char)s[0])) {
                if (cli_parse_uint(s, 1, 64, &v) < 0)
                        return -EINVAL;
                *ret = (int)v;
                return 0;
        }
        const char *name = strncasecmp(s, "SIG", 3) == 0 ? s + 3 : s;
        for (size_t i = 0; i < ELEMENTSOF(signals); i++)
                if (strcasecmp(name, signals[i].name) == 0) {
                        *ret = signals[i].sig;
                        return 0;
                }
        return -EINVAL;
}

const char *cli_signal_name(int sig) {
        for (size_t i = 0; i < ELEMENTSOF(signals); i++)
                if (signals[i].sig == sig)
                        return signals[i].name;
        return NULL;
}

bool cli_env_ok(const char *kv) {
        const char *eq = kv ? strchr(kv, '=') : NULL;
        if (!eq || eq == kv || isdigit((unsigned char)kv[0]))
                return false;
        for (const char *p = kv; p < eq; p++)
                if (!isalnum((unsigned char)*p) && *p != '_')
                        return false;
        return true;
}

int cli_parse_cp_arg(const char *s, struct cli_cp_arg *ret) {
        struct cli_cp_arg a = { .path = s };
        if (!s || !*s)
                return -EINVAL;
        const char *colon = strchr(s, ':');
        bool looks_remote = colon && colon != s && s[0] != '/' && s[0] != '.';
        if (looks_remote) {
                for (const char *p = s; p < colon; p++)
                        if (!isalnum((unsigned char)*p) && *p != '_' && *p != '-')
                                looks_remote = false;
        }
        if (!looks_remote) {
                *ret = a;
                return 0;
        }
        size_t idlen = (size_t)(colon - s);
        if (idlen >= sizeof a.id)
                return -EINVAL;
        memcpy(a.id, s, idlen);
        a.remote = true;
        a.path = colon + 1;
        if (a.path[0] != '/')
                return -EINVAL;
        *ret = a;
        return 0;
}

void cli_format_size(uint64_t bytes, char *out, size_t n) {
        static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
        double v = (double)bytes;
        size_t u = 0;
        while (v >= 1024 && u + 1 < ELEMENTSOF(units)) {
                v /= 1024;
                u++;
        }
        if (u == 0)
                snprintf(out, n, "%llu B", (unsigned long long)bytes);
        else if (v == floor(v))
                snprintf(out, n, "%.0f %s", v, units[u]);
        else
                snprintf(out, n, "%.1f %s", v, units[u]);
}

static int pad(struct buf *out, int depth) {
        int r = buf_putc(out, '\n');
        for (int i = 0; r >= 0 && i < depth; i++)
                r = buf_puts(out, "  ");
        return r;
}

static int pretty(struct buf *out, const struct json *j, int depth) {
        enum json_type t = json_type(j);
        int r = 0;
        if (t == JSON_OBJECT || t == JSON_ARRAY) {
                size_t n = json_len(j);
                if (n == 0)
                        return buf_puts(out, t == JSON_OBJECT ? "{}" : "[]");
                r = buf_putc(out, t == JSON_OBJECT ? '{' : '[');
                for (size_t i = 0; r >= 0 && i < n; i++) {
                        if (i > 0)
                                r = buf_putc(out, ',');
                        if (r >= 0)
                                r = pad(out, depth + 1);
                        if (r >= 0 && t == JSON_OBJECT) {
                                struct json_writer w = JSON_WRITER_INIT(out);
                                json_w_str(&w, json_key_at(j, i));
                                r = w.err ? w.err : buf_puts(out, ": ");
                        }
                        if (r >= 0)
                                r = pretty(out, json_at(j, i), depth + 1);
                }
                if (r >= 0)
                        r = pad(out, depth);
                if (r >= 0)
                        r = buf_putc(out, t == JSON_OBJECT ? '}' : ']');
                return r;
        }
        struct json_writer w = JSON_WRITER_INIT(out);
        json_w_value(&w, j);
        return w.err;
}

int cli_json_pretty(struct buf *out, const char *json, size_t len) {
        _cleanup_json_ struct json *j = NULL;
        int r = json_parse(json, len, &j, NULL, 0);
        if (r < 0)
                return r;
        r = pretty(out, j, 0);
        if (r >= 0)
                r = buf_putc(out, '\n');
        return r;
}

int cli_split_list(const char *s, char ***ret) {
        size_t len = strlen(s), items = 1;
        for (const char *p = s; *p; p++)
                items += *p == ',';
        /* pointers first, then a copy of the text they point into */
        char **v = malloc((items + 1) * sizeof(char *) + len + 1);
        if (!v)
                return -ENOMEM;
        char *text = (char *)(v + items + 1);
        memcpy(text, s, len + 1);
        size_t n = 0;
        for (char *save = NULL, *tok = strtok_r(text, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
                v[n++] = tok;
        v[n] = NULL;
        *ret = v;
        return 0;
}
