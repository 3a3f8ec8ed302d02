/* The one result enum of kiln: every fallible function returns a kiln_status, so callers
 * branch on a value and print kiln_strerror() instead of parsing messages. */
#ifndef KILN_ERROR_H
#define KILN_ERROR_H

#include <stddef.h>

typedef enum kiln_status {
	KILN_OK = 0,
	KILN_ERR_NOMEM,        /* an allocation failed */
	KILN_ERR_INVALID_ARG,  /* a caller passed something the API does not accept */
	KILN_ERR_IO,           /* the operating system refused a read or write */
	KILN_ERR_NOT_FOUND,    /* a file or object does not exist */
	KILN_ERR_CORRUPT,      /* input data is malformed (bad signature, CRC, structure) */
	KILN_ERR_TRUNCATED,    /* input data ends before its structure does */
	KILN_ERR_TOO_LARGE,    /* a size is over a configured limit (pixels, buffer cap) */
	KILN_ERR_OVERFLOW,     /* a size computation would overflow */
	KILN_ERR_UNSUPPORTED,  /* valid input that kiln does not handle */
	KILN_ERR_NO_GPU,       /* a GPU was asked for and none is usable */
	KILN_ERR_CUDA,         /* the CUDA runtime reported an error */
	KILN_ERR_NO_SPACE,     /* the device is full */
	KILN_ERR_PERMISSION,   /* access denied */
	KILN_ERR_CANCELLED,    /* the work was cancelled before it finished */
	KILN_ERR_COUNT_        /* not a status: the number of statuses */
} kiln_status;

/* A short, stable, human-readable description; never NULL. */
const char *kiln_strerror(kiln_status status);

/* Maps an errno value to the closest kiln_status. */
kiln_status kiln_status_from_errno(int err);

/* printf into a caller's message buffer; msg may be NULL or cap 0 (then nothing happens). */
void kiln_msgf(char *msg, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
