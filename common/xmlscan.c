/* Bounded XML element extraction for S3 responses (see xmlscan.h). Every search is
 * limited by the span's length: response bodies are not NUL-terminated. */
#define _GNU_SOURCE  /* memmem */
#include "common/xmlscan.h"

#include <stdint.h>
#include <string.h>

kiln_status kiln_xml_check(const char *doc, size_t len)
{
	if (memchr(doc, '\0', len) || memmem(doc, len, "<!DOCTYPE", 9) ||
	    memmem(doc, len, "<!ENTITY", 8))
		return KILN_ERR_CORRUPT;
	return KILN_OK;
}

bool kiln_xml_next(kiln_xml_span in, size_t *pos, const char *tag, kiln_xml_span *content)
{
	size_t tlen = strlen(tag);
	size_t at = *pos;
	while (at < in.len) {
		const char *lt = memchr(in.p + at, '<', in.len - at);
		if (!lt)
			return false;
		size_t start = (size_t)(lt - in.p);
		at = start + 1;
		if (in.len - at < tlen + 1 || memcmp(in.p + at, tag, tlen) != 0)
			continue;
		/* "<Key" must not match "<KeyCount>". */
		char next = in.p[at + tlen];
		if (next != '>' && next != '/' && next != ' ' && next != '\t' && next != '\n' &&
		    next != '\r')
			continue;
		const char *gt = memchr(in.p + at, '>', in.len - at);
		if (!gt)
			return false;
		size_t body = (size_t)(gt - in.p) + 1;
		if (gt[-1] == '/') {
			content->p = in.p + body;
			content->len = 0;
			*pos = body;
			return true;
		}
		/* The end tag: "</" tag ">". */
		for (size_t e = body; e < in.len; e++) {
			const char *end = memchr(in.p + e, '<', in.len - e);
			if (!end)
				return false;
			e = (size_t)(end - in.p);
			if (in.len - e >= tlen + 3 && end[1] == '/' && memcmp(end + 2, tag, tlen) == 0 &&
			    end[2 + tlen] == '>') {
				content->p = in.p + body;
				content->len = e - body;
				*pos = e + tlen + 3;
				return true;
			}
		}
		return false;
	}
	return false;
}

static size_t put_utf8(uint32_t cp, char *out)
{
	if (cp < 0x80) {
		out[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		out[0] = (char)(0xC0 | cp >> 6);
		out[1] = (char)(0x80 | (cp & 0x3F));
		return 2;
	}
	if (cp < 0x10000) {
		out[0] = (char)(0xE0 | cp >> 12);
		out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
		out[2] = (char)(0x80 | (cp & 0x3F));
		return 3;
	}
	out[0] = (char)(0xF0 | cp >> 18);
	out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
	out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
	out[3] = (char)(0x80 | (cp & 0x3F));
	return 4;
}

/* Decodes one reference at s (after '&', up to ';' within len); returns bytes consumed
 * after the '&' and writes the UTF-8 bytes into out[4], their count into *n; 0 if bad. */
static size_t decode_reference(const char *s, size_t len, char out[4], size_t *n)
{
	static const struct {
		const char *name;
		char c;
	} named[] = {{"amp", '&'}, {"lt", '<'}, {"gt", '>'}, {"quot", '"'}, {"apos", '\''}};
	const char *semi = memchr(s, ';', len < 12 ? len : 12);
	if (!semi)
		return 0;
	size_t rlen = (size_t)(semi - s);
	if (rlen >= 2 && s[0] == '#') {
		uint32_t cp = 0;
		int hex = s[1] == 'x';
		size_t i = hex ? 2 : 1;
		if (i == rlen)
			return 0;
		for (; i < rlen; i++) {
			char c = s[i];
			int d = c >= '0' && c <= '9' ? c - '0'
				: hex && c >= 'a' && c <= 'f' ? c - 'a' + 10
				: hex && c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
			if (d < 0)
				return 0;
			cp = cp * (hex ? 16 : 10) + (uint32_t)d;
			if (cp > 0x10FFFF)
				return 0;
		}
		if (cp == 0 || (cp >= 0xD800 && cp <= 0xDFFF))
			return 0;
		*n = put_utf8(cp, out);
		return rlen + 1;
	}
	for (size_t i = 0; i < sizeof named / sizeof named[0]; i++) {
		if (strlen(named[i].name) == rlen && memcmp(s, named[i].name, rlen) == 0) {
			out[0] = named[i].c;
			*n = 1;
			return rlen + 1;
		}
	}
	return 0;
}

kiln_status kiln_xml_text(kiln_xml_span text, char *out, size_t cap)
{
	size_t n = 0;
	if (cap == 0)
		return KILN_ERR_TOO_LARGE;
	for (size_t i = 0; i < text.len;) {
		char bytes[4];
		size_t count = 1;
		char c = text.p[i];
		if (c == '<' || c == '\0')
			return KILN_ERR_CORRUPT;
		if (c == '&') {
			size_t used = decode_reference(text.p + i + 1, text.len - i - 1, bytes, &count);
			if (!used)
				return KILN_ERR_CORRUPT;
			i += used + 1;
		} else {
			bytes[0] = c;
			i++;
		}
		if (n + count >= cap)
			return KILN_ERR_TOO_LARGE;
		memcpy(out + n, bytes, count);
		n += count;
	}
	out[n] = '\0';
	return KILN_OK;
}

kiln_status kiln_xml_find_text(kiln_xml_span in, const char *tag, char *out, size_t cap)
{
	size_t pos = 0;
	kiln_xml_span content;
	if (!kiln_xml_next(in, &pos, tag, &content))
		return KILN_ERR_NOT_FOUND;
	return kiln_xml_text(content, out, cap);
}
