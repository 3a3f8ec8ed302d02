// The CUDA backend of kiln's PNG decoder: a batch of probed files (bytes already in device
// memory) -> RGBA8 surfaces in device memory, in four kernels on one stream:
//  1. gather: the IDAT payloads of a file split over several chunks are copied into one
//     contiguous zlib stream (a block per file; single-IDAT files are read in place);
//  2. inflate: one warp per kiSt strip, warp_inflate: the tables and bit reader of
//     png_inflate.h (tables in shared memory), the symbols decoded by the whole warp a
//     64-bit window at a time into a ring of recent output in shared memory, the matches
//     copied in rounds, each batch flushed to memory with its Adler-32 sums. A file
//     without strips is inflated in parallel as png_inflate_par.h describes (pd_par_*:
//     its dynamic blocks found by a thread per byte, an entry inside a block every 2 KiB
//     of stream, pieces between entries counted and decoded by a thread each, markers
//     resolved and the Adler-32 taken by a CTA per file);
//  3. finish: one warp per file checks the strips (status, sizes, the combined Adler-32
//     against the trailer) and, when a kiSt chunk lied, inflates the file serially;
//  4. de-filter: a tile-wave over bands of up to 32 rows (whole kiSt strips where they
//     are at most 32 rows: a strip's first row never reads the row above, so such a band
//     never waits for the one above it). A warp takes the next band by ticket
//     (atomicAdd: lower tickets are always held by running warps, so waiting on them
//     cannot deadlock); lane k de-filters row k of the band one pixel behind lane k-1
//     (the wave; the row above comes from lane k-1 by a shuffle), with
//     kiln_png_unfilter_byte's value, and converts the pixel with kiln_png_pixel into a
//     ring of 64 columns of the band in shared memory, which leaves for the surface a tile
//     of 32 columns at a time, a row of 32 pixels per coalesced store; the filtered bytes
//     come from shared memory too, staged a tile ahead by asynchronous copies.
//     The band's last row is written back de-filtered and publishes its progress (pixels
//     done) in device memory every 32 pixels; the next band's first row waits on it only
//     when its filter reads the row above (Up, Avg, Paeth): None/Sub rows, which start
//     every kiSt strip, start at once.
// Integer code from the same headers as the CPU path: the pixels are identical.
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>
#include <type_traits>

extern "C" {
#include "kernels/png/png_dec.h"
}
#include "kernels/png/png_check.h"
#include "kernels/png/png_defilter.h"
#include "kernels/png/png_inflate.h"
#include "kernels/png/png_inflate_par.h"

#define FULL_MASK 0xffffffffu
#define INFL_WARPS 1   // warps per CTA of the inflate kernels (9 KB of shared memory)
#define INFL_MIN_WARPS 18 // resident warps an SM the inflate kernel is held to (<= 112 registers; it takes 96)
// The tables' second levels (codes longer than the roots' bits: rare symbols) live in
// device memory, a slot of INFL_OVF entries per resident warp (warp_inflate_slot), so that a
// warp's shared memory is its roots, ring and tokens: 9 KB instead of 19.3, room for 24
// warps an SM (21 with the kernel's 96 registers) instead of 11 (with the full tables in
// shared memory kiln's 2,400 strips of a batch of fast files ran in 1.6 waves). A ring of
// 2 KB instead of 4 (11 KB a warp, 19 an SM; match sources past it come from the flushed
// output in device memory) decoded kiSt files 5% faster with 3 batches in flight (H100:
// kiln fast 15.9 -> 16.7 GB/s, zlib's 16-row strips 14.7 -> 15.4), the same for one batch.
#define INFL_LIT_ROOT (1u << KILN_INFL_LIT_BITS)
#define INFL_DIST_ROOT (1u << KILN_INFL_DIST_BITS)
#define INFL_LIT_OVF (KILN_INFL_LIT_SIZE - INFL_LIT_ROOT)
#define INFL_OVF (INFL_LIT_OVF + KILN_INFL_DIST_SIZE - INFL_DIST_ROOT)
#define INFL_SLOTS 32 // slots an SM (more than its resident warps)
#define NTOK 128       // match tokens per batch
#define BATCH 1024     // output bytes per batch (a batch may end up to 257 bytes past)
#define RING 2048      // recent output in shared memory (a power of 2 > BATCH + 257)
#define BAND 32        // rows per de-filter band at most (a warp; band_rows)
#define DEF_WARPS 1    // warps per CTA of the de-filter (24.1 KB of shared memory each)
#define TIN_BYTES 512  // staged filtered bytes per row of a band (a power of 2 >= 3 tiles + 8)
#define TIN_PITCH 516  // a row's stride in the stage (129 words: rows start on different banks)

// ST_CPU: the image came out whole but the stream does not end cleanly
// (kiln_pngdec_stream_verdict): the CPU path decides it, as libpng would.
enum { ST_OK = 0, ST_CORRUPT = 1, ST_TRUNCATED = 2, ST_FILTER = 3, ST_HEADER = 4, ST_CPU = 5 };

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
	uint32_t first_strip, first_band, band_rows;
	kiln_png_format format;
	// One stream in parallel (files without kiSt strips, png_inflate_par.h): candidates
	// (bit offsets); the entries, and indexed by entry the counted and the decoded pieces,
	// the chain's offsets and probes; the chain in order; the 16-bit symbols at their
	// stream offsets; the slots of the count (kiln_infl_slot's scale and pad); par_state:
	// candidates found, entries, pieces in the chain, and 1 when the zlib header was
	// refused.
	uint32_t par, cand_cap, ent_cap, spacing, target, slot_scale, slot_pad;
	uint64_t *cand, *seg_base;
	kiln_infl_entry *ent, *ent2; // ent2: kiln_infl_refine's output, copied back
	kiln_infl_seg *seg, *dec;
	uint32_t *order, *skip, *par_state;
	uint16_t *sym, *slots;
};

struct pd_globals {
	uint32_t band_ticket;
	uint32_t items[5]; // work items of the lists (enum par_list)
	uint32_t taken[5]; // items taken so far by the pass over each list
	uint32_t surv;     // offsets that passed the cheap header test (pd_par_scan)
	uint32_t lost;     // 1 when surv passed its cap (pd_par_verify): candidates were dropped
	uint32_t blocks;   // block tables taken from the batch's area (pd_par_blocks)
	uint32_t pad[50];
};

// ---- layout of d_temp ------------------------------------------------------------------

static size_t align256(size_t v) { return (v + 255) & ~(size_t)255; }

struct layout {
	size_t files;      // pd_file[count]
	size_t globals;
	size_t status;     // uint32 per file (zeroed)
	size_t strip_res;  // 4 uint32 per strip (zeroed)
	size_t progress;   // uint32 per band (zeroed)
	size_t par_state;  // 4 uint32 per file (zeroed)
	size_t infl_masks; // the second-level slots' masks (zeroed): a uint32 per SM
	size_t zero_end;
	size_t infl_ovf;   // INFL_OVF uint32 per slot, INFL_SLOTS slots per SM
	size_t work;       // a uint64 per entry and list: (file, entry), the passes' items
	size_t tables;     // kiln_inflate_tables per pool thread of the parallel inflate
	size_t blocks;     // kiln_infl_block: the header entries' tables (pd_par_blocks)
	size_t surv;       // uint64 per slot: (file, bit) offsets for the full header test
	size_t data;       // per file zlib copies, filtered buffers, parallel-inflate state
	size_t total;
	uint64_t strips, bands, ents, pool, surv_cap, block_cap;
	uint32_t slot_scale, slot_pad; // the count's slots (png_inflate_par.h), for the batch
};

// Rows of a de-filter band: BAND, or as many whole kiSt strips as fit in BAND. A strip
// starts with a row filtered None or Sub, so a band that starts a strip does not wait for
// the band above (kiln's fast and medium files: strips of 7 to 13 rows; bands of 32 rows
// from the top started inside a strip, most of them, and waited).
static uint32_t band_rows(const kiln_pngdec_info *in)
{
	if (in->strips > 1 && in->rows_per_strip > 0 && in->rows_per_strip <= BAND)
		return BAND / in->rows_per_strip * in->rows_per_strip;
	return BAND;
}

static uint32_t file_bands(const kiln_pngdec_info *in)
{
	return (uint32_t)(((uint64_t)in->height + band_rows(in) - 1) / band_rows(in));
}

// Candidates kept per file without strips (kiln_infl_cand_cap says how many and why;
// past it, kiln_infl_cand_overflow: the file gets no mid entries).
static uint32_t par_cand_cap(const kiln_pngdec_info *in)
{
	return kiln_infl_cand_cap(in->zlib_size > 2 ? in->zlib_size - 2 : 0, in->filtered_size);
}

// Bits of stream between mid entries (png_inflate_par.h): pieces of 4 KiB, about 7 KB of
// output, keep the pool busy to the end of each pass (32 Kodak files, H100: 1.85, 2.47,
// 2.67 and 2.50 GB/s with pieces of 1, 2, 4 and 8 KiB; each entry costs a table build in
// each pass and its probes). The debug flags' bits 16-20, when set, give log2 of another
// spacing (A/B runs), at least PAR_SPACING_MIN, which the layout is sized for
// (png_inflate_par.h holds both, for the unit tests).
#define PAR_SPACING KILN_INFL_PAR_SPACING
#define PAR_SPACING_MIN KILN_INFL_PAR_SPACING_MIN
static uint32_t par_spacing(unsigned debug)
{
	uint32_t lg = (debug >> 16) & 31u;
	return lg == 0 ? PAR_SPACING : 1u << lg < PAR_SPACING_MIN ? PAR_SPACING_MIN : 1u << lg;
}
// Lanes of a warp that run pieces (each its own, diverging at every other symbol). Alone,
// one batch of 32 Kodak files ran best with 2 (H100: 2.99 GB/s, 2.75 with 1 and 2.74 with
// 4; 5,016 MB/s against 4,635 with 4 in session 19); with 3 batches in flight, as texenc
// keeps them, the passes of the other batches fill the SMs and 4 lanes do more per warp
// instruction: 8,973 MB/s against 8,415 with 2. The debug flags' bits 21-22 give log2 of
// another count for A/B runs, at most PAR_LANES_MAX (the tables are sized for it).
#define PAR_LANES 4u
#define PAR_LANES_MAX 4u
static uint32_t par_lanes(unsigned debug)
{
	uint32_t lg = (debug >> 21) & 3u;
	return lg == 0 ? PAR_LANES : 1u << lg < PAR_LANES_MAX ? 1u << lg : PAR_LANES_MAX;
}
static uint32_t par_ent_cap(const kiln_pngdec_info *in)
{
	return kiln_infl_ent_cap(in->zlib_size > 2 ? in->zlib_size - 2 : 0, in->filtered_size);
}
// Block tables a file adds to the batch's area: zlib ends a block every 16,383 symbols at
// its default memLevel, at most one a byte of output, so this many hold the blocks of
// such a stream (Kodak's have 9-43, a 2048x2048 file's ~560) and 2 more; a header entry
// past the area's end (more, smaller blocks, or false candidates) leaves the build to its
// pieces. 13.5 KB each: 1 MB for a Kodak file.
static uint32_t par_block_cap(const kiln_pngdec_info *in)
{
	uint64_t cap = in->filtered_size / 16383 + 2;
	return cap < 0xFFFFFFFFu ? (uint32_t)cap : 0xFFFFFFFFu;
}

// The parallel inflate's work lists of (file, entry) items, each as long as the entries:
// the entries after prep (probe pass), those kiln_infl_refine added (probe pass), all
// entries (count pass), the chain's pieces decoded again (decode pass), and those placed
// from their slots (pd_par_place).
enum par_list { LIST_PROBE, LIST_FRESH, LIST_COUNT, LIST_REDO, LIST_PLACE, PAR_LISTS };

// Pieces are split where the probes say they would make more than this many symbols
// (kiln_infl_refine); the debug flags' bits 23-26, when set, give its log2 (A/B runs).
#define PAR_TARGET KILN_INFL_PAR_TARGET
static uint32_t par_target(unsigned debug)
{
	uint32_t lg = (debug >> 23) & 15u;
	return lg == 0 ? PAR_TARGET : 1u << lg;
}

// Symbols of a parallel-inflate file's slots (kiln_infl_slots) at the given scale and pad.
static size_t par_slot_syms(const kiln_pngdec_info *in, uint32_t scale, uint32_t pad)
{
	return (size_t)kiln_infl_slot_area((size_t)in->zlib_size - 2, in->filtered_size, par_ent_cap(in), scale, pad);
}

