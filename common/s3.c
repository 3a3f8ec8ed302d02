/* S3 over libcurl (see s3.h).
 *
 * A job is one caller-visible operation (get, put, stat, one listing page); it issues
 * transfers, each one HTTP request that carries its own retry state. All transfers of a
 * batch share one curl multi handle: at most `concurrency` are in flight, the rest wait in
 * a FIFO, and a transfer that failed transiently waits out its backoff on a second list.
 * A multipart upload is a job that moves through steps (create, parts, complete) and, on
 * any failure, aborts the upload so that no parts are left to be billed.
 *
 * Bodies are never copied: uploads read from the caller's memory (a retry rewinds), and
 * object downloads land in the caller's capped kiln_buf. Credentials live only in this
 * file's struct, are used only to sign, and are wiped on destroy; log lines and messages
 * name the operation, bucket, key and status, nothing else. */
#include "common/s3.h"

#include <curl/curl.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <openssl/crypto.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/sigv4.h"
#include "common/xmlscan.h"

#define MAX_PARTS 10000u
#define MAX_OBJECT_SIZE ((uint64_t)5 << 40)   /* S3's limit on one object */
#define MAX_SINGLE_PUT ((size_t)5 << 30)       /* and on one PUT or part */
#define ERROR_BODY_MAX (64u * 1024u)           /* enough for any <Error> document */
#define HOST_CAP 320
#define PATH_CAP (3 * KILN_URI_KEY_MAX + KILN_URI_BUCKET_MAX + 8)
#define QUERY_CAP (16u * 1024u)
#define ETAG_MAX 128
#define UPLOAD_ID_MAX 1024
#define TOKEN_MAX 4096
#define CODE_MAX 64
#define SECRET_MAX 4000  /* session tokens run to a few KiB; anything longer is not one */

struct kiln_s3 {
	CURLM *multi;
	char scheme[8];             /* "http" or "https" */
	char host[256];             /* endpoint host[:port] */
	bool custom_endpoint;
	char region[64];
	char *access_key;           /* NULL: requests go unsigned */
	char *secret;
	char *token;
	kiln_storage_config cfg;    /* the numbers; its strings are not kept */
	uint64_t rng;
	kiln_storage_stats stats;
};

enum job_kind { JOB_GET, JOB_PUT, JOB_HEAD, JOB_LIST };
enum job_step { STEP_SINGLE, STEP_CREATE, STEP_PARTS, STEP_COMPLETE, STEP_ABORT };

struct job {
	enum job_kind kind;
	enum job_step step;
	const char *bucket;
	const char *key;
	kiln_buf *out;                    /* GET: the caller's buffer */
	const uint8_t *data;              /* PUT */
	size_t size;
	uint64_t size_out;                /* HEAD */
	const kiln_sigv4_kv *params;      /* LIST */
	size_t param_count;
	kiln_buf xml;                     /* LIST, create and complete responses */
	/* multipart */
	size_t part_size;
	unsigned part_count;
	char (*etags)[ETAG_MAX];
	char upload_id[UPLOAD_ID_MAX];
	kiln_buf complete;
	unsigned pending;                 /* transfers queued, waiting or running */
	kiln_status status;               /* the first failure, kept through an abort */
	char msg[KILN_STORAGE_MSG_MAX];
};

/* What one HTTP request is; a transfer is made from it once and may be sent many times. */
struct req_spec {
	const char *method;
	const char *op;                   /* for messages and logs: "GET", "UploadPart", ... */
	const kiln_sigv4_kv *params;
	size_t param_count;
	const uint8_t *body;
	size_t body_len;
	const char *content_type;         /* NULL: none sent */
	kiln_buf *sink;                   /* where a 2xx body goes; NULL: discarded */
	unsigned part;                    /* UploadPart: its number */
};

struct xfer {
	struct job *job;
	struct xfer *next;
	const char *method;
	const char *op;
	char host[HOST_CAP];
	char *path;                       /* encoded, as signed and sent */
	char *query;                      /* canonical, as signed and sent */
	char *url;
	kiln_sigv4_kv content_type;
	const uint8_t *body;
	size_t body_len;
	size_t body_off;
	char payload_hash[KILN_SHA256_HEX_LEN + 1];
	kiln_buf *sink;
	size_t sink_start;
	bool xml_body;                    /* the 2xx body is an S3 XML document */
	kiln_buf err;                     /* non-2xx bodies, truncated */
	unsigned part;
	unsigned attempts;
	uint64_t due_ms;
	long retry_after_ms;              /* -1: the response had none */
	char etag[ETAG_MAX];
	bool overflow;                    /* the body outgrew its sink */
	CURL *easy;
	struct curl_slist *headers;
	char curl_err[CURL_ERROR_SIZE];
};

