/* Unit test of the `space` command table (src/cli/commands.c): every row is one cli_run can
 * run and whose --help is true. A new command or option that breaks a rule fails here
 * rather than at a user's prompt. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "cli/commands.h"

static const char *word_of(const struct cli_cmd *c) {
        const char *sp = strrchr(c->name, ' ');
        return sp ? sp + 1 : c->name;
}

static const struct cli_opt *opt_named(const struct cli_cmd *c, const char *name) {
        for (const struct cli_opt *o = c->opts; o && o->name; o++)
                if (strcmp(o->name, name) == 0)
                        return o;
        return NULL;
}

static void check_opts(const struct cli_cmd *c) {
        size_t n = 0;
        for (const struct cli_opt *o = c->opts; o && o->name; o++, n++) {
                /* --host and --help are cli_run's */
                assert_true(strcmp(o->name, "host") != 0 && strcmp(o->name, "help") != 0);
                assert_true(o->letter != 'h');
                for (const struct cli_opt *p = c->opts; p != o; p++) {
                        assert_true(strcmp(p->name, o->name) != 0);
                        assert_true(!o->letter || p->letter != o->letter);
                }
                bool checked = o->kind == CLI_OPT_SIZE || o->kind == CLI_OPT_DURATION || o->kind == CLI_OPT_UINT ||
                               o->kind == CLI_OPT_NUMBER || (o->kind == CLI_OPT_STR && o->max);
                if (checked && !o->what)
                        fail_msg("%s --%s: a checked value needs .what for its error", c->name, o->name);
                assert_true(o->kind == CLI_OPT_FLAG ? !o->arg : o->arg != NULL);
                if (o->same_as) {
                        const struct cli_opt *t = opt_named(c, o->same_as);
                        assert_non_null(t);
                        assert_int_equal(t->kind, o->kind);
                        assert_null(t->same_as);
                        assert_null(o->doc);
                        assert_int_equal(o->letter, 0);
                }
                /* only --json may be taken without being listed (health prints JSON anyway) */
                assert_true(o->doc || o->same_as || strcmp(o->name, "json") == 0);
        }
        assert_true(n <= CLI_MAX_OPTS - 2);
}

static void check_row(const struct cli_cmd *c, bool top) {
        printf("  %s\n", c->name);
        assert_non_null(c->usage);
        assert_non_null(c->about);
        if (top)
                assert_non_null(c->summary);
        if (c->sub) {
                assert_true(!c->run && !c->list && !c->check && !c->opts && c->missing);
                for (const struct cli_cmd *s = c->sub; s->name; s++) {
                        assert_true(strncmp(s->name, c->name, strlen(c->name)) == 0 && s->name[strlen(c->name)] == ' ');
                        check_row(s, false);
                }
                return;
        }
        check_opts(c);
        /* exactly one way to end: a run, a listing, or only printing json_path */
        assert_true(!!c->run + !!c->list <= 1);
        assert_true(c->run || c->list || c->json_path);
        assert_true(c->flags & (CLI_CLIENT | CLI_SESSION));
        if (c->json_path || c->list)
                assert_non_null(opt_named(c, "json"));
        if (c->json_path && (c->flags & CLI_SESSION))
                assert_true(strncmp(c->json_path, "/v1/", 4) != 0); /* under the session */
        else if (c->json_path)
                assert_true(strncmp(c->json_path, "/v1/", 4) == 0);
        if (opt_named(c, "quiet"))
                assert_non_null(c->list); /* only a listing prints ids */
        if (c->flags & CLI_SESSION)
                assert_true(c->min_args >= 1 || c->check); /* the id comes first, or check names it */
        assert_true(c->max_args < 0 || c->max_args >= c->min_args);
        if (c->min_args > 0)
                assert_non_null(c->missing);
        if (c->min_args > 1)
                assert_non_null(c->missing_rest);
}

static void check_words(const struct cli_cmd *table) {
        for (const struct cli_cmd *c = table; c->name; c++)
                for (const struct cli_cmd *d = table; d != c; d++) {
                        assert_true(strcmp(word_of(c), word_of(d)) != 0);
                        assert_true(!c->alias || strcmp(c->alias, word_of(d)) != 0);
                        assert_true(!d->alias || strcmp(d->alias, word_of(c)) != 0);
                }
}

static void test_table(void **state) {
        (void)state;
        printf("checks: every row of the command table can run and has a true --help\n");
        check_words(cli_commands);
        size_t n = 0;
        for (const struct cli_cmd *c = cli_commands; c->name; c++, n++) {
                check_row(c, true);
                if (c->sub)
                        check_words(c->sub);
        }
        assert_true(n >= 20);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_table),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
