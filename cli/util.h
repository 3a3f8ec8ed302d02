/* Small pieces every subcommand uses: number parsing, output naming, the progress bar. */
#ifndef KILN_CLI_UTIL_H
#define KILN_CLI_UTIL_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/gpu.h"
#include "kernels/png/png_file.h"

/* Parses a decimal integer in [min, max]; false (with a message naming opt) otherwise. */
bool cli_parse_long(const char *cmd, const char *opt, const char *arg, long min, long max, long *out);

/* Parses a --device value (auto, cpu, gpu or gpu:N); false (with a message naming cmd) otherwise. */
bool cli_parse_device(const char *cmd, const char *arg, kiln_device *out);

/* Parses a --png-decoder value (kiln or libpng); false (with a message naming cmd) otherwise. */
bool cli_parse_png_decoder(const char *cmd, const char *arg, kiln_png_decoder *out);

/* The help line of --png-decoder, the same in every command that reads PNG files. */
#define CLI_PNG_DECODER_HELP \
	"  --png-decoder kiln|libpng     PNG decoder (default kiln: kiln's own, on the GPU\n" \
	"                                when one encodes; libpng: the reference library)\n"

/* dir/<input's base name without extension>.ext into out; false if it does not fit. */
bool cli_output_name(const char *dir, const char *input, const char *ext, char *out, size_t cap);

/* true when path names an existing directory. */
bool cli_is_dir(const char *path);

/* Writes text and a newline to path with exactly this mode (whatever the umask), for
 * secrets: never through a symlink, and only over an existing file when replace is set.
 * False (with a message naming cmd) on failure. */
bool cli_write_private(const char *cmd, const char *path, const char *text, unsigned mode, bool replace);

/* A one-line progress bar on stderr when it is a terminal (done/failed/total, rate, ETA);
 * nothing otherwise, so logs and pipes stay clean. */
typedef struct cli_progress {
	bool enabled;
	size_t total;
	double start;
	double last_draw;
} cli_progress;

void cli_progress_start(cli_progress *p, size_t total, bool quiet);
void cli_progress_update(cli_progress *p, size_t done, size_t failed);
void cli_progress_finish(cli_progress *p);
/* Draws the bar with figures measured elsewhere (a scheduler's rate and ETA). */
void cli_progress_show(cli_progress *p, size_t total, size_t done, size_t failed, double rate, double eta);

/* Monotonic seconds. */
double cli_now(void);

/* The long-running commands (scheduler, worker, run) stop cleanly on SIGINT and SIGTERM.
 * cli_stop_signals_catch sends both to handler, which may only ask the command to stop
 * (async-signal-safe), and keeps the actions they had in *saved (saved may be NULL);
 * cli_stop_signals_restore puts those back, or the defaults when saved is NULL (then a
 * second signal during the shutdown ends the process at once). */
typedef struct cli_stop_signals {
	struct sigaction old_int, old_term;
} cli_stop_signals;

void cli_stop_signals_catch(cli_stop_signals *saved, void (*handler)(int));
void cli_stop_signals_restore(const cli_stop_signals *saved);

#endif