// A parallel-inflate file's state (after its filtered buffer), carved from p into d's
// arrays, or only measured when p is NULL; its bytes. make_layout measures with it and
// the batch setup carves with it, so the two cannot disagree.
static size_t par_carve(const kiln_pngdec_info *in, uint32_t scale, uint32_t pad, uint8_t *p, pd_file *d)
{
	size_t c = par_cand_cap(in), e = par_ent_cap(in), at = 0;
	auto take = [&](auto **field, size_t bytes) {
		if (p)
			*field = (std::remove_reference_t<decltype(**field)> *)(p + at);
		at += align256(bytes);
	};
	pd_file unused;
	pd_file *f = p ? d : &unused;
	take(&f->cand, c * 8);
	take(&f->ent, e * sizeof(kiln_infl_entry));
	take(&f->ent2, e * sizeof(kiln_infl_entry));
	take(&f->seg_base, e * 8);
	take(&f->seg, e * sizeof(kiln_infl_seg));
	take(&f->dec, e * sizeof(kiln_infl_seg));
	take(&f->order, e * 4);
	take(&f->skip, e * 4);
	take(&f->sym, (size_t)in->filtered_size * 2 + 16);
	take(&f->slots, par_slot_syms(in, scale, pad) * 2 + 16);
	return at;
}

// The count's slots of a batch take at most a sixteenth of the device's memory, between
// 1 and 4 GiB (about 8 bytes per stream byte and 4 per output byte at full scale: 350 MB
// for 32 Kodak files, 3.6 GB for 32 2048x2048 files); past it they shrink, and the pieces
// that no longer fit are decoded again (step 4), as all were before there were slots.
// With 1 GiB at most, a batch of 32 2K files decoded about 40% of its pieces twice.
#define PAR_SLOT_BUDGET_MIN ((uint64_t)1 << 30)
#define PAR_SLOT_BUDGET_MAX ((uint64_t)4 << 30)
#define PAR_MAX_DEVICES 64

// The budget on the current device (the same for every call there: the temp size a caller
// allocated from and the decode lay out the same slots).
static uint64_t par_slot_budget(void)
{
	static uint64_t budget[PAR_MAX_DEVICES]; // 0: not asked yet
	int dev = 0;
	if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= PAR_MAX_DEVICES) {
		cudaGetLastError();
		return PAR_SLOT_BUDGET_MIN;
	}
	uint64_t b = __atomic_load_n(&budget[dev], __ATOMIC_RELAXED);
	if (b == 0) {
		size_t free_bytes = 0, total = 0;
		if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) {
			cudaGetLastError();
			total = 0;
		}
		b = total / 16 < PAR_SLOT_BUDGET_MIN ? PAR_SLOT_BUDGET_MIN
		    : total / 16 > PAR_SLOT_BUDGET_MAX ? PAR_SLOT_BUDGET_MAX : total / 16;
		__atomic_store_n(&budget[dev], b, __ATOMIC_RELAXED);
	}
	return b;
}

static unsigned sm_count(void);

static bool make_layout(const kiln_pngdec_gpu_file *files, size_t count, layout *l)
{
	l->strips = 0;
	l->bands = 0;
	l->ents = 0;
	l->surv_cap = 0;
	l->block_cap = 0;
	uint64_t slot_bytes = 0;
	for (size_t i = 0; i < count; i++)
		if (files[i].info.gpu_ok && files[i].info.strips == 1)
			slot_bytes += 2 * par_slot_syms(&files[i].info, KILN_INFL_SLOT_SCALE, KILN_INFL_SLOT_PAD);
	l->slot_scale = KILN_INFL_SLOT_SCALE;
	l->slot_pad = KILN_INFL_SLOT_PAD;
	uint64_t budget = slot_bytes ? par_slot_budget() : 0;
	if (slot_bytes > budget) {
		l->slot_scale = (uint32_t)(KILN_INFL_SLOT_SCALE * budget / slot_bytes);
		l->slot_pad = (uint32_t)(KILN_INFL_SLOT_PAD * budget / slot_bytes);
	}
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
		if (in->strips == 1) {
			l->ents += par_ent_cap(in);
			l->surv_cap += in->zlib_size / 8 + 64; // Kodak streams: 1 in 1,100 offsets; 2K: 1 in 860
			l->block_cap += par_block_cap(in);
			data += par_carve(in, l->slot_scale, l->slot_pad, NULL, NULL);
		}
	}
	// Pool threads of the passes (PAR_LANES a warp): enough for every entry at once, at
	// most 32 warps an SM; whole warps of PAR_LANES_MAX, since the passes launch whole CTAs
	// of `lanes` threads and each has its tables here (a pool that was not a multiple of
	// the lanes gave the last CTA's lanes tables past the area's end, over the block tables
	// that follow: small batches, whose entries set the pool, decoded wrongly at times).
	uint64_t most = (uint64_t)sm_count() * 32 * PAR_LANES_MAX;
	l->pool = l->ents < most ? l->ents : most;
	l->pool = (l->pool + PAR_LANES_MAX - 1) / PAR_LANES_MAX * PAR_LANES_MAX;
	l->files = 0;
	l->globals = align256(count * sizeof(pd_file));
	l->status = l->globals + align256(sizeof(pd_globals));
	l->strip_res = l->status + align256(count * 4);
	l->progress = l->strip_res + align256((size_t)l->strips * 16);
	l->par_state = l->progress + align256((size_t)l->bands * 4);
	l->infl_masks = l->par_state + align256(count * 16);
	l->zero_end = l->infl_masks + align256((size_t)sm_count() * INFL_SLOTS / 32 * 4);
	l->infl_ovf = l->zero_end;
	l->work = l->infl_ovf + align256((size_t)sm_count() * INFL_SLOTS * INFL_OVF * 4);
	l->tables = l->work + align256((size_t)l->ents * 8 * PAR_LISTS);
	l->blocks = l->tables + align256((size_t)l->pool * sizeof(kiln_inflate_tables));
	l->surv = l->blocks + align256((size_t)l->block_cap * sizeof(kiln_infl_block));
	if (l->surv_cap > 0xFFFFFFFFu)
		l->surv_cap = 0xFFFFFFFFu;
	l->data = l->surv + align256((size_t)l->surv_cap * 8);
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

// 1: gather the IDAT payloads (files of several IDAT chunks): GATHER_CTAS CTAs a file
// (grid.y), each copying an equal share of the stream, whatever the chunks' sizes (kiln's
// encoder writes a chunk per strip, libpng 8 KiB chunks). Every thread walks the chunk
// headers up to its share (the same words: broadcast loads), so no barrier is needed;
// one CTA a file walking and copying chunk by chunk took 1.4 ms for 32 Kodak files.
#define GATHER_CTAS 32
__global__ void __launch_bounds__(256) pd_gather(const pd_file *files, uint32_t count, uint32_t *status)
{
	uint32_t fi = blockIdx.y;
	const pd_file *f = &files[fi];
	if (fi >= count || !f->zcopy || status[fi] != ST_OK)
		return;
	uint64_t share = (f->zlib_size + gridDim.x - 1) / gridDim.x;
	uint64_t lo = share * blockIdx.x, hi = lo + share < f->zlib_size ? lo + share : f->zlib_size;
	uint64_t pos = f->idat_offset, out = 0;
	for (uint32_t c = 0; c < f->idat_chunks && out < hi; c++) {
		uint32_t len = kiln_png_be32(f->data + pos);
		uint64_t a = out > lo ? out : lo, b = out + len < hi ? out + len : hi;
		const uint8_t *src = f->data + pos + 8 - out;
		for (uint64_t i = a + threadIdx.x; i < b; i += blockDim.x)
			f->zcopy[i] = src[i];
		pos += 12 + (uint64_t)len;
		out += len;
	}
}

struct token {
	uint32_t pos;
	uint32_t len_dist; // len << 16 | dist (matches only: literals go straight to the ring)
};

// Clock counts of the inflater for kiln-bench (debug flag 4): lane 0's cycles in block
// headers, in decoding, in the warp's match copies, in the flushes; output bytes, matches,
// headers, streams; windows walked, symbols taken in the walks, clocks from a window's
// refill to its lookups, clocks in the walks.
__device__ unsigned long long g_prof[12];

struct warp_shared {
	uint32_t lit[INFL_LIT_ROOT];
	uint32_t dist[INFL_DIST_ROOT];
	uint32_t *ovf; // device memory: lit's second levels, then dist's
	union {
		// the output around the current batch: positions [o_end - RING, o_end) at
		// o & (RING - 1), then room for a window's literals written on past the ring's
		// end (warp_inflate: moved to its start before anything else runs)
		uint8_t ring[RING + BATCH];
		// a block header's scratch over that room (warp_block_header), so that the
		// room costs no shared memory: the code-length code's table, the code lengths,
		// counts and first codes per length
		struct {
			uint8_t ring[RING];
			uint32_t pre[KILN_INFL_PRE_SIZE];
			uint8_t lens[288 + 32];
			uint32_t cnt[16], nxt[16];
		} hdr;
	};
	token tok[NTOK];
	uint32_t n, done, rc, final, adler;
	uint64_t out_len, used, start, end; // start, end: this batch's output range
};

// ---- block headers by the whole warp -----------------------------------------------------
// kiln_infl_block_header's semantics (same checks in the same order, same tables), with the
// tables built by the 32 lanes: counts by __match_any_sync, codes ranked within chunks of 32
// symbols, short codes filling the root in parallel, long codes marking their root slot
// (atomicMax: no short code fills a long code's root slot) before the subtables are placed in
// root order by a warp scan. Every lane keeps the same bit reader; lane 0 writes lengths.

// Builds a table as kiln_infl_build, its root (1 << tb entries) in table and its second
// levels (entries root .. cap - 1 of kiln_infl_build's array) in ovf.
__device__ static int warp_build(warp_shared *w, uint32_t *table, uint32_t *ovf, uint32_t cap, uint32_t tb,
				 const uint8_t *lens, uint32_t n, int kind)
{
	const uint32_t lane = threadIdx.x & 31;
	uint32_t root = 1u << tb;
	if (lane < 16)
		w->hdr.cnt[lane] = 0;
	__syncwarp();
	for (uint32_t c0 = 0; c0 < n; c0 += 32) {
		uint32_t s = c0 + lane, v = s < n ? lens[s] : 16u;
		uint32_t m = __match_any_sync(FULL_MASK, v);
		if (v < 16 && lane == (uint32_t)__ffs(m) - 1)
			w->hdr.cnt[v] += (uint32_t)__popc(m);
		__syncwarp();
	}
	for (uint32_t i = lane; i < root; i += 32)
		table[i] = KILN_INFL_ENTRY(0, 0, KILN_INFL_INVALID, 1);
	uint32_t maxlen = 0;
	for (int l = 15; l >= 1; l--)
		if (w->hdr.cnt[l]) {
			maxlen = (uint32_t)l;
			break;
		}
	if (maxlen == 0) {
		__syncwarp();
		return 0;
	}
	int32_t left = 1;
	for (int l = 1; l <= 15; l++) {
		left <<= 1;
		left -= (int32_t)w->hdr.cnt[l];
		if (left < 0)
			return -1;
	}
	if (left > 0 && (kind == 2 || maxlen != 1))
		return -1;
	for (int pass = 0; pass < (maxlen > tb ? 2 : 1); pass++) {
		__syncwarp();
		if (lane == 0) {
			uint32_t code = 0;
			w->hdr.nxt[0] = 0;
			for (int l = 1; l <= 15; l++) {
				code = (code + (l > 1 ? w->hdr.cnt[l - 1] : 0u)) << 1;
				w->hdr.nxt[l] = code;
			}
		}
		__syncwarp();
		for (uint32_t c0 = 0; c0 < n; c0 += 32) {
			uint32_t s = c0 + lane, v = s < n ? lens[s] : 0u;
			uint32_t m = __match_any_sync(FULL_MASK, v);
			uint32_t code = w->hdr.nxt[v] + (uint32_t)__popc(m & ((1u << lane) - 1));
			__syncwarp();
			if (v && lane == 31u - (uint32_t)__clz(m))
				w->hdr.nxt[v] += (uint32_t)__popc(m);
			__syncwarp();
			if (v == 0)
				continue;
			uint32_t rev = kiln_infl_reverse(code, v);
			if (pass == 0 && v <= tb) {
				uint32_t e = kiln_infl_symbol_entry(kind, s, v);
				for (uint32_t i = rev; i < root; i += 1u << v)
					table[i] = e;
			} else if (pass == 0) {
				// the subtree's depth, as an entry of kind 15 (no real entry has it)
				atomicMax(&table[rev & (root - 1)], 0xF00u | (v - tb));
			} else if (v > tb) {
				uint32_t link = table[rev & (root - 1)];
				uint32_t start = link >> 16, sb = (link >> 12) & 15u;
				uint32_t e = kiln_infl_symbol_entry(kind, s, v - tb);
				for (uint32_t i = rev >> tb; i < (1u << sb); i += 1u << (v - tb))
					ovf[start - root + i] = e;
			}
		}
		__syncwarp();
		if (pass == 0 && maxlen > tb) {
			// subtables in root order: each lane a run of root/32 slots, a warp scan of sizes
			uint32_t per = root / 32, p0 = lane * per, mine = 0;
			for (uint32_t p = p0; p < p0 + per; p++) {
				uint32_t t = table[p];
				if (((t >> 8) & 15u) == 15u)
					mine += 1u << (t & 15u);
			}
			uint32_t incl = mine;
			for (int d = 1; d < 32; d <<= 1) {
				uint32_t o = __shfl_up_sync(FULL_MASK, incl, d);
				if (lane >= (uint32_t)d)
					incl += o;
			}
			uint32_t total = root + __shfl_sync(FULL_MASK, incl, 31);
			if (total > cap)
				return -1;
			uint32_t pos = root + incl - mine;
			for (uint32_t p = p0; p < p0 + per; p++) {
				uint32_t t = table[p];
				if (((t >> 8) & 15u) == 15u) {
					uint32_t sb = t & 15u, size = 1u << sb;
					table[p] = KILN_INFL_ENTRY(pos, sb, KILN_INFL_LINK, tb);
					for (uint32_t i = 0; i < size; i++)
						ovf[pos - root + i] = KILN_INFL_ENTRY(0, 0, KILN_INFL_INVALID, 1);
					pos += size;
				}
			}
		}
	}
	__syncwarp();
	return 0;
}

