/* A scripted HTTP server on a Unix socket for libspace's and the CLI's unit tests: it
 * answers the requests it gets, in order, with canned raw bytes, and records what it
 * received. The fake_reply_* builders write the usual canned answers. */
#pragma once
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/un.h>

#define FAKE_MAX 16
#define FAKE_MAX_REQ (1u << 20)

struct fake_reply {
        const char *raw;       /* bytes to send back (NULL: send nothing) */
        size_t raw_len;        /* 0: strlen(raw) */
        bool close_after;      /* close the connection after replying */
        int delay_ms;          /* wait before replying */
        bool after_head;       /* reply once the head is in, without reading the body, and close */
};

struct fake_server {
        char dir[64];
        char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
        char host[sizeof "unix:" + sizeof(((struct sockaddr_un *)0)->sun_path)]; /* "unix:" + path, for SPACE_HOST */
        int lfd;
        pthread_t thread;
        struct fake_reply replies[FAKE_MAX];
        size_t nreplies;
        /* results, valid after fake_stop() */
        size_t served;
        int connections;
        char *requests[FAKE_MAX]; /* raw request bytes (head + body), NUL-terminated */
        size_t request_lens[FAKE_MAX];
        char *owned[FAKE_MAX]; /* replies[i].raw when a fake_reply_* call made it */
};

/* Each makes replies[i] an answer that f owns until fake_free. */
void fake_reply_json(struct fake_server *f, size_t i, const char *status, const char *body);
/* A chunked NDJSON answer: each argument after status is one chunk, NULL ends them. */
void fake_reply_chunked(struct fake_server *f, size_t i, const char *status, ...);
/* raw is a malloc'd answer f takes over; raw_len 0 = strlen(raw). */
void fake_reply_take(struct fake_server *f, size_t i, char *raw, size_t raw_len);

/* The body of the i-th request received (what follows its head), NULL if there is none. */
const char *fake_request_body(const struct fake_server *f, size_t i);

/* Creates the socket and starts the thread; replies[] must be filled before. */
void fake_start(struct fake_server *f);
/* Waits for the thread (it ends once every reply is sent or after 10 s idle). */
void fake_stop(struct fake_server *f);
/* Frees the requests and the answers f owns. */
void fake_free(struct fake_server *f);
