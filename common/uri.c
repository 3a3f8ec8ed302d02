/* Strict parsing of storage locations (see uri.h). */
#include "common/uri.h"

#include <stdbool.h>
#include <string.h>

static bool is_lower_alnum(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

static int hex_value(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static kiln_status check_bucket(const char *b, size_t len)
{
	if (len < 3 || len > KILN_URI_BUCKET_MAX)
		return KILN_ERR_INVALID_ARG;
	if (!is_lower_alnum(b[0]) || !is_lower_alnum(b[len - 1]))
		return KILN_ERR_INVALID_ARG;
	for (size_t i = 0; i < len; i++) {
		if (!is_lower_alnum(b[i]) && b[i] != '.' && b[i] != '-')
			return KILN_ERR_INVALID_ARG;
		/* ".." can never be a DNS label boundary, and S3 refuses it. */
		if (b[i] == '.' && b[i + 1] == '.')
			return KILN_ERR_INVALID_ARG;
	}
	return KILN_OK;
}

/* Control characters are refused because names end up in log lines, XML bodies (where
 * most of them cannot be written at all) and file systems that treat them oddly. */
static kiln_status check_segments(const char *s, bool refuse_dot)
{
	const char *seg = s;
	for (const char *p = s;; p++) {
		unsigned char c = (unsigned char)*p;
		if (c == '/' || c == '\0') {
			size_t n = (size_t)(p - seg);
			if ((n == 2 && seg[0] == '.' && seg[1] == '.') ||
			    (refuse_dot && n == 1 && seg[0] == '.'))
				return KILN_ERR_INVALID_ARG;
			if (c == '\0')
				return KILN_OK;
			seg = p + 1;
		} else if (c < 0x20 || c == 0x7f) {
			return KILN_ERR_INVALID_ARG;
		}
	}
}

/* Copies src (len bytes) into dst (cap bytes), decoding %XX when `decode`. */
static kiln_status copy_component(char *dst, size_t cap, const char *src, size_t len, bool decode)
{
	size_t n = 0;
	for (size_t i = 0; i < len; i++) {
		char c = src[i];
		if (decode && c == '%') {
			int hi = i + 2 < len ? hex_value(src[i + 1]) : -1;
			int lo = hi >= 0 ? hex_value(src[i + 2]) : -1;
			if (lo < 0 || (hi == 0 && lo == 0))
				return KILN_ERR_INVALID_ARG;
			c = (char)(hi << 4 | lo);
			i += 2;
		}
		if (n + 1 >= cap)
			return KILN_ERR_INVALID_ARG;
		dst[n++] = c;
	}
	dst[n] = '\0';
	return KILN_OK;
}

/* Length of a leading "scheme://" (RFC 3986 scheme syntax), or 0 when text has none. */
static size_t scheme_length(const char *text)
{
	const char *p = text;
	if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')))
		return 0;
	while ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
	       *p == '+' || *p == '-' || *p == '.')
		p++;
	return strncmp(p, "://", 3) == 0 ? (size_t)(p - text) : 0;
}

kiln_status kiln_uri_parse(const char *text, kiln_uri *out)
{
	kiln_status st = KILN_ERR_INVALID_ARG;
	if (!out)
		return KILN_ERR_INVALID_ARG;
	memset(out, 0, sizeof *out);
	if (!text || !*text)
		return KILN_ERR_INVALID_ARG;
	size_t scheme = scheme_length(text);

	if (scheme == 2 && strncmp(text, "s3", 2) == 0) {
		const char *bucket = text + 5;
		const char *slash = strchr(bucket, '/');
		size_t blen = slash ? (size_t)(slash - bucket) : strlen(bucket);
		const char *key = slash ? slash + 1 : bucket + blen;
		out->scheme = KILN_URI_S3;
		st = check_bucket(bucket, blen);
		if (st != KILN_OK)
			goto fail;
		memcpy(out->bucket, bucket, blen);
		st = KILN_ERR_INVALID_ARG;
		if (strlen(key) > KILN_URI_KEY_MAX)
			goto fail;
		st = copy_component(out->path, sizeof out->path, key, strlen(key), false);
		if (st == KILN_OK)
			st = check_segments(out->path, true);
	} else if (scheme == 4 && strncmp(text, "file", 4) == 0) {
		const char *rest = text + 7;
		/* Only the local host: a file URI naming another machine cannot be honoured. */
		if (strncmp(rest, "localhost/", 10) == 0)
			rest += 9;
		if (*rest != '/')
			goto fail;
		out->scheme = KILN_URI_FILE;
		st = copy_component(out->path, sizeof out->path, rest, strlen(rest), true);
		if (st == KILN_OK)
			st = check_segments(out->path, false);
	} else if (scheme) {
		st = KILN_ERR_UNSUPPORTED;
	} else {
		out->scheme = KILN_URI_FILE;
		st = copy_component(out->path, sizeof out->path, text, strlen(text), false);
		if (st == KILN_OK)
			st = check_segments(out->path, false);
	}
fail:
	if (st != KILN_OK)
		memset(out, 0, sizeof *out);
	return st;
}
