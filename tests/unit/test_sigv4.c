/* SigV4 signer tests: the example signatures published in the S3 API reference
 * ("Signature Calculations for the Authorization Header: Transferring Payload in a Single
 * Chunk"), and botocore's S3SigV4Auth as an independent reference for requests with
 * query strings, payloads, session tokens and keys full of awkward characters. */
#include <criterion/criterion.h>
#include <string.h>

#include "common/sigv4.h"
#include "storage_testutil.h"

#define EXAMPLE_KEY "AKIAIOSFODNN7EXAMPLE"
#define EXAMPLE_SECRET "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
#define EXAMPLE_DATE "20130524T000000Z"
#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

static const char *signature_of(const char *auth)
{
	const char *s = strstr(auth, "Signature=");
	return s ? s + 10 : "";
}

static void sign_example(const char *method, const char *path, const kiln_sigv4_kv *params,
			 size_t np, const kiln_sigv4_kv *headers, size_t nh, const char *body,
			 const char *expected_signature)
{
	char uri[256], query[256], hash[KILN_SHA256_HEX_LEN + 1], auth[512];
	kiln_sigv4_credentials cred = {EXAMPLE_KEY, EXAMPLE_SECRET, NULL};
	cr_assert_eq(kiln_sigv4_encode(path, strlen(path), true, uri, sizeof uri), KILN_OK);
	query[0] = '\0';
	if (np)
		cr_assert_eq(kiln_sigv4_canonical_query(params, np, query, sizeof query), KILN_OK);
	kiln_sha256_hex(body, strlen(body), hash);
	kiln_sigv4_request req = {method, "examplebucket.s3.amazonaws.com", uri, query, headers, nh, hash};
	cr_assert_eq(kiln_sigv4_authorization(&req, &cred, "us-east-1", "s3", EXAMPLE_DATE, auth,
					      sizeof auth), KILN_OK);
	cr_expect_str_eq(signature_of(auth), expected_signature, "%s %s", method, path);
	cr_expect(strstr(auth, "Credential=" EXAMPLE_KEY "/20130524/us-east-1/s3/aws4_request"));
}

