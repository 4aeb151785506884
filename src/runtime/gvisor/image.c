/* The gvisor checkpoint image, made storable: runsc of 2022-12-19 writes its state file
 * compressed (flate in 1 MiB chunks) with no option to turn that off, and compressed data
 * does not dedup. After a checkpoint we keep the file's head verbatim and the chunks
 * decompressed (a second checkpoint that changed little then shares most of its chunks in
 * the store); before a restore we put the file back together with the chunks as deflate
 * "stored" blocks, which runsc reads like any other deflate stream.
 *
 * State file layout (gVisor's pkg/state/statefile + pkg/compressio, as this runsc writes
 * it): "gVisorSF" | metadata length (u64 BE) | metadata JSON | HMAC-SHA256 of all that
 * (32 bytes; runsc uses no key) | chunk size (u32 BE) | { chunk length (u32 BE) | raw
 * deflate data }... — no per-chunk hashes without a key. */
#include "runtime/gvisor/image.h"

#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include "common/fdio.h"
#include "common/macros.h"

#define GV_MAGIC "gVisorSF"
#define GV_MAX_META (16u << 20)        /* gVisor's own bound on the metadata */
#define GV_HMAC_SIZE 32
#define GV_MAX_CHUNK (64u << 20)       /* a chunk size beyond this is not one runsc wrote */
#define GV_STORED_MAX 65535u           /* longest deflate stored block */
#define GV_IO_BUF (1u << 20)

struct image_paths {
        char img[4200], head[4200], raw[4200];
};

/* The three paths of dir's image; *ret is malloc'ed (4 KiB paths do not go on a stack). */
static int image_paths(const char *dir, struct image_paths **ret) {
        _cleanup_free_ struct image_paths *p = malloc(sizeof *p);
        if (!p)
                return -ENOMEM;
        int a = snprintf(p->img, sizeof p->img, "%s/" GV_IMAGE_FILE, dir);
        int b = snprintf(p->head, sizeof p->head, "%s/" GV_IMAGE_HEAD, dir);
        int c = snprintf(p->raw, sizeof p->raw, "%s/" GV_IMAGE_RAW, dir);
        if (a < 0 || b < 0 || c < 0 || (size_t)a >= sizeof p->img || (size_t)b >= sizeof p->head ||
            (size_t)c >= sizeof p->raw)
                return -ENAMETOOLONG;
        *ret = TAKE_PTR(p);
        return 0;
}

static int read_full(int fd, void *buf, size_t n) {
        size_t got = 0;
        while (got < n) {
                ssize_t r = read(fd, (char *)buf + got, n - got);
                if (r < 0 && errno == EINTR)
                        continue;
                if (r < 0)
                        return -errno;
                if (r == 0)
                        return -EBADMSG; /* truncated */
                got += (size_t)r;
        }
        return 0;
}

