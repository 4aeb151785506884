/* space network, and the network options of space create (--egress, --no-egress, --allow,
 * --deny, --bandwidth): a session's network policy (docs/api.md "Network") as options in,
 * as lines or JSON out. The daemon checks the rules; this only builds the object. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "common/buf.h"
#include "common/json.h"

#define NETWORK_RULES_MAX 256 /* per list, as the daemon takes */

static bool policy_opts_given(const struct cli_call *call) {
        return cli_opt_set(call, "allow") || cli_opt_set(call, "deny") || cli_opt_set(call, "bandwidth");
}

/* The option combinations both commands refuse; 0 or the usage error's status. */
static int policy_opts_check(struct cli_call *call, const char *on, const char *off) {
        if (cli_opt_set(call, on) && cli_opt_set(call, off))
                return cli_usage(call->cmd, "--%s and --%s together", on, off);
        const char *list[1];
        if (cli_opt_list(call, "allow", list, 0) > NETWORK_RULES_MAX ||
            cli_opt_list(call, "deny", list, 0) > NETWORK_RULES_MAX)
                return cli_usage(call->cmd, "more than %d --allow or --deny rules", NETWORK_RULES_MAX);
        return 0;
}

static void rules_json(struct json_writer *w, const struct cli_call *call, const char *name) {
        const char *v[NETWORK_RULES_MAX];
        size_t n = cli_opt_list(call, name, v, NETWORK_RULES_MAX);
        json_w_key(w, name);
        json_w_arr_begin(w);
        for (size_t i = 0; i < n && i < NETWORK_RULES_MAX; i++)
                json_w_str(w, v[i]);
        json_w_arr_end(w);
}

/* {"egress":egress,"allow":[...],"deny":[...],"bandwidth":...} into out (NUL-terminated). */
static int policy_json(const struct cli_call *call, bool egress, struct buf *out) {
        struct json_writer w = JSON_WRITER_INIT(out);
        json_w_obj_begin(&w);
        json_w_kbool(&w, "egress", egress);
        rules_json(&w, call, "allow");
        rules_json(&w, call, "deny");
        const char *bw = cli_opt_str(call, "bandwidth");
        if (bw)
                json_w_kstr(&w, "bandwidth", bw);
        json_w_obj_end(&w);
        if (w.err || buf_putc(out, '\0') < 0)
                return cli_error("out of memory");
        return 0;
}

int cli_create_check(struct cli_call *call) {
        int r = policy_opts_check(call, "egress", "no-egress");
        return r ? r : cli_create_timeouts_check(call);
}

int cli_create_network(const struct cli_call *call, struct buf *out, bool *ret_given) {
        *ret_given = false;
        if (!cli_opt_set(call, "egress") && !cli_opt_set(call, "no-egress") && !policy_opts_given(call))
                return 0;
        *ret_given = true;
        /* rules without --no-egress mean egress */
        return policy_json(call, !cli_opt_set(call, "no-egress"), out);
}

int cli_network_check(struct cli_call *call) {
        int r = policy_opts_check(call, "on", "off");
        if (r)
                return r;
        if (policy_opts_given(call) && !cli_opt_set(call, "on") && !cli_opt_set(call, "off"))
                return cli_usage(call->cmd, "--allow, --deny and --bandwidth replace the policy: say --on or --off");
        return 0;
}

/* The policy for people: one "field  value" line per fact. */
static int print_policy(const char *text, bool raw) {
        if (raw)
                return cli_print_raw_json(text);
        _cleanup_json_ struct json *j = NULL;
        if (json_parse(text, strlen(text), &j, NULL, 0) < 0 || json_type(j) != JSON_OBJECT)
                return cli_error("spaced answered a network policy that is not a JSON object");
        printf("%-10s %s\n", "egress", json_get_bool(j, "egress", false) ? "on" : "off");
        const char *lists[] = { "allow", "deny" };
        for (size_t k = 0; k < 2; k++) {
                const struct json *a = json_get(j, lists[k]);
                if (json_len(a) == 0)
                        printf("%-10s %s\n", lists[k], k == 0 ? "(any destination the host allows)" : "(none)");
                for (size_t i = 0; i < json_len(a); i++) {
                        const char *rule = json_str(json_at(a, i));
                        printf("%-10s %s\n", lists[k], rule ? rule : "?");
                }
        }
        int64_t bw;
        if (json_get_int(j, "bandwidth", &bw) == 0 && bw > 0)
                printf("%-10s %" PRId64 " bit/s each way\n", "bandwidth", bw);
        else
                printf("%-10s %s\n", "bandwidth", "no limit");
        return EXIT_SUCCESS;
}

int cli_network(struct cli_call *call) {
        _cleanup_free_ char *answer = NULL;
        int r;
        if (cli_opt_set(call, "on") || cli_opt_set(call, "off")) {
                struct buf b = BUF_INIT(0);
                if (policy_json(call, cli_opt_set(call, "on"), &b)) {
                        buf_free(&b);
                        return EXIT_FAILURE;
                }
                r = space_session_network_set(call->session, b.data, &answer);
                buf_free(&b);
        } else
                r = space_session_network_get(call->session, &answer);
        if (r < 0)
                return cli_api_fail(call, r);
        return print_policy(answer, call->json);
}