struct engine {
	kiln_s3 *s3;
	struct xfer *ready;
	struct xfer *ready_tail;
	struct xfer *waiting;             /* backing off before a retry */
	unsigned active;
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_result;

static void init_curl(void)
{
	curl_init_result = curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* splitmix64: small, seedable, and good enough to spread retries apart. */
static uint64_t next_random(kiln_s3 *s3)
{
	uint64_t z = (s3->rng += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* ---- configuration ---- */

static const char *from_env(const char *a, const char *b)
{
	const char *v = a ? getenv(a) : NULL;
	if (v && *v)
		return v;
	v = b ? getenv(b) : NULL;
	return v && *v ? v : NULL;
}

/* Header values must not smuggle line breaks into a request. */
static bool header_safe(const char *s, size_t max)
{
	size_t n = 0;
	for (; s[n]; n++)
		if ((unsigned char)s[n] < 0x20 || s[n] == 0x7f || n >= max)
			return false;
	return true;
}

static kiln_status parse_endpoint(kiln_s3 *s3, const char *url)
{
	const char *rest;
	if (strncmp(url, "https://", 8) == 0) {
		strcpy(s3->scheme, "https");
		rest = url + 8;
	} else if (strncmp(url, "http://", 7) == 0) {
		strcpy(s3->scheme, "http");
		rest = url + 7;
	} else {
		return KILN_ERR_INVALID_ARG;
	}
	size_t n = strcspn(rest, "/");
	if (n == 0 || n >= sizeof s3->host || (rest[n] == '/' && rest[n + 1] != '\0'))
		return KILN_ERR_INVALID_ARG;
	for (size_t i = 0; i < n; i++) {
		char c = rest[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '-' || c == ':' || c == '[' || c == ']'))
			return KILN_ERR_INVALID_ARG;
	}
	memcpy(s3->host, rest, n);
	s3->host[n] = '\0';
	return KILN_OK;
}

static kiln_status copy_secret(char **dst, const char *src)
{
	if (!src || !*src)
		return KILN_OK;
	if (!header_safe(src, SECRET_MAX))
		return KILN_ERR_INVALID_ARG;
	*dst = kiln_strdup(src);
	return *dst ? KILN_OK : KILN_ERR_NOMEM;
}

static kiln_status check_numbers(const kiln_storage_config *c, char *msg, size_t cap)
{
	if (c->part_size < KILN_S3_MIN_PART_SIZE || c->part_size > MAX_SINGLE_PUT) {
		kiln_msgf(msg, cap, "s3: part size must be between 5 MiB and 5 GiB");
		return KILN_ERR_INVALID_ARG;
	}
	if (c->multipart_threshold > MAX_SINGLE_PUT) {
		kiln_msgf(msg, cap, "s3: multipart threshold must be at most 5 GiB");
		return KILN_ERR_INVALID_ARG;
	}
	if (c->concurrency < 1 || c->concurrency > 1024 || c->max_attempts < 1 ||
	    c->max_attempts > 100 || c->backoff_base_ms > c->backoff_max_ms ||
	    c->max_response_body < 4096 || c->list_page_size > 1000) {
		kiln_msgf(msg, cap, "s3: concurrency, attempts, backoff, body cap or page "
					   "size out of range");
		return KILN_ERR_INVALID_ARG;
	}
	return KILN_OK;
}

kiln_status kiln_s3_create(const kiln_storage_config *cfg, kiln_s3 **out, char *msg,
			   size_t msg_cap)
{
	kiln_status st = KILN_ERR_NOMEM;
	kiln_s3 *s3 = NULL;
	*out = NULL;
	pthread_once(&curl_once, init_curl);
	if (curl_init_result != CURLE_OK) {
		kiln_msgf(msg, msg_cap, "s3: curl_global_init failed");
		return KILN_ERR_IO;
	}
	s3 = kiln_calloc(1, sizeof *s3);
	if (!s3)
		goto fail;
	s3->cfg = *cfg;
	s3->cfg.endpoint = s3->cfg.region = NULL;
	s3->cfg.access_key_id = s3->cfg.secret_access_key = s3->cfg.session_token = NULL;
	st = check_numbers(&s3->cfg, msg, msg_cap);
	if (st != KILN_OK)
		goto fail;

	st = KILN_ERR_INVALID_ARG;
	const char *region = cfg->region ? cfg->region : from_env("AWS_REGION", "AWS_DEFAULT_REGION");
	if (!region)
		region = "us-east-1";
	size_t rlen = strlen(region);
	if (!rlen || rlen >= sizeof s3->region ||
	    strspn(region, "abcdefghijklmnopqrstuvwxyz0123456789-") != rlen) {
		kiln_msgf(msg, msg_cap, "s3: malformed region");
		goto fail;
	}
	strcpy(s3->region, region);

	const char *endpoint = cfg->endpoint ? cfg->endpoint
					     : from_env("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL");
	char aws[128];
	s3->custom_endpoint = endpoint != NULL;
	if (!endpoint) {
		snprintf(aws, sizeof aws, "https://s3.%s.amazonaws.com", s3->region);
		endpoint = aws;
	}
	if (parse_endpoint(s3, endpoint) != KILN_OK) {
		kiln_msgf(msg, msg_cap, "s3: endpoint must be http[s]://host[:port]");
		goto fail;
	}

	/* Keys from one source only: a token from the environment would not belong to keys
	 * given in the config. */
	const char *key = cfg->access_key_id, *secret = cfg->secret_access_key,
		   *token = cfg->session_token;
	if (!key) {
		key = from_env("AWS_ACCESS_KEY_ID", NULL);
		secret = from_env("AWS_SECRET_ACCESS_KEY", NULL);
		token = from_env("AWS_SESSION_TOKEN", NULL);
	}
	if (key && *key && (!secret || !*secret)) {
		kiln_msgf(msg, msg_cap, "s3: an access key id was given without its secret key");
		goto fail;
	}
	if ((st = copy_secret(&s3->access_key, key)) != KILN_OK ||
	    (st = copy_secret(&s3->secret, s3->access_key ? secret : NULL)) != KILN_OK ||
	    (st = copy_secret(&s3->token, s3->access_key ? token : NULL)) != KILN_OK) {
		kiln_msgf(msg, msg_cap, "s3: malformed credentials");
		goto fail;
	}

	s3->rng = cfg->jitter_seed ? cfg->jitter_seed : (uint64_t)time(NULL) ^ (uint64_t)kiln_now_ms() << 20;
	st = KILN_ERR_NOMEM;
	s3->multi = curl_multi_init();
	if (!s3->multi)
		goto fail;
	/* Keep enough connections open for a full batch to reuse them on the next call. */
	curl_multi_setopt(s3->multi, CURLMOPT_MAXCONNECTS, (long)s3->cfg.concurrency * 2);
	*out = s3;
	return KILN_OK;
fail:
	kiln_s3_destroy(s3);
	return st;
}

static void free_secret(char *s)
{
	if (s) {
		OPENSSL_cleanse(s, strlen(s));
		free(s);
	}
}

void kiln_s3_destroy(kiln_s3 *s3)
{
	if (!s3)
		return;
	if (s3->multi)
		curl_multi_cleanup(s3->multi);
	free_secret(s3->access_key);
	free_secret(s3->secret);
	free_secret(s3->token);
	free(s3);
}

void kiln_s3_stats(const kiln_s3 *s3, kiln_storage_stats *out)
{
	*out = s3->stats;
}

/* ---- transfers ---- */

static bool use_path_style(const kiln_s3 *s3, const char *bucket)
{
	switch (s3->cfg.addressing) {
	case KILN_S3_ADDRESSING_PATH:
		return true;
	case KILN_S3_ADDRESSING_VIRTUAL_HOST:
		return false;
	default:
		/* A dotted bucket as a host name would not match the TLS wildcard certificate. */
		return s3->custom_endpoint || (strchr(bucket, '.') && strcmp(s3->scheme, "https") == 0);
	}
}

static void xfer_free(struct xfer *x)
{
	if (!x)
		return;
	if (x->easy)
		curl_easy_cleanup(x->easy);
	curl_slist_free_all(x->headers);
	kiln_buf_free(&x->err);
	free(x->path);
	free(x->query);
	free(x->url);
	free(x);
}

static void push_ready(struct engine *eng, struct xfer *x)
{
	x->next = NULL;
	if (eng->ready_tail)
		eng->ready_tail->next = x;
	else
		eng->ready = x;
	eng->ready_tail = x;
}

/* Builds a transfer for spec (host, encoded path, canonical query, URL) and queues it.
 * The strings are composed in scratch space and kept at their exact size: a large upload
 * queues thousands of parts at once. */
static kiln_status xfer_queue(struct engine *eng, struct job *job, const struct req_spec *spec)
{
	kiln_s3 *s3 = eng->s3;
	kiln_status st = KILN_ERR_NOMEM;
	char *path = kiln_malloc(PATH_CAP), *query = kiln_malloc(QUERY_CAP);
	struct xfer *x = kiln_calloc(1, sizeof *x);
	if (!x || !path || !query)
		goto fail;
	x->job = job;
	x->method = spec->method;
	x->op = spec->op;
	x->body = spec->body;
	x->body_len = spec->body_len;
	x->sink = spec->sink;
	x->sink_start = spec->sink ? spec->sink->len : 0;
	x->xml_body = spec->sink && spec->sink != job->out;
	x->part = spec->part;
	x->content_type.name = "content-type";
	x->content_type.value = spec->content_type;
	kiln_buf_init(&x->err, ERROR_BODY_MAX);

	st = KILN_ERR_TOO_LARGE;
	bool path_style = use_path_style(s3, job->bucket);
	int n = path_style ? snprintf(x->host, sizeof x->host, "%s", s3->host)
			   : snprintf(x->host, sizeof x->host, "%s.%s", job->bucket, s3->host);
	if (n < 0 || (size_t)n >= sizeof x->host)
		goto fail;
	/* Path-style: /bucket[/key]; virtual-host: /[key]. The key is encoded once, '/' kept. */
	size_t used = path_style ? (size_t)snprintf(path, PATH_CAP, "/%s%s", job->bucket,
						    job->key ? "/" : "")
				 : (size_t)snprintf(path, PATH_CAP, "/");
	if (job->key && (st = kiln_sigv4_encode(job->key, strlen(job->key), true, path + used,
						 PATH_CAP - used)) != KILN_OK)
		goto fail;
	query[0] = '\0';
	if (spec->param_count &&
	    (st = kiln_sigv4_canonical_query(spec->params, spec->param_count, query, QUERY_CAP)) !=
		    KILN_OK)
		goto fail;
	st = KILN_ERR_NOMEM;
	size_t url_len = strlen(s3->scheme) + 3 + strlen(x->host) + strlen(path) + 1 + strlen(query);
	x->path = kiln_strdup(path);
	x->query = kiln_strdup(query);
	x->url = kiln_malloc(url_len + 1);
	if (!x->path || !x->query || !x->url)
		goto fail;
	snprintf(x->url, url_len + 1, "%s://%s%s%s%s", s3->scheme, x->host, path,
		 query[0] ? "?" : "", query);
	job->pending++;
	push_ready(eng, x);
	x = NULL;
	st = KILN_OK;
fail:
	xfer_free(x);
	free(query);
	free(path);
	return st;
}

static size_t on_read(char *dst, size_t size, size_t count, void *ud)
{
	struct xfer *x = ud;
	size_t n = size * count, left = x->body_len - x->body_off;
	if (n > left)
		n = left;
	if (n)
		memcpy(dst, x->body + x->body_off, n);
	x->body_off += n;
	return n;
}

/* curl rewinds the body itself when it must resend on a reused connection. */
static int on_seek(void *ud, curl_off_t offset, int origin)
{
	struct xfer *x = ud;
	if (origin != SEEK_SET || offset < 0 || (uint64_t)offset > x->body_len)
		return CURL_SEEKFUNC_CANTSEEK;
	x->body_off = (size_t)offset;
	return CURL_SEEKFUNC_OK;
}

static size_t on_body(char *data, size_t size, size_t count, void *ud)
{
	struct xfer *x = ud;
	size_t n = size * count;
	long code = 0;
	curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &code);
	if (code >= 200 && code < 300) {
		if (!x->sink)
			return n;
		if (kiln_buf_append(x->sink, data, n) != KILN_OK) {
			x->overflow = true;
			return 0;  /* stops the transfer: CURLE_WRITE_ERROR */
		}
		return n;
	}
	/* Only the <Code> near the start of an error body matters; the rest is dropped
	 * rather than failing the request over it. */
	size_t room = x->err.max - x->err.len;
	kiln_buf_append(&x->err, data, n < room ? n : room);
	return n;
}

/* If line is "Name: value" for name (any case), copies the trimmed value into out. */
static bool header_value(const char *line, size_t len, const char *name, char *out, size_t cap)
{
	size_t nlen = strlen(name);
	if (len <= nlen || line[nlen] != ':' || strncasecmp(line, name, nlen) != 0)
		return false;
	const char *v = line + nlen + 1, *end = line + len;
	while (v < end && (*v == ' ' || *v == '\t'))
		v++;
	while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ' || end[-1] == '\t'))
		end--;
	size_t vlen = (size_t)(end - v);
	if (vlen >= cap)
		return false;
	memcpy(out, v, vlen);
	out[vlen] = '\0';
	return true;
}

static long parse_retry_after(const char *v)
{
	if (*v && strspn(v, "0123456789") == strlen(v)) {
		long s = strlen(v) > 6 ? 999999 : strtol(v, NULL, 10);
		return s * 1000;
	}
	time_t when = curl_getdate(v, NULL);
	if (when < 0)
		return -1;
	time_t now = time(NULL);
	return when > now ? (long)(when - now) * 1000 : 0;
}

static size_t on_header(char *line, size_t size, size_t count, void *ud)
{
	struct xfer *x = ud;
	size_t n = size * count;
	char value[ETAG_MAX];
	/* A new status line starts a new response (after a 100 Continue, say). */
	if (n >= 5 && memcmp(line, "HTTP/", 5) == 0) {
		x->etag[0] = '\0';
		x->retry_after_ms = -1;
	} else if (header_value(line, n, "etag", value, sizeof value)) {
		memcpy(x->etag, value, sizeof value);
	} else if (header_value(line, n, "retry-after", value, sizeof value)) {
		x->retry_after_ms = parse_retry_after(value);
	}
	return n;
}

static kiln_status add_header(struct curl_slist **list, const char *name, const char *value)
{
	char line[SECRET_MAX + 128];
	snprintf(line, sizeof line, "%s: %s", name, value);
	struct curl_slist *l = curl_slist_append(*list, line);
	OPENSSL_cleanse(line, sizeof line);
	if (!l)
		return KILN_ERR_NOMEM;
	*list = l;
	return KILN_OK;
}

/* Signs and sends one attempt of x. */
static kiln_status xfer_start(struct engine *eng, struct xfer *x)
{
	kiln_s3 *s3 = eng->s3;
	kiln_status st = KILN_ERR_NOMEM;
	char date[KILN_AMZ_DATE_LEN + 1];
	char auth[512];
	auth[0] = '\0';

	if (!x->payload_hash[0])
		kiln_sha256_hex(x->body, x->body_len, x->payload_hash);
	x->attempts++;
	s3->stats.http_requests++;
	if (x->attempts > 1)
		s3->stats.http_retries++;
	/* A retry starts the body over. */
	if (x->sink)
		x->sink->len = x->sink_start;
	kiln_buf_reset(&x->err);
	x->body_off = 0;
	x->overflow = false;
	x->etag[0] = '\0';
	x->retry_after_ms = -1;
	x->curl_err[0] = '\0';

	x->easy = curl_easy_init();
	if (!x->easy)
		goto fail;
	/* Signed at each attempt: a retry after a long Retry-After must not carry a stale date. */
	kiln_sigv4_amz_date((long long)time(NULL), date);
	const char *ctype = x->content_type.value;
	if ((st = add_header(&x->headers, "Host", x->host)) != KILN_OK ||
	    (st = add_header(&x->headers, "x-amz-date", date)) != KILN_OK ||
	    (st = add_header(&x->headers, "x-amz-content-sha256", x->payload_hash)) != KILN_OK ||
	    (ctype && (st = add_header(&x->headers, "Content-Type", ctype)) != KILN_OK) ||
	    (s3->token && (st = add_header(&x->headers, "x-amz-security-token", s3->token)) != KILN_OK))
		goto fail;
	if (s3->access_key) {
		kiln_sigv4_credentials cred = {s3->access_key, s3->secret, s3->token};
		kiln_sigv4_request req = {
			.method = x->method,
			.host = x->host,
			.canonical_uri = x->path,
			.canonical_query = x->query,
			.headers = &x->content_type,
			.header_count = ctype ? 1 : 0,
			.payload_sha256 = x->payload_hash,
		};
		st = kiln_sigv4_authorization(&req, &cred, s3->region, "s3", date, auth, sizeof auth);
		if (st != KILN_OK || (st = add_header(&x->headers, "Authorization", auth)) != KILN_OK)
			goto fail;
	}
	/* No 100-continue round trip: S3 answers errors to a PUT after the body anyway. */
	st = KILN_ERR_NOMEM;
	struct curl_slist *l = curl_slist_append(x->headers, "Expect:");
	if (!l)
		goto fail;
	x->headers = l;

	CURL *e = x->easy;
	curl_easy_setopt(e, CURLOPT_URL, x->url);
	/* The path is already encoded and signed; curl must not squash or re-encode it. */
	curl_easy_setopt(e, CURLOPT_PATH_AS_IS, 1L);
	curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, x->headers);
	curl_easy_setopt(e, CURLOPT_USERAGENT, "kiln");
	curl_easy_setopt(e, CURLOPT_PRIVATE, x);
	curl_easy_setopt(e, CURLOPT_ERRORBUFFER, x->curl_err);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
	curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(e, CURLOPT_HEADERDATA, x);
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, s3->cfg.connect_timeout_ms);
	curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, s3->cfg.request_timeout_ms);
	curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, s3->cfg.stall_timeout_s);
	curl_easy_setopt(e, CURLOPT_READFUNCTION, on_read);
	curl_easy_setopt(e, CURLOPT_READDATA, x);
	curl_easy_setopt(e, CURLOPT_SEEKFUNCTION, on_seek);
	curl_easy_setopt(e, CURLOPT_SEEKDATA, x);
	if (strcmp(x->method, "HEAD") == 0) {
		curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
	} else if (strcmp(x->method, "PUT") == 0) {
		curl_easy_setopt(e, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(e, CURLOPT_INFILESIZE_LARGE, (curl_off_t)x->body_len);
	} else if (strcmp(x->method, "POST") == 0) {
		curl_easy_setopt(e, CURLOPT_POST, 1L);
		curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)x->body_len);
	} else if (strcmp(x->method, "DELETE") == 0) {
		curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, "DELETE");
	}
	if (curl_multi_add_handle(s3->multi, e) != CURLM_OK)
		goto fail;
	eng->active++;
	st = KILN_OK;
