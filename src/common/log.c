/* Logging to stderr with a timestamp and program name; level from SPACE_LOG or the caller.
 * When stderr is systemd's journal, each line carries its syslog priority ("<3>") instead,
 * and the journal adds the time and the pid itself. */
#include "common/log.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static enum log_level max_level = LOG_INFO;
static const char *log_ident = "space";
static bool log_journal;

void log_set_level(enum log_level l) { max_level = l; }

/* $JOURNAL_STREAM is "DEVICE:INODE" of the stream systemd connected stdout and stderr to;
 * a stderr redirected since (a shell in between) is not the journal any more. */
static bool stderr_is_journal(void) {
        const char *e = getenv("JOURNAL_STREAM");
        unsigned long long dev, ino;
        char end;
        struct stat st;
        if (!e || sscanf(e, "%llu:%llu%c", &dev, &ino, &end) != 2 || fstat(STDERR_FILENO, &st) < 0)
                return false;
        return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

void log_set_ident(const char *ident) {
        log_ident = ident;
        log_journal = stderr_is_journal();
}

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
        /* syslog's err, warning, info, debug */
        static const int prio[] = { 3, 4, 6, 7 };
        int n = log_journal ? snprintf(line, sizeof line, "<%d>%s: ", prio[l], names[l])
                            : snprintf(line, sizeof line, "%02d:%02d:%02d.%03ld %s[%d] %s: ", tm.tm_hour, tm.tm_min,
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
