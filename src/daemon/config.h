/* spaced's configuration file (docs/install.md "Configuration"): "key = value" lines whose
 * keys are spaced's long options. The file's settings become options placed before the
 * command line, so every option can be set there, the options' own checks judge the
 * values, and the command line (then the environment) wins. */
#pragma once
#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#define CONFIG_MAX_SIZE (64u * 1024) /* bytes of one file */
#define CONFIG_MAX_LINE 4096         /* bytes of one line, its end excluded */
#define CONFIG_MAX_ENTRIES 256       /* settings in one file */
#define CONFIG_ERR_SIZE 1024         /* an error message, path and line included */

/* SPACE_SYSCONFDIR is the build's CMAKE_INSTALL_FULL_SYSCONFDIR (/etc for a /usr prefix). */
#ifndef SPACE_SYSCONFDIR
#define SPACE_SYSCONFDIR "/etc"
#endif
#define CONFIG_DEFAULT_PATH SPACE_SYSCONFDIR "/space/spaced.conf"
#define CONFIG_ENV "SPACE_CONFIG" /* names the file instead of the default */
/* Where an installed spaced finds space-init (and the gvisor runtime its statx shim):
 * SPACE_LIBEXECDIR is CMAKE_INSTALL_FULL_LIBEXECDIR/space, SPACE_LIBEXEC_REL the same
 * relative to the directory spaced is installed in (so a tree installed under DESTDIR
 * or moved elsewhere finds its own). */
#ifndef SPACE_LIBEXECDIR
#define SPACE_LIBEXECDIR "/usr/libexec/space"
#endif
#ifndef SPACE_LIBEXEC_REL
#define SPACE_LIBEXEC_REL "../libexec/space"
#endif

struct config;

/* A configuration for the command line argv (opts: spaced's option table, ending in a zero
 * entry): notes which options the command line gives and which file it names (--config).
 * Reads no file. argv is not changed and must outlive the configuration. */
int config_new(const struct option *opts, int argc, char *const *argv, struct config **ret,
               char err[CONFIG_ERR_SIZE]);
/* Parses text as the file path (for messages). -EINVAL on the first bad line, err saying
 * "PATH:LINE: why"; -E2BIG past CONFIG_MAX_SIZE or CONFIG_MAX_ENTRIES. Once per config. */
int config_parse(struct config *c, const char *path, const char *text, size_t len, char err[CONFIG_ERR_SIZE]);
/* Reads and parses the file of this run: --config PATH, else $SPACE_CONFIG, else
 * CONFIG_DEFAULT_PATH; the default alone may be missing (no settings, config_path NULL). */
int config_read(struct config *c, char err[CONFIG_ERR_SIZE]);
/* The command line to parse instead of argv: argv[0], "--key=value" for each setting of
 * the file that neither the command line nor the environment overrides ($SPACE_DATA for
 * data, $SPACE_LOG for log-level), then argv[1..]. A repeatable option (pool, limit) given on the
 * command line replaces all of the file's. The array belongs to c. */
int config_merge(struct config *c, int *ret_argc, char ***ret_argv);

/* config_new + config_read + config_merge, as spaced's main runs them. */
int config_load(const struct option *opts, int argc, char *const *argv, struct config **ret, int *ret_argc,
                char ***ret_argv, char err[CONFIG_ERR_SIZE]);

/* "PATH:LINE: " when argument i of the merged command line came from the file, else "":
 * the prefix of a message about a bad value. Valid until the next call. */
const char *config_origin(struct config *c, int i);
/* The file's value for key after the overrides (the last one of a repeatable key), or
 * NULL when the file does not set it or something overrides it. */
const char *config_get(const struct config *c, const char *key);
/* The file read, or NULL when there was none. */
const char *config_path(const struct config *c);
/* The settings in effect and where each comes from, in the file's syntax (what
 * spaced --check-config prints once the values passed their checks). */
void config_print(const struct config *c, FILE *f);

/* The space-init spaced runs when --init does not name one: next to spaced (a build tree),
 * else SPACE_LIBEXEC_REL from spaced's directory, else SPACE_LIBEXECDIR; the first that
 * exists, the last when none does. NULL when out of memory. */
char *config_default_init(void);

struct config *config_free(struct config *c);
static inline void config_freep(struct config **c) { *c = config_free(*c); }
#define _cleanup_config_ __attribute__((cleanup(config_freep)))
