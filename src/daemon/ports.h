/* Exposed ports of sessions (api_ports.c, docs/api.md "Ports"): what meta keeps of them,
 * and the proxy that takes their requests before the API does. */
#pragma once
#include <stdbool.h>

struct conn;
struct json;
struct session;

/* s's ports from meta's ports_json (NULL or "": none). -EBADMSG if it is not ours. */
int ports_load(struct session *s, const char *text);
/* "ports" of a create: [N | {"port":N,"public":bool}] (at most SES_PORTS_MAX, no port
 * twice), with a new token for each private one. */
struct ports_req;
/* *ret NULL when v is absent or null; a 400 answer and -EINVAL for bad input. */
int ports_parse(struct conn *c, const struct json *v, struct ports_req **ret);
struct ports_req *ports_req_free(struct ports_req *q);
static inline void ports_req_freep(struct ports_req **q) { *q = ports_req_free(*q); }
/* What meta keeps (ports_json, tokens hashed); NULL: out of memory. */
char *ports_req_meta_json(const struct ports_req *q);
/* "ports":[port objects with their tokens] for s's create answer; NULL: out of memory. */
char *ports_req_answer(const struct ports_req *q, struct session *s);

/* The server's intercept hook (server.h): a request for an exposed port, by Host
 * ("PORT-ses_ID.DOMAIN" with spaced --ports-domain) or by path
 * (/v1/sessions/ID/ports/PORT/...), is answered or carried to the port; true if taken. */
bool ports_intercept(struct conn *c);
