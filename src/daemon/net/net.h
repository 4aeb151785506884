/* The network room (docs/network.md): what the rest of spaced asks of it. H1's net.c
 * fills this in; until it is merged, net_stub.c is the placeholder (nothing on the host's
 * network is changed: sandboxes keep their private loopback-only netns). */
#pragma once

struct daemon;
struct session;

/* s->net changed (PUT /v1/sessions/{id}/network): puts it in force for s's sandbox, if it
 * has one (none: nothing to do; the next start applies it). 0 or -errno; on failure the
 * caller puts the old policy back and calls this again. */
int net_session_apply(struct daemon *d, struct session *s);
