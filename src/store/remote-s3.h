/* The store's remote tier on an S3 bucket: struct store_remote_ops filled with the S3
 * client of s3.h (library space_s3). */
#pragma once
#include "store/remote.h"
#include "store/s3.h"

/* A remote for the bucket of c (copied: c's strings need not outlive the call). Clones
 * open their own connection. */
int store_remote_s3_new(const struct s3_config *c, struct store_remote **ret);
