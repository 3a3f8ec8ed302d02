/* GPU test of the worker pipeline (make test-gpu): `kiln run`, i.e. the scheduler and a
 * worker with the GPU backend (texenc keeping several batches in flight), writes the same
 * files as the same job on the CPU backend. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/gpu.h"

Test(worker_gpu, kiln_run_on_the_gpu_writes_the_cpu_backends_files, .timeout = 600)
{
	if (kiln_gpu_count() < 1)
		cr_assert_fail("no usable GPU: make test-gpu must run on a machine with an NVIDIA GPU");
	const char *bin = getenv("KILN_BIN") ? getenv("KILN_BIN") : "build/kiln";
	const char *shared = getenv("KILN_SHARED") ? getenv("KILN_SHARED") : "../shared/data";
	char cmd[4096];
	/* more images than one batch, with mips, through real shards */
	snprintf(cmd, sizeof cmd,
		 "set -e; d=$(mktemp -d); %s samples -o $d/in; cp %s/kodak/*.png $d/in/; "
		 "for i in 1 2; do mkdir -p $d/in/copy$i; cp %s/kodak/kodim1*.png $d/in/copy$i/; done; "
		 "%s run -q --shard-size 8 --mipmaps --container ktx2 --device gpu --input $d/in --output $d/gpu; "
		 "%s run -q --shard-size 8 --mipmaps --container ktx2 --device cpu --input $d/in --output $d/cpu; "
		 "test $(find $d/gpu -name '*.ktx2' | wc -l) -eq $(find $d/in -name '*.png' | wc -l); "
		 "diff -r $d/cpu $d/gpu; rm -rf $d",
		 bin, shared, shared, bin, bin);
	cr_expect_eq(system(cmd), 0, "kiln run on the GPU must write the same files as on the CPU");
}
