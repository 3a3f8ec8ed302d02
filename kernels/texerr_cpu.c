/* kiln_texerr on the host (kernels/texerr.h), and the PSNR of its sums. */
#include <math.h>

#include "kernels/texerr.h"
#include "kernels/texerr_block.h"

typedef struct cpu_ctx {
	const kiln_texerr_job *jobs;
	kiln_texerr *out;
} cpu_ctx;

static void measure_range(void *p, size_t begin, size_t end)
{
	const cpu_ctx *c = p;
	for (size_t i = begin; i < end; i++) {
		const kiln_texerr_job *j = &c->jobs[i];
		uint64_t sse = 0, n = 0, blocks = kiln_texerr_blocks(j);
		for (uint64_t b = 0; b < blocks; b++)
			kiln_texerr_block(j, b, &sse, &n);
		c->out[i] = (kiln_texerr){sse, n};
	}
}

kiln_status kiln_texerr_cpu(const kiln_texerr_job *jobs, size_t count, kiln_texerr *out, kiln_pool *pool)
{
	if (count && (!jobs || !out))
		return KILN_ERR_INVALID_ARG;
	for (size_t i = 0; i < count; i++)
		if (!jobs[i].src.rgba || !jobs[i].blocks || !jobs[i].block_w || !jobs[i].block_h)
			return KILN_ERR_INVALID_ARG;
	cpu_ctx c = {jobs, out};
	if (pool)
		kiln_pool_for(pool, count, 1, measure_range, &c);
	else
		measure_range(&c, 0, count);
	return KILN_OK;
}

bool kiln_texerr_psnr(const kiln_texerr *e, int32_t *centi_db)
{
	if (!e->texels)
		return false;
	double mse = (double)e->sse / (3.0 * (double)e->texels);
	double db = mse > 0 ? 10.0 * log10(255.0 * 255.0 / mse) : 99.0;
	*centi_db = (int32_t)lround((db < 99.0 ? db : 99.0) * 100.0);
	return true;
}