// kiln_infl_dynamic with the lengths in shared memory and the tables built by the warp.
__device__ static int warp_dynamic(warp_shared *w, kiln_bits *b)
{
	const uint32_t lane = threadIdx.x & 31;
	kiln_bits_refill(b);
	uint32_t hlit = (uint32_t)(b->buf & 31u) + 257;
	uint32_t hdist = (uint32_t)((b->buf >> 5) & 31u) + 1;
	uint32_t hclen = (uint32_t)((b->buf >> 10) & 15u) + 4;
	kiln_bits_drop(b, 14);
	if (hlit > 286 || hdist > 30)
		return KILN_INFL_ERR_DATA;
	if (lane < 19)
		w->hdr.lens[lane] = 0;
	__syncwarp();
	kiln_bits_refill(b);
	for (uint32_t i = 0; i < hclen; i++) {
		if (b->count < 3)
			kiln_bits_refill(b);
		if (lane == 0)
			w->hdr.lens[kiln_infl_pre_order[i]] = (uint8_t)(b->buf & 7u);
		kiln_bits_drop(b, 3);
	}
	__syncwarp();
	if (warp_build(w, w->hdr.pre, NULL, KILN_INFL_PRE_SIZE, KILN_INFL_PRE_BITS, w->hdr.lens, 19, 2) != 0)
		return KILN_INFL_ERR_DATA;
	uint32_t n = 0, total = hlit + hdist, len = 0;
	while (n < total) {
		// every lane decodes the same bits (the warp stays in step) and stores its stripe
		// of the run: lane 0 alone for a single length
		uint32_t rep;
		int rc = kiln_infl_len_run(w->hdr.pre, b, n, total, &rep, &len);
		if (rc != KILN_INFL_OK)
			return rc;
		for (uint32_t i = lane; i < rep; i += 32)
			w->hdr.lens[n + i] = (uint8_t)len;
		n += rep;
	}
	__syncwarp();
	if (w->hdr.lens[256] == 0)
		return KILN_INFL_ERR_DATA;
	if (warp_build(w, w->lit, w->ovf, KILN_INFL_LIT_SIZE, KILN_INFL_LIT_BITS, w->hdr.lens, hlit, 0) != 0)
		return KILN_INFL_ERR_DATA;
	if (warp_build(w, w->dist, w->ovf + INFL_LIT_OVF, KILN_INFL_DIST_SIZE, KILN_INFL_DIST_BITS, w->hdr.lens + hlit,
		       hdist, 1) != 0)
		return KILN_INFL_ERR_DATA;
	return KILN_INFL_OK;
}

// kiln_infl_block_header by the whole warp.
__device__ static int warp_block_header(warp_shared *w, kiln_bits *b, uint32_t *bfinal, uint32_t *btype,
					uint32_t *stored_len)
{
	const uint32_t lane = threadIdx.x & 31;
	int rc = kiln_infl_block_type(b, bfinal, btype, stored_len);
	if (rc != KILN_INFL_OK || *btype == 0)
		return rc;
	if (*btype == 1) {
		// kiln_infl_fixed's lengths
		for (uint32_t i = lane; i < 288 + 32; i += 32)
			w->hdr.lens[i] = (uint8_t)(i < 144 ? 8 : i < 256 ? 9 : i < 280 ? 7 : i < 288 ? 8 : 5);
		__syncwarp();
		warp_build(w, w->lit, w->ovf, KILN_INFL_LIT_SIZE, KILN_INFL_LIT_BITS, w->hdr.lens, 288, 0);
		warp_build(w, w->dist, w->ovf + INFL_LIT_OVF, KILN_INFL_DIST_SIZE, KILN_INFL_DIST_BITS, w->hdr.lens + 288, 32,
			   1);
		return KILN_INFL_OK;
	}
	if (*btype == 2)
		return warp_dynamic(w, b);
	return KILN_INFL_ERR_DATA;
}

// kiln_bits_refill with the words loaded ahead: when *nx_pos is the reader's position the
// fast path's three words are nx[] (loaded there a window earlier, so the walk does not
// wait on memory), else the reader refills itself. The same bits either way.
__device__ static void warp_refill(kiln_bits *b, const uint32_t nx[3], size_t *nx_pos)
{
	if (*nx_pos == b->pos && b->end - b->pos >= 8) {
		uint32_t sh = (uint32_t)((uintptr_t)(b->in + b->pos) & 3u) * 8u;
		uint64_t w = (uint64_t)__funnelshift_r(nx[0], nx[1], sh) | (uint64_t)__funnelshift_r(nx[1], nx[2], sh) << 32;
		b->buf |= w << b->count;
		b->pos += (63 - b->count) >> 3;
		b->count |= 56;
	} else {
		kiln_bits_refill(b);
	}
	*nx_pos = SIZE_MAX;
}

// The walk keeps its bit position in the window WALK_BIAS on (pb = pos + WALK_BIAS), and
// lane L holds the entries at offsets (L + WALK_BIAS) & 31 and 32 more: a shuffle at pb
// reads lane pb & 31, which holds offset pos in the half that pb < 32 + WALK_BIAS picks.
#define WALK_BIAS 16u
#define WALK_LIT_MIN (WALK_BIAS << 24) // no table entry reaches it: values stay below 2^12
#define WALK_PAIR 0x00800000u

// A window's entry e, whose symbol ends at offset q, in the form the walk takes literals
// in: the walk's position after it in bits 24-31 (so that a step takes its next position
// as the entry holds it: the chain of dependent instructions from one step to the next is
// a shuffle, a shift and a compare), the literal in 0-7. With pairs, when next (the entry
// at offset q, within the window) is a literal too, a pair: the position after both in
// 24-31, WALK_PAIR set, the first code's bits in 16-22, the second literal in 8-15, the
// first in 0-7. Other entries stay as the
// table has them. The walk takes two literals a step where both end within the bit count
// and the batch has room for both, and the first alone otherwise: the symbols and the bits
// consumed are those of two single steps. Photographs' filtered bytes are mostly literals,
// and a step of the walk is a chain of dependent shuffles.
__device__ static uint32_t walk_entry(uint32_t e, uint32_t next, uint32_t q, int pairs)
{
	if (KILN_INFL_KIND(e) != KILN_INFL_LIT)
		return e;
	uint32_t bits = e & 0xFFu, lit = e >> 16 & 0xFFu;
	if (!pairs || q >= 64 || KILN_INFL_KIND(next) != KILN_INFL_LIT)
		return (q + WALK_BIAS) << 24 | lit;
	return (q + (next & 0xFFu) + WALK_BIAS) << 24 | WALK_PAIR | bits << 16 | (next >> 16 & 0xFFu) << 8 | lit;
}

// The walk's usual steps: literals and pairs that end within the count and fit the room
// (entries below WALK_LIT_MIN wrap past lit_span), stored at lits_at + k (shared memory),
// until a step that is not one of them; *e and *pair: that step's entry and its pair bit.
// In PTX with uniform branches (bra.uni: pb, k and the entries shuffled are the same in
// every lane): in C the compiler wrapped every step in a convergence barrier and
// recomputed the bounds from the count, 26 SASS instructions a literal step against 19
// here. H100, 3 batches in flight: kiln's fast files 19.1 -> 20.1 GB/s, medium files the
// same, zlib's 16-row strips 2.5% slower (more matches: each leaves the loop).
__device__ __forceinline__ static void walk_literals(uint32_t ek, uint32_t ek1, uint32_t lit_span, uint32_t room,
						     uint32_t lits_at, uint32_t *pb, uint32_t *k, uint32_t *e,
						     uint32_t *pair)
{
	asm volatile("{\n\t"
		     ".reg .pred half, stop, two;\n\t"
		     ".reg .b32 src, t, kk, at;\n"
		     "WALK_STEP:\n\t"
		     "setp.lt.u32 half, %0, %8;\n\t"
		     "selp.b32 src, %4, %5, half;\n\t"
		     "shfl.sync.idx.b32 %2, src, %0, 0x1f, 0xffffffff;\n\t"
		     "bfe.u32 %3, %2, 23, 1;\n\t"
		     "add.u32 kk, %1, %3;\n\t"
		     "add.u32 kk, kk, 1;\n\t"
		     "sub.u32 t, %2, %9;\n\t"
		     "setp.gt.u32 stop, t, %6;\n\t"
		     "setp.gt.or.u32 stop, kk, %7, stop;\n\t"
		     "@stop bra.uni WALK_DONE;\n\t"
		     "add.u32 at, %10, %1;\n\t"
		     "st.shared.u8 [at], %2;\n\t"
		     "setp.ne.u32 two, %3, 0;\n\t"
		     "shr.u32 t, %2, 8;\n\t"
		     "@two st.shared.u8 [at+1], t;\n\t"
		     "mov.u32 %1, kk;\n\t"
		     "shr.u32 %0, %2, 24;\n\t"
		     "bra.uni WALK_STEP;\n"
		     "WALK_DONE:\n\t"
		     "}"
		     : "+r"(*pb), "+r"(*k), "=r"(*e), "=r"(*pair)
		     : "r"(ek), "r"(ek1), "r"(lit_span), "r"(room), "n"(32 + WALK_BIAS), "n"(WALK_LIT_MIN),
		       "r"(lits_at)
		     : "memory");
}

