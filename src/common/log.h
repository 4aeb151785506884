/* Logging for programs (spaced, space-init, tools). Libraries return errors and do not
 * log; only main() code and the daemon's own loop call these. */
#pragma once
#include "common/macros.h"

enum log_level { LOG_ERR = 0, LOG_WARN = 1, LOG_INFO = 2, LOG_DEBUG = 3 };

void log_set_level(enum log_level l);
/* Also looks whether stderr is the journal ($JOURNAL_STREAM): call it first. */
void log_set_ident(const char *ident);
void log_msg(enum log_level l, const char *fmt, ...) _printf_(2, 3);

#define log_error(...) log_msg(LOG_ERR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)