fail:
	OPENSSL_cleanse(auth, sizeof auth);
	if (st != KILN_OK) {
		curl_easy_cleanup(x->easy);
		x->easy = NULL;
		curl_slist_free_all(x->headers);
		x->headers = NULL;
	}
	return st;
}

static bool curl_retryable(CURLcode rc)
{
	switch (rc) {
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_CONNECT:
	case CURLE_OPERATION_TIMEDOUT:
	case CURLE_GOT_NOTHING:
	case CURLE_SEND_ERROR:
	case CURLE_RECV_ERROR:
	case CURLE_PARTIAL_FILE:
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_HTTP2:
	case CURLE_HTTP2_STREAM:
		return true;
	default:
		return false;
	}
}

static kiln_status status_from_http(long code)
{
	if (code >= 200 && code < 300)
		return KILN_OK;
	if (code == 404)
		return KILN_ERR_NOT_FOUND;
	if (code == 401 || code == 403)
		return KILN_ERR_PERMISSION;
	return KILN_ERR_IO;
}

/* The S3 error code of an <Error> document in b, or "" when there is none. */
static bool error_code(const kiln_buf *b, size_t start, char code[CODE_MAX])
{
	kiln_xml_span doc = {(const char *)b->data + start, b->len - start}, err;
	size_t pos = 0;
	code[0] = '\0';
	if (b->len <= start || kiln_xml_check(doc.p, doc.len) != KILN_OK ||
	    !kiln_xml_next(doc, &pos, "Error", &err))
		return false;
	if (kiln_xml_find_text(err, "Code", code, CODE_MAX) != KILN_OK)
		code[0] = '\0';
	return true;
}

