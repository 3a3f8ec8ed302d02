/* GPU tests of the mip chains (make test-gpu, on a GPU machine): every level built by
 * kiln_mip_build_gpu is byte-identical to kiln_mip_build_cpu's, for random images of even
 * and odd sizes, sRGB and linear, in batches of 1, 7 and 32 chains; the GPU entry point
 * refuses what the CPU one refuses. Without a GPU these tests fail: this binary only runs
 * where a GPU is expected. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "common/pool.h"
#include "common/texture.h"
#include "kernels/gpu.h"
#include "kernels/mip/mip.h"
#include "tests/gpu/gpu_testutil.h"
#include "tests/unit/mip_chains.h"

/* A chain's levels in device memory: one allocation, levels at offsets, same strides as
 * the host chain it mirrors. */
typedef struct dev_chain {
	kiln_surface levels[TEST_MIP_MAX_LEVELS];
	kiln_mip_chain chain;
	uint8_t *mem;
} dev_chain;

static void dev_chain_upload(dev_chain *d, const test_chain *h, kiln_stream stream)
{
	size_t size = 0;
	for (uint32_t l = 0; l < h->chain.count; l++)
		size += (size_t)h->levels[l].stride * h->levels[l].height;
	cr_assert_eq(kiln_gpu_malloc((void **)&d->mem, size), KILN_OK, "%s", kiln_gpu_last_error());
	/* a fill the filter never produces everywhere, so unwritten texels show */
	cr_assert_eq(kiln_gpu_memset(d->mem, 0xa5, size, stream), KILN_OK);
	size_t off = 0;
	for (uint32_t l = 0; l < h->chain.count; l++) {
		d->levels[l] = h->levels[l];
		d->levels[l].rgba = d->mem + off;
		off += (size_t)h->levels[l].stride * h->levels[l].height;
	}
	cr_assert_eq(kiln_gpu_h2d(d->mem, h->pixels[0], (size_t)h->levels[0].stride * h->levels[0].height,
				  stream), KILN_OK);
	d->chain = h->chain;
	d->chain.levels = d->levels;
}

static void dev_chain_download(const dev_chain *d, test_chain *h, kiln_stream stream)
{
	for (uint32_t l = 0; l < h->chain.count; l++) /* level 0 too: the source must come back unchanged */
		cr_assert_eq(kiln_gpu_d2h(h->pixels[l], d->levels[l].rgba,
					  (size_t)h->levels[l].stride * h->levels[l].height, stream), KILN_OK);
}

typedef struct spec {
	uint32_t w, h;
	bool srgb;
} spec;

/* Builds the chains of `specs` on the CPU (4 threads) and, as one batch, on the GPU, and
 * expects the same bytes at every level. */
static void expect_gpu_equals_cpu(const spec *specs, size_t n, uint32_t seed)
{
	gpu_test_require_device0("mip_gpu");
	test_chain *cpu = calloc(n, sizeof *cpu), *gpu = calloc(n, sizeof *gpu);
	dev_chain *dev = calloc(n, sizeof *dev);
	kiln_mip_chain *cpu_chains = calloc(n, sizeof *cpu_chains), *dev_chains = calloc(n, sizeof *dev_chains);
	cr_assert(cpu && gpu && dev && cpu_chains && dev_chains);
	kiln_stream stream;
	cr_assert_eq(kiln_gpu_stream_create(&stream), KILN_OK, "%s", kiln_gpu_last_error());

	uint32_t max_levels = 1;
	for (size_t i = 0; i < n; i++) {
		uint32_t pad = (uint32_t)(i % 3) * 4;
		cr_assert(test_chain_alloc(&cpu[i], specs[i].w, specs[i].h, pad, specs[i].srgb));
		cr_assert(test_chain_alloc(&gpu[i], specs[i].w, specs[i].h, pad, specs[i].srgb));
		test_chain_random(&cpu[i], seed + (uint32_t)i);
		dev_chain_upload(&dev[i], &cpu[i], stream);
		cpu_chains[i] = cpu[i].chain;
		dev_chains[i] = dev[i].chain;
		if (cpu[i].chain.count > max_levels)
			max_levels = cpu[i].chain.count;
	}

	size_t temp_size = kiln_mip_temp_size(n, max_levels);
	void *d_temp = NULL;
	cr_assert_eq(kiln_gpu_malloc(&d_temp, temp_size), KILN_OK);
	cr_assert_eq(kiln_mip_build_gpu(dev_chains, n, d_temp, temp_size, stream), KILN_OK, "%s",
		     kiln_gpu_last_error());
	for (size_t i = 0; i < n; i++)
		dev_chain_download(&dev[i], &gpu[i], stream);
	cr_assert_eq(kiln_gpu_stream_sync(stream), KILN_OK, "%s", kiln_gpu_last_error());

	kiln_pool *pool;
	cr_assert_eq(kiln_pool_create(4, &pool), KILN_OK);
	cr_assert_eq(kiln_mip_build_cpu(cpu_chains, n, pool), KILN_OK);
	kiln_pool_destroy(pool);

	for (size_t i = 0; i < n; i++) {
		uint32_t bad = 0;
		cr_expect(test_chain_equal(&cpu[i], &gpu[i], &bad),
			  "batch of %zu, chain %zu (%ux%u %s): level %u differs between CPU and GPU",
			  n, i, specs[i].w, specs[i].h, specs[i].srgb ? "sRGB" : "linear", bad);
		test_chain_free(&cpu[i]);
		test_chain_free(&gpu[i]);
		kiln_gpu_free(dev[i].mem);
	}
	kiln_gpu_free(d_temp);
	kiln_gpu_stream_destroy(stream);
	free(cpu);
	free(gpu);
	free(dev);
	free(cpu_chains);
	free(dev_chains);
}

