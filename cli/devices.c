/* kiln devices: what `--device auto` would pick from, for humans and (with --json) scripts. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "common/host.h"
#include "kernels/gpu.h"

int cli_devices(int argc, char **argv)
{
	bool json = false;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--json") == 0) {
			json = true;
		} else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			puts("usage: kiln devices [--json]\n\nList the CPU and the GPUs kiln can use.");
			return CLI_EXIT_OK;
		} else {
			fprintf(stderr, "kiln devices: unknown argument '%s'\n", argv[i]);
			return CLI_EXIT_USAGE;
		}
	}
	json_t *list = json_array();
	json_array_append_new(list, json_pack("{s:s, s:i}", "device", "cpu", "threads", (int)kiln_cpu_count()));
	int gpus = kiln_gpu_count();
	for (int g = 0; g < gpus; g++) {
		char name[256] = "";
		size_t mem = 0;
		char id[16];
		snprintf(id, sizeof id, "gpu:%d", g);
		kiln_gpu_describe(g, name, sizeof name, &mem);
		json_array_append_new(list, json_pack("{s:s, s:s, s:I}", "device", id, "name", name,
						      "memory_bytes", (json_int_t)mem));
	}
	if (json) {
		json_t *root = json_pack("{s:o, s:b}", "devices", list, "cuda_built", kiln_gpu_built());
		json_dumpf(root, stdout, JSON_INDENT(2));
		fputc('\n', stdout);
		json_decref(root);
		return CLI_EXIT_OK;
	}
	size_t i;
	json_t *d;
	json_array_foreach(list, i, d) {
		if (json_object_get(d, "threads"))
			printf("cpu     %d threads\n", (int)json_integer_value(json_object_get(d, "threads")));
		else
			printf("%-7s %s, %.1f GiB\n", json_string_value(json_object_get(d, "device")),
			       json_string_value(json_object_get(d, "name")),
			       (double)json_integer_value(json_object_get(d, "memory_bytes")) / (1 << 30));
	}
	if (!kiln_gpu_built())
		printf("(built without CUDA: GPUs are not used)\n");
	json_decref(list);
	return CLI_EXIT_OK;
}
