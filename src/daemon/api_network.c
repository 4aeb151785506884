/* Route handlers of a session's network policy (docs/api.md, "Network"): GET and PUT
 * /v1/sessions/{id}/network, and the policy parse shared with POST /v1/sessions. The
 * policy is data (net/policy.h); the network room (net/net.h) puts it in force. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "daemon/api.h"
#include "daemon/net/net.h"
#include "daemon/net/policy.h"
#include "daemon/server.h"
#include "daemon/session.h"
#include "daemon/spaced.h"
#include "runtime/runtime.h"

int api_network_parse(struct conn *c, const struct json *v, struct net_policy *ret) {
        struct net_policy p = { 0 };
        char err[NET_RULE_TEXT_MAX + 256];
        int r;
        if (!v || json_type(v) == JSON_NULL)
                p.egress = c->d->net_op.default_egress;
        else if ((r = net_policy_from_json(v, &p, err, sizeof err)) < 0) {
                if (r == -ENOMEM)
                        conn_reply_error(c, 500, "out of memory");
                else
                        conn_reply_error(c, 400, "network: %s", err);
                return r;
        }
        r = net_policy_check(&p, &c->d->net_op, err, sizeof err);
        if (r < 0) {
                net_policy_clear(&p);
                conn_reply_error(c, r == -EPERM ? 403 : 400, "%s", err);
                return r;
        }
        *ret = p;
        return 0;
}

static void reply_policy(struct conn *c, const struct net_policy *p) {
        struct api_json j;
        api_json_begin(&j);
        net_policy_to_json(&j.w, p);
        api_json_reply(c, 200, &j);
}

void api_network_get(struct conn *c) {
        struct session *s = api_session(c, false);
        if (s)
                reply_policy(c, &s->net);
}

/* Replaces the whole policy: in force (the room) and then on record (meta), or neither. */
void api_network_put(struct conn *c) {
        _cleanup_json_ struct json *body = NULL;
        struct session *s = api_session_json(c, false, &body);
        if (!s)
                return;
        /* The body is the policy object; "egress" must be said (an empty body would
         * otherwise mean egress on). */
        const struct json *e = json_get(body, "egress");
        if (!e || json_type(e) != JSON_BOOL) {
                conn_reply_error(c, 400, "network: the body is a policy object with \"egress\": true or false");
                return;
        }
        struct net_policy np, old;
        if (api_network_parse(c, body, &np) < 0)
                return;
        /* as at create (create.c): a runtime without a network cannot have egress */
        if (np.egress && !s->rt->network) {
                net_policy_clear(&np);
                conn_reply_error(c, 400, "runtime %s has no network for sandboxes (loopback only)", s->rt->name);
                return;
        }
        _cleanup_free_ char *text = NULL;
        if (net_policy_to_text(&np, &text) < 0) {
                net_policy_clear(&np);
                conn_reply_error(c, 500, "out of memory");
                return;
        }
        old = s->net;
        s->net = np;
        int r = net_session_apply(c->d, s);
        if (r < 0) {
                s->net = old;
                net_policy_clear(&np);
                if (net_session_apply(c->d, s) < 0)
                        log_warn("%s: putting the old network policy back failed too", s->id);
                conn_reply_error(c, 500, "applying the network policy: %s", strerror(-r));
                return;
        }
        if ((r = meta_session_set_network(c->d->meta, s->id, text)) < 0) {
                s->net = old;
                net_policy_clear(&np);
                if (net_session_apply(c->d, s) < 0)
                        log_warn("%s: putting the old network policy back failed too", s->id);
                conn_reply_error(c, 500, "recording the network policy: %s", meta_last_error(c->d->meta));
                return;
        }
        net_policy_clear(&old);
        log_info("%s: network policy: egress %s, %zu allow, %zu deny rule(s)", s->id, s->net.egress ? "on" : "off",
                 s->net.n_allow, s->net.n_deny);
        struct buf ev = BUF_INIT(0);
        struct json_writer w = JSON_WRITER_INIT(&ev);
        json_w_obj_begin(&w);
        json_w_kstr(&w, "event", "changed");
        json_w_key(&w, "policy");
        json_w_raw(&w, text, strlen(text));
        json_w_obj_end(&w);
        if (!w.err)
                ses_event(s, "network", &ev);
        buf_free(&ev);
        reply_policy(c, &s->net);
}