// Inflates raw deflate in[0, len) into out[0, cap) with one warp: the semantics of
// kiln_inflate_raw (same results, same output bytes), plus the Adler-32 of the output.
// Every lane runs the decoder on the same state; block headers go through
// warp_block_header (the lanes build the tables together). In batches of up to BATCH
// output bytes or NTOK matches:
//  - decode: literals (and stored bytes) go straight into a ring of the recent output in
//    shared memory, matches into a token list. Huffman symbols are read a 64-bit window at
//    a time: each lane looks up the literal/length entries at two bit offsets 32 apart
//    (and rewrites literals and pairs for the walk, walk_entry), and the warp walks the
//    window from symbol to symbol by shuffles (a match's distance code looked up where it
//    starts), taking the symbols that end within the bit count (a symbol it cannot take
//    whole, a long code, the end of a block or any error, goes through the one-symbol path,
//    kiln_infl_huffman's checks in its order). The walk only runs while 16 input bytes
//    remain, where refills never feed the zero bytes past the end, so refilling once per
//    window reads the same bits as refilling before each symbol; the words of the next
//    refill are loaded during the walk (warp_refill);
//  - copy: the batch's matches, each lane one match (bytes in order, byte j from
//    src[j % dist]), in rounds: a match is copied once its source lies before the first
//    match not yet copied (all final there); a long match (> 64 bytes) is copied by the
//    whole warp, 32 bytes a step. Sources more than RING - BATCH - 258 bytes back are read
//    from out (flushed by earlier batches), the others from the ring;
//  - flush: the batch to out (4 loads before 4 stores a lane), with the Adler-32 sums of
//    its bytes.
// flags: 1 one symbol at a time (no window walk), 4 clock counts, 8 matches one after
// another by the whole warp (no rounds), 128 the walk over 32-bit windows, 512 no refill
// words loaded a window ahead, 1024 no literal pairs (A/B). AB: whether flags are read at
// all; the instance without (every flag 0 at compile time) is the one in use, as the
// tests of the flags cost a window a dozen instructions (flag 2048 alone: the reading
// instance with every method the default, its A/B).
template <bool AB>
__device__ __noinline__ static void warp_inflate(warp_shared *w, const uint8_t *in, size_t len, uint8_t *out,
						 size_t cap, int strip, int ab_flags)
{
	const int flags = AB ? ab_flags : 0;
	const int prof = flags & 4, walk = !(flags & 1), rounds = !(flags & 8);
	const int lane = threadIdx.x & 31;
	long long t_hdr = 0, t_dec = 0, t_copy = 0, t_flush = 0, t0 = 0, nmatch = 0, nhdr = 0;
	long long nwin = 0, nwsym = 0, t_wset = 0, t_walk = 0, tw = 0;
	// the decoder state, the same in every lane
	kiln_bits b;
	size_t o = 0, stored_left = 0;
	int in_block = 0, blocks = 0, stored_rc = KILN_INFL_OK;
	uint32_t bfinal = 0, btype = 0;
	uint32_t nx[3] = {0, 0, 0}; // the input words at byte nx_pos (warp_refill)
	size_t nx_pos = SIZE_MAX;
	int rc = KILN_INFL_OK, final = 0, done = 0;
	uint32_t adler = 1u;
	kiln_bits_init(&b, in, len);
	for (;;) {
		uint32_t n = 0;
		size_t start = o, limit = o + BATCH;
		if (prof)
			t0 = clock64();
		// the next batch's input into L1 (the refills load words on the critical path)
		if (lane >= 1 && lane <= 4 && b.pos + 128 * (size_t)lane < len)
			asm volatile("prefetch.global.L1 [%0];" ::"l"(in + b.pos + 128 * (size_t)lane));
		while (!done && n < NTOK && o < limit) {
			if (stored_left) {
				// a stored block's bytes from the input (after those the bit buffer
				// held), as kiln_infl_stored
				size_t m = stored_left < limit - o ? stored_left : limit - o;
				for (size_t i = (size_t)lane; i < m; i += 32)
					w->ring[(o + i) & (RING - 1)] = b.in[b.pos + i];
				o += m;
				b.pos += m;
				stored_left -= m;
				if (stored_left == 0 && stored_rc != KILN_INFL_OK) {
					rc = stored_rc;
					done = 1;
				} else if (stored_left == 0 && bfinal) {
					final = 1;
				}
				continue;
			}
			if (!in_block) {
				if (final || (strip && blocks > 0 && (b.count & 7u) == 0 && kiln_bits_consumed(&b) == len)) {
					done = 1;
					break;
				}
				uint32_t stored = 0;
				long long th = prof ? clock64() : 0;
				__syncwarp();
				rc = warp_block_header(w, &b, &bfinal, &btype, &stored);
				if (prof) {
					t_hdr += clock64() - th;
					nhdr++;
				}
				if (rc == KILN_INFL_ERR_DATA && o >= cap && cap > 0)
					rc = KILN_INFL_OUTPUT_FULL; // as kiln_inflate_raw
				if (rc != KILN_INFL_OK) {
					done = 1;
					break;
				}
				if (btype == 0) {
					// kiln_infl_stored: first the whole bytes in the bit buffer (at
					// most 3 after LEN/NLEN), then the input directly
					blocks++;
					while (stored > 0 && b.count >= 8) {
						if (o >= cap) {
							rc = KILN_INFL_OUTPUT_FULL;
							break;
						}
						if (lane == 0)
							w->ring[o & (RING - 1)] = (uint8_t)b.buf;
						o++;
						kiln_bits_drop(&b, 8);
						stored--;
					}
					if (rc == KILN_INFL_OK && !kiln_bits_ok(&b))
						rc = KILN_INFL_ERR_TRUNCATED;
					if (rc != KILN_INFL_OK) {
						done = 1;
						break;
					}
					if (stored > 0) {
						b.buf = 0;
						b.count = 0;
						size_t avail = b.end - b.pos;
						size_t nn = stored < avail ? stored : avail;
						size_t room = cap - o;
						size_t m = nn < room ? nn : room;
						stored_left = m;
						stored_rc = m < nn ? KILN_INFL_OUTPUT_FULL
								   : nn < stored ? KILN_INFL_ERR_TRUNCATED : KILN_INFL_OK;
						if (m == 0) {
							rc = stored_rc; // never OK here
							done = 1;
							break;
						}
						continue; // the bytes: at the top of the loop
					}
					if (bfinal)
						final = 1;
					continue;
				}
				in_block = 1;
			}
			if (prof)
				tw = clock64();
			if (b.count < 48)
				warp_refill(&b, nx, &nx_pos);
			if (b.overrun > 8) {
				rc = KILN_INFL_ERR_TRUNCATED;
				done = 1;
				break;
			}
			if (walk && b.end - b.pos >= 16) {
				// (no prefetch of the input into L1 here: the next refill's words are loaded a
				// window ahead, and its 5 instructions a window cost more than it hid: kiln's
				// fast and medium files +1.3% / +1.5% without it, session 14)
				// the window: entries at bit offsets 0..span-1, two a lane (WALK_BIAS); a
				// symbol is taken when it ends within the count (refilled to >= 56 for the
				// 64-bit window: 16 bytes remain, the same bits)
				const uint32_t span = flags & 128 ? 32u : 64u;
				if (span > 32 && b.count < 56)
					warp_refill(&b, nx, &nx_pos);
				const uint32_t off = (lane + WALK_BIAS) & 31u;
				uint32_t ek = w->lit[(uint32_t)(b.buf >> off) & ((1u << KILN_INFL_LIT_BITS) - 1)];
				uint32_t ek1 = 0;
				if (span > 32)
					ek1 = w->lit[(uint32_t)(b.buf >> (off + 32)) & ((1u << KILN_INFL_LIT_BITS) - 1)];
				// where the symbol after each of the lane's two starts: the first may be in
				// either half, the second only in the upper one (three shuffles)
				uint32_t q = off + (ek & 0xFFu), q1 = off + 32 + (ek1 & 0xFFu);
				if (!(flags & 1024)) {
					uint32_t lo = __shfl_sync(FULL_MASK, ek, q + WALK_BIAS);
					uint32_t hi = __shfl_sync(FULL_MASK, ek1, q + WALK_BIAS);
					uint32_t hi1 = __shfl_sync(FULL_MASK, ek1, q1 + WALK_BIAS);
					ek = walk_entry(ek, q < 32 ? lo : hi, q, 1);
					ek1 = walk_entry(ek1, hi1, q1, 1);
				} else {
					ek = walk_entry(ek, 0, q, 0);
					ek1 = walk_entry(ek1, 0, q1, 0);
				}
				if (!(flags & 512) && b.end - b.pos >= 8) {
					// the words of the next refill (its position is b.pos: refills alone
					// move it), loaded now and used a window later
					uintptr_t at = (uintptr_t)(b.in + b.pos);
					const uint32_t *q = (const uint32_t *)(at & ~(uintptr_t)3);
					nx[0] = __ldg(q);
					nx[1] = __ldg(q + 1);
					nx[2] = (at & 3u) ? __ldg(q + 2) : 0u;
					nx_pos = b.pos;
				}
				if (prof) {
					if (__any_sync(FULL_MASK, (ek & ek1) == 0xFFFFFFFFu)) // waits for the lookups
						asm volatile("");
					long long t1 = clock64();
					t_wset += t1 - tw;
					tw = t1;
					nwin++;
				}
				// bytes are counted from the walk's start in 32 bits (k, against the room
				// left in the batch): the step's checks and updates are one instruction
				// each instead of 64-bit pairs
				const size_t o_walk = o;
				uint32_t n_walk = n, mbytes = 0; // symbols walked: literals + matches
				uint32_t room = (uint32_t)((limit < cap ? limit : cap) - o);
				// the literals go to the ring from o's place on, past its end where the
				// window reaches it (moved to its start after the walk): no wrap a store
				uint8_t *const lits = w->ring + (o & (RING - 1));
				// (the compiler would recompute the room at every step otherwise; pinning
				// the count and lits as well was 4% slower)
				asm("" : "+r"(room));
				// (the count never exceeds 63 here, refilled as it is; were it 64, a position
				// of 64 would read an entry of offset 32)
				const uint32_t cntb = (b.count < 63 ? b.count : 63) + WALK_BIAS;
				uint32_t pb = WALK_BIAS, k = 0;
				// a literal entry whose next position is within the count lies in
				// [WALK_LIT_MIN, WALK_LIT_MIN + lit_span]
				const uint32_t lit_span = (cntb << 24 | 0xFFFFFFu) - WALK_LIT_MIN;
				const uint32_t lits_at = (uint32_t)__cvta_generic_to_shared(lits);
				// each kind of step tests the room it needs; no test of the position against
				// span: symbols are taken where they end within the count, so the position
				// stays below 64, and with 32-bit windows past 31 it reads ek1, which holds
				// nothing. Every lane stores the walk's literals (the same byte at the same
				// address): no branch on the lane.
				if (room > 0) {
					for (;;) {
						// the usual steps in a loop of their own, then the step that ended
						// them (pb is the same in every lane: each lane picks its half
						// before the one shuffle; two shuffles and a select after took more
						// issue slots)
						uint32_t e, pair;
						walk_literals(ek, ek1, lit_span, room, lits_at, &pb, &k, &e, &pair);
						if (e >= WALK_LIT_MIN) {
							// a pair's first literal alone, as without pairs
							uint32_t nb = pb + (e >> 16 & 0x7Fu);
							if (!pair || nb > cntb || k >= room)
								break;
							lits[k] = (uint8_t)e;
							k++;
							pb = nb;
							continue;
						}
						if (KILN_INFL_KIND(e) != KILN_INFL_LEN || k >= room)
							break;
						uint32_t pos = pb - WALK_BIAS, eb = e & 0xFFu, ex = (e >> 12) & 15u;
						uint32_t dpos = pos + eb + ex;
						if (dpos >= span)
							break;
						uint32_t l = (e >> 16) + ((uint32_t)(b.buf >> (pos + eb)) & ((1u << ex) - 1));
						// the distance code looked up where it starts, the same address in
						// every lane: kiSt files hold 0.2 to 1.6 matches a window, and a
						// lookup at every offset of every window cost more
						uint32_t d =
							w->dist[(uint32_t)(b.buf >> dpos) & ((1u << KILN_INFL_DIST_BITS) - 1)];
						if (KILN_INFL_KIND(d) != KILN_INFL_LEN)
							break;
						uint32_t db = d & 0xFFu, dx = (d >> 12) & 15u;
						if (dpos + db + dx + WALK_BIAS > cntb)
							break;
						uint32_t dist =
							(d >> 16) + ((uint32_t)(b.buf >> (dpos + db)) & ((1u << dx) - 1));
						size_t at = o_walk + k;
						if (dist > at || l > cap - at)
							break;
						// every lane stores the token (the same values at the same address)
						w->tok[n].pos = (uint32_t)at;
						w->tok[n].len_dist = l << 16 | dist;
						n++;
						k += l;
						mbytes += l;
						pb = dpos + db + dx + WALK_BIAS;
						if (n == NTOK)
							break;
					}
				}
				const uint32_t pos = pb - WALK_BIAS;
				// literals past the ring's end to its start (literals come before room, <=
				// BATCH bytes from o; the rest of a match's bytes are written later, by the
				// copy, over whatever lies there)
				uint32_t past = (uint32_t)(o & (RING - 1)) + (k < room ? k : room);
				if (past > RING) {
					__syncwarp();
					for (uint32_t i = lane; i < past - RING; i += 32)
						w->ring[i] = w->ring[RING + i];
					__syncwarp();
				}
				o = o_walk + k;
				if (prof) {
					t_walk += clock64() - tw;
					nwsym += (long long)(o - o_walk) + (long long)(n - n_walk) - (long long)mbytes;
				}
				if (pos) {
					kiln_bits_drop(&b, pos);
					continue;
				}
				if (!(o < limit && n < NTOK))
					continue; // the batch is full: the loop ends
			}
			// one symbol, as kiln_infl_huffman
			uint32_t e = kiln_infl_lookup_split(w->lit, w->ovf, KILN_INFL_LIT_BITS, &b);
			uint32_t kind = KILN_INFL_KIND(e);
			if (kind == KILN_INFL_LIT) {
				if (o >= cap) {
					rc = KILN_INFL_OUTPUT_FULL;
					done = 1;
					break;
				}
				if (lane == 0)
					w->ring[o & (RING - 1)] = (uint8_t)(e >> 16);
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
			rc = kiln_infl_match_ok(kind, o, cap);
			if (rc != KILN_INFL_OK) {
				done = 1;
				break;
			}
			uint32_t l, dist;
			if (!kiln_infl_len_dist_split(w->dist, w->ovf + INFL_LIT_OVF, &b, e, &l, &dist)) {
				rc = KILN_INFL_ERR_DATA;
				done = 1;
				break;
			}
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
				if (lane == 0) {
					w->tok[n].pos = (uint32_t)o;
					w->tok[n].len_dist = l << 16 | dist;
				}
				n++;
				o += l;
			}
		}
		if (done && rc == KILN_INFL_OK && !kiln_bits_ok(&b))
			rc = KILN_INFL_ERR_TRUNCATED;
		size_t end = o;
		if (prof) {
			long long t1 = clock64();
			t_dec += t1 - t0;
			t0 = t1;
			nmatch += n;
		}
		__syncwarp();
		// sources at or after end - RING are in the ring (RING > BATCH + 258: all sources
		// before them were flushed by earlier batches)
		uint32_t first = 0;
		while (first < n) {
			token t = w->tok[first];
			if (!rounds || (t.len_dist >> 16) > 64) {
				uint32_t l = t.len_dist >> 16;
				uint32_t dist = t.len_dist & 0xFFFFu;
				size_t p = t.pos;
				for (uint32_t j = lane; j < l; j += 32) {
					uint32_t jj = j < dist ? j : j % dist;
					size_t q = p - dist + jj;
					uint8_t v = q + RING >= end ? w->ring[q & (RING - 1)] : out[q];
					w->ring[(p + j) & (RING - 1)] = v;
				}
				first++;
				__syncwarp();
				continue;
			}
			// a round: everything before the first match not yet copied is final
			size_t hwm = t.pos;
			uint32_t i = first + (uint32_t)lane;
			bool pending = false;
			if (i < n) {
				token u = w->tok[i];
				uint32_t l = u.len_dist >> 16, dist = u.len_dist & 0xFFFFu;
				size_t p = u.pos;
				size_t src = p - dist;
				size_t src_end = src + (l < dist ? l : dist);
				if (l > 64 || src_end > hwm) {
					pending = l > 0;
				} else if (l > 0) {
					uint32_t k = 0;
					for (uint32_t j = 0; j < l; j++) {
						size_t q = src + k;
						uint8_t v = q + RING >= end ? w->ring[q & (RING - 1)] : out[q];
						w->ring[(p + j) & (RING - 1)] = v;
						if (++k == dist)
							k = 0;
					}
					w->tok[i].len_dist = 0; // copied
				}
			}
			uint32_t pend = __ballot_sync(FULL_MASK, pending);
			first = pend ? first + (uint32_t)(__ffs(pend) - 1) : first + 32;
			__syncwarp();
		}
		if (prof && lane == 0) {
			long long t1 = clock64();
			t_copy += t1 - t0;
			t0 = t1;
		}
		// flush [start, end) and sum it for the Adler-32: sum of x_i and of (L - i) x_i
		uint32_t L = (uint32_t)(end - start), s1 = 0, s2 = 0;
		for (uint32_t i0 = 0; i0 < L; i0 += 128) { // loads before stores (ring and out never overlap)
			uint32_t v[4];
#pragma unroll
			for (uint32_t j = 0; j < 4; j++) {
				uint32_t i = i0 + (uint32_t)lane + 32 * j;
				v[j] = i < L ? w->ring[(start + i) & (RING - 1)] : 0u;
			}
#pragma unroll
			for (uint32_t j = 0; j < 4; j++) {
				uint32_t i = i0 + (uint32_t)lane + 32 * j;
				if (i < L) {
					out[start + i] = (uint8_t)v[j];
					s1 += v[j];
					s2 += (L - i) * v[j];
				}
			}
		}
		s1 = __reduce_add_sync(FULL_MASK, s1);
		s2 = __reduce_add_sync(FULL_MASK, s2);
		if (L) {
			uint32_t a = (1u + s1 % KILN_ADLER_MOD) % KILN_ADLER_MOD;
			uint32_t bb = (L % KILN_ADLER_MOD + s2 % KILN_ADLER_MOD) % KILN_ADLER_MOD;
			adler = kiln_adler32_combine(adler, bb << 16 | a, L);
		}
		__syncwarp();
		if (prof && lane == 0)
			t_flush += clock64() - t0;
		if (done)
			break;
	}
	if (prof && lane == 0) {
		atomicAdd(&g_prof[0], (unsigned long long)(t_hdr));
		atomicAdd(&g_prof[1], (unsigned long long)(t_dec - t_hdr));
		atomicAdd(&g_prof[2], (unsigned long long)t_copy);
		atomicAdd(&g_prof[3], (unsigned long long)t_flush);
		atomicAdd(&g_prof[4], (unsigned long long)o);
		atomicAdd(&g_prof[5], (unsigned long long)nmatch);
		atomicAdd(&g_prof[6], (unsigned long long)nhdr);
		atomicAdd(&g_prof[7], 1ull);
		atomicAdd(&g_prof[8], (unsigned long long)nwin);
		atomicAdd(&g_prof[9], (unsigned long long)nwsym);
		atomicAdd(&g_prof[10], (unsigned long long)t_wset);
		atomicAdd(&g_prof[11], (unsigned long long)t_walk);
	}
	size_t used = kiln_bits_consumed(&b);
	if (rc == KILN_INFL_OK && strip && used != len)
		rc = KILN_INFL_ERR_STRIP;
	if (lane == 0) {
		w->rc = (uint32_t)rc;
		w->final = (uint32_t)final;
		w->out_len = o;
		w->used = used;
		w->adler = adler;
	}
	__syncwarp();
}

