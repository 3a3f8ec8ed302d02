/* AWS Signature Version 4 (see sigv4.h): canonical request, string to sign, and the
 * HMAC-SHA256 chain from the secret to the signing key, on OpenSSL's libcrypto. */
#include "common/sigv4.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/alloc.h"
#include "common/buf.h"

#define MAX_PARAMS 16
#define MAX_HEADERS 16
#define HEADER_NAME_MAX 64
/* A canonical request holds the path and query (each well under 16 KiB) and a few headers. */
#define CANONICAL_MAX (64u * 1024u)

static const char hex_lower[] = "0123456789abcdef";

static void to_hex(const uint8_t *bytes, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = hex_lower[bytes[i] >> 4];
		out[2 * i + 1] = hex_lower[bytes[i] & 15];
	}
	out[2 * n] = '\0';
}

void kiln_sha256_hex(const void *data, size_t len, char out[KILN_SHA256_HEX_LEN + 1])
{
	uint8_t digest[SHA256_DIGEST_LENGTH];
	SHA256(len ? data : (const void *)"", len, digest);
	to_hex(digest, sizeof digest, out);
}

void kiln_sigv4_amz_date(long long t, char out[KILN_AMZ_DATE_LEN + 1])
{
	time_t tt = (time_t)t;
	struct tm tm;
	gmtime_r(&tt, &tm);
	strftime(out, KILN_AMZ_DATE_LEN + 1, "%Y%m%dT%H%M%SZ", &tm);
}

static int is_unreserved(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
	       c == '-' || c == '.' || c == '_' || c == '~';
}

kiln_status kiln_sigv4_encode(const char *s, size_t len, bool keep_slash, char *out, size_t cap)
{
	static const char hex_upper[] = "0123456789ABCDEF";
	size_t n = 0;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		if (is_unreserved(c) || (keep_slash && c == '/')) {
			if (n + 1 >= cap)
				return KILN_ERR_TOO_LARGE;
			out[n++] = (char)c;
		} else {
			if (n + 3 >= cap)
				return KILN_ERR_TOO_LARGE;
			out[n++] = '%';
			out[n++] = hex_upper[c >> 4];
			out[n++] = hex_upper[c & 15];
		}
	}
	if (n >= cap)
		return KILN_ERR_TOO_LARGE;
	out[n] = '\0';
	return KILN_OK;
}

struct encoded_pair {
	const char *name;
	const char *value;
};

static int compare_pairs(const void *a, const void *b)
{
	const struct encoded_pair *x = a, *y = b;
	int c = strcmp(x->name, y->name);
	return c ? c : strcmp(x->value, y->value);
}

/* Encodes s into the scratch area at *used and returns it there. */
static const char *encode_into(char *scratch, size_t cap, size_t *used, const char *s,
			       kiln_status *st)
{
	char *dst = scratch + *used;
	*st = kiln_sigv4_encode(s, strlen(s), false, dst, cap - *used);
	if (*st != KILN_OK)
		return NULL;
	*used += strlen(dst) + 1;
	return dst;
}

kiln_status kiln_sigv4_canonical_query(const kiln_sigv4_kv *params, size_t count, char *out,
				       size_t cap)
{
	kiln_status st = KILN_ERR_INVALID_ARG;
	struct encoded_pair pairs[MAX_PARAMS];
	/* Every encoded name and value, NUL-terminated, is no longer than the output needs. */
	size_t scratch_cap = cap + 2 * count;
	size_t used = 0;
	char *scratch = NULL;
	if (count > MAX_PARAMS || cap == 0)
		return KILN_ERR_INVALID_ARG;
	scratch = kiln_malloc(scratch_cap);
	if (!scratch)
		return KILN_ERR_NOMEM;
	for (size_t i = 0; i < count; i++) {
		pairs[i].name = encode_into(scratch, scratch_cap, &used, params[i].name, &st);
		if (!pairs[i].name)
			goto fail;
		pairs[i].value = encode_into(scratch, scratch_cap, &used,
					     params[i].value ? params[i].value : "", &st);
		if (!pairs[i].value)
			goto fail;
	}
	qsort(pairs, count, sizeof pairs[0], compare_pairs);
	size_t n = 0;
	out[0] = '\0';
	st = KILN_ERR_TOO_LARGE;
	for (size_t i = 0; i < count; i++) {
		int w = snprintf(out + n, cap - n, "%s%s=%s", i ? "&" : "", pairs[i].name,
				 pairs[i].value);
		if (w < 0 || (size_t)w >= cap - n)
			goto fail;
		n += (size_t)w;
	}
	st = KILN_OK;
fail:
	free(scratch);
	return st;
}

