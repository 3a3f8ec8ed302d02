// The CUDA backend of kiln's PNG decoder: a batch of probed files (bytes already in device
// memory) -> RGBA8 surfaces in device memory, in four kernels on one stream:
//  1. gather: the IDAT payloads of a file split over several chunks are copied into one
//     contiguous zlib stream (a block per file; single-IDAT files are read in place);
//  2. inflate: one warp per strip (kiSt) or per file. Lane 0 decodes Huffman symbols with
//     the tables and bit reader of png_inflate.h (tables in shared memory) into a batch of
//     tokens; the warp then writes the batch's literals in parallel and resolves its
//     matches one after another, 32 bytes of a match per step (byte j of a match is
//     src[j % dist], so even short distances copy in parallel). The warp then computes
//     the Adler-32 of what it inflated, lanes on slices combined with png_check.h;
//  3. finish: one warp per file checks the strips (status, sizes, the combined Adler-32
//     against the trailer) and, when a kiSt chunk lied, inflates the file serially;
//  4. de-filter: a tile-wave over bands of 32 rows. A warp takes the next band by ticket
//     (atomicAdd: lower tickets are always held by running warps, so waiting on them
//     cannot deadlock); lane k de-filters row k of the band one pixel behind lane k-1
//     (the wave), with kiln_png_unfilter_byte, and converts the pixel with kiln_png_pixel
//     into the surface. The band's last row publishes its progress (pixels done) in device
//     memory every 32 pixels; the next band's first row waits on it only when its filter
//     reads the row above (Up, Avg, Paeth): None/Sub rows, which start every kiSt strip,
//     start at once.
// Integer code from the same headers as the CPU path: the pixels are identical.
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

extern "C" {
#include "kernels/png/png_dec.h"
}
#include "kernels/png/png_check.h"
#include "kernels/png/png_defilter.h"
#include "kernels/png/png_inflate.h"

#define FULL_MASK 0xffffffffu
#define INFL_WARPS 3   // warps per CTA of the inflate kernels (tables: 13.6 KB each)
#define NTOK 128       // tokens per batch
#define BAND 32        // rows per de-filter band (a warp)
#define DEF_WARPS 4

enum { ST_OK = 0, ST_CORRUPT = 1, ST_TRUNCATED = 2, ST_FILTER = 3, ST_HEADER = 4 };

struct pd_file {
	const uint8_t *data;
	const uint8_t *zlib;
	uint8_t *zcopy;      // NULL when zlib points into data
	uint8_t *filt;
	uint8_t *rgba;
	uint32_t *strip_res; // per strip: status, adler, out_len, final
	uint32_t *progress;  // per band
	uint64_t zlib_size, filtered_size, rowbytes, idat_offset, kist_offsets;
	uint32_t stride, width, height, strips, rows_per_strip, bpp, idat_chunks, zlib_adler;
	uint32_t first_strip, first_band;
	kiln_png_format format;
};

struct pd_globals {
	uint32_t band_ticket;
	uint32_t pad[63];
};

// ---- layout of d_temp ------------------------------------------------------------------

static size_t align256(size_t v) { return (v + 255) & ~(size_t)255; }

struct layout {
	size_t files;      // pd_file[count]
	size_t globals;
	size_t status;     // uint32 per file (zeroed)
	size_t strip_res;  // 4 uint32 per strip (zeroed)
	size_t progress;   // uint32 per band (zeroed)
	size_t zero_end;
	size_t data;       // per file zlib copies and filtered buffers
	size_t total;
	uint64_t strips, bands;
};

static uint32_t file_bands(const kiln_pngdec_info *in) { return (in->height + BAND - 1) / BAND; }

static bool make_layout(const kiln_pngdec_gpu_file *files, size_t count, layout *l)
{
	l->strips = 0;
	l->bands = 0;
	size_t data = 0;
	for (size_t i = 0; i < count; i++) {
		const kiln_pngdec_info *in = &files[i].info;
		if (!in->gpu_ok)
			continue;
		l->strips += in->strips;
		l->bands += file_bands(in);
		if (in->idat_chunks > 1)
			data += align256((size_t)in->zlib_size);
		data += align256((size_t)in->filtered_size + 16);
	}
	l->files = 0;
	l->globals = align256(count * sizeof(pd_file));
	l->status = l->globals + align256(sizeof(pd_globals));
	l->strip_res = l->status + align256(count * 4);
	l->progress = l->strip_res + align256((size_t)l->strips * 16);
	l->zero_end = l->progress + align256((size_t)l->bands * 4);
	l->data = l->zero_end;
	l->total = l->data + data + 256;
	return true;
}