Test(sigv4, aws_documented_examples)
{
	kiln_sigv4_kv range[] = {{"Range", "bytes=0-9"}};
	sign_example("GET", "/test.txt", NULL, 0, range, 1, "",
		     "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");

	kiln_sigv4_kv put_headers[] = {{"Date", "Fri, 24 May 2013 00:00:00 GMT"},
				       {"x-amz-storage-class", "REDUCED_REDUNDANCY"}};
	sign_example("PUT", "/test$file.text", NULL, 0, put_headers, 2, "Welcome to Amazon S3.",
		     "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd");

	kiln_sigv4_kv lifecycle[] = {{"lifecycle", ""}};
	sign_example("GET", "/", lifecycle, 1, NULL, 0, "",
		     "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543");

	kiln_sigv4_kv list[] = {{"prefix", "J"}, {"max-keys", "2"}};
	sign_example("GET", "/", list, 2, NULL, 0, "",
		     "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
}

Test(sigv4, sha256_and_date)
{
	char hash[KILN_SHA256_HEX_LEN + 1], date[KILN_AMZ_DATE_LEN + 1];
	kiln_sha256_hex(NULL, 0, hash);
	cr_expect_str_eq(hash, EMPTY_SHA256);
	kiln_sha256_hex("abc", 3, hash);
	cr_expect_str_eq(hash, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	kiln_sigv4_amz_date(1369353600, date);
	cr_expect_str_eq(date, EXAMPLE_DATE);
}

Test(sigv4, encoding)
{
	char out[64];
	cr_assert_eq(kiln_sigv4_encode("AZaz09-._~/x y+z", 16, true, out, sizeof out), KILN_OK);
	cr_expect_str_eq(out, "AZaz09-._~/x%20y%2Bz");
	cr_assert_eq(kiln_sigv4_encode("a/b=c&d%", 8, false, out, sizeof out), KILN_OK);
	cr_expect_str_eq(out, "a%2Fb%3Dc%26d%25");
	cr_assert_eq(kiln_sigv4_encode("\xc3\xbc", 2, true, out, sizeof out), KILN_OK);
	cr_expect_str_eq(out, "%C3%BC");
	/* Exactly full, and one byte short. */
	cr_expect_eq(kiln_sigv4_encode(" ", 1, true, out, 4), KILN_OK);
	cr_expect_eq(kiln_sigv4_encode(" ", 1, true, out, 3), KILN_ERR_TOO_LARGE);
	cr_expect_eq(kiln_sigv4_encode("abc", 3, true, out, 3), KILN_ERR_TOO_LARGE);
}

Test(sigv4, canonical_query_is_sorted_and_encoded)
{
	char out[256];
	kiln_sigv4_kv params[] = {{"prefix", "a b/c"}, {"list-type", "2"}, {"uploads", ""},
				  {"a", "2"}, {"a", "1"}, {"A", "x"}};
	cr_assert_eq(kiln_sigv4_canonical_query(params, 6, out, sizeof out), KILN_OK);
	cr_expect_str_eq(out, "A=x&a=1&a=2&list-type=2&prefix=a%20b%2Fc&uploads=");
	cr_expect_eq(kiln_sigv4_canonical_query(params, 6, out, 20), KILN_ERR_TOO_LARGE);
}

Test(sigv4, refuses_bad_input)
{
	char auth[512];
	kiln_sigv4_credentials cred = {EXAMPLE_KEY, EXAMPLE_SECRET, NULL};
	kiln_sigv4_request req = {"GET", "h", "/", "", NULL, 0, EMPTY_SHA256};
	cr_expect_eq(kiln_sigv4_authorization(&req, &cred, "us-east-1", "s3", "20130524T000000", auth,
					      sizeof auth), KILN_ERR_INVALID_ARG);
	cr_expect_eq(kiln_sigv4_authorization(&req, &cred, "us-east-1", "s3", "2013052400000000Z", auth,
					      sizeof auth), KILN_ERR_INVALID_ARG);
	kiln_sigv4_credentials empty = {EXAMPLE_KEY, "", NULL};
	cr_expect_eq(kiln_sigv4_authorization(&req, &empty, "us-east-1", "s3", EXAMPLE_DATE, auth,
					      sizeof auth), KILN_ERR_INVALID_ARG);
	cr_expect_eq(kiln_sigv4_authorization(&req, &cred, "us-east-1", "s3", EXAMPLE_DATE, auth, 64),
		     KILN_ERR_TOO_LARGE);
	cr_expect_str_eq(auth, "");
	kiln_sigv4_kv dup[] = {{"X-Amz-Date", "x"}};
	kiln_sigv4_request dreq = {"GET", "h", "/", "", dup, 1, EMPTY_SHA256};
	cr_expect_eq(kiln_sigv4_authorization(&dreq, &cred, "us-east-1", "s3", EXAMPLE_DATE, auth,
					      sizeof auth), KILN_ERR_INVALID_ARG);
	kiln_sigv4_request short_hash = {"GET", "h", "/", "", NULL, 0, "abc"};
	cr_expect_eq(kiln_sigv4_authorization(&short_hash, &cred, "us-east-1", "s3", EXAMPLE_DATE,
					      auth, sizeof auth), KILN_ERR_INVALID_ARG);
}

/* One request for both signers: the raw key and parameters go to botocore, which encodes
 * them itself; kiln encodes them with its own functions. */
struct ref_case {
	const char *method;
	const char *scheme_host;  /* e.g. "https://examplebucket.s3.amazonaws.com" */
	const char *raw_path;     /* "/" + key, or "/bucket/" + key, unencoded */
	kiln_sigv4_kv params[4];
	size_t np;
	kiln_sigv4_kv headers[2];
	size_t nh;
	const char *body;
	size_t body_len;
	const char *token;
	const char *region;
	const char *date;
};

static void kiln_side(const struct ref_case *c, char *auth, size_t cap)
{
	char uri[4096], query[4096], hash[KILN_SHA256_HEX_LEN + 1];
	const char *host = strstr(c->scheme_host, "://") + 3;
	cr_assert_eq(kiln_sigv4_encode(c->raw_path, strlen(c->raw_path), true, uri, sizeof uri), KILN_OK);
	query[0] = '\0';
	if (c->np)
		cr_assert_eq(kiln_sigv4_canonical_query(c->params, c->np, query, sizeof query), KILN_OK);
	kiln_sha256_hex(c->body, c->body_len, hash);
	kiln_sigv4_credentials cred = {EXAMPLE_KEY, EXAMPLE_SECRET, c->token};
	kiln_sigv4_request req = {c->method, host, uri, query, c->headers, c->nh, hash};
	cr_assert_eq(kiln_sigv4_authorization(&req, &cred, c->region, "s3", c->date, auth, cap), KILN_OK);
}

static void ref_side(kiln_buf *in, const struct ref_case *c)
{
	ref_begin(in, 'S');
	ref_field_str(in, c->method);
	ref_field_str(in, c->scheme_host);
	ref_field_str(in, c->raw_path);
	ref_field_pairs(in, c->params, c->np);
	ref_field_pairs(in, c->headers, c->nh);
	ref_field(in, c->body, c->body_len);
	ref_field_str(in, EXAMPLE_KEY);
	ref_field_str(in, EXAMPLE_SECRET);
	ref_field_str(in, c->token);
	ref_field_str(in, c->region);
	ref_field_str(in, c->date);
	ref_end(in);
}

Test(sigv4_botocore, matches_reference_signer, .timeout = 60)
{
	static const char binary[] = "\x00\x01\xff\xfe payload\r\n";
	const char *aws = "https://examplebucket.s3.amazonaws.com";
	const char *local = "http://127.0.0.1:9000";
	const char *token = "FQoGZXIvYXdzEJr//////////wEaDM+token/with+slashes==";
	struct ref_case cases[] = {
		{"GET", aws, "/photos/cat.png", .region = "us-east-1", .date = EXAMPLE_DATE},
		{"GET", local, "/kiln-test", {{"list-type", "2"}, {"prefix", "dir with space/ünï/"},
		 {"continuation-token", "1/aB+c==&x=y"}, {"max-keys", "7"}}, 4,
		 .region = "us-east-1", .date = "20261122T101500Z"},
		{"PUT", local, "/kiln-test/out/a b.dds", .body = binary, .body_len = sizeof binary - 1,
		 .region = "eu-west-1", .date = "20240229T235959Z"},
		{"GET", aws, "/dir/\xc3\xbcn\xc3\xaf\x63\xc3\xb8\x64\xc3\xa9/\xe7\x94\xbb\xe5\x83\x8f 1.png",
		 .region = "ap-northeast-1", .date = EXAMPLE_DATE},
		{"GET", aws, "/a+b=c&d;e,f:g@h$i!j'k(l)m*n~o_p-q.r%41[]{}|^`\"<>#",
		 .region = "us-east-1", .date = EXAMPLE_DATE},
		{"PUT", aws, "/with-token.bin", .body = "data", .body_len = 4, .token = token,
		 .region = "us-west-2", .date = EXAMPLE_DATE},
		{"POST", local, "/kiln-test/big.bin", {{"uploads", ""}}, 1,
		 {{"Content-Type", "application/octet-stream"}}, 1, .token = token,
		 .region = "us-east-1", .date = EXAMPLE_DATE},
		{"PUT", local, "/kiln-test/big.bin", {{"partNumber", "3"}, {"uploadId", "abc&1/2+3"}}, 2,
		 .body = "part", .body_len = 4, .region = "us-east-1", .date = EXAMPLE_DATE},
		{"GET", aws, "/test.txt", .headers = {{"Range", "bytes=0-9"}}, .nh = 1,
		 .region = "us-east-1", .date = EXAMPLE_DATE},
	};
	size_t n = sizeof cases / sizeof cases[0];
	kiln_buf in;
	kiln_buf_init(&in, 1 << 20);
	for (size_t i = 0; i < n; i++)
		ref_side(&in, &cases[i]);
	static char ref[16][1024];
	size_t got = ref_run(&in, ref[0], sizeof ref[0], 16);
	cr_assert_eq(got, n, "botocore reference gave %zu of %zu lines (is python3-botocore installed?)",
		     got, n);
	for (size_t i = 0; i < n; i++) {
		char auth[1024];
		kiln_side(&cases[i], auth, sizeof auth);
		cr_expect_str_eq(auth, ref[i], "case %zu: %s %s", i, cases[i].method, cases[i].raw_path);
	}
	kiln_buf_free(&in);
}