struct canon_header {
	char name[HEADER_NAME_MAX];
	const char *value;
};

static int compare_headers(const void *a, const void *b)
{
	return strcmp(((const struct canon_header *)a)->name, ((const struct canon_header *)b)->name);
}

static kiln_status add_header(struct canon_header *h, size_t *count, const char *name,
			      const char *value)
{
	size_t len = strlen(name);
	if (*count >= MAX_HEADERS || len == 0 || len >= HEADER_NAME_MAX || !value)
		return KILN_ERR_INVALID_ARG;
	for (size_t i = 0; i <= len; i++) {
		char c = name[i];
		h[*count].name[i] = (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
	}
	/* A repeated name would have to be merged; kiln never sends one, so refuse it. */
	for (size_t i = 0; i < *count; i++)
		if (strcmp(h[i].name, h[*count].name) == 0)
			return KILN_ERR_INVALID_ARG;
	h[*count].value = value;
	(*count)++;
	return KILN_OK;
}

/* Appends value with leading and trailing spaces removed and inner runs of spaces made
 * one, as the canonical header rules require. */
static kiln_status append_trimmed(kiln_buf *b, const char *value)
{
	kiln_status st = KILN_OK;
	int pending_space = 0, started = 0;
	for (const char *p = value; *p && st == KILN_OK; p++) {
		if (*p == ' ' || *p == '\t') {
			pending_space = started;
			continue;
		}
		if (pending_space)
			st = kiln_buf_append(b, " ", 1);
		if (st == KILN_OK)
			st = kiln_buf_append(b, p, 1);
		pending_space = 0;
		started = 1;
	}
	return st;
}

static kiln_status append_str(kiln_buf *b, const char *s)
{
	return kiln_buf_append(b, s, strlen(s));
}

static int is_amz_date(const char *d)
{
	if (!d || strlen(d) != KILN_AMZ_DATE_LEN || d[8] != 'T' || d[15] != 'Z')
		return 0;
	for (int i = 0; i < 15; i++)
		if (i != 8 && (d[i] < '0' || d[i] > '9'))
			return 0;
	return 1;
}

static int hmac(const void *key, size_t key_len, const char *msg, uint8_t out[32])
{
	unsigned int n = 0;
	return HMAC(EVP_sha256(), key, (int)key_len, (const unsigned char *)msg, strlen(msg), out,
		    &n) != NULL && n == 32;
}

/* kSigning = HMAC(HMAC(HMAC(HMAC("AWS4" + secret, date), region), service), "aws4_request") */
static kiln_status signing_key(const char *secret, const char *date8, const char *region,
			       const char *service, uint8_t key[32])
{
	kiln_status st = KILN_ERR_NOMEM;
	size_t slen = strlen(secret);
	char *k_secret = kiln_malloc(slen + 5);
	if (!k_secret)
		return KILN_ERR_NOMEM;
	memcpy(k_secret, "AWS4", 4);
	memcpy(k_secret + 4, secret, slen + 1);
	uint8_t k[32];
	if (!hmac(k_secret, slen + 4, date8, k) || !hmac(k, 32, region, k) ||
	    !hmac(k, 32, service, k) || !hmac(k, 32, "aws4_request", key))
		goto fail;
	st = KILN_OK;
fail:
	OPENSSL_cleanse(k, sizeof k);
	OPENSSL_cleanse(k_secret, slen + 5);
	free(k_secret);
	return st;
}

kiln_status kiln_sigv4_authorization(const kiln_sigv4_request *req,
				     const kiln_sigv4_credentials *cred, const char *region,
				     const char *service, const char *amz_date, char *out,
				     size_t cap)
{
	kiln_status st = KILN_ERR_INVALID_ARG;
	struct canon_header headers[MAX_HEADERS];
	size_t nh = 0;
	char signed_names[MAX_HEADERS * HEADER_NAME_MAX];
	char date8[9], scope[256], cr_hash[KILN_SHA256_HEX_LEN + 1];
	char sts[512], signature[KILN_SHA256_HEX_LEN + 1];
	uint8_t key[32], sig[32];
	unsigned int sig_len = 0;
	kiln_buf canon;
	kiln_buf_init(&canon, CANONICAL_MAX);

	if (!req || !cred || !cred->access_key_id || !*cred->access_key_id ||
	    !cred->secret_access_key || !*cred->secret_access_key || !region || !service ||
	    !is_amz_date(amz_date) || !req->payload_sha256 ||
	    strlen(req->payload_sha256) != KILN_SHA256_HEX_LEN)
		goto fail;
	memcpy(date8, amz_date, 8);
	date8[8] = '\0';

	if ((st = add_header(headers, &nh, "host", req->host)) != KILN_OK ||
	    (st = add_header(headers, &nh, "x-amz-content-sha256", req->payload_sha256)) != KILN_OK ||
	    (st = add_header(headers, &nh, "x-amz-date", amz_date)) != KILN_OK)
		goto fail;
	if (cred->session_token && *cred->session_token &&
	    (st = add_header(headers, &nh, "x-amz-security-token", cred->session_token)) != KILN_OK)
		goto fail;
	for (size_t i = 0; i < req->header_count; i++)
		if ((st = add_header(headers, &nh, req->headers[i].name, req->headers[i].value)) !=
		    KILN_OK)
			goto fail;
	qsort(headers, nh, sizeof headers[0], compare_headers);

	signed_names[0] = '\0';
	for (size_t i = 0; i < nh; i++) {
		if (i)
			strcat(signed_names, ";");
		strcat(signed_names, headers[i].name);
	}

	/* CanonicalRequest = method \n uri \n query \n headers \n signed-headers \n payload-hash */
	if ((st = append_str(&canon, req->method)) != KILN_OK ||
	    (st = append_str(&canon, "\n")) != KILN_OK ||
	    (st = append_str(&canon, req->canonical_uri)) != KILN_OK ||
	    (st = append_str(&canon, "\n")) != KILN_OK ||
	    (st = append_str(&canon, req->canonical_query ? req->canonical_query : "")) != KILN_OK ||
	    (st = append_str(&canon, "\n")) != KILN_OK)
		goto fail;
	for (size_t i = 0; i < nh; i++)
		if ((st = append_str(&canon, headers[i].name)) != KILN_OK ||
		    (st = append_str(&canon, ":")) != KILN_OK ||
		    (st = append_trimmed(&canon, headers[i].value)) != KILN_OK ||
		    (st = append_str(&canon, "\n")) != KILN_OK)
			goto fail;
	if ((st = append_str(&canon, "\n")) != KILN_OK ||
	    (st = append_str(&canon, signed_names)) != KILN_OK ||
	    (st = append_str(&canon, "\n")) != KILN_OK ||
	    (st = append_str(&canon, req->payload_sha256)) != KILN_OK)
		goto fail;
	kiln_sha256_hex(canon.data, canon.len, cr_hash);

	st = KILN_ERR_TOO_LARGE;
	int n = snprintf(scope, sizeof scope, "%s/%s/%s/aws4_request", date8, region, service);
	if (n < 0 || (size_t)n >= sizeof scope)
		goto fail;
	n = snprintf(sts, sizeof sts, "AWS4-HMAC-SHA256\n%s\n%s\n%s", amz_date, scope, cr_hash);
	if (n < 0 || (size_t)n >= sizeof sts)
		goto fail;

	if ((st = signing_key(cred->secret_access_key, date8, region, service, key)) != KILN_OK)
		goto fail;
	st = KILN_ERR_NOMEM;
	if (!HMAC(EVP_sha256(), key, sizeof key, (const unsigned char *)sts, strlen(sts), sig,
		  &sig_len) || sig_len != sizeof sig)
		goto fail;
	to_hex(sig, sizeof sig, signature);

	st = KILN_ERR_TOO_LARGE;
	n = snprintf(out, cap, "AWS4-HMAC-SHA256 Credential=%s/%s, SignedHeaders=%s, Signature=%s",
		     cred->access_key_id, scope, signed_names, signature);
	if (n < 0 || (size_t)n >= cap)
		goto fail;
	st = KILN_OK;
fail:
	OPENSSL_cleanse(key, sizeof key);
	kiln_buf_free(&canon);
	if (st != KILN_OK && out && cap)
		out[0] = '\0';
	return st;
}