__device__ static void strip_rows(const pd_file *f, uint32_t i, uint32_t *r0, uint32_t *r1)
{
	*r0 = i * f->rows_per_strip;
	uint32_t e = *r0 + f->rows_per_strip;
	*r1 = e > f->height || e < *r0 ? f->height : e;
}

// The warps' second-level table slots: `words` masks of 32 slots (a bit set: taken), zero
// between kernels, and INFL_OVF entries of device memory per slot.
struct infl_slots {
	uint32_t *masks;
	uint32_t *ovf;
	uint32_t words;
};

// warp_inflate with a second-level slot taken for the call (by lane 0: the first free bit
// from a word that depends on the CTA, so that CTAs rarely race for one word).
__device__ static void warp_inflate_slot(warp_shared *w, infl_slots sl, const uint8_t *in, size_t len, uint8_t *out,
					 size_t cap, int strip, int flags)
{
	uint32_t lane = threadIdx.x & 31, slot = 0;
	if (lane == 0) {
		for (uint32_t k = blockIdx.x % sl.words;; k = k + 1 == sl.words ? 0 : k + 1) {
			uint32_t m = *(volatile uint32_t *)&sl.masks[k];
			while (m != 0xFFFFFFFFu) {
				uint32_t bit = (uint32_t)__ffs(~m) - 1, old = atomicOr(&sl.masks[k], 1u << bit);
				if (!(old & 1u << bit)) {
					slot = 32 * k + bit;
					break;
				}
				m = old | 1u << bit;
			}
			if (m != 0xFFFFFFFFu)
				break;
		}
		w->ovf = sl.ovf + (size_t)slot * INFL_OVF;
	}
	__syncwarp();
	if (flags)
		warp_inflate<true>(w, in, len, out, cap, strip, flags);
	else
		warp_inflate<false>(w, in, len, out, cap, strip, 0);
	if (lane == 0) {
		__threadfence(); // the next owner of the slot sees nothing of ours in flight
		atomicAnd(&sl.masks[slot / 32], ~(1u << (slot % 32)));
	}
}

// 2: one warp per strip (per file without kiSt).
__global__ void __launch_bounds__(32 * INFL_WARPS, INFL_MIN_WARPS / INFL_WARPS)
pd_inflate(const pd_file *files, uint32_t count, uint32_t total_strips, const uint32_t *status, infl_slots sl,
	   int flags)
{
	__shared__ warp_shared ws[INFL_WARPS];
	uint32_t wid = threadIdx.x / 32;
	uint32_t g = blockIdx.x * INFL_WARPS + wid;
	if (g >= total_strips)
		return;
	uint32_t fi = find_prefix(files, count, g, false);
	const pd_file *f = &files[fi];
	if (status[fi] != ST_OK || f->par)
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
		warp_inflate_slot(&ws[wid], sl, f->zlib + 2, (size_t)f->zlib_size - 2, f->filt,
				  (size_t)f->filtered_size, 0, flags);
		uint32_t adler = 0;
		if (ws[wid].rc == KILN_INFL_OK && ws[wid].out_len == f->filtered_size)
			adler = ws[wid].adler;
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
	warp_inflate_slot(&ws[wid], sl, f->zlib + off, next - off, out, want, 1, flags);
	bool ok = ws[wid].rc == KILN_INFL_OK && ws[wid].out_len == want &&
		  ws[wid].final == (uint32_t)(s + 1 == f->strips);
	uint32_t adler = ok ? ws[wid].adler : 0;
	if (lane == 0) {
		res[0] = ok ? 0u : 1u;
		res[1] = adler;
	}
}

// ---- files without strips: one stream in parallel (png_inflate_par.h) -----------------
// par_state[3] says the zlib header was refused (the verdict is already in strip_res).

// 2a. Candidates, in two steps: threads of a grid (grid.y: the file) take a byte of the
// stream each in turn and test the cheap half of the header test at its 8 bits
// (kiln_infl_header_shape, its look-up table in shared memory) and append the offsets
// that pass (0.1 % of Kodak streams') to one list, (file, bit); then threads of a grid
// take them in turn for the full test. In one step (the full test at every bit) the warps
// ran the deep test for a lane or two while the rest waited: 6.1 ms for 32 Kodak files.
// A full list drops the rest: the files' candidates then are some of their headers, as
// past their own cap (kiln_infl_cand_overflow: no mid entries; the same bytes).
__global__ void __launch_bounds__(256) pd_par_scan(const pd_file *files, const uint32_t *status, pd_globals *g,
						  uint64_t *surv, uint32_t surv_cap)
{
	__shared__ uint16_t kraft3[512];
	uint32_t fi = blockIdx.y;
	const pd_file *f = &files[fi];
	if (!f->par || status[fi] != ST_OK)
		return;
	if (threadIdx.x == 0)
		kiln_infl_kraft3_init(kraft3);
	__syncthreads();
	size_t len = (size_t)f->zlib_size - 2;
	const uint8_t *in = f->zlib + 2;
	uint32_t lane = threadIdx.x & 31;
	uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
	// a warp's lanes take 32 bytes in a row, so the loop's condition is the warp's
	for (uint64_t first = (uint64_t)blockIdx.x * blockDim.x + (threadIdx.x - lane); first < len; first += stride) {
		uint64_t byte = first + lane;
		uint32_t hits = 0; // bit k: offset 8 * byte + k passes
		if (byte < len) {
			kiln_infl_window w = kiln_infl_window_at(in, len, byte);
			uint32_t fields = kiln_infl_window_fields(&w) & (byte == 0 ? ~1u : ~0u);
			for (; fields; fields &= fields - 1) {
				uint32_t k = (uint32_t)__ffs(fields) - 1;
				hits |= (uint32_t)kiln_infl_window_shape(&w, k, kraft3) << k;
			}
		}
		uint32_t n = __popc(hits);
		uint32_t incl = n; // the warp's offsets before this lane (an inclusive scan, then less n)
		for (uint32_t d = 1; d < 32; d <<= 1) {
			uint32_t v = __shfl_up_sync(FULL_MASK, incl, d);
			incl += lane >= d ? v : 0u;
		}
		uint32_t total = __shfl_sync(FULL_MASK, incl, 31), at = 0;
		if (lane == 31 && total > 0)
			at = atomicAdd(&g->surv, total);
		at = __shfl_sync(FULL_MASK, at, 31) + incl - n;
		for (uint32_t k = 0; k < 8; k++)
			if ((hits >> k) & 1u) {
				if (at < surv_cap)
					surv[at] = (uint64_t)fi << 40 | (8 * byte + k);
				at++;
			}
	}
}

__global__ void __launch_bounds__(256) pd_par_verify(const pd_file *files, pd_globals *g, const uint64_t *surv,
						    uint32_t surv_cap)
{
	uint32_t n = g->surv < surv_cap ? g->surv : surv_cap;
	if (blockIdx.x == 0 && threadIdx.x == 0)
		g->lost = g->surv > surv_cap;
	for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
		const pd_file *f = &files[surv[i] >> 40];
		uint64_t bit = surv[i] & ((1ull << 40) - 1);
		if (kiln_infl_block_start(f->zlib + 2, (size_t)f->zlib_size - 2, bit)) {
			uint32_t at = atomicAdd(&f->par_state[0], 1u);
			if (at + 1 < f->cand_cap)
				f->cand[at + 1] = bit;
		}
	}
}

// The file of a thread-per-file kernel of the parallel inflate, or NULL when the thread
// has none or its file is not (or no longer) inflated in parallel.
__device__ const pd_file *par_file(const pd_file *files, uint32_t count, const uint32_t *status, uint32_t fi)
{
	if (fi >= count)
		return NULL;
	const pd_file *f = &files[fi];
	return f->par && status[fi] == ST_OK && !f->par_state[3] ? f : NULL;
}

// Heap sort's step: a[k] down the heap a[0, end).
__device__ static void sift_u64(uint64_t *a, uint32_t k, uint32_t end)
{
	uint64_t v = a[k];
	for (;;) {
		uint32_t ch = 2 * k + 1;
		if (ch >= end)
			break;
		if (ch + 1 < end && a[ch + 1] > a[ch])
			ch++;
		if (a[ch] <= v)
			break;
		a[k] = a[ch];
		k = ch;
	}
	a[k] = v;
}

// a[0, m) in increasing order, in place (heap sort: n log n whatever the order; the
// candidates come in the verify kernel's atomics' order, and an insertion sort by one
// thread, fine for Kodak's dozen, is quadratic in the hundreds of a 2048x2048 file's)
__device__ static void sort_u64(uint64_t *a, uint32_t m)
{
	for (uint32_t k = m / 2; k-- > 0;)
		sift_u64(a, k, m);
	for (uint32_t end = m; end-- > 1;) {
		uint64_t t = a[0];
		a[0] = a[end];
		a[end] = t;
		sift_u64(a, 0, end);
	}
}