static uint32_t be32(const uint8_t *p) {
        return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Reads the head (through the chunk size) into a malloc'ed buffer. */
static int read_head(int fd, uint8_t **ret, size_t *ret_len, uint32_t *ret_chunk) {
        uint8_t h[16];
        int r = read_full(fd, h, sizeof h);
        if (r < 0)
                return r;
        if (memcmp(h, GV_MAGIC, 8) != 0)
                return -EBADMSG;
        uint64_t ml = 0;
        for (int i = 8; i < 16; i++)
                ml = ml << 8 | h[i];
        if (ml > GV_MAX_META)
                return -EBADMSG;
        size_t len = 16 + (size_t)ml + GV_HMAC_SIZE + 4;
        _cleanup_free_ uint8_t *head = malloc(len);
        if (!head)
                return -ENOMEM;
        memcpy(head, h, sizeof h);
        if ((r = read_full(fd, head + 16, len - 16)) < 0)
                return r;
        uint32_t chunk = be32(head + len - 4);
        if (chunk == 0 || chunk > GV_MAX_CHUNK)
                return -EBADMSG;
        *ret_chunk = chunk;
        *ret_len = len;
        *ret = TAKE_PTR(head);
        return 0;
}

static int split(const char *img, const char *head_path, const char *raw_path) {
        int r;
        _cleanup_close_ int in = open(img, O_RDONLY | O_CLOEXEC);
        if (in < 0)
                return -errno;
        _cleanup_free_ uint8_t *head = NULL;
        size_t head_len = 0;
        uint32_t chunk = 0;
        if ((r = read_head(in, &head, &head_len, &chunk)) < 0)
                return r;
        _cleanup_close_ int hf = open(head_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        _cleanup_close_ int rf = open(raw_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (hf < 0 || rf < 0)
                return -errno;
        if ((r = fdio_write_all(hf, head, head_len)) < 0)
                return r;
        _cleanup_free_ uint8_t *cbuf = malloc(GV_IO_BUF), *out = malloc(chunk);
        if (!cbuf || !out)
                return -ENOMEM;
        for (;;) {
                uint8_t lb[4];
                ssize_t n;
                do
                        n = read(in, lb, 1);
                while (n < 0 && errno == EINTR);
                if (n < 0)
                        return -errno;
                if (n == 0)
                        break; /* the end: after a whole chunk */
                if ((r = read_full(in, lb + 1, 3)) < 0)
                        return r;
                uint32_t clen = be32(lb);
                if (clen == 0 || clen > chunk + chunk / 8 + 1024)
                        return -EBADMSG;
                /* One raw deflate stream per chunk, at most `chunk` bytes out. */
                z_stream z = { 0 };
                if (inflateInit2(&z, -15) != Z_OK)
                        return -ENOMEM;
                z.next_out = out;
                z.avail_out = chunk;
                uint32_t left = clen;
                int zr = Z_OK;
                while (left > 0 && zr == Z_OK) {
                        size_t want = MIN((size_t)left, (size_t)GV_IO_BUF);
                        if ((r = read_full(in, cbuf, want)) < 0) {
                                inflateEnd(&z);
                                return r;
                        }
                        left -= (uint32_t)want;
                        z.next_in = cbuf;
                        z.avail_in = (uInt)want;
                        zr = inflate(&z, Z_NO_FLUSH);
                        if (zr == Z_OK && z.avail_out == 0 && z.avail_in > 0)
                                zr = Z_DATA_ERROR; /* more than a chunk */
                }
                size_t produced = chunk - z.avail_out;
                inflateEnd(&z);
                if (zr != Z_STREAM_END || left != 0)
                        return -EBADMSG;
                if ((r = fdio_write_all(rf, out, produced)) < 0)
                        return r;
        }
        if (fsync(hf) < 0 || fsync(rf) < 0)
                return -errno;
        return 0;
}

int gv_image_split(const char *dir) {
        _cleanup_free_ struct image_paths *p = NULL;
        int r = image_paths(dir, &p);
        if (r < 0)
                return r;
        r = split(p->img, p->head, p->raw);
        if (r == 0 && unlink(p->img) < 0)
                r = -errno;
        if (r < 0) {
                /* The image stays as runsc wrote it; no half-made parts beside it. */
                (void)unlink(p->head);
                (void)unlink(p->raw);
        }
        return r;
}

/* Writes one chunk of raw data as deflate stored blocks (the last one final). */
static int write_stored_chunk(int fd, const uint8_t *data, size_t n, uint8_t *buf) {
        size_t o = 0, pos = 4; /* buf[0..3]: the chunk length, filled in at the end */
        do {
                size_t b = MIN(n - o, (size_t)GV_STORED_MAX);
                bool final = o + b == n;
                buf[pos++] = final ? 1 : 0; /* BFINAL, BTYPE 00 (stored), padding */
                buf[pos++] = (uint8_t)(b & 0xff);
                buf[pos++] = (uint8_t)(b >> 8);
                buf[pos++] = (uint8_t)(~b & 0xff);
                buf[pos++] = (uint8_t)((~b >> 8) & 0xff);
                memcpy(buf + pos, data + o, b);
                pos += b;
                o += b;
        } while (o < n);
        uint32_t clen = (uint32_t)(pos - 4);
        buf[0] = (uint8_t)(clen >> 24);
        buf[1] = (uint8_t)(clen >> 16);
        buf[2] = (uint8_t)(clen >> 8);
        buf[3] = (uint8_t)clen;
        return fdio_write_all(fd, buf, pos);
}

int gv_image_join(const char *dir) {
        _cleanup_free_ struct image_paths *p = NULL;
        int r = image_paths(dir, &p);
        if (r < 0)
                return r;
        const char *img = p->img, *head_path = p->head, *raw_path = p->raw;
        if (access(img, F_OK) == 0)
                return 0; /* never split (an image from before this format) */
        _cleanup_close_ int hf = open(head_path, O_RDONLY | O_CLOEXEC);
        _cleanup_close_ int rf = open(raw_path, O_RDONLY | O_CLOEXEC);
        if (hf < 0 || rf < 0)
                return errno == ENOENT ? -EINVAL : -errno;
        _cleanup_free_ uint8_t *head = NULL;
        size_t head_len = 0;
        uint32_t chunk = 0;
        if ((r = read_head(hf, &head, &head_len, &chunk)) < 0)
                return r;
        _cleanup_close_ int out = open(img, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (out < 0)
                return -errno;
        if ((r = fdio_write_all(out, head, head_len)) < 0)
                return r;
        size_t blocks = chunk / GV_STORED_MAX + 1;
        _cleanup_free_ uint8_t *data = malloc(chunk), *buf = malloc(4 + chunk + 5 * blocks);
        if (!data || !buf)
                return -ENOMEM;
        for (;;) {
                size_t got = 0;
                while (got < chunk) {
                        ssize_t n = read(rf, data + got, chunk - got);
                        if (n < 0 && errno == EINTR)
                                continue;
                        if (n < 0)
                                return -errno;
                        if (n == 0)
                                break;
                        got += (size_t)n;
                }
                if (got == 0)
                        break;
                if ((r = write_stored_chunk(out, data, got, buf)) < 0)
                        return r;
                if (got < chunk)
                        break;
        }
        /* Only what the restore reads: the parts go. */
        (void)unlink(head_path);
        (void)unlink(raw_path);
        return 0;
}