static void log_key(const struct job *job, char *out, unsigned cap)
{
	kiln_log_quote(job->key ? job->key : "", out, cap);
}

static void schedule_retry(struct engine *eng, struct xfer *x, long http, const char *code,
			   CURLcode rc)
{
	kiln_s3 *s3 = eng->s3;
	uint64_t delay;
	if (x->retry_after_ms >= 0) {
		delay = (uint64_t)x->retry_after_ms;
	} else {
		/* Exponential, with "equal jitter": half fixed, half random, so that a crowd
		 * of workers that failed together does not come back together. */
		unsigned shift = x->attempts - 1 > 20 ? 20 : x->attempts - 1;
		uint64_t base = (uint64_t)s3->cfg.backoff_base_ms << shift;
		if (base > s3->cfg.backoff_max_ms)
			base = s3->cfg.backoff_max_ms;
		delay = base / 2 + (base ? next_random(s3) % (base / 2 + 1) : 0);
	}
	if (delay > s3->cfg.backoff_max_ms)
		delay = s3->cfg.backoff_max_ms;
	x->due_ms = kiln_now_ms() + delay;
	x->next = eng->waiting;
	eng->waiting = x;
	char key[256], why[96];
	log_key(x->job, key, sizeof key);
	kiln_log_quote(rc != CURLE_OK ? curl_easy_strerror(rc) : code, why, sizeof why);
	KILN_WARN("s3 request failed, retrying",
		  "op=%s bucket=%s key=%s status=%ld error=%s attempt=%u delay_ms=%" PRIu64, x->op,
		  x->job->bucket, key, http, why, x->attempts, delay);
}