// The stream's candidates passed the cap, or the batch's list of offsets to test did:
// no mid entries (kiln_infl_cand_overflow).
__device__ static bool par_overflow(const pd_file *f, const pd_globals *g)
{
	return g->lost || kiln_infl_cand_overflow((uint64_t)f->par_state[0] + 1, f->cand_cap);
}

// 2b. A thread per file: bit 0 first, the candidates sorted and merged with the mid
// entries, the probe and count passes' items.
__global__ void pd_par_prep(const pd_file *files, uint32_t count, const uint32_t *status, pd_globals *g,
			    uint64_t *work)
{
	uint32_t fi = blockIdx.x * blockDim.x + threadIdx.x;
	const pd_file *f = par_file(files, count, status, fi);
	if (!f)
		return;
	if (kiln_zlib_header_check(f->zlib[0], f->zlib[1]) != 0) {
		f->strip_res[0] = KILN_INFL_ERR_DATA + 100; // header
		f->par_state[3] = 1;
		return;
	}
	uint32_t n = f->par_state[0] + 1;
	n = n < f->cand_cap ? n : f->cand_cap;
	uint64_t *c = f->cand;
	c[0] = 0;
	sort_u64(c + 1, n - 1);
	uint32_t m = kiln_infl_entries(c, n, (size_t)f->zlib_size - 2, par_overflow(f, g) ? 0 : f->spacing, f->ent,
				       f->ent_cap);
	f->par_state[1] = m;
	uint32_t w = atomicAdd(&g->items[LIST_PROBE], m);
	for (uint32_t i = 0; i < m; i++)
		work[w + i] = (uint64_t)fi << 32 | i;
}

// 2c/2f/2i. The probe (pass 0), count (1) and decode (2) passes: pool threads (`lanes` of
// each warp) take (file, entry) items in turn. The count writes each entry's symbols to
// its slot, from where most pieces of the chain are placed (pd_par_place); the decode
// pass decodes only the rest again (before slots, every piece was decoded twice: count
// 3.1 ms and decode 5.3 ms for 32 Kodak files). Tables in shared memory instead of device
// memory (L1 hits, 98%) gained nothing.
enum { PASS_PROBE, PASS_COUNT, PASS_DECODE };
__device__ const pd_file *par_item(const pd_file *files, uint64_t w, uint32_t *i, uint32_t *n)
{
	const pd_file *f = &files[w >> 32];
	*i = (uint32_t)w;
	*n = f->par_state[1];
	return f;
}

__device__ __forceinline__ void par_pass(const pd_file *files, pd_globals *g, const uint64_t *work,
					 kiln_inflate_tables *tables, const kiln_infl_block *blocks, int pass, int list,
					 uint32_t lanes)
{
	if (threadIdx.x >= lanes)
		return;
	kiln_inflate_tables *t = tables + blockIdx.x * lanes + threadIdx.x;
	uint32_t items = g->items[list];
	for (;;) {
		uint32_t it = atomicAdd(&g->taken[list], 1u), i, n;
		if (it >= items)
			break;
		const pd_file *f = par_item(files, work[it], &i, &n);
		const uint8_t *in = f->zlib + 2;
		size_t len = (size_t)f->zlib_size - 2;
		if (pass == PASS_PROBE)
			kiln_infl_probe(t, blocks, in, len, f->ent, n, i);
		else if (pass == PASS_COUNT)
			kiln_infl_piece(t, blocks, in, len, f->ent, n, i, 0, f->slots + f->ent[i].slot,
					f->ent[i].slot_cap, KILN_INFL_BASE_UNKNOWN, f->filtered_size, &f->seg[i]);
		else
			kiln_infl_piece(t, blocks, in, len, f->ent, n, i, f->skip[i], f->sym + f->seg_base[i], SIZE_MAX,
					f->seg_base[i], f->filtered_size, &f->dec[i]);
	}
}

// Held to 64 registers, so that 32 warps of an SM run pieces instead of 16 (with 128
// registers and no spills): a few percent faster with spills of 800 B (H100, 32 Kodak
// files). Debug flag bit 27 runs the kernel with 128 registers (pd_par_pass_roomy).
__global__ void __launch_bounds__(32, 32) pd_par_pass(const pd_file *files, pd_globals *g, const uint64_t *work,
						     kiln_inflate_tables *tables, const kiln_infl_block *blocks,
						     int pass, int list, uint32_t lanes)
{
	par_pass(files, g, work, tables, blocks, pass, list, lanes);
}

__global__ void __launch_bounds__(32) pd_par_pass_roomy(const pd_file *files, pd_globals *g, const uint64_t *work,
						       kiln_inflate_tables *tables, const kiln_infl_block *blocks,
						       int pass, int list, uint32_t lanes)
{
	par_pass(files, g, work, tables, blocks, pass, list, lanes);
}

// 2b'. The tables of each header entry's block, built once for the probes and pieces of
// its mid entries (kiln_infl_block), a thread a header entry, while the batch's area
// lasts: each of Kodak's ~4,000 entries a batch built its block's tables in the probe and
// the count pass (about 77K instructions each), most of the probe pass.
__global__ void __launch_bounds__(256) pd_par_blocks(const pd_file *files, pd_globals *g, const uint64_t *work,
						    kiln_infl_block *blocks, uint32_t block_cap)
{
	uint32_t items = g->items[LIST_PROBE];
	for (uint32_t it = blockIdx.x * blockDim.x + threadIdx.x; it < items; it += gridDim.x * blockDim.x) {
		uint32_t i, n;
		const pd_file *f = par_item(files, work[it], &i, &n);
		kiln_infl_entry *e = &f->ent[i];
		if (e->src != i)
			continue;
		uint32_t k = atomicAdd(&g->blocks, 1u);
		if (k >= block_cap)
			continue;
		kiln_infl_block_build(&blocks[k], f->zlib + 2, (size_t)f->zlib_size - 2, e->bit);
		e->block = k;
	}
}

// The per-file steps between the passes run a CTA of PF_THREADS per file, each thread a
// run of entries, with a scan where an entry's result depends on those before it (a thread
// per file took 0.8-1.4 ms per step for 32 Kodak files: a few hundred entries each, every
// step a chain of device-memory loads).
#define PF_THREADS 256

// Exclusive prefix sum of v over the CTA's threads (PF_THREADS of them); *total: the sum.
__device__ uint64_t cta_scan(uint64_t v, uint64_t *total)
{
	__shared__ uint64_t warp_sum[PF_THREADS / 32];
	uint32_t lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
	uint64_t incl = v;
	for (uint32_t d = 1; d < 32; d <<= 1) {
		uint64_t u = __shfl_up_sync(FULL_MASK, incl, d);
		incl += lane >= d ? u : 0;
	}
	if (lane == 31)
		warp_sum[wid] = incl;
	__syncthreads();
	uint64_t before = 0, all = 0;
	for (uint32_t w = 0; w < PF_THREADS / 32; w++) {
		before += w < wid ? warp_sum[w] : 0;
		all += warp_sum[w];
	}
	__syncthreads(); // warp_sum is the next call's
	*total = all;
	return before + incl - v;
}

// This thread's run [*i0, *i1) of n items.
__device__ void cta_run(uint32_t n, uint32_t *i0, uint32_t *i1)
{
	uint32_t per = (n + PF_THREADS - 1) / PF_THREADS;
	uint64_t a = (uint64_t)threadIdx.x * per, b = a + per;
	*i0 = (uint32_t)(a < n ? a : n);
	*i1 = (uint32_t)(b < n ? b : n);
}

// Appends (file, entry) items to list l: this thread's `mine` of them, which it then
// writes from the returned index on.
__device__ uint32_t cta_append(pd_globals *g, int l, uint32_t mine)
{
	__shared__ uint32_t at;
	uint64_t all, before = cta_scan(mine, &all);
	if (threadIdx.x == 0)
		at = atomicAdd(&g->items[l], (uint32_t)all);
	__syncthreads();
	uint32_t r = at + (uint32_t)before;
	__syncthreads();
	return r;
}

// 2d. A CTA per file: pieces the probes say are long get more mid entries
// (kiln_infl_refine's steps), which the probe pass then probes.
__global__ void __launch_bounds__(PF_THREADS) pd_par_refine(const pd_file *files, uint32_t count,
							   const uint32_t *status, pd_globals *g, uint64_t *fresh)
{
	const pd_file *f = par_file(files, count, status, blockIdx.x);
	if (!f)
		return;
	uint32_t n = f->par_state[1], i0, i1;
	size_t len = (size_t)f->zlib_size - 2;
	uint64_t mine = 0, all;
	cta_run(n, &i0, &i1);
	for (uint32_t i = i0; i < i1; i++) { // skip[i]: entry i's additions, then its new index
		uint64_t add = kiln_infl_refine_adds(f->ent, n, i, len, par_overflow(f, g) ? 0 : f->target);
		f->skip[i] = (uint32_t)(add < f->ent_cap ? add : f->ent_cap);
		mine += f->skip[i];
	}
	uint64_t before = cta_scan(mine, &all), room = f->ent_cap - n;
	if (all == 0)
		return;
	for (uint32_t i = i0; i < i1; i++) {
		uint32_t add = f->skip[i];
		f->skip[i] = i + (uint32_t)(before < room ? before : room);
		before += add;
	}
	uint32_t m = n + (uint32_t)(all < room ? all : room);
	__syncthreads();
	for (uint32_t i = i0; i < i1; i++)
		kiln_infl_refine_move(f->ent, n, i, len, f->skip, (i + 1 < n ? f->skip[i + 1] : m) - f->skip[i] - 1,
				      f->ent2);
	__syncthreads();
	cta_run(m, &i0, &i1);
	uint32_t added = 0;
	for (uint32_t i = i0; i < i1; i++) {
		f->ent[i] = f->ent2[i];
		added += f->ent[i].probes == KILN_INFL_UNPROBED;
	}
	uint32_t w = cta_append(g, LIST_FRESH, added);
	for (uint32_t i = i0; i < i1; i++)
		if (f->ent[i].probes == KILN_INFL_UNPROBED)
			fresh[w++] = (uint64_t)blockIdx.x << 32 | i;
	if (threadIdx.x == 0)
		f->par_state[1] = m;
}

// 2e. A CTA per file: the slots (kiln_infl_slots' steps) and the count pass's items.
__global__ void __launch_bounds__(PF_THREADS) pd_par_slots(const pd_file *files, uint32_t count,
							  const uint32_t *status, pd_globals *g, uint64_t *work)
{
	const pd_file *f = par_file(files, count, status, blockIdx.x);
	if (!f)
		return;
	uint32_t n = f->par_state[1], i0, i1;
	size_t len = (size_t)f->zlib_size - 2;
	uint64_t area = kiln_infl_slot_area(len, f->filtered_size, f->ent_cap, f->slot_scale, f->slot_pad), mine = 0, all;
	cta_run(n, &i0, &i1);
	for (uint32_t i = i0; i < i1; i++)
		mine += kiln_infl_slot_want(f->ent, n, i, len, f->slot_scale, f->slot_pad);
	uint64_t wants = cta_scan(mine, &all);
	for (uint32_t i = i0; i < i1; i++) {
		uint64_t want = kiln_infl_slot_want(f->ent, n, i, len, f->slot_scale, f->slot_pad);
		kiln_infl_slot_at(f->ent, n, i, wants, want, area);
		wants += want;
	}
	uint32_t w = cta_append(g, LIST_COUNT, i1 - i0);
	for (uint32_t i = i0; i < i1; i++)
		work[w++] = (uint64_t)blockIdx.x << 32 | i;
}

// 2g. A CTA per file: the chain (one thread walks it); its pieces that can be placed from
// their slots (their results then are the count's less the symbols before the probe they
// are entered at), and the others, which the decode pass decodes again.
__global__ void __launch_bounds__(PF_THREADS) pd_par_chain(const pd_file *files, uint32_t count,
							  const uint32_t *status, pd_globals *g, uint64_t *redo,
							  uint64_t *place)
{
	const pd_file *f = par_file(files, count, status, blockIdx.x);
	if (!f)
		return;
	if (threadIdx.x == 0)
		f->par_state[2] = kiln_infl_chain(f->seg, f->ent, f->par_state[1], f->filtered_size, f->order,
						  f->seg_base, f->skip);
	__syncthreads();
	uint32_t k = f->par_state[2], i0, i1, placed = 0;
	cta_run(k, &i0, &i1);
	for (uint32_t i = i0; i < i1; i++) {
		uint32_t c = f->order[i];
		int ok = kiln_infl_placeable(f->ent, f->seg, c, f->skip[c], f->seg_base[c], f->filtered_size);
		placed += ok;
		if (ok) {
			f->dec[c] = f->seg[c];
			f->dec[c].out_len -= kiln_infl_before(f->ent, c, f->skip[c]);
		}
	}
	uint32_t p = cta_append(g, LIST_PLACE, placed), r = cta_append(g, LIST_REDO, i1 - i0 - placed);
	for (uint32_t i = i0; i < i1; i++) {
		uint32_t c = f->order[i];
		uint64_t item = (uint64_t)blockIdx.x << 32 | c;
		if (kiln_infl_placeable(f->ent, f->seg, c, f->skip[c], f->seg_base[c], f->filtered_size))
			place[p++] = item;
		else
			redo[r++] = item;
	}
}

