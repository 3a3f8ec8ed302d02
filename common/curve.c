/* CURVE key files and the loopback rule; see curve.h. */
#include "common/curve.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <zmq.h>

#include "common/buf.h"

#define KEY_FILE_MAX 4096  /* a key is 40 bytes: anything much larger is the wrong file */

kiln_status kiln_curve_key_load(const char *path, char *key, char *msg, size_t msg_cap)
{
	char dummy[1];
	if (!msg || !msg_cap) {
		msg = dummy;
		msg_cap = sizeof dummy;
	}
	uint8_t raw[32];
	char text[KILN_CURVE_KEY_LEN + 1];
	kiln_buf buf;
	kiln_buf_init(&buf, KEY_FILE_MAX);
	kiln_status st = kiln_buf_read_file(&buf, path);
	if (st != KILN_OK) {
		snprintf(msg, msg_cap, "cannot read CURVE key %s: %s", path, kiln_strerror(st));
		goto fail;
	}
	size_t b = 0, e = buf.len;
	while (b < e && strchr(" \t\r\n", buf.data[b]))
		b++;
	while (e > b && strchr(" \t\r\n", buf.data[e - 1]))
		e--;
	st = KILN_ERR_CORRUPT;
	if (e - b != KILN_CURVE_KEY_LEN) {
		snprintf(msg, msg_cap, "CURVE key %s: expected %d characters of Z85 text", path, KILN_CURVE_KEY_LEN);
		goto fail;
	}
	memcpy(text, buf.data + b, KILN_CURVE_KEY_LEN);
	text[KILN_CURVE_KEY_LEN] = '\0';
	if (!zmq_z85_decode(raw, text)) {
		snprintf(msg, msg_cap, "CURVE key %s: not Z85 text", path);
		goto fail;
	}
	memcpy(key, text, sizeof text);
	st = KILN_OK;
fail:
	/* the file may hold a secret key: it does not linger in freed memory or on the stack */
	if (buf.data)
		memset(buf.data, 0, buf.len);
	kiln_buf_free(&buf);
	memset(text, 0, sizeof text);
	memset(raw, 0, sizeof raw);
	return st;
}

bool kiln_endpoint_is_local(const char *endpoint)
{
	if (strncmp(endpoint, "inproc://", 9) == 0 || strncmp(endpoint, "ipc://", 6) == 0)
		return true;
	if (strncmp(endpoint, "tcp://", 6) != 0)
		return false;
	const char *host = endpoint + 6;
	/* "tcp://src;dst" names a source address: the bound side is what comes after ';' */
	const char *semi = strchr(host, ';');
	if (semi)
		host = semi + 1;
	if (strncmp(host, "[::1]:", 6) == 0)
		return true;
	const char *colon = strrchr(host, ':');
	if (!colon)
		return false;
	size_t len = (size_t)(colon - host);
	if (len == 9 && strncmp(host, "localhost", 9) == 0)
		return true;
	/* 127.0.0.0/8, written as a dotted quad: four numbers, the first 127 */
	unsigned a, b, c, d;
	char tail;
	char addr[16];
	if (len == 0 || len >= sizeof addr)
		return false;
	memcpy(addr, host, len);
	addr[len] = '\0';
	return sscanf(addr, "%u.%u.%u.%u%c", &a, &b, &c, &d, &tail) == 4 && a == 127 && b < 256 && c < 256 &&
	       d < 256;
}
