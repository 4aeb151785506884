/* Logging to stderr with a timestamp and program name; level from SPACE_LOG or the caller. */
#include "common/log.h"

#include <stdarg.h>
#include <string.h>
#include <time.h>

static enum log_level max_level = LOG_INFO;
static const char *log_ident = "space";

void log_set_level(enum log_level l) { max_level = l; }
void log_set_ident(const char *ident) { log_ident = ident; }

void log_msg(enum log_level l, const char *fmt, ...) {
        static const char *const names[] = { "error", "warn", "info", "debug" };
        if (l > max_level)
                return;
        int saved = errno;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        struct tm tm;
        gmtime_r(&ts.tv_sec, &tm);
        char line[2048];
        int n = snprintf(line, sizeof line, "%02d:%02d:%02d.%03ld %s[%d] %s: ", tm.tm_hour, tm.tm_min,
                         tm.tm_sec, ts.tv_nsec / 1000000, log_ident, (int)getpid(), names[l]);
        va_list ap;
        va_start(ap, fmt);
        if (n > 0 && (size_t)n < sizeof line)
                vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
        va_end(ap);
        size_t len = strnlen(line, sizeof line - 2);
        line[len++] = '\n';
        (void)!write(STDERR_FILENO, line, len);
        errno = saved;
}
