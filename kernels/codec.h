/* Options shared by the texture codecs. */
#ifndef KILN_CODEC_H
#define KILN_CODEC_H

typedef enum kiln_quality {
	KILN_QUALITY_FAST = 0,
	KILN_QUALITY_MEDIUM = 1,
	KILN_QUALITY_HIGH = 2,
} kiln_quality;

/* Parses "fast", "medium", "high"; returns -1 for anything else. */
int kiln_quality_parse(const char *name);
const char *kiln_quality_name(kiln_quality quality);

#endif