static void job_on_xfer(struct engine *eng, struct xfer *x, kiln_status st, const char *msg);

/* One attempt of x has ended: retry it, or hand its result to its job. */
static void xfer_finish(struct engine *eng, struct xfer *x, CURLcode rc)
{
	kiln_s3 *s3 = eng->s3;
	struct job *job = x->job;
	long http = 0;
	char code[CODE_MAX] = "";
	char msg[KILN_STORAGE_MSG_MAX];
	kiln_status st;
	bool retryable;

	curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &http);
	if (rc == CURLE_OK && job->kind == JOB_HEAD && http >= 200 && http < 300) {
		curl_off_t len = -1;
		curl_easy_getinfo(x->easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &len);
		job->size_out = len >= 0 ? (uint64_t)len : 0;
	}
	curl_easy_cleanup(x->easy);
	x->easy = NULL;
	curl_slist_free_all(x->headers);
	x->headers = NULL;

	if (rc != CURLE_OK) {
		st = x->overflow ? KILN_ERR_TOO_LARGE : KILN_ERR_IO;
		retryable = !x->overflow && curl_retryable(rc);
	} else {
		/* CompleteMultipartUpload may fail after its 200 has been sent: the error is then
		 * the body, and S3 asks for a retry. */
		if (x->xml_body && http >= 200 && http < 300 &&
		    error_code(x->sink, x->sink_start, code))
			http = 500;
		else if (http < 200 || http >= 300)
			error_code(&x->err, 0, code);
		st = status_from_http(http);
		retryable = http == 429 || http >= 500;
	}
	if (st != KILN_OK && retryable && x->attempts < s3->cfg.max_attempts) {
		schedule_retry(eng, x, http, code, rc);
		return;
	}

	msg[0] = '\0';
	char tries[32] = "";
	const char *key = job->key ? job->key : "";
	if (x->attempts > 1)
		snprintf(tries, sizeof tries, " after %u attempts", x->attempts);
	if (st == KILN_ERR_TOO_LARGE)
		kiln_msgf(msg, sizeof msg, "s3 %s %s/%s: object larger than the %zu-byte buffer", x->op,
			job->bucket, key, x->sink ? x->sink->max : 0);
	else if (rc != CURLE_OK)
		kiln_msgf(msg, sizeof msg, "s3 %s %s/%s: %s%s", x->op, job->bucket, key,
			x->curl_err[0] ? x->curl_err : curl_easy_strerror(rc), tries);
	else if (st != KILN_OK)
		kiln_msgf(msg, sizeof msg, "s3 %s %s/%s: HTTP %ld%s%s%s", x->op, job->bucket, key, http,
			code[0] ? " " : "", code, tries);
	job_on_xfer(eng, x, st, msg);
	xfer_free(x);
}

