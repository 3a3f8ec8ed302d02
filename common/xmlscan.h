/* A tiny, bounded extractor for the few XML documents S3 sends back (errors, listings,
 * multipart results). It finds elements by name and decodes their text; it never
 * processes a DTD, so no entity can expand and nothing external is ever fetched: a
 * document with a DOCTYPE is refused outright. */
#ifndef KILN_XMLSCAN_H
#define KILN_XMLSCAN_H

#include <stdbool.h>
#include <stddef.h>

#include "common/error.h"

typedef struct kiln_xml_span {
	const char *p;
	size_t len;
} kiln_xml_span;

/* KILN_ERR_CORRUPT for a document that declares a DTD or holds a NUL byte. */
kiln_status kiln_xml_check(const char *doc, size_t len);

/* Finds the first element named tag (<tag>, <tag attr="...">, or <tag/>) that starts at or
 * after *pos within in; on success sets *content to what lies between its start and end
 * tags, moves *pos past the end tag, and returns true. */
bool kiln_xml_next(kiln_xml_span in, size_t *pos, const char *tag, kiln_xml_span *content);

/* Decodes character data (the five predefined entities and &#N; / &#xN; references) into
 * out as a NUL-terminated string. KILN_ERR_CORRUPT for markup, unknown entities or a NUL
 * reference; KILN_ERR_TOO_LARGE if it does not fit in cap bytes. */
kiln_status kiln_xml_text(kiln_xml_span text, char *out, size_t cap);

/* kiln_xml_next from the start of in, then kiln_xml_text: the text of the first tag. */
kiln_status kiln_xml_find_text(kiln_xml_span in, const char *tag, char *out, size_t cap);

#endif
