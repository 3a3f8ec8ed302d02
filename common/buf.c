/* Capped growable buffer. */
#include "buf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void kiln_buf_init(kiln_buf *buf, size_t max)
{
	buf->data = NULL;
	buf->len = 0;
	buf->cap = 0;
	buf->max = max;
}

/* Moves the storage to exactly cap bytes (cap >= len). */
static kiln_status buf_resize(kiln_buf *buf, size_t cap)
{
	uint8_t *data = realloc(buf->data, cap ? cap : 1);
	if (!data)
		return KILN_ERR_NOMEM;
	buf->data = data;
	buf->cap = cap;
	return KILN_OK;
}

kiln_status kiln_buf_reserve(kiln_buf *buf, size_t extra)
{
	if (extra > buf->max || buf->len > buf->max - extra)
		return KILN_ERR_TOO_LARGE;
	size_t need = buf->len + extra;
	if (need <= buf->cap)
		return KILN_OK;
	size_t cap = buf->cap ? buf->cap : 256;
	while (cap < need)
		cap = cap > SIZE_MAX / 2 ? need : cap * 2;
	return buf_resize(buf, cap > buf->max ? buf->max : cap);
}

kiln_status kiln_buf_append(kiln_buf *buf, const void *data, size_t len)
{
	kiln_status st = kiln_buf_reserve(buf, len);
	if (st != KILN_OK)
		return st;
	if (len)
		memcpy(buf->data + buf->len, data, len);
	buf->len += len;
	return KILN_OK;
}

kiln_status kiln_buf_extend(kiln_buf *buf, size_t len, uint8_t **out)
{
	kiln_status st = kiln_buf_reserve(buf, len);
	if (st != KILN_OK)
		return st;
	memset(buf->data + buf->len, 0, len);
	*out = buf->data + buf->len;
	buf->len += len;
	return KILN_OK;
}

static kiln_status put_le(kiln_buf *buf, uint64_t v, int bytes)
{
	uint8_t b[8];
	for (int i = 0; i < bytes; i++)
		b[i] = (uint8_t)(v >> (8 * i));
	return kiln_buf_append(buf, b, (size_t)bytes);
}

kiln_status kiln_buf_put_u16le(kiln_buf *buf, uint16_t v) { return put_le(buf, v, 2); }
kiln_status kiln_buf_put_u32le(kiln_buf *buf, uint32_t v) { return put_le(buf, v, 4); }
kiln_status kiln_buf_put_u64le(kiln_buf *buf, uint64_t v) { return put_le(buf, v, 8); }

void kiln_buf_reset(kiln_buf *buf)
{
	buf->len = 0;
}

void kiln_buf_free(kiln_buf *buf)
{
	if (!buf)
		return;
	free(buf->data);
	buf->data = NULL;
	buf->len = 0;
	buf->cap = 0;
}

kiln_status kiln_buf_read_file(kiln_buf *buf, const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return kiln_status_from_errno(errno);
	kiln_status st = KILN_OK;
	/* A regular file's size sizes the buffer once (and a byte more, to see its end in the
	 * same read): growing by doubling moved a worker's inputs several times each. What
	 * has no size, or grows meanwhile, is read on in pieces. */
	struct stat sb;
	if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size > 0) {
		size_t room = buf->max - buf->len;
		uint64_t want = (uint64_t)sb.st_size + 1;
		size_t need = buf->len + (want < room ? (size_t)want : room);
		if (need > buf->cap && (st = buf_resize(buf, need)) != KILN_OK)
			goto fail;
	}
	for (;;) {
		size_t room = buf->max - buf->len;
		if (room == 0) {
			/* Full to the cap: the file is too large unless it ends exactly here. */
			uint8_t more;
			ssize_t n;
			while ((n = read(fd, &more, 1)) < 0 && errno == EINTR)
				;
			st = n > 0 ? KILN_ERR_TOO_LARGE : (n < 0 ? KILN_ERR_IO : KILN_OK);
			break;
		}
		if (buf->cap == buf->len) {
			st = kiln_buf_reserve(buf, room < 65536 ? room : 65536);
			if (st != KILN_OK)
				goto fail;
		}
		size_t ask = buf->cap - buf->len < room ? buf->cap - buf->len : room;
		ssize_t n = read(fd, buf->data + buf->len, ask);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			st = KILN_ERR_IO;
			break;
		}
		if (n == 0)
			break;
		buf->len += (size_t)n;
	}
fail:
	close(fd);
	return st;
}
