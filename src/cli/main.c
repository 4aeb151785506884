/* space: the command-line client of spaced. main reads the options before the command,
 * finds the command's word in the table (commands.c) and hands it to cli_run (cli.c).
 * Exit statuses: 0 ok, 1 error ("space: <message>" on stderr), 2 usage error; exec and
 * logs --follow exit with the command's status (128+N when killed by signal N). */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/commands.h"

static void print_main_help(FILE *f) {
        fputs("Usage: space [--host ADDR] [--token TOKEN] COMMAND [ARGS...]\n"
              "\n"
              "Client of spaced, the SPACE sandbox daemon.\n"
              "\n"
              "Commands:\n",
              f);
        for (const struct cli_cmd *c = cli_commands; c->name; c++) {
                if (c->flags & CLI_GAP)
                        fputc('\n', f);
                fprintf(f, "  %-11s %s\n", c->name, c->summary);
        }
        fputs("\n"
              "The daemon is found at --host ADDR, else $SPACE_HOST, else the Unix socket\n"
              "$SPACE_DATA/spaced.sock ($SPACE_DATA defaults to /var/lib/space). ADDR is\n"
              "unix:/path, /path, tcp://host:port or host:port.\n"
              "Every request carries the API token --token TOKEN (before the command), else\n"
              "$SPACE_TOKEN, if any ('spaced token add' makes one): TCP needs it; on the Unix\n"
              "socket no token means the local operator. Prefer SPACE_TOKEN: a command line is\n"
              "visible to other users in ps.\n"
              "Run 'space COMMAND --help' for a command's options.\n",
              f);
}

static int unknown_command(const char *word) {
        fprintf(stderr, "space: unknown command '%s'\nTry 'space --help'.\n", word);
        return CLI_EXIT_USAGE;
}

/* space help [COMMAND [SUBCOMMAND]] */
static int help(const struct cli_globals *g, int argc, char **argv) {
        if (argc < 2) {
                print_main_help(stdout);
                return EXIT_SUCCESS;
        }
        const struct cli_cmd *c = cli_find(cli_commands, argv[1], false);
        if (!c)
                return unknown_command(argv[1]);
        if (c->sub && argc >= 3) {
                char *av[] = { argv[1], argv[2], (char *)"--help", NULL };
                return cli_run(c, g, 3, av);
        }
        return cli_show_help(c);
}

int main(int argc, char **argv) {
        /* A closed stdout pipe shows up as EPIPE from write(), handled where we write. */
        signal(SIGPIPE, SIG_IGN);
        static const struct option lopts[] = {
                { "help", no_argument, NULL, 'h' }, { "host", required_argument, NULL, 'H' },
                { "token", required_argument, NULL, 'K' }, { "version", no_argument, NULL, 'V' }, { 0 },
        };
        struct cli_globals g = { 0 };
        int c;
        optind = 0;
        opterr = 0;
        while ((c = getopt_long(argc, argv, "+:h", lopts, NULL)) != -1) {
                switch (c) {
                case 'h': print_main_help(stdout); return EXIT_SUCCESS;
                case 'H': g.host = optarg; break;
                case 'K': g.token = optarg; break;
                case 'V': printf("space %s\n", SPACE_VERSION); return EXIT_SUCCESS;
                case ':':
                        fprintf(stderr, "space: option '%s' needs a value\nTry 'space --help'.\n", argv[optind - 1]);
                        return CLI_EXIT_USAGE;
                default:
                        fprintf(stderr, "space: unknown option '%s'\nTry 'space --help'.\n", argv[optind - 1]);
                        return CLI_EXIT_USAGE;
                }
        }
        if (optind >= argc) {
                print_main_help(stderr);
                return CLI_EXIT_USAGE;
        }
        const char *word = argv[optind];
        int sub_argc = argc - optind;
        char **sub_argv = argv + optind;
        if (strcmp(word, "help") == 0)
                return help(&g, sub_argc, sub_argv);
        const struct cli_cmd *cmd = cli_find(cli_commands, word, true);
        if (!cmd)
                return unknown_command(word);
        int r = cli_run(cmd, &g, sub_argc, sub_argv);
        if (fflush(stdout) != 0 && r == EXIT_SUCCESS)
                r = EXIT_FAILURE;
        return r;
}