extern "C" size_t kiln_pngdec_temp_size(const kiln_pngdec_gpu_file *files, size_t count)
{
	layout l;
	if (!files || count == 0)
		return 0;
	make_layout(files, count, &l);
	return l.total;
}

// ---- device helpers --------------------------------------------------------------------

template <typename T> __device__ static uint32_t find_prefix(const pd_file *f, uint32_t count, T idx, bool band)
{
	uint32_t lo = 0, hi = count;
	while (hi - lo > 1) {
		uint32_t mid = lo + (hi - lo) / 2;
		uint32_t first = band ? f[mid].first_band : f[mid].first_strip;
		if (first <= idx)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

// 1: gather the IDAT payloads.
__global__ void pd_gather(const pd_file *files, uint32_t count, uint32_t *status)
{
	const pd_file *f = &files[blockIdx.x];
	if (!f->zcopy || status[blockIdx.x] != ST_OK)
		return;
	__shared__ uint64_t src, dst;
	__shared__ uint32_t len;
	uint64_t pos = f->idat_offset, out = 0;
	for (uint32_t c = 0; c < f->idat_chunks; c++) {
		if (threadIdx.x == 0) {
			const uint8_t *h = f->data + pos;
			len = kiln_png_be32(h);
			src = pos + 8;
			dst = out;
		}
		__syncthreads();
		for (uint32_t i = threadIdx.x; i < len; i += blockDim.x)
			f->zcopy[dst + i] = f->data[src + i];
		pos += 12 + (uint64_t)len;
		out += len;
		__syncthreads();
	}
}

struct token {
	uint32_t pos;
	uint32_t len_dist; // len << 16 | dist; len 0: a literal, its byte in dist
};

struct warp_shared {
	kiln_inflate_tables t;
	token tok[NTOK];
	uint32_t n, done, rc, final;
	uint64_t out_len, used;
};

// Inflates raw deflate in[0, len) into out[0, cap) with one warp: the semantics of
// kiln_inflate_raw (same results, same output bytes).
__device__ static void warp_inflate(warp_shared *w, const uint8_t *in, size_t len, uint8_t *out,
				    size_t cap, int strip)
{
	int lane = threadIdx.x & 31;
	// lane 0's decoder state
	kiln_bits b;
	size_t o = 0;
	int in_block = 0, blocks = 0;
	uint32_t bfinal = 0, btype = 0;
	int rc = KILN_INFL_OK, final = 0, done = 0;
	if (lane == 0)
		kiln_bits_init(&b, in, len);
	for (;;) {
		if (lane == 0) {
			uint32_t n = 0;
			while (n < NTOK && !done) {
				if (!in_block) {
					if (final || (strip && blocks > 0 && (b.count & 7u) == 0 &&
						      kiln_bits_consumed(&b) == len)) {
						done = 1;
						break;
					}
					uint32_t stored = 0;
					rc = kiln_infl_block_header(&w->t, &b, &bfinal, &btype, &stored);
					if (rc == KILN_INFL_ERR_DATA && o >= cap && cap > 0)
						rc = KILN_INFL_OUTPUT_FULL; // as kiln_inflate_raw
					if (rc != KILN_INFL_OK) {
						done = 1;
						break;
					}
					if (btype == 0) {
						rc = kiln_infl_stored(&b, stored, out, &o, cap);
						blocks++;
						if (rc != KILN_INFL_OK) {
							done = 1;
							break;
						}
						if (bfinal)
							final = 1;
						continue;
					}
					in_block = 1;
				}
				if (b.count < 48)
					kiln_bits_refill(&b);
				if (b.overrun > 8) {
					rc = KILN_INFL_ERR_TRUNCATED;
					done = 1;
					break;
				}
				uint32_t e = kiln_infl_lookup(w->t.lit, KILN_INFL_LIT_BITS, &b);
				uint32_t kind = KILN_INFL_KIND(e);
				if (kind == KILN_INFL_LIT) {
					if (o >= cap) {
						rc = KILN_INFL_OUTPUT_FULL;
						done = 1;
						break;
					}
					w->tok[n].pos = (uint32_t)o;
					w->tok[n].len_dist = e >> 16;
					n++;
					o++;
					continue;
				}
				if (kind == KILN_INFL_EOB) {
					in_block = 0;
					blocks++;
					if (!kiln_bits_ok(&b)) {
						rc = KILN_INFL_ERR_TRUNCATED;
						done = 1;
						break;
					}
					if (bfinal)
						final = 1;
					continue;
				}
				if (o >= cap) { // as kiln_infl_huffman: past the image, libpng only drains
					rc = KILN_INFL_OUTPUT_FULL;
					done = 1;
					break;
				}
				if (kind != KILN_INFL_LEN) {
					rc = KILN_INFL_ERR_DATA;
					done = 1;
					break;
				}
				uint32_t extra = (e >> 12) & 15u;
				uint32_t l = (e >> 16) + (uint32_t)(b.buf & ((1u << extra) - 1));
				kiln_bits_drop(&b, extra);
				uint32_t d = kiln_infl_lookup(w->t.dist, KILN_INFL_DIST_BITS, &b);
				if (KILN_INFL_KIND(d) != KILN_INFL_LEN) {
					rc = KILN_INFL_ERR_DATA;
					done = 1;
					break;
				}
				extra = (d >> 12) & 15u;
				uint32_t dist = (d >> 16) + (uint32_t)(b.buf & ((1u << extra) - 1));
				kiln_bits_drop(&b, extra);
				if (dist > o) {
					rc = KILN_INFL_ERR_DISTANCE;
					done = 1;
					break;
				}
				if (l > cap - o) {
					l = (uint32_t)(cap - o);
					rc = KILN_INFL_OUTPUT_FULL;
					done = 1;
				}
				if (l) {
					w->tok[n].pos = (uint32_t)o;
					w->tok[n].len_dist = l << 16 | dist;
					n++;
					o += l;
				}
			}
			if (done && rc == KILN_INFL_OK && !kiln_bits_ok(&b))
				rc = KILN_INFL_ERR_TRUNCATED;
			w->n = n;
			w->done = (uint32_t)done;
		}
		__syncwarp();
		uint32_t n = w->n;
		for (uint32_t i = lane; i < n; i += 32) {
			token t = w->tok[i];
			if ((t.len_dist >> 16) == 0)
				out[t.pos] = (uint8_t)t.len_dist;
		}
		__syncwarp();
		for (uint32_t i = 0; i < n; i++) {
			token t = w->tok[i];
			uint32_t l = t.len_dist >> 16;
			if (l == 0)
				continue;
			uint32_t dist = t.len_dist & 0xFFFFu;
			uint8_t *dst = out + t.pos;
			const uint8_t *src = dst - dist;
			for (uint32_t j = lane; j < l; j += 32)
				dst[j] = src[j % dist];
			__syncwarp();
		}
		uint32_t all_done = w->done;
		__syncwarp();
		if (all_done)
			break;
	}
	if (lane == 0) {
		size_t used = kiln_bits_consumed(&b);
		if (rc == KILN_INFL_OK && strip && used != len)
			rc = KILN_INFL_ERR_STRIP;
		w->rc = (uint32_t)rc;
		w->final = (uint32_t)final;
		w->out_len = o;
		w->used = used;
	}
	__syncwarp();
}

// Adler-32 of p[0, n) by a warp: lane slices, combined in order.
__device__ static uint32_t warp_adler(const uint8_t *p, size_t n)
{
	int lane = threadIdx.x & 31;
	size_t per = (n + 31) / 32;
	size_t a = (size_t)lane * per < n ? (size_t)lane * per : n;
	size_t e = a + per < n ? a + per : n;
	uint32_t mine = kiln_adler32_update(1u, p + a, e - a);
	uint32_t total = 1u;
	for (int k = 0; k < 32; k++) {
		uint32_t v = __shfl_sync(FULL_MASK, mine, k);
		size_t ka = (size_t)k * per < n ? (size_t)k * per : n;
		size_t ke = ka + per < n ? ka + per : n;
		total = kiln_adler32_combine(total, v, ke - ka);
	}
	return total;
}

__device__ static void strip_rows(const pd_file *f, uint32_t i, uint32_t *r0, uint32_t *r1)
{
	*r0 = i * f->rows_per_strip;
	uint32_t e = *r0 + f->rows_per_strip;
	*r1 = e > f->height || e < *r0 ? f->height : e;
}

// 2: one warp per strip (per file without kiSt).
__global__ void __launch_bounds__(32 * INFL_WARPS)
pd_inflate(const pd_file *files, uint32_t count, uint32_t total_strips, const uint32_t *status)
{
	__shared__ warp_shared ws[INFL_WARPS];
	uint32_t wid = threadIdx.x / 32;
	uint32_t g = blockIdx.x * INFL_WARPS + wid;
	if (g >= total_strips)
		return;
	uint32_t fi = find_prefix(files, count, g, false);
	const pd_file *f = &files[fi];
	if (status[fi] != ST_OK)
		return;
	uint32_t s = g - f->first_strip;
	uint32_t *res = f->strip_res + 4 * s;
	int lane = threadIdx.x & 31;
	if (f->strips == 1) {
		if (kiln_zlib_header_check(f->zlib[0], f->zlib[1]) != 0) {
			if (lane == 0)
				res[0] = KILN_INFL_ERR_DATA + 100; // header
			return;
		}
		warp_inflate(&ws[wid], f->zlib + 2, (size_t)f->zlib_size - 2, f->filt, (size_t)f->filtered_size, 0);
		uint32_t adler = 0;
		if (ws[wid].rc == KILN_INFL_OK && ws[wid].out_len == f->filtered_size)
			adler = warp_adler(f->filt, (size_t)f->filtered_size);
		if (lane == 0) {
			res[0] = ws[wid].rc;
			res[1] = adler;
			res[2] = (uint32_t)ws[wid].out_len;
			res[3] = (uint32_t)ws[wid].used;
		}
		return;
	}
	const uint8_t *offs = f->data + f->kist_offsets;
	uint32_t off = kiln_png_be32(offs + 4 * (size_t)s);
	uint32_t next = s + 1 < f->strips ? kiln_png_be32(offs + 4 * (size_t)(s + 1)) : (uint32_t)f->zlib_size - 4;
	uint32_t r0, r1;
	strip_rows(f, s, &r0, &r1);
	size_t rowlen = (size_t)f->rowbytes + 1;
	uint8_t *out = f->filt + (size_t)r0 * rowlen;
	size_t want = (size_t)(r1 - r0) * rowlen;
	warp_inflate(&ws[wid], f->zlib + off, next - off, out, want, 1);
	bool ok = ws[wid].rc == KILN_INFL_OK && ws[wid].out_len == want &&
		  ws[wid].final == (uint32_t)(s + 1 == f->strips);
	uint32_t adler = ok ? warp_adler(out, want) : 0;
	if (lane == 0) {
		res[0] = ok ? 0u : 1u;
		res[1] = adler;
	}
}

__device__ static uint32_t infl_to_status(uint32_t rc)
{
	return rc == KILN_INFL_ERR_TRUNCATED ? ST_TRUNCATED : ST_CORRUPT;
}

// 3: one warp per file: verdict on the strips, serial fallback when they lied.
__global__ void __launch_bounds__(32 * INFL_WARPS)
pd_finish(const pd_file *files, uint32_t count, uint32_t *status)
{
	__shared__ warp_shared ws[INFL_WARPS];
	uint32_t wid = threadIdx.x / 32;
	uint32_t fi = blockIdx.x * INFL_WARPS + wid;
	if (fi >= count)
		return;
	const pd_file *f = &files[fi];
	if (status[fi] != ST_OK || f->strips == 0)
		return;
	int lane = threadIdx.x & 31;
	size_t rowlen = (size_t)f->rowbytes + 1;
	if (f->strips == 1) {
		uint32_t *res = f->strip_res;
		uint32_t rc = res[0];
		uint32_t st = ST_OK;
		if (rc == KILN_INFL_ERR_DATA + 100)
			st = ST_HEADER;
		else if (rc == KILN_INFL_OUTPUT_FULL)
			st = ST_OK;
		else if (rc != KILN_INFL_OK)
			st = infl_to_status(rc);
		else if (res[2] < f->filtered_size)
			st = ST_TRUNCATED;
		else {
			uint64_t used = res[3];
			if (f->zlib_size - 2 - used < 4)
				st = ST_TRUNCATED;
			else if (kiln_png_be32(f->zlib + 2 + used) != res[1])
				st = ST_CORRUPT;
		}
		if (lane == 0)
			status[fi] = st;
		return;
	}
	bool ok = true;
	uint32_t total = 1;
	for (uint32_t s = 0; s < f->strips && ok; s++) {
		const uint32_t *res = f->strip_res + 4 * s;
		ok = res[0] == 0;
		uint32_t r0, r1;
		strip_rows(f, s, &r0, &r1);
		total = kiln_adler32_combine(total, res[1], (uint64_t)(r1 - r0) * rowlen);
	}
	if (ok && total == f->zlib_adler)
		return;
	// The strips do not decode as the kiSt chunk says: the whole stream, serially.
	uint32_t st = ST_OK;
	if (kiln_zlib_header_check(f->zlib[0], f->zlib[1]) != 0) {
		st = ST_HEADER;
	} else {
		warp_inflate(&ws[wid], f->zlib + 2, (size_t)f->zlib_size - 2, f->filt, (size_t)f->filtered_size, 0);
		uint32_t rc = ws[wid].rc;
		if (rc == KILN_INFL_OUTPUT_FULL) {
			st = ST_OK;
		} else if (rc != KILN_INFL_OK) {
			st = infl_to_status(rc);
		} else if (ws[wid].out_len < f->filtered_size || f->zlib_size - 2 - ws[wid].used < 4) {
			st = ST_TRUNCATED;
		} else {
			uint32_t adler = warp_adler(f->filt, (size_t)f->filtered_size);
			if (kiln_png_be32(f->zlib + 2 + ws[wid].used) != adler)
				st = ST_CORRUPT;
		}
	}
	if (lane == 0)
		status[fi] = st;
}

// 4: the de-filter wave over bands.
__global__ void __launch_bounds__(32 * DEF_WARPS)
pd_defilter(const pd_file *files, uint32_t count, uint32_t total_bands, pd_globals *g, uint32_t *status)
{
	int lane = threadIdx.x & 31;
	for (;;) {
		uint32_t t = 0;
		if (lane == 0)
			t = atomicAdd(&g->band_ticket, 1u);
		t = __shfl_sync(FULL_MASK, t, 0);
		if (t >= total_bands)
			return;
		uint32_t fi = find_prefix(files, count, t, true);
		const pd_file *f = &files[fi];
		uint32_t band = t - f->first_band;
		if (*(volatile uint32_t *)&status[fi] != ST_OK) {
			if (lane == 0) {
				__threadfence();
				atomicExch(&f->progress[band], 0xFFFFFFFFu);
			}
			continue;
		}
		uint32_t y = band * BAND + (uint32_t)lane;
		bool active = y < f->height;
		uint32_t rows_here = f->height - band * BAND < BAND ? f->height - band * BAND : BAND;
		size_t rowlen = (size_t)f->rowbytes + 1;
		uint8_t *row = f->filt + (size_t)y * rowlen;
		const uint8_t *prev = y > 0 ? row - f->rowbytes : NULL;
		uint32_t type = active ? row[0] : 0;
		if (active && type > 4) {
			atomicMax(&status[fi], (uint32_t)ST_FILTER);
			type = 0;
		}
		bool wait = lane == 0 && y > 0 && type >= KILN_PNG_FILTER_UP;
		uint32_t seen = 0;
		const volatile uint32_t *upper = band > 0 ? &f->progress[band - 1] : NULL;
		uint32_t bpp = f->bpp, width = f->width;
		uint32_t a[4] = {0, 0, 0, 0}, c[4] = {0, 0, 0, 0};
		uint8_t *dst_row = f->rgba + (size_t)y * f->stride;
		for (uint32_t step = 0; step < width + rows_here - 1; step++) {
			int32_t x = (int32_t)step - lane;
			if (active && x >= 0 && (uint32_t)x < width) {
				if (wait && seen < (uint32_t)x + 1) {
					while ((seen = *upper) < (uint32_t)x + 1)
						;
					__threadfence();
				}
				uint8_t px[4];
				size_t base = (size_t)x * bpp;
				for (uint32_t k = 0; k < bpp; k++) {
					uint32_t bb = 0;
					if (prev)
						bb = lane == 0 ? __ldcg(prev + base + k) : prev[base + k];
					uint32_t v = kiln_png_unfilter_byte(type, row[1 + base + k], a[k], bb, c[k]);
					row[1 + base + k] = (uint8_t)v;
					px[k] = (uint8_t)v;
					a[k] = v;
					c[k] = bb;
				}
				kiln_png_store_pixel(dst_row + 4 * (size_t)x, kiln_png_pixel(&f->format, px, 0));
				if ((uint32_t)lane == rows_here - 1 && (((uint32_t)x & 31u) == 31u || (uint32_t)x + 1 == width)) {
					__threadfence();
					atomicExch(&f->progress[band], (uint32_t)x + 1);
				}
			}
			__syncwarp();
		}
	}
}

// ---- host ------------------------------------------------------------------------------

static unsigned sm_count(void)
{
	int dev = 0, sms = 0;
	if (cudaGetDevice(&dev) != cudaSuccess ||
	    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || sms <= 0)
		sms = 1;
	return (unsigned)sms;
}

extern "C" kiln_status kiln_pngdec_decode_gpu(const kiln_pngdec_gpu_file *files, size_t count,
					      kiln_status *status, void *d_temp, size_t temp_size,
					      kiln_stream stream)
{
	if (count == 0)
		return KILN_OK;
	if (!files || !status || !d_temp || count > 65535)
		return KILN_ERR_INVALID_ARG;
	layout l;
	make_layout(files, count, &l);
	if (temp_size < l.total || l.strips > 0xFFFFFFFFu || l.bands > 0xFFFFFFFFu)
		return KILN_ERR_INVALID_ARG;
	uint8_t *base = (uint8_t *)(((uintptr_t)d_temp + 255) & ~(uintptr_t)255);
	if ((size_t)(base - (uint8_t *)d_temp) + l.total - 256 > temp_size)
		return KILN_ERR_INVALID_ARG;
	cudaStream_t s = (cudaStream_t)stream;
	pd_file *d_files = (pd_file *)(base + l.files);
	uint32_t *d_status = (uint32_t *)(base + l.status);
	cudaGetLastError();
	if (cudaMemsetAsync(base + l.globals, 0, l.zero_end - l.globals, s) != cudaSuccess)
		return KILN_ERR_CUDA;

	// Descriptors go up in stack-sized chunks (a pageable copy is staged before
	// cudaMemcpyAsync returns); files the GPU does not handle get a dead descriptor whose
	// device status is set to a failure so no kernel touches it.
	enum { CHUNK = 16 };
	pd_file chunk[CHUNK];
	uint32_t dead[CHUNK];
	size_t data = l.data;
	uint32_t strips = 0, bands = 0;
	for (size_t i0 = 0; i0 < count; i0 += CHUNK) {
		size_t n = count - i0 < CHUNK ? count - i0 : CHUNK;
		for (size_t j = 0; j < n; j++) {
			size_t i = i0 + j;
			const kiln_pngdec_gpu_file *src = &files[i];
			const kiln_pngdec_info *in = &src->info;
			pd_file *d = &chunk[j];
			memset(d, 0, sizeof *d);
			d->first_strip = strips;
			d->first_band = bands;
			bool ok = in->gpu_ok && src->data && src->rgba && in->width && in->height &&
				  src->stride >= 4 * (uint64_t)in->width && in->zlib_size >= 2 &&
				  in->filtered_size == (in->rowbytes + 1) * in->height;
			dead[j] = 0;
			if (!ok) {
				status[i] = in->gpu_ok ? KILN_ERR_INVALID_ARG : KILN_ERR_UNSUPPORTED;
				dead[j] = 1;
				continue;
			}
			status[i] = KILN_OK;
			d->data = src->data;
			d->rgba = src->rgba;
			d->stride = src->stride;
			d->width = in->width;
			d->height = in->height;
			d->strips = in->strips;
			d->rows_per_strip = in->rows_per_strip;
			d->bpp = in->bpp;
			d->rowbytes = in->rowbytes;
			d->filtered_size = in->filtered_size;
			d->zlib_size = in->zlib_size;
			d->idat_offset = in->idat_offset;
			d->kist_offsets = in->kist_offsets;
			d->idat_chunks = in->idat_chunks;
			d->zlib_adler = in->zlib_adler;
			d->format = in->format;
			if (in->idat_chunks > 1) {
				d->zcopy = base + data;
				d->zlib = d->zcopy;
				data += align256((size_t)in->zlib_size);
			} else {
				d->zlib = src->data + in->idat_offset + 8;
			}
			d->filt = base + data;
			data += align256((size_t)in->filtered_size + 16);
			d->strip_res = (uint32_t *)(base + l.strip_res) + 4 * (size_t)strips;
			d->progress = (uint32_t *)(base + l.progress) + bands;
			strips += in->strips;
			bands += file_bands(in);
		}
		if (cudaMemcpyAsync(d_files + i0, chunk, n * sizeof *chunk, cudaMemcpyHostToDevice, s) != cudaSuccess)
			return KILN_ERR_CUDA;
		for (size_t j = 0; j < n; j++)
			if (dead[j] && cudaMemsetAsync(d_status + i0 + j, 0xFF, 4, s) != cudaSuccess)
				return KILN_ERR_CUDA;
	}
	if (strips == 0)
		return KILN_OK;
	uint32_t c32 = (uint32_t)count;
	pd_gather<<<c32, 256, 0, s>>>(d_files, c32, d_status);
	pd_inflate<<<(strips + INFL_WARPS - 1) / INFL_WARPS, 32 * INFL_WARPS, 0, s>>>(d_files, c32, strips, d_status);
	pd_finish<<<(c32 + INFL_WARPS - 1) / INFL_WARPS, 32 * INFL_WARPS, 0, s>>>(d_files, c32, d_status);
	unsigned warps = sm_count() * 16;
	if (warps > bands)
		warps = bands;
	unsigned grid = (warps + DEF_WARPS - 1) / DEF_WARPS;
	pd_defilter<<<grid, 32 * DEF_WARPS, 0, s>>>(d_files, c32, bands, (pd_globals *)(base + l.globals), d_status);
	return cudaGetLastError() == cudaSuccess ? KILN_OK : KILN_ERR_CUDA;
}

extern "C" kiln_status kiln_pngdec_gpu_status(const kiln_pngdec_gpu_file *files, size_t count,
					      kiln_status *status, void *d_temp, size_t temp_size)
{
	if (count == 0)
		return KILN_OK;
	if (!files || !status || !d_temp)
		return KILN_ERR_INVALID_ARG;
	layout l;
	make_layout(files, count, &l);
	uint8_t *base = (uint8_t *)(((uintptr_t)d_temp + 255) & ~(uintptr_t)255);
	enum { CHUNK = 256 };
	uint32_t st[CHUNK];
	for (size_t i0 = 0; i0 < count; i0 += CHUNK) {
		size_t n = count - i0 < CHUNK ? count - i0 : CHUNK;
		if (cudaMemcpy(st, base + l.status + 4 * i0, 4 * n, cudaMemcpyDeviceToHost) != cudaSuccess)
			return KILN_ERR_CUDA;
		for (size_t j = 0; j < n; j++) {
			if (status[i0 + j] != KILN_OK)
				continue;
			switch (st[j]) {
			case ST_OK:
				break;
			case ST_TRUNCATED:
				status[i0 + j] = KILN_ERR_TRUNCATED;
				break;
			default:
				status[i0 + j] = KILN_ERR_CORRUPT;
				break;
			}
		}
	}
	return KILN_OK;
}
