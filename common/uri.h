/* Storage locations as users write them: `s3://bucket/key`, `file:///abs/path`, or a plain
 * path. Parsing is strict so that a name built from untrusted input (a job's file list, an
 * image's name) can never point outside the place it was meant for. */
#ifndef KILN_URI_H
#define KILN_URI_H

#include "common/error.h"

#define KILN_URI_BUCKET_MAX 63   /* S3's limit on bucket names */
#define KILN_URI_KEY_MAX 1024    /* S3's limit on keys, in bytes of UTF-8 */
#define KILN_URI_PATH_MAX 4096   /* PATH_MAX, including the terminating NUL */

typedef enum kiln_uri_scheme {
	KILN_URI_FILE,  /* file:// or a plain path */
	KILN_URI_S3,    /* s3://bucket/key */
} kiln_uri_scheme;

typedef struct kiln_uri {
	kiln_uri_scheme scheme;
	char bucket[KILN_URI_BUCKET_MAX + 1];  /* s3 only; "" for files */
	/* file: the path (percent-decoded for file://); s3: the key, possibly "" (a listing of
	 * the whole bucket). Keys are taken as written, without percent-decoding, as the aws
	 * CLI does: '%' is a legal character in a key. */
	char path[KILN_URI_PATH_MAX];
} kiln_uri;

/* Parses text into *out. KILN_ERR_INVALID_ARG for: an empty string; an empty or malformed
 * bucket (S3 naming rules: 3-63 of [a-z0-9.-], starting and ending with a letter or digit);
 * a path or key with a ".." segment, a key with a "." segment (a file backend would read
 * "a/./b" as "a/b"), a control character, a bad or NUL percent escape (file://), or over
 * the length limits; a file:// URI with a host other than localhost.
 * KILN_ERR_UNSUPPORTED for any other scheme (http://, gs://, ...). */
kiln_status kiln_uri_parse(const char *text, kiln_uri *out);

#endif
