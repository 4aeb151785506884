/* Exposed ports of sessions (api_ports.c, docs/api.md "Ports"): what meta keeps of them,
 * and the proxy that takes their requests before the API does. */
#pragma once
#include <stdbool.h>

struct conn;
struct session;

/* s's ports from meta's ports_json (NULL or "": none). -EBADMSG if it is not ours. */
int ports_load(struct session *s, const char *text);
/* The server's intercept hook (server.h): a request for an exposed port, by Host
 * ("PORT-ses_ID.DOMAIN" with spaced --ports-domain) or by path
 * (/v1/sessions/ID/ports/PORT/...), is answered or carried to the port; true if taken. */
bool ports_intercept(struct conn *c);
