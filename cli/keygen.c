/* kiln keygen: a CURVE key pair for the scheduler or a worker, as two files of Z85 text:
 * PREFIX.key (the secret, mode 0600) and PREFIX.pub (the public key, to hand out). */
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "cli/cli.h"
#include "cli/util.h"
#include "common/curve.h"

static const char usage_text[] =
	"usage: kiln keygen --out PREFIX [--force]\n"
	"\n"
	"Make a CURVE key pair: PREFIX.key holds the secret key (mode 0600; give it to\n"
	"'kiln scheduler --curve-secret' or 'kiln worker --curve-secret'), PREFIX.pub the\n"
	"public key (the scheduler's goes to every worker as --curve-server-key). Both are\n"
	"40 characters of Z85 text and a newline. Existing files are kept unless --force\n"
	"(an existing file makes keygen fail).\n"
	"\n"
	"options:\n"
	"  --out PREFIX   where to write PREFIX.key and PREFIX.pub\n"
	"  --force        replace existing files\n"
	"  -h, --help     this text\n"
	"\n"
	"exit status: 0 written, 2 usage error, 3 could not write (nothing is left half-made)\n";

int cli_keygen(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"out", required_argument, NULL, 'o'},
		{"force", no_argument, NULL, 'f'},
		{"help", no_argument, NULL, 'h'},
		{0, 0, 0, 0},
	};
	const char *prefix = NULL;
	bool force = false;
	int c;
	optind = 1;
	while ((c = getopt_long(argc, argv, "o:fh", longopts, NULL)) != -1) {
		switch (c) {
		case 'o': prefix = optarg; break;
		case 'f': force = true; break;
		case 'h': fputs(usage_text, stdout); return CLI_EXIT_OK;
		default: fprintf(stderr, "kiln keygen: see 'kiln keygen --help'\n"); return CLI_EXIT_USAGE;
		}
	}
	if (optind < argc || !prefix || !prefix[0]) {
		fprintf(stderr, "kiln keygen: give --out PREFIX (see 'kiln keygen --help')\n");
		return CLI_EXIT_USAGE;
	}
	char pub[KILN_CURVE_KEY_LEN + 1], sec[KILN_CURVE_KEY_LEN + 1];
	char key_path[4096], pub_path[4096];
	int rc = CLI_EXIT_USAGE;
	if (snprintf(key_path, sizeof key_path, "%s.key", prefix) >= (int)sizeof key_path ||
	    snprintf(pub_path, sizeof pub_path, "%s.pub", prefix) >= (int)sizeof pub_path) {
		fprintf(stderr, "kiln keygen: --out is too long\n");
		goto fail;
	}
	rc = CLI_EXIT_FATAL;
	if (!zmq_has("curve") || zmq_curve_keypair(pub, sec) != 0) {
		fprintf(stderr, "kiln keygen: this libzmq cannot make CURVE keys\n");
		goto fail;
	}
	/* the secret is 0600 from its first byte; the public key is meant to be handed out */
	if (!cli_write_private("keygen", key_path, sec, 0600, force))
		goto fail;
	/* without its public half the secret is of no use: take it back rather than leave half a pair */
	if (!cli_write_private("keygen", pub_path, pub, 0644, force)) {
		unlink(key_path);
		goto fail;
	}
	printf("%s\n%s\n", key_path, pub_path);
	rc = CLI_EXIT_OK;
fail:
	explicit_bzero(sec, sizeof sec);
	return rc;
}