/* ---- jobs ---- */

/* Drops the job's transfers that have not started (a part failed; the rest are moot). */
static void cancel_queued(struct engine *eng, struct job *job)
{
	struct xfer **pp = &eng->ready, *prev = NULL;
	while (*pp) {
		struct xfer *x = *pp;
		if (x->job == job) {
			*pp = x->next;
			job->pending--;
			xfer_free(x);
		} else {
			prev = x;
			pp = &x->next;
		}
	}
	eng->ready_tail = prev;
	for (pp = &eng->waiting; *pp;) {
		struct xfer *x = *pp;
		if (x->job == job) {
			*pp = x->next;
			job->pending--;
			xfer_free(x);
		} else {
			pp = &x->next;
		}
	}
}

static void job_fail(struct job *job, kiln_status st, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void job_fail(struct job *job, kiln_status st, const char *fmt, ...)
{
	if (job->status != KILN_OK)
		return;  /* the first failure is the one worth reporting */
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(job->msg, sizeof job->msg, fmt, ap);
	va_end(ap);
	job->status = st;
}

static void start_abort(struct engine *eng, struct job *job)
{
	kiln_sigv4_kv params[] = {{"uploadId", job->upload_id}};
	struct req_spec spec = {.method = "DELETE", .op = "AbortMultipartUpload",
				.params = params, .param_count = 1};
	job->step = STEP_ABORT;
	if (job->upload_id[0] && xfer_queue(eng, job, &spec) != KILN_OK) {
		char key[256];
		log_key(job, key, sizeof key);
		KILN_WARN("s3 multipart upload left behind", "bucket=%s key=%s", job->bucket, key);
	}
}

static void start_parts(struct engine *eng, struct job *job)
{
	kiln_xml_span doc = {(const char *)job->xml.data, job->xml.len};
	if (kiln_xml_check(doc.p, doc.len) != KILN_OK ||
	    kiln_xml_find_text(doc, "UploadId", job->upload_id, sizeof job->upload_id) != KILN_OK ||
	    !job->upload_id[0]) {
		job->upload_id[0] = '\0';
		job_fail(job, KILN_ERR_CORRUPT, "s3 CreateMultipartUpload %s/%s: no UploadId in the response",
			 job->bucket, job->key);
		return;
	}
	job->etags = kiln_calloc(job->part_count, sizeof *job->etags);
	if (!job->etags) {
		job_fail(job, KILN_ERR_NOMEM, "s3 PUT %s/%s: out of memory", job->bucket, job->key);
		start_abort(eng, job);
		return;
	}
	job->step = STEP_PARTS;
	for (unsigned i = 0; i < job->part_count; i++) {
		char number[16];
		snprintf(number, sizeof number, "%u", i + 1);
		kiln_sigv4_kv params[] = {{"partNumber", number}, {"uploadId", job->upload_id}};
		size_t off = (size_t)i * job->part_size;
		struct req_spec spec = {
			.method = "PUT", .op = "UploadPart", .params = params, .param_count = 2,
			.body = job->data + off,
			.body_len = job->size - off < job->part_size ? job->size - off : job->part_size,
			.part = i + 1,
		};
		kiln_status st = xfer_queue(eng, job, &spec);
		if (st != KILN_OK) {
			job_fail(job, st, "s3 PUT %s/%s: could not queue part %u", job->bucket, job->key, i + 1);
			cancel_queued(eng, job);
			start_abort(eng, job);
			return;
		}
	}
}

/* ETags go into the Complete document verbatim, so they must be plain printable text. */
static bool etag_ok(const char *etag)
{
	if (!*etag)
		return false;
	for (const char *p = etag; *p; p++)
		if (*p < 0x21 || *p > 0x7e || *p == '<' || *p == '>' || *p == '&')
			return false;
	return true;
}

static void start_complete(struct engine *eng, struct job *job)
{
	kiln_status st = KILN_OK;
	kiln_buf *b = &job->complete;
	char part[ETAG_MAX + 96];
	kiln_sigv4_kv params[] = {{"uploadId", job->upload_id}};
	kiln_buf_init(b, (size_t)MAX_PARTS * sizeof part + 128);
	st = kiln_buf_append(b, "<CompleteMultipartUpload>", 25);
	for (unsigned i = 0; i < job->part_count && st == KILN_OK; i++) {
		int n = snprintf(part, sizeof part, "<Part><PartNumber>%u</PartNumber><ETag>%s</ETag></Part>",
				 i + 1, job->etags[i]);
		st = kiln_buf_append(b, part, (size_t)n);
	}
	if (st == KILN_OK)
		st = kiln_buf_append(b, "</CompleteMultipartUpload>", 26);
	struct req_spec spec = {.method = "POST", .op = "CompleteMultipartUpload", .params = params,
				.param_count = 1, .body = b->data, .body_len = b->len,
				.content_type = "application/xml", .sink = &job->xml};
	job->step = STEP_COMPLETE;
	kiln_buf_reset(&job->xml);
	if (st == KILN_OK)
		st = xfer_queue(eng, job, &spec);
	if (st != KILN_OK) {
		job_fail(job, st, "s3 CompleteMultipartUpload %s/%s: %s", job->bucket, job->key,
			 kiln_strerror(st));
		start_abort(eng, job);
	}
}

static void job_on_xfer(struct engine *eng, struct xfer *x, kiln_status st, const char *msg)
{
	struct job *job = x->job;
	job->pending--;
	if (st != KILN_OK)
		job_fail(job, st, "%s", msg);
	switch (job->step) {
	case STEP_SINGLE:
		break;
	case STEP_CREATE:
		if (job->status == KILN_OK)
			start_parts(eng, job);
		break;
	case STEP_PARTS:
		if (st == KILN_OK) {
			if (etag_ok(x->etag))
				memcpy(job->etags[x->part - 1], x->etag, ETAG_MAX);
			else
				job_fail(job, KILN_ERR_CORRUPT, "s3 UploadPart %s/%s: part %u has no usable ETag",
					 job->bucket, job->key, x->part);
		}
		if (job->status != KILN_OK)
			cancel_queued(eng, job);
		if (job->pending == 0) {
			if (job->status == KILN_OK)
				start_complete(eng, job);
			else
				start_abort(eng, job);
		}
		break;
	case STEP_COMPLETE:
		if (job->status != KILN_OK)
			start_abort(eng, job);
		break;
	case STEP_ABORT:
		eng->s3->stats.multipart_aborts++;
		if (st != KILN_OK) {
			char key[256];
			log_key(job, key, sizeof key);
			KILN_WARN("s3 multipart abort failed", "bucket=%s key=%s", job->bucket, key);
		}
		break;
	}
}

static void job_begin(struct engine *eng, struct job *job)
{
	kiln_s3 *s3 = eng->s3;
	kiln_status st = KILN_OK;
	struct req_spec spec = {.method = "GET", .op = "GET"};
	kiln_buf_init(&job->xml, s3->cfg.max_response_body);
	job->step = STEP_SINGLE;
	switch (job->kind) {
	case JOB_GET:
		spec.sink = job->out;
		break;
	case JOB_HEAD:
		spec.method = spec.op = "HEAD";
		break;
	case JOB_LIST:
		spec.op = "ListObjectsV2";
		spec.params = job->params;
		spec.param_count = job->param_count;
		spec.sink = &job->xml;
		break;
	case JOB_PUT:
		if ((uint64_t)job->size > MAX_OBJECT_SIZE) {
			job_fail(job, KILN_ERR_TOO_LARGE, "s3 PUT %s/%s: over S3's 5 TiB object limit",
				 job->bucket, job->key);
			return;
		}
		if (job->size <= s3->cfg.multipart_threshold) {
			spec.method = spec.op = "PUT";
			spec.body = job->data;
			spec.body_len = job->size;
			break;
		}
		/* Parts grow when the default size would need more than S3's 10000. */
		job->part_size = s3->cfg.part_size;
		if ((job->size - 1) / job->part_size + 1 > MAX_PARTS) {
			size_t mib = (size_t)1 << 20;
			job->part_size = ((job->size - 1) / MAX_PARTS / mib + 1) * mib;
		}
		job->part_count = (unsigned)((job->size - 1) / job->part_size + 1);
		job->step = STEP_CREATE;
		static const kiln_sigv4_kv uploads[] = {{"uploads", ""}};
		spec.method = "POST";
		spec.op = "CreateMultipartUpload";
		spec.params = uploads;
		spec.param_count = 1;
		/* Without it curl would label the object as a form post. */
		spec.content_type = "application/octet-stream";
		spec.sink = &job->xml;
		break;
	}
	st = xfer_queue(eng, job, &spec);
	if (st != KILN_OK)
		job_fail(job, st, "s3 %s %s/%s: %s", spec.op, job->bucket, job->key ? job->key : "",
			 kiln_strerror(st));
}

static void job_cleanup(struct job *job)
{
	kiln_buf_free(&job->xml);
	kiln_buf_free(&job->complete);
	free(job->etags);
	job->etags = NULL;
}

static void promote_due(struct engine *eng, uint64_t now, uint64_t *next_due)
{
	*next_due = UINT64_MAX;
	for (struct xfer **pp = &eng->waiting; *pp;) {
		struct xfer *x = *pp;
		if (x->due_ms <= now) {
			*pp = x->next;
			push_ready(eng, x);
		} else {
			if (x->due_ms < *next_due)
				*next_due = x->due_ms;
			pp = &x->next;
		}
	}
}

static void engine_run(kiln_s3 *s3, struct job *jobs, size_t count)
{
	struct engine eng = {.s3 = s3};
	for (size_t i = 0; i < count; i++)
		job_begin(&eng, &jobs[i]);
	while (eng.ready || eng.waiting || eng.active) {
		uint64_t now = kiln_now_ms(), next_due;
		promote_due(&eng, now, &next_due);
		while (eng.ready && eng.active < s3->cfg.concurrency) {
			struct xfer *x = eng.ready;
			eng.ready = x->next;
			if (!eng.ready)
				eng.ready_tail = NULL;
			kiln_status st = xfer_start(&eng, x);
			if (st != KILN_OK) {
				char msg[KILN_STORAGE_MSG_MAX];
				snprintf(msg, sizeof msg, "s3 %s %s/%s: could not send: %s", x->op,
					 x->job->bucket, x->job->key ? x->job->key : "", kiln_strerror(st));
				job_on_xfer(&eng, x, st, msg);
				xfer_free(x);
			}
		}
		int running = 0, left = 0;
		bool finished = false;
		curl_multi_perform(s3->multi, &running);
		CURLMsg *m;
		while ((m = curl_multi_info_read(s3->multi, &left))) {
			if (m->msg != CURLMSG_DONE)
				continue;
			struct xfer *x = NULL;
			CURLcode rc = m->data.result;
			curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&x);
			curl_multi_remove_handle(s3->multi, m->easy_handle);
			eng.active--;
			xfer_finish(&eng, x, rc);
			finished = true;
		}
		if (finished || (eng.ready && eng.active < s3->cfg.concurrency))
			continue;
		if (!eng.active && !eng.ready && !eng.waiting)
			break;
		int timeout = 1000;
		now = kiln_now_ms();
		if (eng.waiting && next_due != UINT64_MAX)
			timeout = next_due <= now ? 0 : next_due - now < 1000 ? (int)(next_due - now) : 1000;
		curl_multi_poll(s3->multi, NULL, 0, timeout, NULL);
	}
}

