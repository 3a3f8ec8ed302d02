/* Descriptions for kiln_status and the errno mapping used by every I/O path. */
#include "error.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

static const char *const messages[KILN_ERR_COUNT_] = {
	[KILN_OK] = "success",
	[KILN_ERR_NOMEM] = "out of memory",
	[KILN_ERR_INVALID_ARG] = "invalid argument",
	[KILN_ERR_IO] = "input/output error",
	[KILN_ERR_NOT_FOUND] = "not found",
	[KILN_ERR_CORRUPT] = "corrupt data",
	[KILN_ERR_TRUNCATED] = "truncated data",
	[KILN_ERR_TOO_LARGE] = "over the size limit",
	[KILN_ERR_OVERFLOW] = "size overflow",
	[KILN_ERR_UNSUPPORTED] = "unsupported",
	[KILN_ERR_NO_GPU] = "no usable GPU",
	[KILN_ERR_CUDA] = "CUDA error",
	[KILN_ERR_NO_SPACE] = "no space left on device",
	[KILN_ERR_PERMISSION] = "permission denied",
	[KILN_ERR_CANCELLED] = "cancelled",
};

const char *kiln_strerror(kiln_status status)
{
	if ((unsigned)status >= KILN_ERR_COUNT_ || !messages[status])
		return "unknown error";
	return messages[status];
}

kiln_status kiln_status_from_errno(int err)
{
	switch (err) {
	case 0: return KILN_OK;
	case ENOMEM: return KILN_ERR_NOMEM;
	case ENOENT: case ENOTDIR: return KILN_ERR_NOT_FOUND;
	case ENOSPC: case EDQUOT: return KILN_ERR_NO_SPACE;
	case EACCES: case EPERM: case EROFS: return KILN_ERR_PERMISSION;
	case EINVAL: return KILN_ERR_INVALID_ARG;
	case EFBIG: case ENAMETOOLONG: return KILN_ERR_TOO_LARGE;
	default: return KILN_ERR_IO;
	}
}

void kiln_msgf(char *msg, size_t cap, const char *fmt, ...)
{
	if (!msg || !cap)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, cap, fmt, ap);
	va_end(ap);
}
