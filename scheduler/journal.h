/* The scheduler's journal: an append-only file of JSON records, one per line, in the state
 * directory. A record is durable (fsynced) before the caller acknowledges what it says, so
 * a restart replays exactly what was promised. The journal knows nothing of jobs: it
 * stores, replays and compacts opaque JSON objects; scheduler/jobs.c gives them meaning.
 *
 * Crash safety: a record is one write() of "JSON\n". After a crash (kill -9, power loss)
 * only the last line can be incomplete; replay ignores it and cuts it off so that later
 * appends start on a clean line. A failed append (disk full) is cut off the same way.
 * Compaction writes the live state to a new file, fsyncs it and renames it over the
 * journal (then fsyncs the directory), so at every instant one complete journal exists. */
#ifndef KILN_SCHED_JOURNAL_H
#define KILN_SCHED_JOURNAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"

typedef struct kiln_journal kiln_journal;

/* Where compaction writes; handed to a kiln_journal_dump_fn. */
typedef struct kiln_journal_sink kiln_journal_sink;

#define KILN_JOURNAL_FILE "journal.jsonl"
#define KILN_JOURNAL_DEFAULT_COMPACT (64u << 20)  /* bytes */
#define KILN_JOURNAL_MAX_LINE (256u << 20)        /* a longer line is corruption */

/* Opens (creating if needed) DIR/journal.jsonl, creating DIR too. Takes an exclusive lock
 * on DIR/lock, so two schedulers never share a state directory (KILN_ERR_PERMISSION when
 * another holds it; the lock dies with its process, kill -9 included).
 * compact_bytes: journal size past which kiln_journal_wants_compaction says yes (0: the
 * default). */
kiln_status kiln_journal_open(const char *dir, uint64_t compact_bytes, kiln_journal **out);
void kiln_journal_close(kiln_journal *j);

/* Called once per record in file order; a status other than KILN_OK stops the replay. */
typedef kiln_status (*kiln_journal_replay_fn)(void *ctx, json_t *record);

/* Replays every complete record. An incomplete or unparsable last line is dropped (and
 * truncated away); an unparsable line before the last is KILN_ERR_CORRUPT: that is not a
 * crash, and the scheduler refuses to start rather than lose what follows it. */
kiln_status kiln_journal_replay(kiln_journal *j, kiln_journal_replay_fn fn, void *ctx);

/* Appends one record; durable only after kiln_journal_sync. */
kiln_status kiln_journal_append(kiln_journal *j, const json_t *record);
kiln_status kiln_journal_sync(kiln_journal *j);
/* Appends records already written as text: one or more complete lines, each a compact JSON
 * object followed by '\n' and holding no other newline (kiln_json_put_string escapes
 * them). One write() for all of them, so a group commit costs one system call; on failure
 * the file is cut back as for kiln_journal_append and none of them is in it. Durable only
 * after kiln_journal_sync. */
kiln_status kiln_journal_append_text(kiln_journal *j, const char *text, size_t len);
/* append + sync: what a caller uses before acknowledging. */
kiln_status kiln_journal_commit(kiln_journal *j, const json_t *record);

uint64_t kiln_journal_size(const kiln_journal *j);
/* True when the journal has grown past its threshold (which rises after a compaction
 * that could not shrink it, so a large live state does not compact on every append). */
bool kiln_journal_wants_compaction(const kiln_journal *j);

/* Says that the last `bytes` appended are live state (a new job's records), which a
 * compaction would only copy: the threshold rises by as much as a compaction that left
 * them would have raised it, so a large new job does not rewrite the journal at once. */
void kiln_journal_note_live(kiln_journal *j, uint64_t bytes);

/* Writes the live state: fn calls kiln_journal_sink_put for every record that replaying
 * the new journal needs. On any failure the old journal stays as it was. */
typedef kiln_status (*kiln_journal_dump_fn)(void *ctx, kiln_journal_sink *sink);
kiln_status kiln_journal_compact(kiln_journal *j, kiln_journal_dump_fn fn, void *ctx);
kiln_status kiln_journal_sink_put(kiln_journal_sink *sink, const json_t *record);

#endif
