/* AWS Signature Version 4 for S3 requests, written here rather than taken from an SDK so
 * that the worker needs only libcurl and libcrypto. The S3 client builds each request's
 * path and query with the same encoders the signer uses, so what is signed is byte for
 * byte what is sent; tests compare the result with botocore's signer. */
#ifndef KILN_SIGV4_H
#define KILN_SIGV4_H

#include <stdbool.h>
#include <stddef.h>

#include "common/error.h"

#define KILN_SHA256_HEX_LEN 64
/* "YYYYMMDDTHHMMSSZ" */
#define KILN_AMZ_DATE_LEN 16

typedef struct kiln_sigv4_kv {
	const char *name;
	const char *value;
} kiln_sigv4_kv;

typedef struct kiln_sigv4_credentials {
	const char *access_key_id;
	const char *secret_access_key;
	const char *session_token;  /* NULL or "" when none; signed as x-amz-security-token */
} kiln_sigv4_credentials;

typedef struct kiln_sigv4_request {
	const char *method;           /* "GET", "PUT", ... */
	const char *host;             /* the Host header as sent: "host" or "host:port" */
	const char *canonical_uri;    /* the encoded path as sent (kiln_sigv4_encode_path) */
	const char *canonical_query;  /* as sent, from kiln_sigv4_canonical_query; "" if none */
	/* Headers signed besides host, x-amz-content-sha256, x-amz-date and
	 * x-amz-security-token, which the signer adds itself; the caller sends them too. */
	const kiln_sigv4_kv *headers;
	size_t header_count;
	const char *payload_sha256;   /* lowercase hex SHA-256 of the body; also sent */
} kiln_sigv4_request;

/* Writes the lowercase hex SHA-256 of data (65 bytes with the NUL). */
void kiln_sha256_hex(const void *data, size_t len, char out[KILN_SHA256_HEX_LEN + 1]);

/* Formats t (seconds since the epoch) as an x-amz-date value (17 bytes with the NUL). */
void kiln_sigv4_amz_date(long long t, char out[KILN_AMZ_DATE_LEN + 1]);

/* URI-encodes len bytes of s the way SigV4 wants: every byte but A-Z a-z 0-9 - . _ ~ becomes
 * %XX (uppercase hex); '/' is kept when keep_slash (S3 paths are encoded once, segment by
 * segment). Writes a NUL-terminated string; KILN_ERR_TOO_LARGE if it does not fit in cap. */
kiln_status kiln_sigv4_encode(const char *s, size_t len, bool keep_slash, char *out, size_t cap);

/* The canonical query string of params (raw names and values): each encoded, sorted by
 * encoded name then value, joined as n=v&n=v. The same string is sent as the URL's query. */
kiln_status kiln_sigv4_canonical_query(const kiln_sigv4_kv *params, size_t count, char *out,
				       size_t cap);

/* Computes the Authorization header value for req, signed at amz_date
 * ("YYYYMMDDTHHMMSSZ") for region and service ("s3"). KILN_ERR_INVALID_ARG on a malformed
 * date or empty credentials, KILN_ERR_TOO_LARGE if out (cap bytes) is too small. The
 * secret never leaves this function except through the HMAC. */
kiln_status kiln_sigv4_authorization(const kiln_sigv4_request *req,
				     const kiln_sigv4_credentials *cred, const char *region,
				     const char *service, const char *amz_date, char *out,
				     size_t cap);

#endif
