/* A small synchronous client of the space-init protocol for the integration tests:
 * start space-init on a socketpair (or connect to its --listen socket), send requests,
 * wait for the frames of one id. spaced has its own asynchronous client. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/buf.h"
#include "common/json.h"
#include "common/proto.h"

struct initc {
        int fd;
        pid_t pid; /* space-init, when we started it; -1 otherwise */
        uint32_t next_id;
        struct buf in;
        struct json *hello;
        struct initc_stashed *stash; /* frames received while waiting for another id */
        size_t n_stash;
        struct buf out; /* frames queued by initc_queue, written while waiting for input */
        size_t out_off;
};

struct initc_frame {
        struct proto_hdr h;
        struct buf payload; /* raw; NUL-terminated */
};

/* Starts `space-init --fd 3 [extra args]` with one end of a socketpair as fd 3 and reads
 * its HELLO. extra is NULL-terminated (may be NULL). */
int initc_spawn(struct initc *c, const char *init_path, const char *const *extra);
/* Connects to a --listen socket and reads HELLO. */
int initc_connect(struct initc *c, const char *sock_path);
/* Closes the socket; if we started init, waits up to timeout_ms for it to exit
 * (returns its wait status, or -ETIMEDOUT after killing it). */
int initc_close(struct initc *c, int timeout_ms);

int initc_send(struct initc *c, uint8_t type, uint32_t id, const void *p, size_t n);
/* Queues a frame that the receive calls write out as the socket takes it, so that a big
 * stdin can't deadlock against output nobody reads (init stops reading its socket while
 * a command's stdin is backed up). */
int initc_queue(struct initc *c, uint8_t type, uint32_t id, const void *p, size_t n);
/* Sends a REQ with a fresh id; returns the id (> 0) or a negative errno. */
int64_t initc_req(struct initc *c, const char *json);
/* Next frame for id; frames of other ids that arrive meanwhile are kept for later calls.
 * 1 = got one, 0 = timeout, -EPIPE = connection closed, other negative = error. */
int initc_recv(struct initc *c, uint32_t id, struct initc_frame *f, int timeout_ms);
/* Next frame off the wire, whatever its id (ignores kept frames). */
int initc_recv_any(struct initc *c, struct initc_frame *f, int timeout_ms);
void initc_frame_free(struct initc_frame *f);

/* Sends json as a REQ and parses the RESP. */
int initc_call(struct initc *c, const char *json, struct json **ret_resp);

struct initc_result {
        struct json *resp;   /* the RESP */
        struct json *exit;   /* the EXIT, NULL if none came */
        struct buf out, err; /* STDOUT / STDERR bytes */
        int64_t exit_code;   /* -1 if none */
        int64_t signal;      /* -1 if none */
        bool timed_out;
};
/* Runs a foreground exec request to its EXIT. stdin_data (may be NULL) is sent as STDIN
 * frames followed by EOF when the request has "stdin":true. */
int initc_run(struct initc *c, const char *json, const void *stdin_data, size_t stdin_len,
              struct initc_result *ret, int timeout_ms);
void initc_result_free(struct initc_result *r);

/* "code" of an error RESP, or NULL. */
const char *initc_error_code(const struct json *resp);