/* n pseudo-random sizes from 1 to max_side per axis, sRGB on every other chain. */
static void random_specs(spec *specs, size_t n, uint32_t max_side, uint32_t seed, int srgb_mode)
{
	uint32_t r = seed * 747796405u + 2891336453u;
	for (size_t i = 0; i < n; i++) {
		r = r * 1103515245u + 12345u;
		specs[i].w = 1 + (r >> 8) % max_side;
		r = r * 1103515245u + 12345u;
		specs[i].h = 1 + (r >> 8) % max_side;
		specs[i].srgb = srgb_mode < 0 ? i % 2 == 0 : srgb_mode;
	}
}

Test(mip_gpu, single_chains)
{
	static const spec specs[] = {
		{ 768, 512, true }, { 768, 512, false }, { 4099, 17, true }, { 1, 9, false },
		{ 5, 3, true }, { 1, 1, true }, { 1023, 1025, true }, { 2048, 1, false },
	};
	for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++)
		expect_gpu_equals_cpu(&specs[i], 1, 7 + (uint32_t)i);
}

Test(mip_gpu, batch_of_7)
{
	spec specs[7];
	for (int mode = 0; mode < 2; mode++) {
		random_specs(specs, 7, 700, 11 + mode, mode);
		expect_gpu_equals_cpu(specs, 7, 100 + mode);
	}
	random_specs(specs, 7, 33, 13, -1);
	expect_gpu_equals_cpu(specs, 7, 102);
}

Test(mip_gpu, batch_of_32)
{
	spec specs[32];
	for (int mode = -1; mode < 2; mode++) {
		random_specs(specs, 32, 900, 21 + mode, mode);
		expect_gpu_equals_cpu(specs, 32, 200 + mode);
	}
	/* Kodak-sized, mixed */
	for (size_t i = 0; i < 32; i++)
		specs[i] = (spec){ i % 3 ? 768 : 512, i % 3 ? 512 : 768, i % 2 == 0 };
	expect_gpu_equals_cpu(specs, 32, 300);
}

Test(mip_gpu, refuses_what_the_cpu_refuses)
{
	gpu_test_require_device0("mip_gpu");
	test_chain tc;
	cr_assert(test_chain_alloc(&tc, 9, 6, 0, true));
	dev_chain d;
	dev_chain_upload(&d, &tc, NULL);
	size_t temp_size = kiln_mip_temp_size(1, d.chain.count);
	void *d_temp = NULL;
	cr_assert_eq(kiln_gpu_malloc(&d_temp, temp_size), KILN_OK);

	cr_expect_eq(kiln_mip_build_gpu(&d.chain, 1, d_temp, temp_size - 1, NULL), KILN_ERR_INVALID_ARG,
		     "temp too small");
	cr_expect_eq(kiln_mip_build_gpu(&d.chain, 1, NULL, temp_size, NULL), KILN_ERR_INVALID_ARG,
		     "no temp");
	d.levels[1].width = 5;
	cr_expect_eq(kiln_mip_build_gpu(&d.chain, 1, d_temp, temp_size, NULL), KILN_ERR_INVALID_ARG,
		     "wrong level size");
	d.levels[1].width = 4;
	cr_expect_eq(kiln_mip_build_gpu(&d.chain, 1, d_temp, temp_size, NULL), KILN_OK);
	cr_expect_eq(kiln_gpu_stream_sync(NULL), KILN_OK, "%s", kiln_gpu_last_error());

	kiln_gpu_free(d_temp);
	kiln_gpu_free(d.mem);
	test_chain_free(&tc);
}