// 2h. A CTA per placed piece in turn: its symbols from its slot to their stream offsets,
// as the decode from its probe writes them (kiln_infl_unslot). References into the first
// symbols resolve by pointer jumping over those (each round a symbol takes its target's
// value; chains halve), the rest in one step. A piece near the stream's start whose
// markers name bytes before it joins the decode pass (which fails it where the serial
// inflater does).
__global__ void __launch_bounds__(256) pd_par_place(const pd_file *files, pd_globals *g, const uint64_t *place,
						   uint64_t *redo)
{
	uint32_t items = g->items[LIST_PLACE], tid = threadIdx.x, nt = blockDim.x;
	for (uint32_t it = blockIdx.x; it < items; it += gridDim.x) {
		uint64_t w = place[it];
		uint32_t c, n;
		const pd_file *f = par_item(files, w, &c, &n);
		const uint16_t *slot = f->slots + f->ent[c].slot;
		uint32_t before = kiln_infl_before(f->ent, c, f->skip[c]);
		uint64_t base = f->seg_base[c], m = f->seg[c].out_len, refs = kiln_infl_refs(f->ent, c);
		uint64_t r_end = refs < m ? refs : m;
		uint16_t *out = f->sym + base; // slot symbol x >= before goes to out[x - before]
		for (uint64_t x = before + tid; x < r_end; x += nt)
			out[x - before] = kiln_infl_unslot(slot[x], before);
		int more = 1;
		while (__syncthreads_or(more)) {
			more = 0;
			for (uint64_t x = before + tid; x < r_end; x += nt) {
				uint16_t v = out[x - before];
				if (v >= KILN_INFL_REF0) {
					v = out[v - KILN_INFL_REF0 - before];
					out[x - before] = v;
					more |= v >= KILN_INFL_REF0;
				}
			}
		}
		int early = 0;
		for (uint64_t x = before + tid; x < m; x += nt) {
			uint16_t v;
			if (x < r_end) {
				v = out[x - before];
			} else {
				v = kiln_infl_unslot(slot[x], before);
				if (v >= KILN_INFL_REF0)
					v = out[v - KILN_INFL_REF0 - before];
				out[x - before] = v;
			}
			early |= kiln_infl_before_start(v, base);
		}
		if (__syncthreads_or(early) && tid == 0)
			redo[atomicAdd(&g->items[LIST_REDO], 1u)] = w;
	}
}

// Symbols per thread and round of pd_par_resolve (a Kodak piece is about 7 KB: one round
// of 1,024 threads).
#define RESOLVE_RUN 8

// kiln_adler32_update(1, p, n) with p 16-byte aligned, a 16-byte word per load.
__device__ static uint32_t adler_run(const uint8_t *p, size_t n)
{
	uint32_t a = 1, b = 0;
	size_t i = 0;
	while (i < n) {
		size_t stop = n - i < KILN_ADLER_RUN ? n : i + (KILN_ADLER_RUN & ~(size_t)15);
		for (; i + 16 <= stop; i += 16) {
			uint4 w = *(const uint4 *)(p + i);
			uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
			for (int k = 0; k < 16; k++) {
				a += (words[k / 4] >> (8 * (k % 4))) & 0xFFu;
				b += a;
			}
		}
		for (; i < stop; i++) {
			a += p[i];
			b += a;
		}
		a %= KILN_ADLER_MOD;
		b %= KILN_ADLER_MOD;
	}
	return b << 16 | a;
}

// 2j. A CTA per file: the verdict, the markers resolved piece after piece (a piece's bytes
// in parallel), the Adler-32 of the image's bytes; results as pd_inflate's.
__global__ void __launch_bounds__(1024) pd_par_resolve(const pd_file *files, const uint32_t *status)
{
	const pd_file *f = par_file(files, gridDim.x, status, blockIdx.x);
	if (!f)
		return;
	__shared__ uint64_t out_len, used;
	__shared__ int rc;
	__shared__ uint32_t part[32];
	uint32_t k = f->par_state[2], tid = threadIdx.x, nt = blockDim.x;
	if (tid == 0)
		rc = kiln_infl_verdict(f->dec, f->order, k, &out_len, &used);
	__syncthreads();
	uint64_t end = out_len;
	for (uint32_t j = 0; j < k; j++) {
		uint32_t c = f->order[j];
		uint64_t b = f->seg_base[c], e = b + f->dec[c].out_len;
		e = e < end ? e : end;
		// a thread's symbols are all loaded before any byte is written: one round trip
		// for them (and one for the markers' bytes) per piece instead of one per symbol
		// (the loop symbol by symbol waited on each load: 1.1 ms for 32 Kodak files)
		for (uint64_t p0 = b + tid; p0 < e; p0 += (uint64_t)nt * RESOLVE_RUN) {
			uint16_t v[RESOLVE_RUN];
#pragma unroll
			for (uint32_t u = 0; u < RESOLVE_RUN; u++) {
				uint64_t p = p0 + (uint64_t)u * nt;
				v[u] = p < e ? f->sym[p] : 0;
			}
#pragma unroll
			for (uint32_t u = 0; u < RESOLVE_RUN; u++) {
				uint64_t p = p0 + (uint64_t)u * nt;
				if (p < e)
					f->filt[p] = kiln_infl_resolve(v[u], f->filt, b);
			}
		}
		__syncthreads();
	}
	uint32_t adler = 0;
	if (rc == KILN_INFL_OK && end == f->filtered_size) {
		// each thread a run of whole 16-byte words (the buffer is 256-aligned), each
		// warp's runs combined by its lane 0, then the warps'
		uint64_t run = ((end + nt - 1) / nt + 15) & ~(uint64_t)15, p0 = tid * run, p1 = p0 + run;
		p0 = p0 < end ? p0 : end;
		p1 = p1 < end ? p1 : end;
		uint32_t a = adler_run(f->filt + p0, (size_t)(p1 - p0));
		uint32_t lane = tid & 31;
		uint32_t acc = 1;
		for (uint32_t l = 0; l < 32; l++) {
			uint32_t v = __shfl_sync(FULL_MASK, a, l);
			uint64_t q0 = (uint64_t)(tid - lane + l) * run, q1 = q0 + run;
			q0 = q0 < end ? q0 : end;
			q1 = q1 < end ? q1 : end;
			acc = kiln_adler32_combine(acc, v, q1 - q0);
		}
		if (lane == 0)
			part[tid / 32] = acc;
		__syncthreads();
		if (tid == 0) {
			uint32_t all = 1;
			for (uint32_t w = 0; w < nt / 32; w++) {
				uint64_t q0 = (uint64_t)w * 32 * run, q1 = q0 + 32 * run;
				q0 = q0 < end ? q0 : end;
				q1 = q1 < end ? q1 : end;
				all = kiln_adler32_combine(all, part[w], q1 - q0);
			}
			part[0] = all;
		}
		__syncthreads();
		adler = part[0];
	}
	if (tid == 0) {
		uint32_t *res = f->strip_res;
		res[0] = (uint32_t)rc;
		res[1] = adler;
		res[2] = (uint32_t)out_len;
		res[3] = (uint32_t)used;
	}
}

// A whole stream's verdict (kiln_pngdec_stream_verdict, the rule the CPU path follows) as
// a device status.
__device__ static uint32_t stream_status(const pd_file *f, uint32_t rc, uint64_t out_len, uint64_t used,
					 uint32_t adler)
{
	kiln_status v = kiln_pngdec_stream_verdict((int)rc, out_len, used, adler, f->zlib, f->zlib_size,
						   f->filtered_size);
	return v == KILN_OK		     ? ST_OK
	       : v == KILN_ERR_TRUNCATED   ? ST_TRUNCATED
	       : v == KILN_ERR_UNSUPPORTED ? ST_CPU
					   : ST_CORRUPT;
}

// 3: one warp per file: verdict on the strips, serial fallback when they lied.
__global__ void __launch_bounds__(32 * INFL_WARPS)
pd_finish(const pd_file *files, uint32_t count, uint32_t *status, infl_slots sl, int flags)
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
	if (f->strips == 1 && f->strip_res[0] != KILN_INFL_GAVE_UP) {
		const uint32_t *res = f->strip_res;
		uint32_t st = res[0] == KILN_INFL_ERR_DATA + 100 ? ST_HEADER
								  : stream_status(f, res[0], res[2], res[3], res[1]);
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
	// The CPU path takes the strips only with a 32 KiB window (kiln_pngdec_inflate says
	// why): with another, the whole stream's verdict sends the file there.
	if (ok && total == f->zlib_adler && kiln_pngdec_full_window(f->zlib))
		return;
	// The strips do not decode as the kiSt chunk says, or the parallel inflate of a file
	// without strips gave up (png_inflate_par.h, KILN_INFL_ROAM): the whole stream, serially.
	uint32_t st = ST_OK;
	if (kiln_zlib_header_check(f->zlib[0], f->zlib[1]) != 0) {
		st = ST_HEADER;
	} else {
		warp_inflate_slot(&ws[wid], sl, f->zlib + 2, (size_t)f->zlib_size - 2, f->filt,
				  (size_t)f->filtered_size, 0, flags);
		st = stream_status(f, ws[wid].rc, ws[wid].out_len, ws[wid].used, ws[wid].adler);
	}
	if (lane == 0)
		status[fi] = st;
}

// kiln_png_unfilter_byte's value by selects, not a switch: the rows of a band (the lanes)
// mix filter types, and every type's predictor is a few instructions.
__device__ static uint32_t unfilter_select(uint32_t type, uint32_t x, uint32_t a, uint32_t b, uint32_t c)
{
	uint32_t pa = kiln_png_paeth(a, b, c);
	uint32_t pred = type == KILN_PNG_FILTER_SUB     ? a
			: type == KILN_PNG_FILTER_UP    ? b
			: type == KILN_PNG_FILTER_AVG   ? (a + b) >> 1
			: type == KILN_PNG_FILTER_PAETH ? pa
							: 0u;
	return (x + pred) & 0xFFu;
}

// Stages tile tt (pixels [32 tt, 32 tt + 32) of the band's rows) of the filtered bytes in
// tin by asynchronous copies of the aligned words that hold them: byte g of filt (g from the
// buffer's start, 256-aligned) goes to tin[r][g % TIN_BYTES]. Words at a tile's edges also
// hold bytes of the neighbouring tiles, copied with the same values they already have (a
// byte of the band's last row written back de-filtered has been read from tin before).
__device__ static void defilter_stage(uint8_t (*tin)[TIN_PITCH], const uint8_t *filt, size_t rowlen, uint32_t y0,
				      uint32_t rows, uint32_t bpp, uint32_t width, uint32_t tt, uint32_t lane)
{
	uint32_t x0 = 32 * tt, x1 = x0 + 32 < width ? x0 + 32 : width;
	for (uint32_t r = 0; r < rows; r++) {
		size_t g = (size_t)(y0 + r) * rowlen + 1;
		size_t w0 = (g + (size_t)x0 * bpp) >> 2, w1 = (g + (size_t)x1 * bpp + 3) >> 2;
		for (size_t wi = w0 + lane; wi < w1; wi += 32) {
			uint32_t sa = (uint32_t)__cvta_generic_to_shared(&tin[r][(wi * 4) & (TIN_BYTES - 1)]);
			asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(sa), "l"(filt + wi * 4) : "memory");
		}
	}
	asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// 4: the de-filter wave over bands.
