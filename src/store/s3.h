/* A small S3 client (issue #17's remote tier): path-style requests to one bucket, signed
 * with AWS Signature V4 by libcurl (CURLOPT_AWS_SIGV4), each retried with backoff on a
 * connection failure or a 5xx answer, within a time bound. The store's remote tier is to
 * sit on it (docs/store.md, "Remote tier"): remote-s3.c fills the store's remote ops with it.
 *
 * Errors: 0 or a negative errno, and s3_last_error() says what happened:
 *   -ENOENT      no such key (404; NoSuchBucket too)
 *   -EACCES      credentials refused (403)
 *   -EFBIG       an object larger than the caller's limit
 *   -EINVAL      a bad key, config or argument
 *   -ECONNREFUSED / -ETIMEDOUT  the server did not answer, every try (see retries)
 *   -EIO         anything else (a 4xx we do not map, a 5xx that stayed, a bad reply)
 * A handle is used by one thread at a time. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#define S3_KEY_MAX 1024u               /* S3's own limit on a key, in bytes */
#define S3_ERR_SIZE 512u
#define S3_DEFAULT_TIMEOUT_MS 30000u   /* one try of one request, connect included */
#define S3_DEFAULT_RETRIES 4u          /* tries after the first */
#define S3_RETRIES_MAX 16u
#define S3_BACKOFF_FIRST_MS 100u       /* then doubled, up to S3_BACKOFF_MAX_MS */
#define S3_BACKOFF_MAX_MS 2000u
#define S3_LIST_PAGE_MAX 1000u         /* keys per ListObjectsV2 page (S3's own maximum) */
#define S3_LIST_REPLY_MAX (8u << 20)   /* bytes of one list answer */

struct s3_config {
        const char *endpoint;   /* "http://127.0.0.1:16200": scheme, host, port; no path */
        const char *region;     /* "us-east-1" */
        const char *access_key; /* may hold ':' (Swift's tempauth "account:user") */
        const char *secret_key;
        const char *bucket;     /* 3..63 of [a-z0-9.-] */
        unsigned timeout_ms;    /* 0: S3_DEFAULT_TIMEOUT_MS */
        int retries;            /* -1: S3_DEFAULT_RETRIES; 0..S3_RETRIES_MAX */
};

struct s3;

int s3_new(const struct s3_config *c, struct s3 **ret);
struct s3 *s3_free(struct s3 *s);
/* A handle of its own (a libcurl handle of its own) with s's configuration: for another
 * thread. */
int s3_clone(const struct s3 *s, struct s3 **ret);
const char *s3_last_error(const struct s3 *s);

/* Creates the bucket; one that exists and is ours is fine. */
int s3_bucket_create(struct s3 *s);
int s3_put(struct s3 *s, const char *key, const void *data, size_t n);
/* The whole regular file behind fd (read with pread from offset 0: fd's offset untouched). */
int s3_put_fd(struct s3 *s, const char *key, int fd);
/* The object into a malloc'ed buffer (NUL-terminated past *ret_n); -EFBIG past max bytes. */
int s3_get(struct s3 *s, const char *key, size_t max, void **ret_data, size_t *ret_n);
/* The object written to fd from its current offset (a retry truncates back to it). */
int s3_get_fd(struct s3 *s, const char *key, int fd, uint64_t *ret_n);
int s3_head(struct s3 *s, const char *key, uint64_t *ret_size);
/* s3_head, and the object's Last-Modified (seconds since the epoch, the server's clock;
 * 0 when the answer had none). */
int s3_head_mtime(struct s3 *s, const char *key, uint64_t *ret_size, int64_t *ret_mtime);
/* Deleting a key that is not there is not an error (S3 answers 204 either way). */
int s3_delete(struct s3 *s, const char *key);
/* Every key under prefix ("" for all), in S3's order, page by page (page_size keys a
 * request, 1..S3_LIST_PAGE_MAX; 0 = the maximum), with its size and LastModified
 * (seconds since the epoch by the server's clock; 0 when the answer had none or one we
 * could not read); fn returning non-zero stops the walk and is returned. */
int s3_list(struct s3 *s, const char *prefix, unsigned page_size,
            int (*fn)(const char *key, uint64_t size, int64_t mtime, void *ud), void *ud);