kiln_status kiln_s3_run(kiln_s3 *s3, kiln_s3_op *ops, size_t count)
{
	struct job *jobs = kiln_calloc(count, sizeof *jobs);
	if (!jobs)
		return KILN_ERR_NOMEM;
	for (size_t i = 0; i < count; i++) {
		static const enum job_kind kinds[] = {
			[KILN_S3_GET] = JOB_GET, [KILN_S3_PUT] = JOB_PUT, [KILN_S3_HEAD] = JOB_HEAD};
		jobs[i].kind = kinds[ops[i].kind];
		jobs[i].bucket = ops[i].bucket;
		jobs[i].key = ops[i].key;
		jobs[i].out = ops[i].out;
		jobs[i].data = ops[i].data;
		jobs[i].size = ops[i].size;
	}
	engine_run(s3, jobs, count);
	for (size_t i = 0; i < count; i++) {
		ops[i].status = jobs[i].status;
		ops[i].size_out = jobs[i].size_out;
		memcpy(ops[i].msg, jobs[i].msg, sizeof ops[i].msg);
		job_cleanup(&jobs[i]);
	}
	free(jobs);
	return KILN_OK;
}

/* ---- listing ---- */

struct list_state {
	const kiln_uri *prefix;
	const char *glob;
	kiln_storage_list_fn fn;
	void *ctx;
	char key[KILN_URI_KEY_MAX * 4 + 1];  /* decoded; checked against the key limit after */
	char uri[KILN_URI_KEY_MAX + KILN_URI_BUCKET_MAX + 8];
	kiln_uri check;
	bool malformed;
};