__global__ void __launch_bounds__(32 * DEF_WARPS)
pd_defilter(const pd_file *files, uint32_t count, uint32_t total_bands, pd_globals *g, uint32_t *status, int flags)
{
	__shared__ uint32_t tout_all[DEF_WARPS][BAND][64];
	__shared__ __align__(16) uint8_t tin_all[DEF_WARPS][BAND][TIN_PITCH];
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
		uint32_t y0 = band * f->band_rows, y = y0 + (uint32_t)lane;
		uint32_t rows_here = f->height - y0 < f->band_rows ? f->height - y0 : f->band_rows;
		bool active = (uint32_t)lane < rows_here;
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
		// The row above comes from lane - 1 by a shuffle (the pixel it de-filtered one step
		// earlier); lane 0 reads it from memory, where the band above wrote its last row.
		uint32_t mine = 0; // this lane's last de-filtered pixel, sample k in byte k
		bool last = (uint32_t)lane == rows_here - 1;
		// Output pixels go to tout (a ring of 64 columns of the band's rows) and leave in
		// tiles of 32 columns, a row (128 bytes) per store; tile t is complete once the
		// band's last row has done its last pixel, after step min(32t + 31, width - 1) +
		// rows_here - 1 (tile t + 2, which reuses its slots, starts at step 32t + 64).
		uint32_t(*tout)[64] = tout_all[threadIdx.x / 32];
		uint32_t color = f->format.color_type, trns = f->format.has_trns, flushed = 0;
		uint32_t steps = width + rows_here - 1;
		bool words = (((uintptr_t)f->rgba | (uintptr_t)f->stride) & 3u) == 0;
		// The filtered bytes come from tin, staged a tile of 32 columns ahead (tile p + 1
		// during steps [32p, 32p + 32), while the lanes read tiles p and p - 1).
		uint32_t ra[4] = {0, 0, 0, 0}, rc[4] = {0, 0, 0, 0}; // left and upper-left samples
		uint8_t(*tin)[TIN_PITCH] = tin_all[threadIdx.x / 32];
		const uint8_t *trow = tin[lane];
		size_t gy = (size_t)y * rowlen + 1;
		if (!(flags & 16))
			defilter_stage(tin, f->filt, rowlen, y0, rows_here, bpp, width, 0, (uint32_t)lane);
		// The row above the band (when its first row reads it) comes a tile at a time: once
		// the band above has published the tile, lane j loads pixel 32 t + j and lane 0
		// takes them by shuffles. Loaded pixel by pixel by lane 0 (an L2 round trip each
		// step, the warp waiting) it made libpng's adaptive filters 3x slower than rows
		// that start bands with Sub.
		bool band_waits = __shfl_sync(FULL_MASK, wait, 0);
		const uint8_t *above = band_waits ? f->filt + (size_t)y0 * rowlen - f->rowbytes : NULL;
		uint32_t above_px = 0; // lane j: pixel 32 t + j of the row above, tile t
		for (uint32_t step = 0; !(flags & 16) && step < steps; step++) {
			int32_t x = (int32_t)step - lane;
			if ((step & 31u) == 0) {
				asm volatile("cp.async.wait_all;\n" ::: "memory");
				__syncwarp();
				if (step + 32 < width)
					defilter_stage(tin, f->filt, rowlen, y0, rows_here, bpp, width, step / 32 + 1,
						       (uint32_t)lane);
				if (band_waits && step < width) {
					uint32_t tile_end = step + 32 < width ? step + 32 : width;
					if (lane == 0 && seen < tile_end) {
						while ((seen = *upper) < tile_end)
							;
						__threadfence();
					}
					__syncwarp();
					uint32_t xx = step + (uint32_t)lane;
					above_px = 0;
					if (xx < width)
						for (uint32_t k = 0; k < bpp; k++)
							above_px |= (uint32_t)__ldcg(above + (size_t)xx * bpp + k) << (8 * k);
				}
			}
			uint32_t up = __shfl_up_sync(FULL_MASK, mine, 1);
			uint32_t up0 = __shfl_sync(FULL_MASK, above_px, step & 31u);
			if (active && x >= 0 && (uint32_t)x < width) {
				size_t base = (size_t)x * bpp;
				uint32_t packed = 0;
#pragma unroll
				for (uint32_t k = 0; k < 4; k++) { // registers, not an indexed array
					if (k >= bpp)
						break;
					uint32_t bb = ((lane > 0 ? up : up0) >> (8 * k)) & 0xFFu;
					uint32_t fb = trow[(gy + base + k) & (TIN_BYTES - 1)];
					uint32_t v = unfilter_select(type, fb, ra[k], bb, rc[k]);
					if (last)
						row[1 + base + k] = (uint8_t)v; // the next band's lane 0 reads it
					packed |= v << (8 * k);
					ra[k] = v;
					rc[k] = bb;
				}
				mine = packed;
				// kiln_png_pixel's value (its direct cases as kiln_png_expand_row's)
				uint32_t pix;
				if (color == 6) {
					pix = packed;
				} else if (color == 2 && !trns) {
					pix = packed | 0xFF000000u;
				} else {
					uint8_t px[4] = {(uint8_t)packed, (uint8_t)(packed >> 8), (uint8_t)(packed >> 16),
							 (uint8_t)(packed >> 24)};
					pix = kiln_png_pixel(&f->format, px, 0);
				}
				tout[lane][(uint32_t)x & 63u] = pix;
				if (last && (((uint32_t)x & 31u) == 31u || (uint32_t)x + 1 == width)) {
					__threadfence();
					atomicExch(&f->progress[band], (uint32_t)x + 1);
				}
			}
			// write out the tiles now complete
			while (32 * flushed < width) {
				uint32_t lastx = 32 * flushed + 31 < width ? 32 * flushed + 31 : width - 1;
				if (lastx + rows_here - 1 > step)
					break;
				__syncwarp();
				uint32_t xx = 32 * flushed + (uint32_t)lane;
				for (uint32_t r = 0; r < rows_here && xx < width; r++) {
					uint32_t pix = tout[r][xx & 63u];
					uint8_t *d = f->rgba + (size_t)(y0 + r) * f->stride + 4 * (size_t)xx;
					if (words)
						*(uint32_t *)d = pix;
					else
						kiln_png_store_pixel(d, pix);
				}
				__syncwarp();
				flushed++;
			}
		}
		for (uint32_t step = 0; (flags & 16) && step < width + rows_here - 1; step++) {
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

// Measurement hooks for kiln-bench (png_dec.h): flags 1, 4, 8, 128, 512, 1024 and 2048
// are warp_inflate's (A/B of its decode and copy methods, clock counts: kiln_pngdec_gpu_prof
// reads and clears them), 16 runs the de-filter without shuffles (A/B), 2 records events
// around the four kernels of the following calls (kiln_pngdec_gpu_phase_ms gives the last
// call's kernel times).
static unsigned g_debug;
static cudaEvent_t g_ev[5];

extern "C" void kiln_pngdec_gpu_debug(unsigned flags)
{
	if ((flags & 2u) && !g_ev[4])
		for (int i = 0; i < 5; i++)
			if (cudaEventCreate(&g_ev[i]) != cudaSuccess)
				g_ev[i] = NULL;
	g_debug = flags;
}

extern "C" int kiln_pngdec_gpu_prof(unsigned long long v[12])
{
	static const unsigned long long zero[12] = {0};
	if (cudaDeviceSynchronize() != cudaSuccess || cudaMemcpyFromSymbol(v, g_prof, sizeof zero) != cudaSuccess ||
	    cudaMemcpyToSymbol(g_prof, zero, sizeof zero) != cudaSuccess)
		return -1;
	return 0;
}

extern "C" int kiln_pngdec_gpu_phase_ms(float ms[4])
{
	if (!g_ev[4] || cudaEventSynchronize(g_ev[4]) != cudaSuccess)
		return -1;
	for (int i = 0; i < 4; i++)
		if (cudaEventElapsedTime(&ms[i], g_ev[i], g_ev[i + 1]) != cudaSuccess)
			return -1;
	return 0;
}

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
	uint32_t par_files = 0;      // files inflated in parallel (png_inflate_par.h)
	uint64_t par_bytes_max = 0; // and their longest stream
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
			d->band_rows = band_rows(in);
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
			if (in->strips == 1) {
				uint32_t c = par_cand_cap(in), e = par_ent_cap(in);
				d->par = !(g_debug & 16384u);
				d->cand_cap = c;
				d->ent_cap = e;
				d->spacing = par_spacing(g_debug);
				d->target = par_target(g_debug);
				d->par_state = (uint32_t *)(base + l.par_state) + 4 * i;
				d->slot_scale = l.slot_scale;
				d->slot_pad = l.slot_pad;
				data += par_carve(in, l.slot_scale, l.slot_pad, base + data, d);
				par_files += d->par;
				if (d->par && in->zlib_size - 2 > par_bytes_max)
					par_bytes_max = in->zlib_size - 2;
			}
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
	int flags = (int)(g_debug & (1u | 4u | 8u | 128u | 512u | 1024u | 2048u)), timed = (g_debug & 2u) && g_ev[4];
	// the most shared memory an SM can give (on the current device): the inflate kernels'
	// resident warps are bounded by it; a refusal costs only speed (its error is cleared)
	if (cudaFuncSetAttribute(pd_inflate, cudaFuncAttributePreferredSharedMemoryCarveout,
				 cudaSharedmemCarveoutMaxShared) != cudaSuccess ||
	    cudaFuncSetAttribute(pd_finish, cudaFuncAttributePreferredSharedMemoryCarveout,
				 cudaSharedmemCarveoutMaxShared) != cudaSuccess)
		cudaGetLastError();
	if (timed)
		cudaEventRecord(g_ev[0], s);
	pd_gather<<<dim3(GATHER_CTAS, c32), 256, 0, s>>>(d_files, c32, d_status);
	if (timed)
		cudaEventRecord(g_ev[1], s);
	infl_slots sl = {(uint32_t *)(base + l.infl_masks), (uint32_t *)(base + l.infl_ovf),
			 sm_count() * INFL_SLOTS / 32};
	pd_inflate<<<(strips + INFL_WARPS - 1) / INFL_WARPS, 32 * INFL_WARPS, 0, s>>>(d_files, c32, strips, d_status,
										      sl, flags);
	if (par_files > 0) {
		pd_globals *gl = (pd_globals *)(base + l.globals);
		uint64_t *list[PAR_LISTS];
		for (int k = 0; k < PAR_LISTS; k++)
			list[k] = (uint64_t *)(base + l.work) + k * l.ents;
		kiln_inflate_tables *tabs = (kiln_inflate_tables *)(base + l.tables);
		kiln_infl_block *blocks = (kiln_infl_block *)(base + l.blocks);
		uint32_t lanes = par_lanes(g_debug);
		uint64_t workers = l.pool < (uint64_t)sm_count() * 32 * lanes ? l.pool : (uint64_t)sm_count() * 32 * lanes;
		unsigned pool = (unsigned)((workers + lanes - 1) / lanes);
		// scan: about 8 CTAs of 256 threads per SM in all (each builds its look-up table)
		unsigned scan_x = (unsigned)((par_bytes_max + 255) / 256) + 1, scan_cap = sm_count() * 8 / c32 + 1;
		dim3 sg(scan_x < scan_cap ? scan_x : scan_cap, c32);
		uint64_t *surv = (uint64_t *)(base + l.surv);
		pd_par_scan<<<sg, 256, 0, s>>>(d_files, d_status, gl, surv, (uint32_t)l.surv_cap);
		pd_par_verify<<<sm_count() * 8, 256, 0, s>>>(d_files, gl, surv, (uint32_t)l.surv_cap);
		unsigned per_file = (c32 + 127) / 128;
		auto pass_kernel = (g_debug >> 27) & 1u ? pd_par_pass_roomy : pd_par_pass;
		pd_par_prep<<<per_file, 128, 0, s>>>(d_files, c32, d_status, gl, list[LIST_PROBE]);
		pd_par_blocks<<<sm_count() * 2, 256, 0, s>>>(d_files, gl, list[LIST_PROBE], blocks,
							     (uint32_t)(l.block_cap < 0xFFFFFFFFu ? l.block_cap : 0xFFFFFFFFu));
		pass_kernel<<<pool, 32, 0, s>>>(d_files, gl, list[LIST_PROBE], tabs, blocks, PASS_PROBE, LIST_PROBE, lanes);
		pd_par_refine<<<c32, PF_THREADS, 0, s>>>(d_files, c32, d_status, gl, list[LIST_FRESH]);
		pass_kernel<<<pool, 32, 0, s>>>(d_files, gl, list[LIST_FRESH], tabs, blocks, PASS_PROBE, LIST_FRESH, lanes);
		pd_par_slots<<<c32, PF_THREADS, 0, s>>>(d_files, c32, d_status, gl, list[LIST_COUNT]);
		pass_kernel<<<pool, 32, 0, s>>>(d_files, gl, list[LIST_COUNT], tabs, blocks, PASS_COUNT, LIST_COUNT, lanes);
		pd_par_chain<<<c32, PF_THREADS, 0, s>>>(d_files, c32, d_status, gl, list[LIST_REDO], list[LIST_PLACE]);
		pd_par_place<<<sm_count() * 8, 256, 0, s>>>(d_files, gl, list[LIST_PLACE], list[LIST_REDO]);
		pass_kernel<<<pool, 32, 0, s>>>(d_files, gl, list[LIST_REDO], tabs, blocks, PASS_DECODE, LIST_REDO, lanes);
		pd_par_resolve<<<c32, 1024, 0, s>>>(d_files, d_status);
	}
	if (timed)
		cudaEventRecord(g_ev[2], s);
	pd_finish<<<(c32 + INFL_WARPS - 1) / INFL_WARPS, 32 * INFL_WARPS, 0, s>>>(d_files, c32, d_status, sl, flags);
	if (timed)
		cudaEventRecord(g_ev[3], s);
	unsigned warps = sm_count() * 16;
	if (warps > bands)
		warps = bands;
	unsigned grid = (warps + DEF_WARPS - 1) / DEF_WARPS;
	pd_defilter<<<grid, 32 * DEF_WARPS, 0, s>>>(d_files, c32, bands, (pd_globals *)(base + l.globals), d_status,
						    (int)g_debug);
	if (timed)
		cudaEventRecord(g_ev[4], s);
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
			case ST_CPU:
				status[i0 + j] = KILN_ERR_UNSUPPORTED; // decode it with the CPU path
				break;
			default:
				status[i0 + j] = KILN_ERR_CORRUPT;
				break;
			}
		}
	}
	return KILN_OK;
}
