/* A minimal space-init protocol client (docs/protocol.md) for the microvm driver's test and
 * benchmark, which drive rt_microvm_ops directly, without spaced: wait for HELLO, run a
 * shell command and collect its output. */
#pragma once
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/json.h"
#include "common/proto.h"

static inline int64_t mvc_now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline int mvc_read_full(int fd, void *buf, size_t n, int64_t deadline) {
        size_t got = 0;
        while (got < n) {
                int64_t left = deadline - mvc_now_ms();
                struct pollfd p = { .fd = fd, .events = POLLIN };
                if (left <= 0 || poll(&p, 1, (int)left) <= 0)
                        return -ETIMEDOUT;
                ssize_t k = read(fd, (char *)buf + got, n - got);
                if (k <= 0)
                        return k < 0 ? -errno : -ECONNRESET;
                got += (size_t)k;
        }
        return 0;
}

/* One frame; payload NUL-terminated (max >= 1). */
static inline int mvc_frame(int fd, struct proto_hdr *h, char *payload, size_t max, int64_t deadline) {
        uint8_t raw[PROTO_HDR_SIZE];
        int r = mvc_read_full(fd, raw, sizeof raw, deadline);
        if (r < 0 || (r = proto_hdr_decode(raw, h)) < 0)
                return r;
        if (h->len >= max)
                return -EMSGSIZE;
        r = mvc_read_full(fd, payload, h->len, deadline);
        payload[r == 0 ? h->len : 0] = 0;
        return r;
}

static inline int mvc_hello(int fd, int timeout_ms) {
        struct proto_hdr h;
        char p[4096];
        int r = mvc_frame(fd, &h, p, sizeof p, mvc_now_ms() + timeout_ms);
        if (r < 0)
                return r;
        return h.type == PROTO_HELLO ? 0 : -EPROTO;
}

/* Runs `sh -c cmd`; foreground: its stdout into out and its exit code; background: the
 * RESP only. */
static inline int mvc_sh(int fd, const char *cmd, bool background, char *out, size_t outn, int *exit_code,
                         int timeout_ms) {
        static uint32_t next_id = 1;
        uint32_t id = next_id++;
        struct buf req = BUF_INIT(PROTO_MAX_JSON), frame = BUF_INIT(PROTO_HDR_SIZE + PROTO_MAX_JSON);
        struct json_writer w = JSON_WRITER_INIT(&req);
        json_w_obj_begin(&w);
        json_w_kstr(&w, "op", "exec");
        json_w_key(&w, "argv");
        json_w_arr_begin(&w);
        json_w_str(&w, "sh");
        json_w_str(&w, "-c");
        json_w_str(&w, cmd);
        json_w_arr_end(&w);
        json_w_kbool(&w, "background", background);
        json_w_obj_end(&w);
        int r = proto_frame_append(&frame, PROTO_REQ, id, req.data, (uint32_t)req.len);
        if (r == 0 && write(fd, frame.data, frame.len) != (ssize_t)frame.len)
                r = -EIO;
        buf_free(&req);
        buf_free(&frame);
        if (r < 0)
                return r;
        size_t used = 0;
        if (out && outn)
                out[0] = 0;
        int64_t deadline = mvc_now_ms() + timeout_ms;
        static char p[PROTO_MAX_PAYLOAD + 1];
        for (;;) {
                struct proto_hdr h;
                r = mvc_frame(fd, &h, p, sizeof p, deadline);
                if (r < 0)
                        return r;
                if (h.id != id)
                        continue;
                if (h.type == PROTO_RESP) {
                        if (strstr(p, "\"error\"")) {
                                fprintf(stderr, "# exec error: %s\n", p);
                                return -EIO;
                        }
                        if (background)
                                return 0;
                } else if (h.type == PROTO_STDOUT && out && used + h.len < outn) {
                        memcpy(out + used, p, h.len);
                        used += h.len;
                        out[used] = 0;
                } else if (h.type == PROTO_EXIT) {
                        struct json *j = NULL;
                        int64_t code = -1;
                        if (json_parse(p, h.len, &j, NULL, 0) == 0)
                                (void)json_get_int(j, "exit_code", &code);
                        json_free(j);
                        if (exit_code)
                                *exit_code = (int)code;
                        return 0;
                }
        }
}