static kiln_status list_entry(struct list_state *ls, kiln_xml_span contents)
{
	char size_text[32];
	kiln_xml_span key_span;
	size_t pos = 0;
	if (!kiln_xml_next(contents, &pos, "Key", &key_span) ||
	    kiln_xml_text(key_span, ls->key, sizeof ls->key) != KILN_OK ||
	    kiln_xml_find_text(contents, "Size", size_text, sizeof size_text) != KILN_OK ||
	    !size_text[0] || strspn(size_text, "0123456789") != strlen(size_text))
		goto fail;
	size_t plen = strlen(ls->prefix->path);
	if (strncmp(ls->key, ls->prefix->path, plen) != 0)
		goto fail;  /* the server ignored the prefix */
	int n = snprintf(ls->uri, sizeof ls->uri, "s3://%s/%s", ls->prefix->bucket, ls->key);
	/* A key kiln could not read back, or one with ".." that a caller might turn into a
	 * path, is skipped rather than handed on. */
	if (n < 0 || (size_t)n >= sizeof ls->uri || kiln_uri_parse(ls->uri, &ls->check) != KILN_OK) {
		char key[256];
		kiln_log_quote(ls->key, key, sizeof key);
		KILN_WARN("s3 listing: skipping a key kiln cannot address", "bucket=%s key=%s",
			  ls->prefix->bucket, key);
		return KILN_OK;
	}
	const char *last = strrchr(ls->key, '/');
	if (ls->glob && fnmatch(ls->glob, last ? last + 1 : ls->key, 0) != 0)
		return KILN_OK;
	kiln_storage_entry entry = {ls->uri, ls->key + plen, strtoull(size_text, NULL, 10)};
	return ls->fn(ls->ctx, &entry);
fail:
	ls->malformed = true;
	return KILN_ERR_CORRUPT;
}

kiln_status kiln_s3_list(kiln_s3 *s3, const kiln_uri *prefix, const char *glob,
			 kiln_storage_list_fn fn, void *ctx, char *msg, size_t msg_cap)
{
	kiln_status st = KILN_ERR_NOMEM;
	char *token = kiln_malloc(TOKEN_MAX), *prev = kiln_malloc(TOKEN_MAX);
	struct list_state *ls = kiln_calloc(1, sizeof *ls);
	char max_keys[16], flag[8];
	struct job job;
	memset(&job, 0, sizeof job);
	if (!token || !prev || !ls)
		goto fail;
	ls->prefix = prefix;
	ls->glob = glob;
	ls->fn = fn;
	ls->ctx = ctx;
	token[0] = '\0';
	snprintf(max_keys, sizeof max_keys, "%u", s3->cfg.list_page_size);
	for (;;) {
		kiln_sigv4_kv params[4] = {{"list-type", "2"}};
		size_t n = 1;
		if (prefix->path[0])
			params[n++] = (kiln_sigv4_kv){"prefix", prefix->path};
		if (s3->cfg.list_page_size)
			params[n++] = (kiln_sigv4_kv){"max-keys", max_keys};
		if (token[0])
			params[n++] = (kiln_sigv4_kv){"continuation-token", token};
		memset(&job, 0, sizeof job);
		job.kind = JOB_LIST;
		job.bucket = prefix->bucket;
		job.params = params;
		job.param_count = n;
		engine_run(s3, &job, 1);
		st = job.status;
		if (st != KILN_OK) {
			kiln_msgf(msg, msg_cap, "%s", job.msg);
			goto fail;
		}
		kiln_xml_span doc = {(const char *)job.xml.data, job.xml.len}, contents;
		st = KILN_ERR_CORRUPT;
		ls->malformed = kiln_xml_check(doc.p, doc.len) != KILN_OK;
		size_t pos = 0;
		while (!ls->malformed && kiln_xml_next(doc, &pos, "Contents", &contents)) {
			st = list_entry(ls, contents);
			if (st != KILN_OK)
				goto fail;
		}
		if (ls->malformed ||
		    kiln_xml_find_text(doc, "IsTruncated", flag, sizeof flag) != KILN_OK ||
		    strcmp(flag, "true") != 0)
			break;
		/* A truncated page must move on, or the loop would never end. */
		memcpy(prev, token, TOKEN_MAX);
		ls->malformed = kiln_xml_find_text(doc, "NextContinuationToken", token, TOKEN_MAX) !=
					KILN_OK || !token[0] || strcmp(token, prev) == 0;
		if (ls->malformed)
			goto fail;
		job_cleanup(&job);
	}
	st = ls->malformed ? KILN_ERR_CORRUPT : KILN_OK;
fail:
	if (ls && ls->malformed)
		kiln_msgf(msg, msg_cap, "s3 ListObjectsV2 %s/%s: malformed response", prefix->bucket,
			prefix->path);
	job_cleanup(&job);
	free(ls);
	free(prev);
	free(token);
	return st;
}
