/* A growable byte buffer with a hard cap, for anything whose size comes from outside
 * (files, network bodies, encoder output): growth past the cap is an error, not an OOM. */
#ifndef KILN_BUF_H
#define KILN_BUF_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

typedef struct kiln_buf {
	uint8_t *data;
	size_t len;
	size_t cap;  /* allocated bytes */
	size_t max;  /* len never exceeds this */
} kiln_buf;

/* An empty buffer that may grow to max bytes. No allocation happens here. */
void kiln_buf_init(kiln_buf *buf, size_t max);
/* Ensures room for `extra` more bytes; KILN_ERR_TOO_LARGE past max. */
kiln_status kiln_buf_reserve(kiln_buf *buf, size_t extra);
kiln_status kiln_buf_append(kiln_buf *buf, const void *data, size_t len);
/* Appends len zero bytes and returns a pointer to them through *out. */
kiln_status kiln_buf_extend(kiln_buf *buf, size_t len, uint8_t **out);
kiln_status kiln_buf_put_u16le(kiln_buf *buf, uint16_t v);
kiln_status kiln_buf_put_u32le(kiln_buf *buf, uint32_t v);
kiln_status kiln_buf_put_u64le(kiln_buf *buf, uint64_t v);
void kiln_buf_reset(kiln_buf *buf);
/* Frees the storage; the buffer is empty and reusable afterwards. NULL is accepted. */
void kiln_buf_free(kiln_buf *buf);

/* Appends a whole file to buf (capped by buf->max). */
kiln_status kiln_buf_read_file(kiln_buf *buf, const char *path);

#endif
