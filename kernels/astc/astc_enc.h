/* The ASTC encoder's per-block logic, written once for both backends (see kiln_hd.h).
 *
 * A block is encoded by trying candidates and keeping the one whose exact decode (the
 * decoder of astc_block.h) has the lowest squared error:
 *  - constant blocks become void-extent blocks;
 *  - partitionings ("fits"): one partition with one weight plane; one partition with a
 *    second plane for the channel farthest from the principal line (every varying
 *    channel at high); 2 partitions: the seeds whose patterns best match a 2-means
 *    clustering (each moved texel weighed by its distance from the clusters' boundary),
 *    re-ranked by the residual off a line per partition, the best 1 / 2 / 6
 *    (fast / medium / high) searched in full (at high also the best one with a second
 *    plane); 3 and 4 partitions likewise from a k-means clustering (patterns matched
 *    under the best relabelling), at medium (1 + 1 searched) and high (2 + 1), only for
 *    blocks still far off, not at fast; at medium and high a fit of 2-4 partitions is
 *    encoded only where its residual and ranking predict an error near the best so far
 *    (medium at 4x4 searches 2, 3 and 4 partitions each from the error before them, side
 *    by side on a GPU: astc_enc_effort.split);
 *    fast and medium try the second plane and 2 partitions only for blocks that one
 *    partition leaves far off, and every quality the second plane (fast also 2
 *    partitions) only where the block's line leaves a large residual
 *    (astc_enc_effort_of);
 *  - per fit, the block modes are first ranked without encoding (astc_enc_estimate):
 *    ideal weights decimated to each grid (least squares by correction steps), then per
 *    mode the error of quantising them and an expected endpoint quantisation error for
 *    each endpoint kind; the best 3 / 8 / 12 (mode, kind) candidates are encoded exactly
 *    once, the best 1 / 3 / 4 of those refined (alternating endpoint least squares and
 *    weight re-projection; not at fast) and polished (each grid weight and colour value
 *    moved one quantisation level while the exact error falls; at medium and high only
 *    those refined to within 1.1875x and 1.5x of the best error so far);
 *  - endpoint kinds: direct (CEM 8 RGB, 12 RGBA), base+scale (CEM 6 RGB, 10 RGB with
 *    two alphas), which leave more bits for colour precision, and luminance (CEM 0 L,
 *    4 L+alpha) for gray blocks; under the first two a gray partition (R = G = B) among
 *    coloured ones takes the smallest mode the block's other CEMs allow. Direct
 *    endpoints use blue contraction where its decoded endpoints are closer.
 * Every candidate is a function of (block, fit, mode, kind) and the choice is an argmin
 * over integer exact errors with ties to the first, so candidates can later be split
 * across GPU lanes and reduced. Float appears in the fits and the estimate (evaluated in
 * one fixed order, never contracted, no libm); the CPU and GPU backends produce the same
 * bytes. */
#ifndef KILN_ASTC_ENC_H
#define KILN_ASTC_ENC_H

#include <float.h>
#include <stdint.h>
#include <string.h>

#include "kernels/astc/astc_block.h"
#include "kernels/codec.h"
#include "kernels/kiln_hd.h"

#if !defined(__CUDA_ARCH__) && defined(FLT_EVAL_METHOD) && FLT_EVAL_METHOD != 0
#error "astc_enc.h needs FLT_EVAL_METHOD == 0 (build with SSE2 floating point)"
#endif

/* The functions of the search stay out of line under nvcc (KILN_HD inlines by force), and
 * their loops over texels, grid points, modes and seeds stay rolled (KILN_ROLLED): the
 * threads of a warp run different blocks' searches along different paths, and inlined and
 * unrolled, that code (1 MB of SASS in one kernel) did not fit the instruction cache:
 * warps waited on instruction fetch 73% of the time (ncu, H100, 4x4 fast). Out of line
 * and rolled it is 200 KB and 4x4 fast ran 3x faster (docs/PERFORMANCE.md, ASTC). */
#ifdef __CUDACC__
#define ASTC_ENC_OUTLINE static __host__ __device__ __noinline__
#else
#define ASTC_ENC_OUTLINE KILN_HD
#endif

#define ASTC_ENC_MAX_MODES 2048
/* Three of the search's exact shortcuts, which spare the CPU work, are left out on the
 * GPU, where a warp's lanes (a block each) reach them at different points and they
 * measured slower than the work they save: the ranking's drop of a grid part-way
 * through its decimation term (astc_enc_estimate; the grid's modes are then cut by the
 * mode loop's test), the 3- and 4-partition pattern match's bound
 * (astc_enc_pattern_mismatch_k) and, below ASTC_ENC_GPU_CACHE_TEXELS, the ranking's cache
 * of grid weights for the encodings (astc_enc_grid_cache; they are fitted again from the
 * texels). Without the first two the kernel ran 0.6-2.5% faster at every footprint and
 * preset measured, without the cache too up to 7% more (6x5, 6x6, 8x6: 4-7% at fast and
 * medium), but 1-3% less at 10x10 and 12x12, where a fit from the texels costs more
 * (H100, docs/PERFORMANCE.md, session 24); the other exact early exits measured
 * (astc_enc_eval's limit, the polish's colour moves, astc_enc_moment_resid's cut, the
 * ranking's mode cut, every cut of the ranking at once, the power iteration's stop) were
 * as fast or faster kept. Exact: the same bytes either way (tests/unit/
 * test_astc_gpu_form.c runs the GPU's form on the CPU against the CPU backend). */
#ifndef ASTC_ENC_CPU_SHORTCUTS /* a test builds the GPU's form on the CPU */
#ifdef __CUDA_ARCH__
#define ASTC_ENC_CPU_SHORTCUTS 0
#else
#define ASTC_ENC_CPU_SHORTCUTS 1
#endif
#endif
#ifndef ASTC_ENC_GPU_CACHE_TEXELS
#define ASTC_ENC_GPU_CACHE_TEXELS 100
#endif
#define ASTC_ENC_SEEDS 1024
/* 2-partition seeds whose patterns are scored in full, per quality */
#define ASTC_ENC_MAX_TRY_SEEDS 32
/* the texels of a 4x4 block, the footprint where the presets differ (astc_enc_effort_of)
 * and which astc_enc_search_full16 is written for */
#define ASTC_ENC_N16 16
/* of which searched in full, at most, for astc_enc_seed_score's cut (more: no cut) */
#define ASTC_ENC_MAX_CUT 8

#define ASTC_ENC_MAX_GRIDS 128
/* a mode's config bits (at most 39) and weights (at most 96) leave at least -7 bits */
#define ASTC_ENC_CRANGE_PAD 8
#define ASTC_ENC_MAX_CAND 32
#define ASTC_ENC_SHORTLIST 4

/* What a quality searches: every knob of the presets in one place (astc_enc_effort_of).
 * Errors per texel (the gates) are sums of squared 8-bit differences over 4 channels. */
typedef struct astc_enc_effort {
	uint8_t cand;       /* (mode, kind) candidates the estimate passes on per fit */
	uint8_t keep;       /* of those, refined and polished */
	uint8_t iterations; /* refinement rounds (endpoint least squares <-> weights) */
	uint8_t passes;     /* polish sweeps */
	uint8_t est_steps;  /* correction steps of decimated weights towards least squares in
			       the ranking of modes (astc_enc_estimate) ... */
	uint8_t grid_steps; /* ... and in their encoding (astc_enc_try_mode) */
	uint8_t grid_share; /* ranks only weight grids of at least 1 / grid_share of the
			       footprint's texels, over the partition count (more partitions
			       leave fewer bits for weights; 0: every grid) */
	uint8_t dual_tries; /* second-plane channels tried with one partition */
	uint8_t dual_gate;  /* ... only for blocks whose error per texel exceeds this */
	uint8_t p2_gate;    /* 2 partitions only above this error per texel */
	uint8_t p2_tries;   /* 2-partition seeds scored by line fit */
	uint8_t p2_full;    /* ... of which searched in full */
	uint8_t dual2;      /* the best 2-partition seed with a second plane too (above gate) */
	uint8_t gate;       /* 3 and 4 partitions only above this error per texel */
	uint8_t tries3, full3, tries4, full4;
	uint8_t p4_mult;    /* 4 partitions only where 3 won or the error exceeds p4_mult x gate
			       (0: whenever above gate) */
	/* gates on the residual of the block's line (per channel: the squared distance of the
	 * texels from it), which the second plane and 2 partitions can remove and the
	 * quantisation error cannot; 0: no gate */
	uint8_t dual_rgate; /* second plane only where the largest channel residual exceeds
			       this per texel ... */
	uint8_t dual_rfrac; /* ... and that residual times dual_rfrac exceeds the error so far */
	uint8_t p2_rgate;   /* 2 partitions only where the residual of all channels exceeds this
			       per texel ... */
	uint8_t p2_rfrac;   /* ... and that residual times p2_rfrac exceeds the error so far */
	uint8_t dual_share; /* grid_share for the modes with a second plane */
	uint8_t polish_gate; /* polishes a refined candidate only where its error times 16 is
				below the best error so far times polish_gate (0: every one) */
	/* a fit of 2-4 partitions is encoded only where its predicted error, the residual off
	 * its lines plus the ranking's best error times pred_w / 16, is below the best error
	 * so far times pred_cut / 16 (0: always) */
	uint8_t pred_w, pred_cut;
	/* the ranking's weight quantisation and endpoint quantisation terms times est_qw / 16
	 * and est_cw / 16 (16: as modelled) */
	uint8_t est_qw, est_cw;
	uint8_t moment_score; /* ranks partitionings by astc_enc_moment_resid (0: line fits) */
	uint8_t full_only; /* a fit of one partition and one plane ranks the full weight grid
			      alone (fast and medium at 4x4: astc_enc_effort_of) */
	uint8_t split;     /* the PARTS stage's searches (astc_enc_parts_items) each from the
			      error before the stage, not from the best of those before it, so
			      that a GPU runs them side by side (astc_encode_later) */
} astc_enc_effort;

/* fast aims at astcenc -fast quality and spends what it had above it on speed: it
 * encodes the best of 3 candidates per fit and polishes it without refinement rounds,
 * takes fewer weight correction steps (one to rank the modes, two to encode them), ranks
 * only weight grids of at least a third of the texels per partition (the two-colour
 * blocks of tests/unit/test_astc.c lost 2.2 dB at 8x8 without the smaller grids for 2
 * partitions), and tries the second plane and 2 partitions only for blocks they can
 * improve: error above 4 and 32 per texel, and a large residual off the block's line
 * (second plane: the largest channel's residual above half the error; 2 partitions: the
 * residual of all channels above 48 per texel and above half the error). Gated by the
 * error alone, those stages ran for nearly every block at 6x6 and 8x8 and gained on few
 * (at 8x8, 90% of the second plane's gain took 40% of its time in the order of the
 * error, 12% in the order of the largest residual). Full Kodak set,
 * 2026-11-22: +0.003 to +0.099 dB over astcenc -fast (RGB), 2.1-3.8x faster than
 * before, 0.54-0.77x astcenc per core (docs/PERFORMANCE.md, ASTC). No 3 and 4
 * partitions. At 4x4 its first stage ranks the full weight grid alone (full_only),
 * which astc_enc_search_full16 runs with the block in a GPU thread's registers: full
 * Kodak set, 2026-11-24, RGB 44.491 -> 44.464 dB (astcenc -fast 44.468), RGBA 43.732 ->
 * 43.652 (43.690), 1.2x -> 1.6x astcenc per core; on an H100 1,166 -> 1,692 Mpix/s
 * (kernel only; the general search over the full grid alone 1,474; 2,140 with the rest
 * of docs/PERFORMANCE.md's session 25). Grids below the full
 * one won few of those blocks; for the second plane (32 weights on the full grid) the
 * full grid alone cost 0.20 dB, and at 6x6 and 8x8 (where few weight bits are left per
 * texel) 1.6-4.4 dB.
 * Fast and medium at 4x4 rank only grids of at least half the texels for the second
 * plane (dual_share 2) and of at least all of them over the partitions for 2-4
 * partitions (grid_share 1: 8 weights at 2 partitions, 6 at 3, 4 at 4): without the
 * smaller grids 7 (fast) and 6 (medium) of Kodak's 589,824 blocks change. The CPU's
 * ranking drops such grids early anyway; a GPU fits them through
 * (ASTC_ENC_CPU_SHORTCUTS). Full Kodak set, RGB / RGBA PSNR unchanged (fast 44.502 /
 * 43.704, medium 45.095 / 44.285 dB); on an H100 fast 2,402-2,409 -> 2,448-2,454,
 * medium 496.3-496.9 -> 505.2-506.2 Mpix/s (each alone: dual_share 2 2,436-2,438 and
 * 501.9, grid_share 1 2,412-2,416 and 498.4-498.8; docs/PERFORMANCE.md, session 32). A
 * second plane on the full grid alone (dual_share 1) cost 0.18 dB RGB.
 *
 * medium aims at astcenc -medium quality; it was 0.02-0.32 dB above it and 3-10x slower
 * per core, and its thinnest margin (RGB 8x8, +0.02 dB) bounds what it can give up. Its
 * time went to the 2-4 partition stage (up to 5 full searches, for 86% of the blocks at
 * 8x8) and the second plane. Changes, each measured alone on 24 Kodak centre crops
 * (dB at 8x8 for the share of instructions saved there; docs/PERFORMANCE.md, ASTC):
 *  - the second plane only where the largest channel residual off the block's line is
 *    above a quarter of the error (dual_rfrac 4; at 8x8 95% of its gain took 16% of its
 *    time in that order, 45% in the order of the error): -0.002 dB, 17% fewer;
 *  - the best 2 of the 16 2-partition seeds searched in full (was 3), 4 partitions only
 *    where 3 won or the error is above 32 times the gate (was 16). The residual gates
 *    of fast do not carry over: ranked by the line's residual, 90% of medium's
 *    2-partition gain at 8x8 took 40% of the stage's time, about as ranked by the error
 *    (37%; in 10 of the 25 blocks that gained most the residual was under a fifth of the
 *    error, the rest being weight decimation and quantisation), and most 8x8 blocks pass
 *    an error gate, so the searches per block are fewer instead. The error gates stay
 *    at 8 and 16 per texel: at 16 and 32 (the first alone: 7-12% fewer instructions) the
 *    smooth Kodak crop of tests/unit/test_astc.c got no 2- and 3-partition blocks;
 *  - one refinement round (was 2; -0.005 dB), 2 correction steps to rank the modes
 *    (was 4; -0.002 and -0.010 dB for the two steps; one since, below), single-plane
 *    grids of at least a third of the texels per partition (-0.001 dB, 9% fewer) and
 *    second-plane grids of at least a sixth (a third cost 0.12 dB on RGBA 8x8, whose
 *    alpha plane needs the small grids);
 *  - a refined candidate polished only where its error is within 1.25x of the best so
 *    far (polish_gate 20): -0.010 dB at 8x8 for 17% fewer instructions; 1.1875x since
 *    (19, with the changes below: -0.004 to -0.009 dB RGB, -0.003 to -0.006 dB RGBA,
 *    3% fewer; 18 cost 0.02 dB at 6x6 for 7%);
 *  - a fit of 2-4 partitions encoded only where the residual off its lines plus half the
 *    ranking's best error (pred_w 8; 12 since, below) is under 1.125x the best error so
 *    far (pred_cut 18; astc_enc_hopeless). Those searches improved the block in 12% (2
 *    partitions) and 4% (3) of the cases at 8x8 and were 55% of the instructions; the
 *    ranking's error alone overestimated the exact one about twice, and the residual
 *    alone is far under it. Gating after the ranking leaves the encoding and polish of
 *    the fits it turns away (about 63% of a search): 9-12% fewer instructions at 6x6
 *    and 8x8 for -0.006 dB (RGB), -0.001 to -0.012 dB (RGBA) on 24 Kodak 64x64 crops;
 *    a cut of 1.0x saved 13-15% for -0.02 to -0.04 dB;
 *  - the ranking's weight quantisation term at 6/16 and its endpoint quantisation term
 *    at 10/16 of what they model (est_qw, est_cw). Fitted to the exact first-pass errors
 *    of the candidates (least squares within each fit, 24 Kodak 64x64 crops), the terms
 *    weighed 0.4-0.7 and 0.7-0.8 against the decimation error's 0.9, the first the less
 *    the larger the footprint (the polish and the refinement remove much of it); so
 *    weighed, the candidate that ends best was in the first 8 of the list at 8x8 in 93%
 *    of the fits instead of 75%. That gave +0.10 dB at 8x8 (RGB and RGBA) and spent:
 *    8 candidates (was 16), one correction step to rank the modes (was 2), the
 *    prediction above at pred_w 12 (was 8): with the new weights, against the previous
 *    commit, RGB -0.005 / -0.006 / +0.077 dB at 4x4 / 6x6 / 8x8 for 17% / 19% / 25%
 *    fewer instructions. Measured on top and not taken (6x6 RGB): 2 kept candidates
 *    (-0.037 dB, -8%), no refinement round (-0.038, -5%), polish_gate 18 (-0.020, -7%),
 *    pred_cut 16 (-0.017, -3%), 6 candidates (-0.010, -3.5%), 2 polish passes (-0.006, -1%).
 *  - At 4x4, where its margin was the widest (+0.040 dB RGB, +0.264 RGBA) and its GPU
 *    speed the furthest off its target (166 Mpix/s on an H100 against 500), it spends
 *    most of that margin, as astcenc's presets differ by footprint too: the full weight
 *    grid alone for one partition and one plane (as fast), 6 candidates of which 2 kept,
 *    2 polish sweeps, 2 correction steps in the encoding, pred_cut 16. Full Kodak set,
 *    2026-11-24: RGB 45.184 -> 45.116 dB (astcenc -medium 45.144), RGBA 44.432 -> 44.316
 *    (44.168); on an H100 165.4 -> 253.3 Mpix/s (kernel only). Each alone on top of the
 *    full grid alone (RGB dB, Mpix/s): the full grid -0.016, 166 -> 179; 2 passes -0.002,
 *    184; 6 candidates -0.010, 195; 2 kept -0.034, 213; 2 steps and pred_cut 16 -0.002
 *    each. Not taken: 3 and 4 partitions above 32 per texel (-0.009) and no 4 partitions
 *    (-0.002, 185): the Kodak crop and the 4-partition patterns of tests/unit/test_astc.c
 *    then got no 3-partition block and 30.9 dB; no ranking correction step (-0.016, 183),
 *    2 partitions above 16 per texel (-0.030, 189 alone), no refinement round (-0.051,
 *    189 alone), the second plane above 8 per texel (-0.084, 188 alone). Then, as its
 *    later stages had become most of its GPU time (the second plane 29% and 2-4
 *    partitions 47% of the kernel, with the grid's tails), it gates them as fast does:
 *    2 partitions only where the residual of all channels off the block's line is above
 *    8 per texel (p2_rgate), the second plane only where the largest channel residual
 *    is above a third of the error (dual_rfrac 3). Full Kodak set, 2026-11-24: RGB
 *    45.116 -> 45.094 dB, RGBA 44.316 -> 44.288; blocks searched for 2-4 partitions -30%,
 *    for a second plane -29%; on an H100 299.7 -> 360.8 Mpix/s. Each alone (RGB dB,
 *    that stage's blocks): p2_rgate 8 -0.007, -30% (326 Mpix/s); 12 -0.017, -39%; 16
 *    -0.029, -43%; the error gate p2_gate 12 instead -0.015, -31%; dual_rfrac 3 -0.014,
 *    -29%; 2 -0.109, -75%; the residual gate dual_rgate 2 instead -0.034, -30%; the error
 *    gate dual_gate 4 -0.031, -20%. Not taken on top: p2_rgate 12 (-0.012, 384 Mpix/s: the
 *    margin kept against astcenc is half the target's 0.10 dB), 5 candidates (-0.011),
 *    polish_gate 18 (-0.009), pred_cut 14 (-0.007), one polish pass (-0.033).
 *    Then the 2-partition shortlist weighted by how far each moved texel is from the
 *    clusters' boundary (astc_enc_two_means) gained +0.034 dB RGB (45.128), which pays
 *    for p2_rgate 12, 5 candidates and 3-4 partitions only above 32 per texel (gate),
 *    4 partitions where 3 won or the error is above 12 x 32 per texel (p4_mult 12): RGB
 *    45.096 dB (astcenc -medium 45.144), RGBA 44.284 (44.168); on an H100 387 -> 464
 *    Mpix/s. Each on top of the weighted shortlist (RGB dB, Mpix/s, 2026-11-25):
 *    p2_rgate 12 -0.012, 410; and 5 candidates -0.023, 433; and gate 24 -0.028, 462;
 *    gate 32 instead -0.032, 475; 24 seeds scored (p2_tries) +0.023 but -6.5% on the
 *    GPU. With gate 32 and p4_mult 32 a 2-partition encoding often beat 3 partitions
 *    where 4 would have beaten both (tests/unit/test_astc.c's 4-partition patterns at
 *    4x4: 6 of 16 blocks, 30.2 dB); p4_mult 12 (9 of 16, 33.4 dB; 16 gave 7 of 16) costs
 *    2.4% of the 475 and changes no PSNR on Kodak (8: 453, 4: 447). Then the PARTS
 *    stage split (split): its three searches (the 2-partition seeds, 3 partitions, 4
 *    partitions) each from the error before the stage, which a GPU runs as work of their
 *    own instead of one after the other on one thread (astc_cuda.cu, encode_split; the
 *    stage's blocks had kept a thread for up to 11 ms, its last 6 a tail), and, as the
 *    3-partition search is no longer gated by the 2-partition result, 3-4 partitions
 *    above 48 per texel and 4 where the error is above 8 x 48 (gate 48, p4_mult 8; the
 *    4-partition patterns: 9 of 16): RGB 45.095 dB, RGBA 44.285; H100 462-465 -> 492-499
 *    Mpix/s in the same calls (split at gate 32: 474, RGB 45.100; gate 40: 470; gate
 *    56: 496, RGB 45.093; docs/PERFORMANCE.md, session 31). Then, as that stage's
 *    searches were 1.36 rounds of the GPU's threads (each 2-partition item 4.7 ms on an
 *    H100, most of the second round's threads idle), 2 partitions only where the
 *    residual off the line is above 16 per texel and the error above 12 (p2_rgate 16,
 *    p2_gate 12), 3-4 partitions above 64 (gate 64): RGB 45.095 -> 45.073 dB, RGBA
 *    44.285 -> 44.272; the stage's blocks 95,085 -> 71,170 on the GPU bench; H100
 *    495-497 -> 533-534 Mpix/s in one call (p2_rgate 14 and p2_gate 12 with gate 64:
 *    -0.065 dB, 527-528; p2_rgate 18 with gate 64: -0.076 dB, 537; p2_rgate 16 alone:
 *    -0.064 dB, 523-524; session 33). Of that, 20 seeds scored for the shortlist
 *    instead of 16 (p2_tries) buy back 0.012 dB for 1.2% (RGB 45.085, RGBA 44.278; 528-529
 *    against 535-536 in one call; 24 seeds: 45.096 / 44.283, 516-517).
 * high aims at astcenc -thorough quality; it was +0.15 / +0.02 / -0.09 dB against it at
 * 4x4 / 6x6 / 8x8 (full Kodak, RGB) and 0.08-0.10x its speed per core. It takes medium's
 * ranking weights (est_qw 6, est_cw 10), which at 8x8 put the candidate that ends best
 * early enough in the list for 16 candidates (was 32) and gained +0.085 dB there; a
 * looser polish gate (24: within 1.5x of the best so far) and prediction gate (pred_cut
 * 20) than medium's, as high has the finer search to lose. 12 Kodak 96x96 crops, RGB,
 * against the previous preset: 4x4 / 6x6 / 8x8 -0.012 / -0.005 / +0.080 dB, 2.2x / 2.0x
 * / 1.7x faster per core (docs/PERFORMANCE.md, ASTC). Then medium's second-plane gate
 * (dual_rfrac 4), 2 refinement rounds and 2 ranking correction steps (were 3 and 4) and
 * seeds ranked by moments: -0.012 / -0.005 / -0.013 dB, 1.3x / 1.5x / 1.6x faster.
 * Then 12 candidates and one ranking correction step: 24 Kodak 128x128 crops, -0.004 /
 * -0.012 / -0.020 dB, 1.1x / 1.2x / 1.3x faster. Measured on top and not taken (12 Kodak
 * 96x96 crops): 3 kept candidates (-0.023 / -0.017 / -0.017 dB, 5-7%), 16 2-partition
 * seeds scored (-0.039 dB at 4x4), 3 and 4 partitions from 8 seeds, 3 polish passes,
 * polish_gate 22, grid_share 3: each within 0.006 dB and within this machine's noise
 * in speed; pred_cut 18: -0.012 / -0.020 dB at 6x6 / 8x8 for 5-10%. Then 3 and 4
 * partitions only above 8 per texel (was 4, as medium), 4 only where 3 won or the error
 * is above 16 times that (was always): -0.003 / 0.000 / -0.001 dB, 1.1x-1.15x faster.
 * medium and high try 3 and 4 partitions (and high the second plane with 2 partitions)
 * only for blocks still far off (smooth blocks rarely gain). */
KILN_HD void astc_enc_effort_of(int quality, int texels, astc_enc_effort *e)
{
	/* cand keep iterations passes est_steps grid_steps grid_share, dual_tries dual_gate,
	 * p2_gate p2_tries p2_full, dual2 gate, tries3 full3 tries4 full4 p4_mult,
	 * dual_rgate dual_rfrac p2_rgate p2_rfrac, dual_share polish_gate, pred_w pred_cut,
	 * est_qw est_cw, moment_score full_only split */
	const astc_enc_effort fast = {3, 1, 0, 1, 1, 2, 3, 1, 4, 32, 8, 1, 0, 16, 0, 0, 0, 0, 0, 0, 2, 48, 2, 3, 0, 0, 0, 16, 16, 0, 0, 0};
	const astc_enc_effort medium = {8, 3, 1, 4, 1, 4, 3, 1, 2, 8, ASTC_ENC_MAX_TRY_SEEDS / 2, 2, 0, 16, 4, 1, 4, 1, 32,
					0, 4, 0, 0, 6, 19, 12, 18, 6, 10, 1, 0, 0};
	const astc_enc_effort high = {12, ASTC_ENC_SHORTLIST, 2, 4, 1, 4, 0, 4, 0, 0, ASTC_ENC_MAX_TRY_SEEDS,
				      6, 1, 8, 16, 2, 16, 1, 16, 0, 4, 0, 0, 0, 24, 12, 20, 6, 10, 1, 0, 0};
	*e = quality == KILN_QUALITY_FAST ? fast : (quality == KILN_QUALITY_MEDIUM ? medium : high);
	/* the rows are the presets above 4x4; what differs at 4x4, all of it here */
	if (texels > ASTC_ENC_N16 || quality == KILN_QUALITY_HIGH)
		return;
	e->full_only = 1;
	e->grid_share = 1;
	e->dual_share = 2;
	if (quality == KILN_QUALITY_MEDIUM) {
		e->cand = 5;
		e->keep = 2;
		e->passes = 2;
		e->grid_steps = 2;
		e->pred_cut = 16;
		e->p2_rgate = 16;
		e->p2_gate = 12;
		e->p2_tries = 20;
		e->dual_rfrac = 3;
		e->gate = 64;
		e->p4_mult = 8;
		e->split = 1;
	}
}

/* One candidate block mode (single plane) of a footprint. */
typedef struct astc_enc_mode {
	uint16_t mode;
	uint8_t grid_w, grid_h, wrange, weight_bits;
	uint8_t grid; /* index into astc_enc_ctx.grids */
	uint8_t dual; /* two weight planes */
} astc_enc_mode;

/* A weight grid size with the infill taps of every texel and, per grid point, the sum of
 * its factors (for the transpose of the infill; an integer, held as the float that the
 * encoder's float arithmetic takes). */
typedef struct astc_enc_grid {
	uint8_t w, h;
	uint8_t full; /* the grid is the footprint: no infill */
	/* every texel's taps 2 and 3 have factor 0 (a grid as wide or as high as the
	 * footprint, whose taps are stored with the two of factor 0 last), so that an infill
	 * reads taps 0 and 1 only: the products it leaves out are +0 (weights >= +0) and a
	 * sum that adds +0 to a non-negative float is that float, so a float infill is the same
	 * bit for bit */
	uint8_t two_taps;
	astc_infill_tap taps[ASTC_MAX_TEXELS];
	float den[ASTC_MAX_WEIGHTS];
	/* the transpose of the taps (not for a full grid): grid point j gets factor tfac[e]
	 * from texel ttex[e] for e in tfirst[j] .. tfirst[j + 1] - 1, in the order of the
	 * texels and then of their taps, so that a sum over them adds in the order of a
	 * scatter over the texels' taps; taps of factor zero are left out, and with them every
	 * repeated index (astc_infill_texel repeats one only with a zero factor), so each
	 * texel that reads the point appears once */
	uint16_t tfirst[ASTC_MAX_WEIGHTS + 1];
	uint8_t ttex[4 * ASTC_MAX_TEXELS];
	float tfac[4 * ASTC_MAX_TEXELS];
	/* the taps' factors as floats, for the float infill of the weight fit */
	float ffac[ASTC_MAX_TEXELS][4];
} astc_enc_grid;

/* What the encoder precomputes per footprint: the distinct valid single-plane block modes
 * and the 2-partition pattern of every seed (bit i: texel i is in partition 1). The CPU
 * backend builds it once per footprint; it is read-only afterwards. */
typedef struct astc_enc_ctx {
	int bw, bh;
	int mode_count, grid_count;
	int full_grid; /* the grid that is the footprint (-1: none) */
	astc_enc_mode modes[ASTC_ENC_MAX_MODES];
	astc_enc_grid grids[ASTC_ENC_MAX_GRIDS];
	uint64_t part2[ASTC_ENC_SEEDS][3]; /* 144 bits per seed */
	uint8_t part2_ok[ASTC_ENC_SEEDS];  /* both partitions non-empty, first of its pattern */
	/* the 3- [0] and 4-partition [1] patterns of every seed as two bit planes (texel i is
	 * in partition plane0_i + 2 plane1_i); part34_ok bit c: every partition of count
	 * c + 3 non-empty and no earlier seed with the same pattern up to relabelling */
	uint64_t part34[2][ASTC_ENC_SEEDS][2][3];
	uint8_t part34_ok[ASTC_ENC_SEEDS];
	uint8_t part34_size[2][ASTC_ENC_SEEDS][4]; /* texels of each partition */
	/* the code of the next lower [0] and next higher [1] value of each weight and colour
	 * code (trit and quint ranges do not order their codes by value); the code itself at
	 * either end */
	uint8_t wstep[ASTC_WEIGHT_RANGES][32][2];
	uint8_t cstep[ASTC_RANGES][256][2];
	/* astc_color_range(2 v + 2, bits) at crange[v][ASTC_ENC_CRANGE_PAD + bits] for every
	 * count of colour values and of bits left, -1 where none fits: for bits below zero
	 * down to -ASTC_ENC_CRANGE_PAD, and in the last row (no values: a kind that does not
	 * apply), so that a lookup needs no test; and the distance between adjacent levels of
	 * each colour range */
	int8_t crange[ASTC_MAX_VALUES / 2 + 1][ASTC_ENC_CRANGE_PAD + 129];
	float color_step[ASTC_RANGES];
	/* each weight 0..64 quantised to a weight range and back, as the float the ranking
	 * takes */
	float wrecon[ASTC_WEIGHT_RANGES][65];
	/* the modes grouped by weight grid and plane count, each group in mode order: those of
	 * grid g with dual planes `dual` are grid_modes[grid_first[2 g + dual] ..
	 * grid_first[2 g + dual + 1]) */
	uint16_t grid_modes[ASTC_ENC_MAX_MODES];
	uint16_t grid_first[2 * ASTC_ENC_MAX_GRIDS + 1];
	/* the fewest weight bits of the modes at grid_modes[t] and after it in its group */
	uint8_t grid_wb_min[ASTC_ENC_MAX_MODES];
} astc_enc_ctx;

/* The context of footprint fp (an index of kiln_astc_footprints), built on first use by the
 * CPU backend (astc_cpu.c) and read-only afterwards: the CUDA backend copies it to the
 * device, the tests and fuzz targets encode with it. Host only; thread-safe. */
const astc_enc_ctx *astc_enc_context(int fp);

/* Bits set in x (SWAR on the CPU: no builtin that may become a library call). */
KILN_HD int astc_enc_popcount(uint64_t x)
{
#ifdef __CUDA_ARCH__
	return __popcll(x);
#else
	x = x - ((x >> 1) & 0x5555555555555555ull);
	x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
	x = (x + (x >> 4)) & 0x0F0F0F0F0F0F0F0Full;
	return (int)((x * 0x0101010101010101ull) >> 56);
#endif
}

/* The bits of a float, to compare values exactly (-0 apart from +0); a fixed-size memcpy
 * is a register move on either backend. */
KILN_HD uint32_t astc_enc_float_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	return u;
}

/* The least float above a non-negative finite f (x < astc_enc_float_up(f) is x <= f). */
KILN_HD float astc_enc_float_up(float f)
{
	uint32_t u = astc_enc_float_bits(f) + 1u;
	float up;
	memcpy(&up, &u, sizeof up);
	return up;
}

/* The 3- and 4-partition patterns of every seed. A pattern's identity up to relabelling
 * is a hash of its labels renumbered in order of first appearance; a seed whose hash an
 * earlier seed has is dropped (a hash collision only drops one more candidate, and the
 * context is built once on the host, so both backends see the same set). */
KILN_HD void astc_enc_init_part34(astc_enc_ctx *ctx, int n)
{
	int bw = ctx->bw, bh = ctx->bh;
	uint64_t hashes[2][ASTC_ENC_SEEDS];
	for (int s = 0; s < ASTC_ENC_SEEDS; s++) {
		ctx->part34_ok[s] = 0;
		for (int c = 0; c < 2; c++) {
			int count = c + 3, seen[4] = {0, 0, 0, 0}, map[4] = {-1, -1, -1, -1}, next = 0;
			uint64_t planes[2][3] = {{0, 0, 0}, {0, 0, 0}};
			uint64_t h = 1469598103934665603ull;
			for (int p = 0; p < 4; p++)
				ctx->part34_size[c][s][p] = 0;
			KILN_ROLLED for (int y = 0; y < bh; y++) {
				KILN_ROLLED for (int x = 0; x < bw; x++) {
					int i = y * bw + x, p = astc_partition(s, x, y, count, n);
					if (p & 1)
						planes[0][i >> 6] |= 1ull << (i & 63);
					if (p & 2)
						planes[1][i >> 6] |= 1ull << (i & 63);
					seen[p] = 1;
					ctx->part34_size[c][s][p]++;
					if (map[p] < 0)
						map[p] = next++;
					h = (h ^ (uint64_t)map[p]) * 1099511628211ull;
				}
			}
			for (int k = 0; k < 2; k++)
				for (int w = 0; w < 3; w++)
					ctx->part34[c][s][k][w] = planes[k][w];
			int ok = 1;
			KILN_ROLLED for (int p = 0; p < count; p++)
				ok &= seen[p];
			KILN_ROLLED for (int t = 0; t < s && ok; t++)
				if (((ctx->part34_ok[t] >> c) & 1) && hashes[c][t] == h)
					ok = 0;
			hashes[c][s] = h;
			ctx->part34_ok[s] = (uint8_t)(ctx->part34_ok[s] | (ok << c));
		}
	}
}

/* For each code c < count of a range with `levels` codes unquantised by unquant[]: the
 * code of the next lower [0] and next higher [1] value (the code itself at either end, and
 * for codes past the range). */
KILN_HD void astc_enc_steps(const uint8_t *unquant, int levels, int count, uint8_t (*step)[2])
{
	KILN_ROLLED for (int c = 0; c < count; c++) {
		int v = c < levels ? unquant[c] : 0, lo = c, hi = c;
		KILN_ROLLED for (int d = 0; d < levels && c < levels; d++) {
			int u = unquant[d];
			if (u < v && (lo == c || u > unquant[lo]))
				lo = d;
			if (u > v && (hi == c || u < unquant[hi]))
				hi = d;
		}
		step[c][0] = (uint8_t)lo;
		step[c][1] = (uint8_t)hi;
	}
}

KILN_HD void astc_enc_ctx_init(astc_enc_ctx *ctx, int bw, int bh)
{
	ctx->bw = bw;
	ctx->bh = bh;
	ctx->mode_count = 0;
	ctx->grid_count = 0;
	ctx->full_grid = -1;
	for (uint32_t m = 0; m < 2048; m++) {
		astc_mode md;
		if ((m & 0x1FFu) == 0x1FCu || !astc_mode_decode(m, bw, bh, &md))
			continue;
		int dup = 0;
		KILN_ROLLED for (int i = 0; i < ctx->mode_count && !dup; i++)
			dup = ctx->modes[i].grid_w == md.grid_w && ctx->modes[i].grid_h == md.grid_h &&
			      ctx->modes[i].wrange == md.wrange && ctx->modes[i].dual == md.dual;
		if (dup)
			continue;
		astc_enc_mode *e = &ctx->modes[ctx->mode_count++];
		e->mode = (uint16_t)m;
		e->grid_w = md.grid_w;
		e->grid_h = md.grid_h;
		e->wrange = md.wrange;
		e->weight_bits = md.weight_bits;
		e->dual = md.dual;
		int g = 0;
		while (g < ctx->grid_count && (ctx->grids[g].w != md.grid_w || ctx->grids[g].h != md.grid_h))
			g++;
		if (g == ctx->grid_count) {
			astc_enc_grid *gr = &ctx->grids[ctx->grid_count++];
			gr->w = md.grid_w;
			gr->h = md.grid_h;
			gr->full = md.grid_w == bw && md.grid_h == bh;
			if (gr->full)
				ctx->full_grid = ctx->grid_count - 1;
			for (int j = 0; j < ASTC_MAX_WEIGHTS; j++)
				gr->den[j] = 0.0f;
			int zero13 = 1, zero23 = 1;
			KILN_ROLLED for (int y = 0; y < bh; y++) {
				KILN_ROLLED for (int x = 0; x < bw; x++) {
					astc_infill_tap *t = &gr->taps[y * bw + x];
					astc_infill_texel(bw, bh, md.grid_w, md.grid_h, x, y, t);
					zero13 &= !t->fac[1] && !t->fac[3];
					zero23 &= !t->fac[2] && !t->fac[3];
				}
			}
			/* a grid as wide as the footprint has no horizontal factors (taps 1 and 3):
			 * taps 1 and 2 trade places, which leaves every infill sum as it was (the
			 * products moved are +0) */
			gr->two_taps = (uint8_t)(!gr->full && (zero13 || zero23));
			KILN_ROLLED for (int i = 0; i < bw * bh; i++) {
				astc_infill_tap *t = &gr->taps[i];
				if (zero13 && !zero23) {
					uint8_t idx = t->idx[1], fac = t->fac[1];
					t->idx[1] = t->idx[2];
					t->fac[1] = t->fac[2];
					t->idx[2] = idx;
					t->fac[2] = fac;
				}
				for (int k = 0; k < 4; k++) {
					gr->den[t->idx[k]] += (float)t->fac[k];
					gr->ffac[i][k] = (float)t->fac[k];
				}
			}
			int at = 0;
			KILN_ROLLED for (int j = 0; j < md.grid_w * md.grid_h; j++) {
				gr->tfirst[j] = (uint16_t)at;
				KILN_ROLLED for (int i = 0; i < bw * bh && !gr->full; i++) {
					for (int k = 0; k < 4; k++) {
						if (gr->taps[i].idx[k] != j || !gr->taps[i].fac[k])
							continue;
						gr->ttex[at] = (uint8_t)i;
						gr->tfac[at] = (float)gr->taps[i].fac[k];
						at++;
					}
				}
			}
			KILN_ROLLED for (int j = md.grid_w * md.grid_h; j <= ASTC_MAX_WEIGHTS; j++)
				gr->tfirst[j] = (uint16_t)at;
		}
		e->grid = (uint8_t)g;
	}
	int n = bw * bh;
	for (int s = 0; s < ASTC_ENC_SEEDS; s++) {
		uint64_t bits[3] = {0, 0, 0};
		int ones = 0;
		KILN_ROLLED for (int y = 0; y < bh; y++) {
			KILN_ROLLED for (int x = 0; x < bw; x++) {
				int i = y * bw + x;
				if (astc_partition(s, x, y, 2, n)) {
					bits[i >> 6] |= 1ull << (i & 63);
					ones++;
				}
			}
		}
		ctx->part2[s][0] = bits[0];
		ctx->part2[s][1] = bits[1];
		ctx->part2[s][2] = bits[2];
		int ok = ones > 0 && ones < n;
		KILN_ROLLED for (int t = 0; t < s && ok; t++) {
			int same = 1, inv = 1;
			for (int k = 0; k < 3; k++) {
				uint64_t mask = k * 64 + 64 <= n ? ~0ull : (k * 64 >= n ? 0 : (1ull << (n - k * 64)) - 1);
				same &= ((ctx->part2[t][k] ^ bits[k]) & mask) == 0;
				inv &= ((ctx->part2[t][k] ^ ~bits[k]) & mask) == 0;
			}
			if (same || inv)
				ok = 0;
		}
		ctx->part2_ok[s] = (uint8_t)ok;
	}
	astc_enc_init_part34(ctx, n);
	int at = 0;
	KILN_ROLLED for (int gd = 0; gd < 2 * ctx->grid_count; gd++) {
		ctx->grid_first[gd] = (uint16_t)at;
		KILN_ROLLED for (int m = 0; m < ctx->mode_count; m++)
			if (2 * ctx->modes[m].grid + ctx->modes[m].dual == gd)
				ctx->grid_modes[at++] = (uint16_t)m;
	}
	ctx->grid_first[2 * ctx->grid_count] = (uint16_t)at;
	KILN_ROLLED for (int gd = 0; gd < 2 * ctx->grid_count; gd++) {
		int fewest = 255;
		KILN_ROLLED for (int t = ctx->grid_first[gd + 1] - 1; t >= ctx->grid_first[gd]; t--) {
			int wb = ctx->modes[ctx->grid_modes[t]].weight_bits;
			fewest = wb < fewest ? wb : fewest;
			ctx->grid_wb_min[t] = (uint8_t)fewest;
		}
	}
	for (int r = 0; r < ASTC_WEIGHT_RANGES; r++) {
		astc_enc_steps(astc_weight_unquant[r], astc_ranges[r].levels, 32, ctx->wstep[r]);
		for (int v = 0; v <= 64; v++)
			ctx->wrecon[r][v] = (float)astc_weight_unquant[r][astc_weight_quant[r][v]];
	}
	for (int r = 0; r < ASTC_RANGES; r++) {
		astc_enc_steps(astc_color_unquant[r], astc_ranges[r].levels, 256, ctx->cstep[r]);
		ctx->color_step[r] = 255.0f / (float)(astc_ranges[r].levels - 1);
	}
	for (int v = 0; v <= ASTC_MAX_VALUES / 2; v++)
		for (int bits = -ASTC_ENC_CRANGE_PAD; bits <= 128; bits++)
			ctx->crange[v][ASTC_ENC_CRANGE_PAD + bits] =
				(int8_t)(v < ASTC_MAX_VALUES / 2 && bits >= 0 ? astc_color_range(2 * v + 2, bits) : -1);
}

/* The texels of one block (edge blocks repeat the last row and column). */
typedef struct astc_enc_block {
	int bw, bh, n;
	int srgb;
	int opaque; /* every texel's alpha is 255 */
	uint8_t px[ASTC_MAX_TEXELS][4];
} astc_enc_block;

KILN_HD void astc_enc_load(const kiln_surface *s, uint32_t bx, uint32_t by, int bw, int bh,
			   int srgb, astc_enc_block *blk)
{
	blk->bw = bw;
	blk->bh = bh;
	blk->n = bw * bh;
	blk->srgb = srgb;
	blk->opaque = 1;
	KILN_ROLLED for (int y = 0; y < bh; y++) {
		KILN_ROLLED for (int x = 0; x < bw; x++) {
			const uint8_t *t = kiln_surface_texel(s, bx * (uint32_t)bw + (uint32_t)x,
							      by * (uint32_t)bh + (uint32_t)y);
			for (int c = 0; c < 4; c++)
				blk->px[y * bw + x][c] = s->has_alpha || c < 3 ? t[c] : 255;
			blk->opaque &= blk->px[y * bw + x][3] == 255;
		}
	}
}

/* Per-partition line fit: endpoints in float and each texel's position 0..1 on it. With a
 * second weight plane (ccs < 4), the line is fitted to the other channels and channel ccs
 * gets its own positions w1 (its value between the partition's extremes). */
typedef struct astc_enc_fit {
	int parts;
	int ccs;                /* 4: one weight plane */
	uint8_t part[ASTC_MAX_TEXELS];
	uint8_t alpha[4];       /* partition p has alpha below 255 (needs CEM 12) */
	uint8_t gray[4];        /* every texel of partition p has R == G == B */
	uint32_t resid[4];      /* per channel: squared distance of the texels from the line */
	uint32_t gray_err;      /* squared distance of the texels' RGB from the gray axis */
	/* per partition: its texels and their sum per channel (the part of every least-squares
	 * fit of its endpoints that does not depend on the weights; astc_enc_refit) */
	int32_t count[4], sum[4][4];
	float w[ASTC_MAX_TEXELS];
	float w1[ASTC_MAX_TEXELS];
} astc_enc_fit;

/* The start of astc_enc_principal_axis: the unit vector of the channel of largest
 * variance. */
KILN_HD void astc_enc_axis_start(const float cov[4][4], float v[4])
{
	int big = 0;
	for (int c = 1; c < 4; c++)
		if (cov[c][c] > cov[big][big])
			big = c;
	for (int a = 0; a < 4; a++)
		v[a] = a == big ? 1.0f : 0.0f;
}

/* One power iteration step of astc_enc_principal_axis; returns 0 once the iteration has
 * ended (a zero product, or a step that leaves v as it was, bit for bit: it would leave
 * it so at every later step, each being a function of v alone). */
KILN_HD int astc_enc_axis_step(const float cov[4][4], float v[4])
{
	float nv[4], m = 0.0f;
	for (int a = 0; a < 4; a++) {
		nv[a] = cov[a][0] * v[0] + cov[a][1] * v[1] + cov[a][2] * v[2] + cov[a][3] * v[3];
		float mag = nv[a] < 0 ? -nv[a] : nv[a];
		m = mag > m ? mag : m;
	}
	if (m <= 0.0f)
		return 0;
	int moved = 0;
	for (int a = 0; a < 4; a++) {
		float x = nv[a] / m;
		moved |= astc_enc_float_bits(x) != astc_enc_float_bits(v[a]);
		v[a] = x;
	}
	return moved;
}

/* The principal axis of a 4x4 covariance (any scale), unnormalised: power iteration from
 * the channel of largest variance, 8 steps at most. */
KILN_HD void astc_enc_principal_axis(const float cov[4][4], float v[4])
{
	astc_enc_axis_start(cov, v);
	KILN_ROLLED for (int it = 0; it < 8 && astc_enc_axis_step(cov, v); it++)
		;
}

/* Adds a texel's differences from the mean d to the upper triangle of a covariance,
 * written out (cov[b][a] would add the same products in the same order). */
KILN_HD void astc_enc_cov_add(float cov[4][4], const float d[4])
{
	cov[0][0] += d[0] * d[0];
	cov[0][1] += d[0] * d[1];
	cov[0][2] += d[0] * d[2];
	cov[0][3] += d[0] * d[3];
	cov[1][1] += d[1] * d[1];
	cov[1][2] += d[1] * d[2];
	cov[1][3] += d[1] * d[3];
	cov[2][2] += d[2] * d[2];
	cov[2][3] += d[2] * d[3];
	cov[3][3] += d[3] * d[3];
}

/* The principal axis v of a covariance whose upper triangle is summed (the lower one is
 * filled here), oriented towards a larger RGB sum; returns its squared length. */
KILN_HD float astc_enc_line_axis(float cov[4][4], float v[4])
{
	for (int a = 1; a < 4; a++)
		for (int b = 0; b < a; b++)
			cov[a][b] = cov[b][a];
	astc_enc_principal_axis(cov, v);
	if (v[0] + v[1] + v[2] < 0.0f)
		for (int a = 0; a < 4; a++)
			v[a] = -v[a];
	return v[0] * v[0] + v[1] * v[1] + v[2] * v[2] + v[3] * v[3];
}

/* Principal axis of each partition by power iteration (no square roots), projections
 * normalised to 0..1, oriented so that endpoint 1 has the larger RGB sum (plain direct
 * endpoints need s1 >= s0; blue-contracted ones store 2r + 2g - b in that order, which
 * usually grows the same way; see astc_enc_quant_endpoints). Also notes the partitions
 * with alpha and the gray ones, and the block's distance from gray. With `positions` 0
 * only the residuals and the partitions' flags (what ranks a partitioning; the fit of
 * the one chosen is made again), which skips the positions and the gray distance. */
ASTC_ENC_OUTLINE void astc_enc_line_fit(const astc_enc_block *blk, astc_enc_fit *fit, int positions)
{
	for (int k = 0; k < 4; k++)
		fit->resid[k] = 0;
	/* the gray-axis distance in ninths: (3 c - (r + g + b))^2 summed over RGB, over 9 */
	uint32_t g9 = 0;
	KILN_ROLLED for (int i = 0; i < blk->n && positions; i++) {
		/* here and below the channels are written out: a loop of 4 is not unrolled at -O2 */
		int sum = blk->px[i][0] + blk->px[i][1] + blk->px[i][2];
		int d0 = 3 * blk->px[i][0] - sum, d1 = 3 * blk->px[i][1] - sum, d2 = 3 * blk->px[i][2] - sum;
		g9 += (uint32_t)(d0 * d0 + d1 * d1 + d2 * d2);
	}
	fit->gray_err = (g9 + 4) / 9;
	KILN_ROLLED for (int p = 0; p < fit->parts; p++) {
		float mean[4];
		int cnt = 0, alpha = 0, gray = 1;
		int cmin = 255, cmax = 0;
		int32_t sum[4] = {0, 0, 0, 0};
		KILN_ROLLED for (int i = 0; i < blk->n; i++) {
			if (fit->part[i] != p)
				continue;
			const uint8_t *x = blk->px[i];
			cnt++;
			sum[0] += x[0];
			sum[1] += x[1];
			sum[2] += x[2];
			sum[3] += x[3];
			alpha |= blk->px[i][3] != 255;
			gray &= blk->px[i][0] == blk->px[i][1] && blk->px[i][1] == blk->px[i][2];
			if (fit->ccs < 4) {
				int v = blk->px[i][fit->ccs];
				cmin = v < cmin ? v : cmin;
				cmax = v > cmax ? v : cmax;
			}
		}
		fit->alpha[p] = (uint8_t)alpha;
		fit->gray[p] = (uint8_t)gray;
		fit->count[p] = cnt;
		for (int c = 0; c < 4; c++)
			fit->sum[p][c] = sum[c];
		if (cnt == 0)
			continue;
		/* the float sum of the texels' values in order is the integer sum (every partial
		 * sum, at most 144 x 255, is exact in a float) */
		for (int c = 0; c < 4; c++)
			mean[c] = (float)sum[c] / (float)cnt;
		float cov[4][4] = {{0}};
		KILN_ROLLED for (int i = 0; i < blk->n; i++) {
			if (fit->part[i] != p)
				continue;
			const uint8_t *x = blk->px[i];
			float d[4];
			d[0] = (float)x[0] - mean[0];
			d[1] = (float)x[1] - mean[1];
			d[2] = (float)x[2] - mean[2];
			d[3] = (float)x[3] - mean[3];
			astc_enc_cov_add(cov, d);
		}
		/* the channel ccs (if any) is left out of the axis: its row and column are +0, as a
		 * sum from +0 of products with a difference taken as +0 is (each such product is
		 * +0 or -0, and +0 plus either is +0), set once here rather than a difference
		 * taken as 0 per texel (constant indices once unrolled: cov stays in registers) */
		for (int a = 0; a < 4; a++)
			for (int b = a; b < 4; b++)
				cov[a][b] = a == fit->ccs || b == fit->ccs ? 0.0f : cov[a][b];
		float v[4], vv = astc_enc_line_axis(cov, v);
		float tmin = FLT_MAX, tmax = -FLT_MAX;
		/* the axis with channel ccs's component taken as 0 for the projection: that term is
		 * then +0 or -0 as it was (a difference taken as 0 times the component), and adding
		 * either leaves t as it is (t starts at +0 and a sum is -0 only from -0 + -0, so t is
		 * never -0) */
		float u0 = fit->ccs == 0 ? 0.0f : v[0], u1 = fit->ccs == 1 ? 0.0f : v[1];
		float u2 = fit->ccs == 2 ? 0.0f : v[2], u3 = fit->ccs == 3 ? 0.0f : v[3];
		KILN_ROLLED for (int i = 0; i < blk->n; i++) {
			if (fit->part[i] != p)
				continue;
			const uint8_t *x = blk->px[i];
			float t = 0.0f;
			t += ((float)x[0] - mean[0]) * u0;
			t += ((float)x[1] - mean[1]) * u1;
			t += ((float)x[2] - mean[2]) * u2;
			t += ((float)x[3] - mean[3]) * u3;
			t = vv > 0.0f ? t / vv : 0.0f;
			float r0 = (float)x[0] - mean[0] - t * v[0], r1 = (float)x[1] - mean[1] - t * v[1];
			float r2 = (float)x[2] - mean[2] - t * v[2], r3 = (float)x[3] - mean[3] - t * v[3];
			fit->resid[0] += (uint32_t)(r0 * r0);
			fit->resid[1] += (uint32_t)(r1 * r1);
			fit->resid[2] += (uint32_t)(r2 * r2);
			fit->resid[3] += (uint32_t)(r3 * r3);
			fit->w[i] = t;
			tmin = t < tmin ? t : tmin;
			tmax = t > tmax ? t : tmax;
		}
		float span = tmax - tmin;
		KILN_ROLLED for (int i = 0; i < blk->n && positions; i++) {
			if (fit->part[i] != p)
				continue;
			fit->w[i] = span > 0.0f ? (fit->w[i] - tmin) / span : 0.5f;
			if (fit->ccs < 4)
				fit->w1[i] = cmax > cmin ? (float)(blk->px[i][fit->ccs] - cmin) / (float)(cmax - cmin) : 0.5f;
		}
	}
}

KILN_HD void astc_enc_fit_lines(const astc_enc_block *blk, astc_enc_fit *fit)
{
	astc_enc_line_fit(blk, fit, 1);
}

/* Texel i's partition in a seed's pattern: bit i of plane0, plus twice bit i of plane1 for
 * 3 and 4 partitions (NULL for 2; astc_enc_ctx.part2, part34). */
KILN_HD int astc_enc_pattern_part(const uint64_t *plane0, const uint64_t *plane1, int i)
{
	int p = (int)(plane0[i >> 6] >> (i & 63) & 1u);
	return plane1 ? p | (int)(plane1[i >> 6] >> (i & 63) & 1u) << 1 : p;
}

/* f->part from a seed's pattern (astc_enc_pattern_part). */
KILN_HD void astc_enc_set_pattern(astc_enc_fit *f, int n, const uint64_t *plane0, const uint64_t *plane1)
{
	KILN_ROLLED for (int i = 0; i < n; i++)
		f->part[i] = (uint8_t)astc_enc_pattern_part(plane0, plane1, i);
}

/* The squared distance of a partitioning's texels from the best line of each partition
 * (the sum of astc_enc_line_fit's residuals but for their rounding), from the texels'
 * sums and sums of products per partition: each partition's covariance, and its variance
 * off the principal axis (the trace less the Rayleigh quotient of the axis found as
 * there). Where that reaches cut, what it returns is only at or above cut and no more
 * than the whole (astc_enc_seed_score). The partitioning is a seed's pattern
 * (astc_enc_pattern_part), read where the context holds it: a fit's partition per texel,
 * written for every seed scored, was local memory on the GPU. */
ASTC_ENC_OUTLINE uint32_t astc_enc_moment_resid(const astc_enc_block *blk, int parts, const uint64_t *plane0,
						const uint64_t *plane1, uint32_t cut)
{
	/* partition by partition, a pass over the texels each: the residual only grows with
	 * each (non-negative terms, and float addition and the rounding below are monotonic),
	 * so the partitions left once it reaches cut are not worked out. A partition's sums
	 * are scalars (registers on the GPU): in arrays indexed by each texel's partition, one
	 * pass for all, they were 14% of the kernel's local-memory store sectors at medium 4x4
	 * (ncu, docs/PERFORMANCE.md, session 29). */
	float total = 0.0f;
	KILN_ROLLED for (int p = 0; p < parts; p++) {
		int32_t cnt = 0, sum[4] = {0, 0, 0, 0}, prod[10] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
		KILN_ROLLED for (int i = 0; i < blk->n; i++) {
			if (astc_enc_pattern_part(plane0, plane1, i) != p)
				continue;
			const uint8_t *x = blk->px[i];
			int32_t x0 = x[0], x1 = x[1], x2 = x[2], x3 = x[3];
			cnt++;
			sum[0] += x0;
			sum[1] += x1;
			sum[2] += x2;
			sum[3] += x3;
			prod[0] += x0 * x0;
			prod[1] += x0 * x1;
			prod[2] += x0 * x2;
			prod[3] += x0 * x3;
			prod[4] += x1 * x1;
			prod[5] += x1 * x2;
			prod[6] += x1 * x3;
			prod[7] += x2 * x2;
			prod[8] += x2 * x3;
			prod[9] += x3 * x3;
		}
		/* an empty partition is left out */
		if (cnt == 0)
			continue;
		/* the covariance times the texel count, exact in 64 bits */
		float c[4][4];
		int at = 0;
		for (int a = 0; a < 4; a++)
			for (int b = a; b < 4; b++, at++) {
				int64_t m = (int64_t)cnt * prod[at] - (int64_t)sum[a] * sum[b];
				c[a][b] = c[b][a] = (float)m / (float)cnt;
			}
		float u[4];
		astc_enc_principal_axis((const float(*)[4])c, u);
		float vv = u[0] * u[0] + u[1] * u[1] + u[2] * u[2] + u[3] * u[3], vcv = 0.0f;
		for (int a = 0; a < 4; a++)
			vcv += u[a] * (c[a][0] * u[0] + c[a][1] * u[1] + c[a][2] * u[2] + c[a][3] * u[3]);
		float off = c[0][0] + c[1][1] + c[2][2] + c[3][3] - (vv > 0.0f ? vcv / vv : 0.0f);
		total += off > 0.0f ? off : 0.0f;
		if ((uint32_t)(total + 0.5f) >= cut)
			break;
	}
	return (uint32_t)(total + 0.5f);
}

/* Decoded endpoints (0..255) of partition p from s, packed: channel k of endpoint 0 in
 * byte k, of endpoint 1 in byte 4 + k. An out-of-line call on the GPU returns them in
 * registers; written through pointers into the caller's arrays (and with the values in
 * an array indexed at run time), they were 16% of the kernel's local-memory stores at
 * medium 4x4 (ncu, docs/PERFORMANCE.md, session 29). */
ASTC_ENC_OUTLINE uint64_t astc_enc_decoded_packed(const astc_symbolic *s, int p)
{
	int pos = 0;
	KILN_ROLLED for (int q = 0; q < p; q++)
		pos += astc_cem_values(s->cem[q]);
	int nv = astc_cem_values(s->cem[p]);
	/* read in a loop to 8 (the values past the mode's set to 0), so that v is registers */
	uint8_t v[8];
	for (int i = 0; i < 8; i++)
		v[i] = i < nv ? astc_color_unquant[s->crange][s->colors[pos + i]] : 0;
	int e0[4] = {0, 0, 0, 0}, e1[4] = {0, 0, 0, 0};
	astc_decode_endpoints(s->cem[p], v, e0, e1);
	uint64_t d = 0;
	for (int k = 0; k < 4; k++)
		d |= (uint64_t)(uint32_t)e0[k] << (8 * k) | (uint64_t)(uint32_t)e1[k] << (32 + 8 * k);
	return d;
}

/* Channel k of endpoint e (0 or 1) of decoded endpoints packed as
 * astc_enc_decoded_packed returns them. */
KILN_HD int astc_enc_packed_value(uint64_t d, int e, int k)
{
	return (int)(d >> (32 * e + 8 * k) & 255u);
}

/* Packed decoded endpoints d into the channels of endpoint 0 (e0) and 1 (e1). */
KILN_HD void astc_enc_unpack_endpoints(uint64_t d, int *e0, int *e1)
{
	for (int k = 0; k < 4; k++) {
		e0[k] = astc_enc_packed_value(d, 0, k);
		e1[k] = astc_enc_packed_value(d, 1, k);
	}
}

/* Decoded endpoints (0..255) of partition p from s. */
KILN_HD void astc_enc_decoded_endpoints(const astc_symbolic *s, int p, int *e0, int *e1)
{
	astc_enc_unpack_endpoints(astc_enc_decoded_packed(s, p), e0, e1);
}

/* Texel weights 0..1 -> grid weights 0..64 through the transpose of the infill: each grid
 * point averages the texels it contributes to, weighted by its factor (the start of
 * astc_enc_grid_from_texels). */
ASTC_ENC_OUTLINE void astc_enc_grid_start(const astc_enc_grid *g, const float *tw, float *grid)
{
	int ng = g->w * g->h;
	if (g->full) {
		KILN_ROLLED for (int i = 0; i < ng; i++)
			grid[i] = tw[i] * 64.0f;
		return;
	}
	/* each grid point's sum gathered over the transposed taps: the float additions of a
	 * scatter over the texels' taps in the same order, less those of a zero product (a sum
	 * that starts at +0 is never -0, so adding a zero leaves it as it is) */
	KILN_ROLLED for (int j = 0; j < ng; j++) {
		float num = 0.0f;
		KILN_ROLLED for (int e = g->tfirst[j]; e < g->tfirst[j + 1]; e++)
			num += g->tfac[e] * tw[g->ttex[e]];
		grid[j] = g->den[j] > 0.0f ? num / g->den[j] * 64.0f : 32.0f;
	}
}

/* Texel i's infill of grid weights v (>= +0) in float, times 16: the products in tap order
 * (the last two only where they are not all 0: astc_enc_grid's two_taps). */
KILN_HD float astc_enc_infill16(const astc_enc_grid *g, int i, const float *v)
{
	const astc_infill_tap *t = &g->taps[i];
	const float *f = g->ffac[i];
	float w = f[0] * v[t->idx[0]] + f[1] * v[t->idx[1]];
	if (!g->two_taps)
		w = w + f[2] * v[t->idx[2]] + f[3] * v[t->idx[3]];
	return w;
}

/* Texel i's infill sum (8 + grid weight x factor over its taps) of grid weights v. */
KILN_HD int astc_enc_infill_sum(const astc_enc_grid *g, int i, const uint8_t *v)
{
	const astc_infill_tap *t = &g->taps[i];
	int sum = 8 + v[t->idx[0]] * t->fac[0] + v[t->idx[1]] * t->fac[1];
	if (!g->two_taps)
		sum += v[t->idx[2]] * t->fac[2] + v[t->idx[3]] * t->fac[3];
	return sum;
}

/* The average blurs: correction steps towards the least-squares grid, each grid point
 * moved by the average residual of the texels it reaches (none on a full grid). A step
 * depends only on the grid weights before it, so k steps and then m more are k + m steps:
 * the encoding continues from the ranking's weights (astc_enc_grid_cache). */
ASTC_ENC_OUTLINE void astc_enc_grid_correct(const astc_enc_grid *g, int n, const float *tw, float *grid, int steps)
{
	int ng = g->w * g->h;
	if (g->full)
		return;
	float r[ASTC_MAX_TEXELS];
	KILN_ROLLED for (int it = 0; it < steps; it++) {
		KILN_ROLLED for (int i = 0; i < n; i++)
			r[i] = tw[i] * 64.0f - astc_enc_infill16(g, i, grid) / 16.0f;
		KILN_ROLLED for (int j = 0; j < ng; j++) {
			float num = 0.0f;
			KILN_ROLLED for (int e = g->tfirst[j]; e < g->tfirst[j + 1]; e++)
				num += g->tfac[e] * r[g->ttex[e]];
			float v = g->den[j] > 0.0f ? grid[j] + num / g->den[j] : grid[j];
			grid[j] = v < 0.0f ? 0.0f : (v > 64.0f ? 64.0f : v);
		}
	}
}

/* Texel weights 0..1 -> grid weights 0..64: the average, then `steps` corrections. */
KILN_HD void astc_enc_grid_from_texels(const astc_enc_grid *g, int n, const float *tw, float *grid, int steps)
{
	astc_enc_grid_start(g, tw, grid);
	astc_enc_grid_correct(g, n, tw, grid, steps);
}

/* The decoder's infill (astc_infill) with precomputed taps. */
ASTC_ENC_OUTLINE void astc_enc_infill(const astc_enc_grid *g, int n, const uint8_t *grid, uint8_t *W)
{
	if (g->full) {
		KILN_ROLLED for (int i = 0; i < n; i++)
			W[i] = grid[i];
		return;
	}
	KILN_ROLLED for (int i = 0; i < n; i++)
		W[i] = (uint8_t)(astc_enc_infill_sum(g, i, grid) >> 4);
}

/* Grid weight codes of one plane -> infilled texel weights. */
KILN_HD void astc_enc_plane_weights(const astc_enc_grid *g, int n, int wrange, const uint8_t *codes,
				    uint8_t *W)
{
	uint8_t gq[ASTC_MAX_WEIGHTS];
	KILN_ROLLED for (int j = 0; j < g->w * g->h; j++)
		gq[j] = astc_weight_unquant[wrange][codes[j]];
	astc_enc_infill(g, n, gq, W);
}

#ifndef __CUDA_ARCH__
/* The bits of each value 0..31 smeared downwards (astc_enc_unorm8's mask on the CPU: one
 * load for six dependent operations). */
static const uint8_t astc_enc_smeared[32] = {0,  1,  3,  3,  7,  7,  7,  7,  15, 15, 15, 15, 15, 15, 15, 15,
					     31, 31, 31, 31, 31, 31, 31, 31, 31, 31, 31, 31, 31, 31, 31, 31};
#endif

/* astc_interpolate of astc_block.h without its loop (the FP16 truncation as a mask chosen
 * by the magnitude: 31 from 32768 down to 1 from 2048, a bit for each bit of c above bit
 * 10, so the bits of c >> 11 smeared downwards; a chain of comparisons was branches that
 * the texels' values mispredict); tests/unit/test_astc.c checks that the two agree
 * everywhere. The GPU takes the mask as 2^(bit length of c >> 11) - 1 (__clz(0) is 32)
 * and no test for c = 65535: the formula gives 255 there too, and a decoded 16-bit
 * value is at most 65535 (H100, fast 4x4 +2.3%, medium +1%: docs/PERFORMANCE.md,
 * session 30); the CPU's test keeps its table read in bounds. */
KILN_HD int astc_enc_unorm8(uint32_t c)
{
#ifdef __CUDA_ARCH__
	uint32_t m = (1u << (32 - __clz((int)(c >> 11)))) - 1u;
#else
	if (c >= 65535u)
		return 255;
	uint32_t m = astc_enc_smeared[c >> 11];
#endif
	return (int)(((c & ~m) * 255u + 32768u) >> 16);
}

/* astc_interpolate of one channel as base + slope x weight (astc_enc_base, astc_enc_slope):
 * linear, the 16-bit value e0 257 (64 - w) + e1 257 w + 32 = (257 64 e0 + 32) + 257 (e1 - e0) w,
 * then >> 6 and to 8 bits; sRGB (c = e << 8 | 0x80), ((c0 (64 - w) + c1 w + 32) >> 6) >> 8 =
 * ((64 c0 + 32) + (c1 - c0) w) >> 14, the sum being >= 0. Two operations a texel once the
 * channel's base and slope are known. */
KILN_HD int astc_enc_base(int e0, int srgb)
{
	return srgb ? 64 * (e0 << 8 | 0x80) + 32 : 257 * 64 * e0 + 32;
}

KILN_HD int astc_enc_slope(int e0, int e1, int srgb)
{
	return srgb ? (e1 - e0) * 256 : 257 * (e1 - e0);
}

KILN_HD int astc_enc_decode_at(int base, int slope, int w, int srgb)
{
	uint32_t t = (uint32_t)(base + slope * w);
	return srgb ? (int)(t >> 14) : astc_enc_unorm8(t >> 6);
}

KILN_HD int astc_enc_interp(int e0, int e1, int w, int srgb)
{
	return astc_enc_decode_at(astc_enc_base(e0, srgb), astc_enc_slope(e0, e1, srgb), w, srgb);
}

/* Exact error of an encoding with texel weights W0 (and W1 for channel ccs; ccs 4: none):
 * what astc_decode_symbolic would give, without recomputing partitions and infill. Stops
 * early once over `limit` (with some sum above it: the callers only compare it). */
ASTC_ENC_OUTLINE uint32_t astc_enc_eval(const astc_enc_block *blk, const uint8_t *part, const uint8_t *W0,
					const uint8_t *W1, int ccs, const astc_symbolic *s, uint32_t limit)
{
	uint32_t err = 0;
	int srgb = blk->srgb, parts = s->partitions;
	/* partition by partition, its channels' astc_enc_interp as base + slope x weight in
	 * scalars: in arrays indexed by each texel's partition they were 8 local-memory loads
	 * a texel on the GPU; a pass per partition reads the texels again, a one-partition
	 * encoding (most) once */
	KILN_ROLLED for (int p = 0; p < parts; p++) {
		int e0[4], e1[4];
		astc_enc_decoded_endpoints(s, p, e0, e1);
		int b0 = astc_enc_base(e0[0], srgb), b1 = astc_enc_base(e0[1], srgb);
		int b2 = astc_enc_base(e0[2], srgb), b3 = astc_enc_base(e0[3], srgb);
		int s0 = astc_enc_slope(e0[0], e1[0], srgb), s1 = astc_enc_slope(e0[1], e1[1], srgb);
		int s2 = astc_enc_slope(e0[2], e1[2], srgb), s3 = astc_enc_slope(e0[3], e1[3], srgb);
		/* an opaque block's partition that decodes alpha 255 at both ends has no alpha
		 * error (255 and 255 interpolate to 255 at every weight) */
		int alpha = !blk->opaque || e0[3] != 255 || e1[3] != 255;
		KILN_ROLLED for (int i = 0; i < blk->n; i++) {
			if (parts > 1 && part[i] != p)
				continue;
			int w0 = W0[i], w1 = ccs < 4 ? W1[i] : w0;
			const uint8_t *x = blk->px[i];
			/* the channels written out (a loop of 4 is not unrolled at -O2) */
			uint32_t t0 = (uint32_t)(b0 + s0 * (ccs == 0 ? w1 : w0));
			uint32_t t1 = (uint32_t)(b1 + s1 * (ccs == 1 ? w1 : w0));
			uint32_t t2 = (uint32_t)(b2 + s2 * (ccs == 2 ? w1 : w0));
			uint32_t t3 = (uint32_t)(b3 + s3 * (ccs == 3 ? w1 : w0));
			int d0, d1, d2, d3;
			if (srgb) {
				d0 = (int)(t0 >> 14) - (int)x[0];
				d1 = (int)(t1 >> 14) - (int)x[1];
				d2 = (int)(t2 >> 14) - (int)x[2];
				d3 = alpha ? (int)(t3 >> 14) - (int)x[3] : 0;
			} else {
				d0 = astc_enc_unorm8(t0 >> 6) - (int)x[0];
				d1 = astc_enc_unorm8(t1 >> 6) - (int)x[1];
				d2 = astc_enc_unorm8(t2 >> 6) - (int)x[2];
				d3 = alpha ? astc_enc_unorm8(t3 >> 6) - (int)x[3] : 0;
			}
			err += (uint32_t)(d0 * d0 + d1 * d1 + d2 * d2 + d3 * d3);
			if (err > limit)
				return err;
		}
	}
	return err;
}

KILN_HD int astc_enc_round64(float v)
{
	int r = (int)(v + 0.5f);
	return r < 0 ? 0 : (r > 64 ? 64 : r);
}

/* floor(num / den) for 0 <= num < 2^53 and 0 < den < 2^53, from doubles: both operands
 * convert exactly and the rounded quotient is off by at most one, which the integer
 * products correct (they stay below 2^63 for astc_enc_round_ratio8's quotients, < 256). */
KILN_HD int64_t astc_enc_div_by_double(int64_t num, int64_t den)
{
	int64_t q = (int64_t)((double)num / (double)den);
	if (q * den > num)
		q--;
	else if ((q + 1) * den <= num)
		q++;
	return q;
}

/* n / det (det > 0) rounded half away from zero and clamped to 0..255, for |n| < 2^49 and
 * det < 2^42 (astc_enc_lsq's sums). A negative n gives 0 and a quotient past 255 is seen
 * without dividing; the rest is floor((2 n + det) / (2 det)), which the GPU takes from
 * doubles: its 64-bit integer division is a long software routine whose registers set
 * the whole kernel's (168 with it, 128 without: 8 CTAs an SM instead of 6). */
KILN_HD int astc_enc_round_ratio8(int64_t n, int64_t det)
{
	if (n < 0)
		return 0;
	int64_t num = 2 * n + det, den = 2 * det;
	if (num >= 256 * den)
		return 255;
#ifdef __CUDA_ARCH__
	return (int)astc_enc_div_by_double(num, den);
#else
	return (int)(num / den);
#endif
}

/* Endpoints of one partition by least squares against integer texel weights w1 (0..64):
 * minimise sum((64-w1) e0 + w1 e1 - 64 x)^2 per channel k0..k1-1, solved exactly in 64-bit
 * integers and rounded to nearest, from the partition's sums (astc_enc_refit): texels
 * cnt, weights s1, squared weights c2, per channel values px and weighted values pw.
 * Returns 0 when the weights do not determine two endpoints. */
KILN_HD int astc_enc_lsq(int32_t cnt, int32_t s1, int32_t c2, const int32_t *px, const int32_t *pw, int k0, int k1,
			 int *e0, int *e1)
{
	/* a = sum w0 w0, b = sum w0 w1, c = sum w1 w1 (w0 = 64 - w1) */
	int64_t c = c2, b = 64 * (int64_t)s1 - c, a = 4096 * (int64_t)cnt - 64 * (int64_t)s1 - b;
	int64_t det = a * c - b * b;
	if (det <= 0)
		return 0;
	KILN_ROLLED for (int k = k0; k < k1; k++) {
		/* d0, d1: 64 x sum w0 x, 64 x sum w1 x */
		int64_t d1 = 64 * (int64_t)pw[k], d0 = 4096 * (int64_t)px[k] - d1;
		int64_t n0 = c * d0 - b * d1, n1 = a * d1 - b * d0;
		/* round half away from zero, then clamp */
		e0[k] = astc_enc_round_ratio8(n0, det);
		e1[k] = astc_enc_round_ratio8(n1, det);
	}
	return 1;
}

/* Endpoints of every partition of a fit by least squares against W0 (and W1 for channel
 * ccs); a partition or channel the weights do not determine keeps its endpoints in ep.
 * The weighted sums are taken partition by partition in 32 bits (at most 144 x 64 x
 * 255), in scalars: summed into arrays indexed by each texel's partition they were a
 * chain of local-memory updates on the GPU, which waited on each other (2% of the
 * kernel's samples at 4x4); a pass per partition reads the texels again, a one-partition
 * fit (most) once. The texel counts and plain sums are the fit's. */
ASTC_ENC_OUTLINE void astc_enc_refit(const astc_enc_block *blk, const astc_enc_fit *fit, const uint8_t *W0,
				     const uint8_t *W1, int ccs, int ep[4][2][4])
{
	KILN_ROLLED for (int p = 0; p < fit->parts; p++) {
		int32_t s1 = 0, c2 = 0, t1 = 0, d2 = 0, q1 = 0, pw[4] = {0, 0, 0, 0};
		KILN_ROLLED for (int i = 0; i < blk->n; i++) {
			if (fit->part[i] != p)
				continue;
			int32_t w = W0[i];
			const uint8_t *x = blk->px[i];
			s1 += w;
			c2 += w * w;
			/* the channels written out: a loop of 4 is not unrolled at -O2 */
			pw[0] += w * x[0];
			pw[1] += w * x[1];
			pw[2] += w * x[2];
			pw[3] += w * x[3];
			if (ccs < 4) {
				w = W1[i];
				t1 += w;
				d2 += w * w;
				q1 += w * x[ccs];
			}
		}
		int e0[4], e1[4];
		const int32_t *px = fit->sum[p];
		if (astc_enc_lsq(fit->count[p], s1, c2, px, pw, 0, 4, e0, e1)) {
			for (int k = 0; k < 4; k++) {
				if (k == ccs)
					continue;
				ep[p][0][k] = e0[k];
				ep[p][1][k] = e1[k];
			}
		}
		/* channel ccs against W1 (astc_enc_lsq reads pw1[ccs]) */
		int32_t pw1[4] = {q1, q1, q1, q1};
		if (ccs < 4 && astc_enc_lsq(fit->count[p], t1, d2, px, pw1, ccs, ccs + 1, e0, e1)) {
			ep[p][0][ccs] = e0[ccs];
			ep[p][1][ccs] = e1[ccs];
		}
	}
}

/* Starting endpoints of a fit: least squares against the fit's own positions, which
 * recovers the line's extremes; a flat partition gets its mean. */
ASTC_ENC_OUTLINE void astc_enc_line_endpoints(const astc_enc_block *blk, const astc_enc_fit *fit, int ep[4][2][4])
{
	uint8_t W0[ASTC_MAX_TEXELS], W1[ASTC_MAX_TEXELS];
	KILN_ROLLED for (int i = 0; i < blk->n; i++) {
		W0[i] = (uint8_t)astc_enc_round64(fit->w[i] * 64.0f);
		W1[i] = fit->ccs < 4 ? (uint8_t)astc_enc_round64(fit->w1[i] * 64.0f) : 0;
	}
	KILN_ROLLED for (int p = 0; p < fit->parts; p++) {
		int cnt = fit->count[p];
		for (int k = 0; k < 4; k++)
			ep[p][0][k] = ep[p][1][k] = cnt ? (fit->sum[p][k] + cnt / 2) / cnt : 0;
	}
	astc_enc_refit(blk, fit, W0, W1, fit->ccs, ep);
}

/* Quantises the endpoints of every partition into s (colour range s->crange) for its
 * CEM: direct (8, 12) puts endpoint 1 on the side of the larger RGB sum after
 * quantisation, or blue-contracts them; base+scale (6, 10) stores the brighter endpoint
 * and the scale that best maps it onto the other; luminance (0, 4) the mean of R, G, B.
 * Returns a bit mask of the partitions whose endpoints were swapped (their weights must
 * invert). */
ASTC_ENC_OUTLINE int astc_enc_quant_endpoints(astc_symbolic *s, int ep[4][2][4])
{
	int pos = 0, swapped = 0, cr = s->crange;
	KILN_ROLLED for (int p = 0; p < s->partitions; p++) {
		int cem = s->cem[p];
		if (cem == 0 || cem == 4) {
			/* the luminance that fits R, G and B best is their mean */
			for (int e = 0; e < 2; e++) {
				int l = (ep[p][e][0] + ep[p][e][1] + ep[p][e][2] + 1) / 3;
				s->colors[pos + e] = astc_color_quant[cr][l];
				if (cem == 4)
					s->colors[pos + 2 + e] = astc_color_quant[cr][ep[p][e][3]];
			}
			pos += astc_cem_values(cem);
			continue;
		}
		if (cem == 6 || cem == 10) {
			int hi = ep[p][1][0] + ep[p][1][1] + ep[p][1][2] >= ep[p][0][0] + ep[p][0][1] + ep[p][0][2] ? 1 : 0;
			int lo = 1 - hi;
			int64_t num = 0, den = 0;
			for (int k = 0; k < 3; k++) {
				uint8_t q = astc_color_quant[cr][ep[p][hi][k]];
				int u = astc_color_unquant[cr][q];
				s->colors[pos + k] = q;
				num += (int64_t)u * ep[p][lo][k];
				den += (int64_t)u * u;
			}
			int64_t sc = den > 0 ? (num * 256 + den / 2) / den : 255;
			s->colors[pos + 3] = astc_color_quant[cr][sc > 255 ? 255 : sc];
			if (cem == 10) {
				s->colors[pos + 4] = astc_color_quant[cr][ep[p][lo][3]];
				s->colors[pos + 5] = astc_color_quant[cr][ep[p][hi][3]];
			}
			if (!hi)
				swapped |= 1 << p;
			pos += astc_cem_values(cem);
			continue;
		}
		int rgba = cem == 12;
		uint8_t q[2][4];
		int sum[2] = {0, 0};
		for (int e = 0; e < 2; e++) {
			for (int k = 0; k < 4; k++) {
				q[e][k] = astc_color_quant[cr][ep[p][e][k]];
				if (k < 3)
					sum[e] += astc_color_unquant[cr][q[e][k]];
			}
		}
		/* blue contraction: values (2r - b, 2g - b, b) decode to (r, g, b) with R and G
		 * at twice the precision, when the stored RGB sums decrease (endpoint 0 then comes
		 * from the odd values). Kept where its decoded endpoints are closer; with several
		 * partitions only in the orientation that needs no weight inversion. */
		int errp = 0, errb = 0, sb[2] = {0, 0};
		uint8_t qb[2][3];
		for (int e = 0; e < 2; e++) {
			qb[e][2] = astc_color_quant[cr][ep[p][e][2]];
			int ub = astc_color_unquant[cr][qb[e][2]];
			for (int k = 0; k < 3; k++) {
				int d = astc_color_unquant[cr][q[e][k]] - ep[p][e][k];
				errp += d * d;
				int u = ub;
				if (k < 2) {
					int t = 2 * ep[p][e][k] - ub;
					qb[e][k] = astc_color_quant[cr][t < 0 ? 0 : (t > 255 ? 255 : t)];
					u = (astc_color_unquant[cr][qb[e][k]] + ub) >> 1;
				}
				sb[e] += astc_color_unquant[cr][qb[e][k]];
				d = u - ep[p][e][k];
				errb += d * d;
			}
		}
		int first = sb[0] < sb[1] ? 0 : (sb[1] < sb[0] && s->partitions == 1 ? 1 : -1);
		if (first >= 0 && errb < errp) {
			for (int k = 0; k < 3; k++) {
				s->colors[pos + 2 * k] = qb[1 - first][k];
				s->colors[pos + 2 * k + 1] = qb[first][k];
			}
			if (rgba) {
				s->colors[pos + 6] = q[1 - first][3];
				s->colors[pos + 7] = q[first][3];
			}
			if (first)
				swapped |= 1 << p;
			pos += rgba ? 8 : 6;
			continue;
		}
		int lo = 0, hi = 1;
		if (sum[1] < sum[0]) {
			lo = 1;
			hi = 0;
			swapped |= 1 << p;
		}
		KILN_ROLLED for (int k = 0; k < (rgba ? 4 : 3); k++) {
			s->colors[pos + 2 * k] = q[lo][k];
			s->colors[pos + 2 * k + 1] = q[hi][k];
		}
		pos += rgba ? 8 : 6;
	}
	return swapped;
}

/* Endpoint kinds: 0 direct (CEM 8, 12), 1 base+scale (6, 10), 2 luminance (0, 4). */
#define ASTC_ENC_KINDS 3

/* Sets the CEM of every partition for an endpoint kind; returns the number of colour
 * values and sets *config to the bits the rest of the block (mode, partitions, CEMs)
 * takes; 0 when the kind does not apply. Under kinds 0 and 1 a gray partition among
 * coloured ones takes the smallest mode that the others' class allows (the CEMs of one
 * block may differ by one class only): luminance, luminance+alpha, then the kind's own. */
ASTC_ENC_OUTLINE int astc_enc_kind_cems(astc_symbolic *s, const astc_enc_fit *fit, int ccs, int kind, int *config)
{
	int values = 0, mixed = 0, parts = s->partitions;
	*config = 0;
	if (kind == 2 && ccs < 3)
		return 0;
	int top = 0, allgray = 1;
	KILN_ROLLED for (int p = 0; p < parts; p++) {
		int alpha = fit->alpha[p] || ccs == 3;
		int cem = kind == 2 ? (alpha ? 4 : 0) : (kind ? (alpha ? 10 : 6) : (alpha ? 12 : 8));
		s->cem[p] = (uint8_t)cem;
		allgray &= fit->gray[p];
		if (!fit->gray[p] && (cem >> 2) > top)
			top = cem >> 2;
	}
	KILN_ROLLED for (int p = 0; p < parts && kind < 2 && !allgray && ccs >= 3; p++) {
		if (!fit->gray[p])
			continue;
		int alpha = fit->alpha[p] || ccs == 3;
		int cem = alpha ? 4 : 0;
		if ((cem >> 2) < top - 1)
			cem = top - 1 == 1 ? 4 : (top - 1 == 2 ? (alpha ? 10 : 8) : s->cem[p]);
		s->cem[p] = (uint8_t)cem;
	}
	KILN_ROLLED for (int p = 0; p < parts; p++) {
		values += astc_cem_values(s->cem[p]);
		mixed |= s->cem[p] != s->cem[0];
	}
	*config = (parts == 1 ? 17 : (mixed ? 25 + 3 * parts : 29)) + (s->mode.dual ? 2 : 0);
	return values > ASTC_MAX_VALUES ? 0 : values;
}

/* The colour range left for `values` colour values by a block whose mode and weights
 * take `used` bits; -1 when none fits. */
KILN_HD int astc_enc_color_range(const astc_enc_ctx *ctx, int values, int used)
{
	return used <= 128 ? ctx->crange[values / 2 - 1][ASTC_ENC_CRANGE_PAD + 128 - used] : -1;
}

/* The CEMs of an endpoint kind (astc_enc_kind_cems) and the colour range a mode with
 * weight_bits leaves; 0 when the values do not fit. */
ASTC_ENC_OUTLINE int astc_enc_set_cems(const astc_enc_ctx *ctx, astc_symbolic *s, const astc_enc_fit *fit, int ccs,
				       int kind, int weight_bits)
{
	int config, values = astc_enc_kind_cems(s, fit, ccs, kind, &config);
	int cr = values ? astc_enc_color_range(ctx, values, config + weight_bits) : -1;
	if (cr < 0)
		return 0;
	s->crange = (uint8_t)cr;
	return 1;
}

/* Grid weights (0..64, rounded) of one plane quantised into codes, and their texel
 * weights; `invert` mirrors them (64 - w). */
ASTC_ENC_OUTLINE void astc_enc_quant_plane(const astc_enc_grid *g, int n, int wrange, const uint8_t *v, int invert,
					   uint8_t *codes, uint8_t *W)
{
	KILN_ROLLED for (int j = 0; j < g->w * g->h; j++)
		codes[j] = astc_weight_quant[wrange][invert ? 64 - v[j] : v[j]];
	astc_enc_plane_weights(g, n, wrange, codes, W);
}

/* The rounded grid weights of both planes for one grid: those of a fit's own texel
 * positions (grid >= 0: which grid), which every candidate of the fit starts from, or a
 * refinement's (grid -1). Consecutive candidates often share a grid. */
typedef struct astc_enc_grid_memo {
	int grid;
	uint8_t v[2][ASTC_MAX_WEIGHTS];
} astc_enc_grid_memo;

/* The ranking's grid weights (before rounding) of the few grids whose modes stand highest
 * in its candidate list, kept for the candidates' encoding: that continues them with the
 * remaining correction steps (grid_steps - est_steps; astc_enc_grid_correct), which gives
 * the weights of a fit from scratch bit for bit for a fraction of the work. A slot holds
 * one plane of one grid of the fit and the steps taken so far. */
#define ASTC_ENC_GRID_CACHE 8
typedef struct astc_enc_grid_cache {
	int key[ASTC_ENC_GRID_CACHE]; /* 2 grid + plane; -1: empty */
	int steps[ASTC_ENC_GRID_CACHE];
	float v[ASTC_ENC_GRID_CACHE][ASTC_MAX_WEIGHTS];
} astc_enc_grid_cache;

/* The end of a candidate's first iteration (astc_enc_try_mode): its encoding, error and
 * refitted endpoints, from which a later call with refinement rounds goes on instead of
 * encoding it again (the same inputs give the same first iteration). */
typedef struct astc_enc_first {
	astc_symbolic s;
	uint32_t err;
	int ep[4][2][4];
} astc_enc_first;

/* Encodes with one block mode and a partitioning: fills s, returns its exact error.
 * line_ep are the fit's starting endpoints (astc_enc_line_endpoints, computed once per
 * fit), memo the fit's rounded grid weights for the last grid asked (kept across the
 * calls of one fit), kind the endpoint kind (astc_enc_kind_cems). With `iterations` 0,
 * `first` (where not NULL) gets the first iteration's end (s may be first's own encoding,
 * which is then not copied); with refinement rounds it must hold that end: the call goes on
 * from there, and may leave first's encoding overwritten. */
ASTC_ENC_OUTLINE uint32_t astc_enc_try_mode(const astc_enc_ctx *ctx, const astc_enc_block *blk,
					    const astc_enc_fit *fit, int line_ep[4][2][4], const astc_enc_mode *m, int seed,
					    int iterations, int grid_steps, uint32_t limit, int kind, astc_symbolic *s,
					    astc_enc_grid_memo *memo, astc_enc_grid_cache *gc, astc_enc_first *first)
{
	const astc_enc_grid *g = &ctx->grids[m->grid];
	int parts = fit->parts;
	int dual = m->dual, ccs = dual ? fit->ccs : 4;
	if (dual && (ccs > 3 || parts > 3))
		return UINT32_MAX;
	s->kind = ASTC_KIND_NORMAL;
	s->partitions = (uint8_t)parts;
	s->seed = (uint16_t)seed;
	s->ccs = (uint8_t)(dual ? ccs : 0);
	s->block_mode = m->mode;
	s->mode.grid_w = m->grid_w;
	s->mode.grid_h = m->grid_h;
	s->mode.dual = (uint8_t)dual;
	s->mode.wrange = m->wrange;
	s->mode.weight_bits = m->weight_bits;
	if (!astc_enc_set_cems(ctx, s, fit, ccs, kind, m->weight_bits))
		return UINT32_MAX;

	/* the texels' positions on each plane: the fit's, re-projected into tw after the first
	 * iteration (not copied for it: at fast there is no other) */
	float tw[2][ASTC_MAX_TEXELS], grid[ASTC_MAX_WEIGHTS];
	const float *pos[2] = {fit->w, fit->w1};
	uint8_t(*gv)[ASTC_MAX_WEIGHTS] = memo->v;
	int ep[4][2][4];
	KILN_ROLLED for (int p = 0; p < parts; p++)
		for (int k = 0; k < 4; k++) {
			ep[p][0][k] = line_ep[p][0][k];
			ep[p][1][k] = line_ep[p][1][k];
		}

	uint8_t W[2][ASTC_MAX_TEXELS];
	uint32_t best = UINT32_MAX;
	/* Each iteration is made in a buffer of its own and re-projects the texels on the
	 * encoding before it (`prev`): the last in s itself, the one before it in own, and so
	 * on in turn, so that where the last comes closest (or is the only one) nothing is
	 * copied: copies of an astc_symbolic are a GPU thread's local memory. Every buffer
	 * holds the fields set above (an iteration rewrites the weights and colour values
	 * only). `closest`: the closest encoding so far (none yet: NULL). */
	astc_symbolic own;
	const astc_symbolic *prev = s, *closest = NULL;
	int resume = iterations > 0;
	if (iterations > 1)
		astc_symbolic_copy(&own, s);
	if (resume) {
		best = first->err;
		prev = closest = &first->s;
		KILN_ROLLED for (int p = 0; p < parts; p++)
			for (int k = 0; k < 4; k++) {
				ep[p][0][k] = first->ep[p][0][k];
				ep[p][1][k] = first->ep[p][1][k];
			}
	}
	KILN_ROLLED for (int it = resume; it <= iterations; it++) {
		astc_symbolic *cur = (iterations - it) % 2 ? &own : s;
		/* a buffer is made again only after the one between: where it holds the closest
		 * encoding, that moves to first's, whose own iteration is then behind (more than
		 * two refinement rounds; no preset has them) */
		if (cur == closest) {
			astc_symbolic_copy(&first->s, cur);
			closest = &first->s;
		}
		if (it > 0) {
			/* texel positions re-projected on the quantised endpoints: plane 0 on the
			 * channels other than ccs, plane 1 on channel ccs */
			pos[0] = tw[0];
			pos[1] = tw[1];
			KILN_ROLLED for (int p = 0; p < parts; p++) {
				int e0[4], e1[4];
				astc_enc_decoded_endpoints(prev, p, e0, e1);
				/* the line's direction on plane 0 (channel ccs zeroed: its term of every
				 * product is 0) */
				int d[4], dd = 0;
				for (int k = 0; k < 4; k++) {
					d[k] = k == ccs ? 0 : e1[k] - e0[k];
					dd += d[k] * d[k];
				}
				KILN_ROLLED for (int i = 0; i < blk->n; i++) {
					if (fit->part[i] != p)
						continue;
					const uint8_t *x = blk->px[i];
					/* written out: a loop of 4 is not unrolled at -O2 */
					int t = (x[0] - e0[0]) * d[0] + (x[1] - e0[1]) * d[1] + (x[2] - e0[2]) * d[2] + (x[3] - e0[3]) * d[3];
					float f = dd > 0 ? (float)t / (float)dd : 0.5f;
					tw[0][i] = f < 0.0f ? 0.0f : (f > 1.0f ? 1.0f : f);
					if (dual) {
						int dc = e1[ccs] - e0[ccs];
						f = dc != 0 ? (float)((int)x[ccs] - e0[ccs]) / (float)dc : 0.5f;
						tw[1][i] = f < 0.0f ? 0.0f : (f > 1.0f ? 1.0f : f);
					}
				}
			}
		}
		/* weights for the current texel positions, quantised and infilled */
		if (it > 0 || memo->grid != m->grid) {
			KILN_ROLLED for (int pl = 0; pl <= dual; pl++) {
				/* the fit's own positions: from the ranking's weights where it kept them */
				int slot = -1;
				KILN_ROLLED for (int c = 0; c < ASTC_ENC_GRID_CACHE && it == 0; c++)
					if (gc->key[c] == 2 * m->grid + pl && gc->steps[c] <= grid_steps)
						slot = c;
				float *gp = grid;
				if (slot >= 0) {
					gp = gc->v[slot];
					astc_enc_grid_correct(g, blk->n, pos[pl], gp, grid_steps - gc->steps[slot]);
					gc->steps[slot] = grid_steps;
				} else {
					astc_enc_grid_from_texels(g, blk->n, pos[pl], grid, grid_steps);
				}
				KILN_ROLLED for (int j = 0; j < g->w * g->h; j++)
					gv[pl][j] = (uint8_t)astc_enc_round64(gp[j]);
			}
			memo->grid = it > 0 ? -1 : m->grid;
		}
		KILN_ROLLED for (int pl = 0; pl <= dual; pl++)
			astc_enc_quant_plane(g, blk->n, m->wrange, gv[pl], 0, cur->weights + pl * g->w * g->h, W[pl]);
		/* endpoints refitted to those weights (kept when they do not determine a line) */
		astc_enc_refit(blk, fit, W[0], W[1], ccs, ep);
		int swapped = astc_enc_quant_endpoints(cur, ep);
		if (swapped && parts == 1) {
			/* invert the weights of the (single) partition and requantise */
			KILN_ROLLED for (int pl = 0; pl <= dual; pl++)
				astc_enc_quant_plane(g, blk->n, m->wrange, gv[pl], 1, cur->weights + pl * g->w * g->h, W[pl]);
		}
		uint32_t err = astc_enc_eval(blk, fit->part, W[0], W[1], ccs, cur, best < limit ? best : limit);
		if (err < best) {
			best = err;
			closest = cur;
		}
		prev = cur;
	}
	if (closest != s)
		astc_symbolic_copy(s, closest);
	if (first && iterations == 0) {
		if (s != &first->s)
			astc_symbolic_copy(&first->s, s);
		first->err = best;
		KILN_ROLLED for (int p = 0; p < parts; p++)
			for (int k = 0; k < 4; k++) {
				first->ep[p][0][k] = ep[p][0][k];
				first->ep[p][1][k] = ep[p][1][k];
			}
	}
	return best;
}

/* The decoded value of one channel between endpoints e0 and e1 at the weights a texel can
 * have: at every weight 0..64, or on a full grid at the codes of weight range wr (without
 * infill a texel's weight is one of its levels): a table of at most 32 entries, whose
 * lookups on the GPU touch at most half the lines of local memory that one indexed by
 * weight did (a thread's words interleave across the warp: a byte table spans a line
 * every 4 bytes; medium 4x4 3% faster, docs/PERFORMANCE.md, session 29). */
KILN_HD void astc_enc_lut_channel(int e0, int e1, int srgb, int full, int wr, uint8_t *lut)
{
	int count = full ? astc_ranges[wr].levels : 65, base = astc_enc_base(e0, srgb), slope = astc_enc_slope(e0, e1, srgb);
	KILN_ROLLED for (int t = 0; t < count; t++)
		lut[t] = (uint8_t)astc_enc_decode_at(base, slope, full ? astc_weight_unquant[wr][t] : t, srgb);
}

/* The decoded value of every channel between decoded endpoints e[0] and e[1]
 * (astc_enc_lut_channel). */
ASTC_ENC_OUTLINE void astc_enc_lut(const int e[2][4], int srgb, int full, int wr, uint8_t lut[4][65])
{
	for (int k = 0; k < 4; k++)
		astc_enc_lut_channel(e[0][k], e[1][k], srgb, full, wr, lut[k]);
}

/* Texel i's decoded minus original value in each channel under the tables of its
 * partition (plane 2 for channel ccs). */
KILN_HD void astc_enc_texel_diffs(const astc_enc_block *blk, int i, const uint8_t lut[4][65], int w0, int w1,
				  int ccs, int d[4])
{
	const uint8_t *x = blk->px[i];
	/* written out: a loop of 4 is not unrolled at -O2 */
	d[0] = (int)lut[0][ccs == 0 ? w1 : w0] - (int)x[0];
	d[1] = (int)lut[1][ccs == 1 ? w1 : w0] - (int)x[1];
	d[2] = (int)lut[2][ccs == 2 ? w1 : w0] - (int)x[2];
	d[3] = (int)lut[3][ccs == 3 ? w1 : w0] - (int)x[3];
}

/* Squared error of texel i under the tables of its partition. */
KILN_HD uint32_t astc_enc_texel_err(const astc_enc_block *blk, int i, const uint8_t lut[4][65], int w0,
				    int w1, int ccs)
{
	int d[4];
	astc_enc_texel_diffs(blk, i, lut, w0, w1, ccs, d);
	return (uint32_t)(d[0] * d[0] + d[1] * d[1] + d[2] * d[2] + d[3] * d[3]);
}

/* Adds sign times the squared error of each channel of texel i under the tables of its
 * partition to cerr; returns the texel's squared error (astc_enc_texel_err: its callers
 * that also want that error compute the differences once). */
KILN_HD uint32_t astc_enc_channel_errs(const astc_enc_block *blk, int i, const uint8_t lut[4][65], int w0, int w1,
				       int ccs, int sign, int32_t *cerr)
{
	int d[4];
	astc_enc_texel_diffs(blk, i, lut, w0, w1, ccs, d);
	cerr[0] += sign * d[0] * d[0];
	cerr[1] += sign * d[1] * d[1];
	cerr[2] += sign * d[2] * d[2];
	cerr[3] += sign * d[3] * d[3];
	return (uint32_t)(d[0] * d[0] + d[1] * d[1] + d[2] * d[2] + d[3] * d[3]);
}

/* The infill's sum of every texel (8 + grid weight x factor over its taps; the texel's
 * weight is the sum >> 4) from the grid weights gq, and the weights; not for a full grid. */
KILN_HD void astc_enc_infill_sums(const astc_enc_grid *g, int n, const uint8_t *gq, uint16_t *sums, uint8_t *W)
{
	KILN_ROLLED for (int i = 0; i < n; i++) {
		sums[i] = (uint16_t)astc_enc_infill_sum(g, i, gq);
		W[i] = (uint8_t)(sums[i] >> 4);
	}
}

/* The weight of the texel of grid g's e-th transposed tap once that tap's grid point moves
 * from a to b = a + step (the texel's infill sum in sums): on a full grid the point is the
 * texel, of weight b. */
KILN_HD int astc_enc_moved_weight(const astc_enc_grid *g, const uint16_t *sums, int e, int b, int step)
{
	return g->full ? b : (sums[g->ttex[e]] + step * (int)g->tfac[e]) >> 4;
}

/* Local search on a finished encoding: moves each grid weight, then each colour value, one
 * quantisation level up or down while the exact error falls (at most `passes` sweeps).
 * Per-texel errors are kept so that a move re-evaluates only what it changes: a grid
 * weight the texels that read it (the transposed taps), a colour value the channels of
 * its partition whose decoded endpoints move. A sweep ends early where it reaches the
 * moves that followed the last accepted one without accepting any: they were rejected in
 * the same state before. part is the partition of every texel (that of s's seed: the fit's).
 * A grid weight's move from a to b changes the infill sum of each texel that reads it by
 * (b - a) times its one non-zero factor for that point (the transposed taps hold each such
 * texel once), so the texels' sums are kept (not for a full grid, whose texel weights are
 * its grid weights) and moved instead of infilled again.
 * Returns the new error of s. */
ASTC_ENC_OUTLINE uint32_t astc_enc_polish(const astc_enc_ctx *ctx, const astc_enc_block *blk, const astc_enc_grid *g,
					  const uint8_t *part, astc_symbolic *s, uint32_t err, int passes)
{
	uint8_t W[2][ASTC_MAX_TEXELS];
	uint16_t sums[2][ASTC_MAX_TEXELS];
	uint8_t lut[4][4][65];
	uint32_t terr[ASTC_MAX_TEXELS];
	int32_t cerr[4][4] = {{0}}; /* the error of each partition per channel */
	uint64_t cur[4]; /* the decoded endpoints of each partition, as in lut (astc_enc_decoded_packed) */
	int dual = s->mode.dual, ccs = dual ? s->ccs : 4, wr = s->mode.wrange;
	int ng = s->mode.grid_w * s->mode.grid_h, n = blk->n, parts = s->partitions;
	/* a single plane's texel weights serve as both planes' (W1 only names them) */
	uint8_t *W1 = W[dual];
	/* where the tables are read: each texel's weight, or on a full grid its code (the
	 * grid's own; astc_enc_lut_channel) */
	const uint8_t *L0 = g->full ? s->weights : W[0], *L1 = g->full ? s->weights + (dual ? ng : 0) : W1;
	KILN_ROLLED for (int pl = 0; pl <= dual; pl++) {
		uint8_t gq[ASTC_MAX_WEIGHTS];
		/* a full grid's weights are the texels' (no copy through gq) */
		uint8_t *to = g->full ? W[pl] : gq;
		KILN_ROLLED for (int j = 0; j < ng; j++)
			to[j] = astc_weight_unquant[wr][s->weights[pl * ng + j]];
		if (!g->full)
			astc_enc_infill_sums(g, n, gq, sums[pl], W[pl]);
	}
	KILN_ROLLED for (int p = 0; p < parts; p++) {
		int e[2][4];
		cur[p] = astc_enc_decoded_packed(s, p);
		astc_enc_unpack_endpoints(cur[p], e[0], e[1]);
		astc_enc_lut((const int(*)[4])e, blk->srgb, g->full, wr, lut[p]);
	}
	uint32_t total = 0;
	KILN_ROLLED for (int i = 0; i < n; i++) {
		terr[i] = astc_enc_channel_errs(blk, i, lut[part[i]], L0[i], L1[i], ccs, 1, cerr[part[i]]);
		total += terr[i];
	}
	err = total;
	/* moves are numbered in sweep order (pos); last: the last one accepted */
	int last = -1, settled = 0;
	KILN_ROLLED for (int pass = 0; pass < passes && err > 0 && !settled; pass++) {
		int improved = 0, pos = 0;
		KILN_ROLLED for (int pl = 0; pl <= dual && !settled; pl++) {
			KILN_ROLLED for (int j = 0; j < ng; j++, pos++) {
				if (pass > 0 && !improved && pos > last) {
					settled = 1;
					break;
				}
				uint8_t old = s->weights[pl * ng + j];
				/* the texels whose infill reads grid point j */
				int first = g->full ? j : g->tfirst[j], end = g->full ? j + 1 : g->tfirst[j + 1];
				/* both moves (down [0], up [1]) in one walk over the texels, which
				 * shares their loads: the second is tried only where the first is
				 * rejected, and the first is accepted rarely. A move past either end
				 * of the range (nc = old, step 0) gives each texel its weight and
				 * error now: delta 0, rejected as it was skipped. The deltas fit in
				 * 32 bits (at most ASTC_MAX_TEXELS texels of 4 x 255^2). */
				uint8_t nc0 = ctx->wstep[wr][old][0], nc1 = ctx->wstep[wr][old][1];
				int a = astc_weight_unquant[wr][old];
				int b0 = astc_weight_unquant[wr][nc0], b1 = astc_weight_unquant[wr][nc1];
				int step0 = b0 - a, step1 = b1 - a;
				int32_t delta0 = 0, delta1 = 0;
				KILN_ROLLED for (int e = first; e < end; e++) {
					int i = g->full ? e : g->ttex[e];
					/* the tables at each move (a full grid's at its codes) */
					int w0 = g->full ? nc0 : astc_enc_moved_weight(g, sums[pl], e, b0, step0);
					int w1 = g->full ? nc1 : astc_enc_moved_weight(g, sums[pl], e, b1, step1);
					/* one plane: every channel at w (constants the compiler folds) */
					uint32_t te0 = dual ? astc_enc_texel_err(blk, i, lut[part[i]], pl == 0 ? w0 : L0[i], pl == 1 ? w0 : L1[i], ccs)
							    : astc_enc_texel_err(blk, i, lut[part[i]], w0, w0, 4);
					uint32_t te1 = dual ? astc_enc_texel_err(blk, i, lut[part[i]], pl == 0 ? w1 : L0[i], pl == 1 ? w1 : L1[i], ccs)
							    : astc_enc_texel_err(blk, i, lut[part[i]], w1, w1, 4);
					delta0 += (int32_t)te0 - (int32_t)terr[i];
					delta1 += (int32_t)te1 - (int32_t)terr[i];
				}
				if (delta0 < 0 || delta1 < 0) {
					/* accept: commit the texels' weights and errors */
					int dir = delta0 < 0 ? 0 : 1, b = dir ? b1 : b0, step = dir ? step1 : step0;
					s->weights[pl * ng + j] = dir ? nc1 : nc0;
					KILN_ROLLED for (int e = first; e < end; e++) {
						int i = g->full ? e : g->ttex[e], w = astc_enc_moved_weight(g, sums[pl], e, b, step);
						/* the texel's table index before the move (its code moved above) */
						int was = g->full ? old : W[pl][i];
						astc_enc_channel_errs(blk, i, lut[part[i]], pl == 0 ? was : L0[i], pl == 1 ? was : L1[i], ccs,
								      -1, cerr[part[i]]);
						if (!g->full)
							sums[pl][i] = (uint16_t)(sums[pl][i] + step * (int)g->tfac[e]);
						W[pl][i] = (uint8_t)w;
						terr[i] = astc_enc_channel_errs(blk, i, lut[part[i]], L0[i], L1[i], ccs, 1, cerr[part[i]]);
					}
					err = (uint32_t)((int64_t)err + (dir ? delta1 : delta0));
					improved = 1;
					last = pos;
				}
			}
		}
		int base = 0;
		KILN_ROLLED for (int p = 0; p < parts && !settled; p++) {
			int nv = astc_cem_values(s->cem[p]);
			KILN_ROLLED for (int v = base; v < base + nv; v++, pos++) {
				if (pass > 0 && !improved && pos > last) {
					settled = 1;
					break;
				}
				uint8_t old = s->colors[v];
				for (int dir = 0; dir < 2; dir++) {
					uint8_t nc = ctx->cstep[s->crange][old][dir];
					if (nc == old)
						continue;
					s->colors[v] = nc;
					/* only the channels whose decoded endpoints move change: their
					 * errors decoded texel by texel (cheaper than new tables unless
					 * the partition has over 65 texels) against the tables' */
					/* the move's error in those channels (now) against their error
					 * before it (was): the first only grows texel by texel, so the move
					 * is dropped as soon as it reaches the second */
					/* the decoded endpoints packed (a register; as arrays indexed
					 * by partition they were local memory: H100 medium 4x4 +6%,
					 * docs/PERFORMANCE.md, session 30), the channels whose
					 * values move */
					int ch = 0;
					int32_t was = 0, now = 0, nerr[4];
					uint64_t ne = astc_enc_decoded_packed(s, p), moved = ne ^ cur[p];
					for (int k = 0; k < 4; k++) {
						if (astc_enc_packed_value(moved, 0, k) | astc_enc_packed_value(moved, 1, k)) {
							ch |= 1 << k;
							was += cerr[p][k];
						}
					}
					/* the changed channels one after another, the channel a value
					 * and not a branch (astc_enc_polish_full16) */
					for (int rem = ch; rem && now < was; rem &= rem - 1) {
						int k = rem & 1 ? 0 : (rem & 2 ? 1 : (rem & 4 ? 2 : 3));
						const uint8_t *wk = k == ccs ? W1 : W[0];
						int e0 = astc_enc_packed_value(ne, 0, k), e1 = astc_enc_packed_value(ne, 1, k);
						int base = astc_enc_base(e0, blk->srgb), slope = astc_enc_slope(e0, e1, blk->srgb);
						nerr[k] = 0;
						KILN_ROLLED for (int i = 0; i < n && now < was; i++) {
							if (parts > 1 && part[i] != p)
								continue;
							int d = astc_enc_decode_at(base, slope, wk[i], blk->srgb) - (int)blk->px[i][k];
							nerr[k] += d * d;
							now += d * d;
						}
					}
					int64_t delta = (int64_t)now - was;
					if (delta < 0) {
						cur[p] = ne;
						for (int k = 0; k < 4; k++) {
							if ((ch >> k) & 1) {
								astc_enc_lut_channel(astc_enc_packed_value(ne, 0, k), astc_enc_packed_value(ne, 1, k),
										     blk->srgb, g->full, wr, lut[p][k]);
								cerr[p][k] = nerr[k];
							}
						}
						KILN_ROLLED for (int i = 0; i < n; i++)
							if (part[i] == p)
								terr[i] = astc_enc_texel_err(blk, i, lut[p], L0[i], L1[i], ccs);
						err = (uint32_t)((int64_t)err + delta);
						improved = 1;
						last = pos;
						break;
					}
					s->colors[v] = old;
				}
			}
			base += nv;
		}
		if (!improved)
			break;
	}
	return err;
}

/* Adds seed id with score sc to the shortlist ids/scores (*have entries, at most cap),
 * sorted by score; ties keep the earlier seed first, and a seed past the last place is
 * dropped. */
KILN_HD void astc_enc_shortlist_add(int *ids, uint32_t *scores, int *have, int cap, int id, uint32_t sc)
{
	int at = *have;
	while (at > 0 && scores[at - 1] > sc)
		at--;
	if (at >= cap)
		return;
	int last = *have < cap ? *have : cap - 1;
	KILN_ROLLED for (int j = last; j > at; j--) {
		ids[j] = ids[j - 1];
		scores[j] = scores[j - 1];
	}
	ids[at] = id;
	scores[at] = sc;
	if (*have < cap)
		(*have)++;
}

/* Stable selection: moves the first of the lowest scores in places j .. have - 1 to place
 * j (the others keep their order) and returns its id. */
KILN_HD int astc_enc_select(int *ids, uint32_t *scores, int have, int j)
{
	int bi = j;
	KILN_ROLLED for (int t = j + 1; t < have; t++)
		if (scores[t] < scores[bi])
			bi = t;
	int id = ids[bi];
	uint32_t sc = scores[bi];
	KILN_ROLLED for (int t = bi; t > j; t--) {
		ids[t] = ids[t - 1];
		scores[t] = scores[t - 1];
	}
	ids[j] = id;
	scores[j] = sc;
	return id;
}

/* A 2-means clustering of a block's colours: labels (bit i: texel i in cluster 1), and
 * each texel's weight 0..ASTC_ENC_CLUSTER_LEVELS - 1 as bit planes (weight bit b of texel
 * i in planes[b], bit i), with the weights' sum. */
#define ASTC_ENC_CLUSTER_PLANES 2
#define ASTC_ENC_CLUSTER_LEVELS (1 << ASTC_ENC_CLUSTER_PLANES)
typedef struct astc_enc_clusters {
	uint64_t labels[3];
	uint64_t planes[ASTC_ENC_CLUSTER_PLANES][3];
	int total;
} astc_enc_clusters;

/* How far seed s's pattern is from a 2-means clustering (under either labelling): the
 * weights of the texels it puts in the other cluster. Every bit set is clear past texel
 * n - 1: only the words that hold texels are compared. */
KILN_HD int astc_enc_pattern_mismatch(const astc_enc_ctx *ctx, int seed, const astc_enc_clusters *cl, int n)
{
	int diff = 0;
	KILN_ROLLED for (int k = 0; k < (n + 63) >> 6; k++) {
		uint64_t d = ctx->part2[seed][k] ^ cl->labels[k];
		for (int b = 0; b < ASTC_ENC_CLUSTER_PLANES; b++)
			diff += astc_enc_popcount(d & cl->planes[b][k]) << b;
	}
	return diff < cl->total - diff ? diff : cl->total - diff;
}

/* Two clusters of the block's colours (Lloyd iterations from the two texels farthest
 * along the principal axis). A texel's weight is how much closer its colour is to its own
 * cluster's centre than to the other's (squared distances, from the centres of the last
 * assignment), scaled to 0..ASTC_ENC_CLUSTER_LEVELS - 1 by the block's largest: a seed
 * that moves a texel near the clusters' boundary costs less than one that moves a texel
 * deep inside a cluster. Counted alike (every moved texel 1), the seeds tied often and
 * the shortlist kept the first of them. Weighted (4 levels; 8 and 16 gave a little
 * less), at the same seeds over the Kodak set: medium 4x4 / 6x6 / 8x8 +0.034 / +0.010 /
 * +0.007 dB RGB, fast 4x4 +0.038 (docs/PERFORMANCE.md, ASTC, session 31). */
ASTC_ENC_OUTLINE void astc_enc_two_means(const astc_enc_block *blk, const astc_enc_fit *line, astc_enc_clusters *cl)
{
	int lo = 0, hi = 0;
	KILN_ROLLED for (int i = 1; i < blk->n; i++) {
		if (line->w[i] < line->w[lo])
			lo = i;
		if (line->w[i] > line->w[hi])
			hi = i;
	}
	int c[2][4];
	for (int k = 0; k < 4; k++) {
		c[0][k] = blk->px[lo][k];
		c[1][k] = blk->px[hi][k];
	}
	/* the last assignment's gaps (each texel's distance from the other centre over its
	 * own's) and their largest */
	uint32_t gap[ASTC_MAX_TEXELS], gmax = 0;
	uint64_t *labels = cl->labels;
	const int iterations = 4;
	for (int it = 0; it < iterations; it++) {
		int sum[2][4] = {{0}}, cnt[2] = {0, 0};
		labels[0] = labels[1] = labels[2] = 0;
		KILN_ROLLED for (int i = 0; i < blk->n; i++) {
			int d0 = 0, d1 = 0;
			for (int k = 0; k < 4; k++) {
				int a = blk->px[i][k] - c[0][k], b = blk->px[i][k] - c[1][k];
				d0 += a * a;
				d1 += b * b;
			}
			int l = d1 < d0;
			if (l)
				labels[i >> 6] |= 1ull << (i & 63);
			if (it == iterations - 1) {
				gap[i] = (uint32_t)(l ? d0 - d1 : d1 - d0);
				gmax = gap[i] > gmax ? gap[i] : gmax;
			}
			cnt[l]++;
			for (int k = 0; k < 4; k++)
				sum[l][k] += blk->px[i][k];
		}
		for (int l = 0; l < 2; l++)
			if (cnt[l])
				for (int k = 0; k < 4; k++)
					c[l][k] = (sum[l][k] + cnt[l] / 2) / cnt[l];
	}
	for (int b = 0; b < ASTC_ENC_CLUSTER_PLANES; b++)
		cl->planes[b][0] = cl->planes[b][1] = cl->planes[b][2] = 0;
	cl->total = 0;
	/* (a gap is at most 4 x 255^2: the product fits in 32 bits) */
	KILN_ROLLED for (int i = 0; i < blk->n; i++) {
		uint32_t q = gap[i] * ASTC_ENC_CLUSTER_LEVELS / (gmax + 1);
		cl->total += (int)q;
		for (int b = 0; b < ASTC_ENC_CLUSTER_PLANES; b++)
			cl->planes[b][i >> 6] |= (uint64_t)((q >> b) & 1u) << (i & 63);
	}
}

/* k clusters (k = 3, 4) of the block's colours as k bit sets: Lloyd iterations from the
 * texel lowest on the principal axis and then, one by one, the texel farthest from the
 * centres so far (ties to the lower texel; a texel goes to the lower of equidistant
 * centres). */
ASTC_ENC_OUTLINE void astc_enc_k_means(const astc_enc_block *blk, const astc_enc_fit *line, int k, uint64_t masks[4][3])
{
	int c[4][4], lo = 0;
	KILN_ROLLED for (int i = 1; i < blk->n; i++)
		if (line->w[i] < line->w[lo])
			lo = i;
	for (int ch = 0; ch < 4; ch++)
		c[0][ch] = blk->px[lo][ch];
	KILN_ROLLED for (int j = 1; j < k; j++) {
		int far = 0, fd = -1;
		KILN_ROLLED for (int i = 0; i < blk->n; i++) {
			int md = 1 << 30;
			KILN_ROLLED for (int q = 0; q < j; q++) {
				int d = 0;
				for (int ch = 0; ch < 4; ch++) {
					int a = blk->px[i][ch] - c[q][ch];
					d += a * a;
				}
				md = d < md ? d : md;
			}
			if (md > fd) {
				fd = md;
				far = i;
			}
		}
		for (int ch = 0; ch < 4; ch++)
			c[j][ch] = blk->px[far][ch];
	}
	for (int it = 0; it < 4; it++) {
		int sum[4][4] = {{0}}, cnt[4] = {0, 0, 0, 0};
		for (int q = 0; q < 4; q++)
			masks[q][0] = masks[q][1] = masks[q][2] = 0;
		KILN_ROLLED for (int i = 0; i < blk->n; i++) {
			int l = 0, ld = 1 << 30;
			KILN_ROLLED for (int q = 0; q < k; q++) {
				int d = 0;
				for (int ch = 0; ch < 4; ch++) {
					int a = blk->px[i][ch] - c[q][ch];
					d += a * a;
				}
				if (d < ld) {
					ld = d;
					l = q;
				}
			}
			masks[l][i >> 6] |= 1ull << (i & 63);
			cnt[l]++;
			for (int ch = 0; ch < 4; ch++)
				sum[l][ch] += blk->px[i][ch];
		}
		KILN_ROLLED for (int q = 0; q < k; q++)
			if (cnt[q])
				for (int ch = 0; ch < 4; ch++)
					c[q][ch] = (sum[q][ch] + cnt[q] / 2) / cnt[q];
	}
}

/* Every permutation of 0..3, those that leave 3 in place (the permutations of 0..2) first. */
KILN_HD_CONST uint8_t astc_enc_perms[24][4] = {
	{0, 1, 2, 3}, {0, 2, 1, 3}, {1, 0, 2, 3}, {1, 2, 0, 3}, {2, 0, 1, 3}, {2, 1, 0, 3}, {0, 1, 3, 2}, {0, 2, 3, 1},
	{0, 3, 1, 2}, {0, 3, 2, 1}, {1, 0, 3, 2}, {1, 2, 3, 0}, {1, 3, 0, 2}, {1, 3, 2, 0}, {2, 0, 3, 1}, {2, 1, 3, 0},
	{2, 3, 0, 1}, {2, 3, 1, 0}, {3, 0, 1, 2}, {3, 0, 2, 1}, {3, 1, 0, 2}, {3, 1, 2, 0}, {3, 2, 0, 1}, {3, 2, 1, 0},
};

/* Texels of a k-clustering (clusters of msize texels) outside the partitions of seed s
 * (k = 3, 4) under the best matching of clusters to partitions; where no matching can
 * bring that under `cut` (each cluster in its best partition), a bound at or above `cut`
 * instead (on the CPU: ASTC_ENC_CPU_SHORTCUTS). */
KILN_HD int astc_enc_pattern_mismatch_k(const astc_enc_ctx *ctx, int seed, int k, uint64_t masks[4][3],
					const int *msize, int n, uint32_t cut)
{
	const uint64_t(*pl)[3] = ctx->part34[k - 3][seed];
	const uint8_t *psize = ctx->part34_size[k - 3][seed];
	int words = (n + 63) >> 6, cnt[4][4], l = k - 1;
	/* cluster by cluster a < k - 1: its texels in partition b counted for b < k - 1, the
	 * last column what its size leaves; top: each cluster so far in its best partition,
	 * rest: the texels of the clusters not yet counted. Once even with all of those matched
	 * `cut` texels are left out, no matching comes under cut. */
	int top = 0, rest = n;
	KILN_ROLLED for (int a = 0; a < l; a++) {
		int mx = 0;
		cnt[a][l] = msize[a];
		KILN_ROLLED for (int b = 0; b < l; b++) {
			cnt[a][b] = 0;
			KILN_ROLLED for (int w = 0; w < words; w++) {
				/* word w of partition b's texels */
				uint64_t pm = ((b & 1) ? pl[0][w] : ~pl[0][w]) & ((b & 2) ? pl[1][w] : ~pl[1][w]);
				cnt[a][b] += astc_enc_popcount(masks[a][w] & pm);
			}
			cnt[a][l] -= cnt[a][b];
			mx = cnt[a][b] > mx ? cnt[a][b] : mx;
		}
		top += cnt[a][l] > mx ? cnt[a][l] : mx;
		rest -= msize[a];
		if (ASTC_ENC_CPU_SHORTCUTS && (uint32_t)(n - top - rest) >= cut)
			return n - top - rest;
	}
	/* the clusters and the partitions each cover every texel once: the last row is what
	 * the partitions' sizes leave */
	int mx = 0;
	cnt[l][l] = msize[l];
	KILN_ROLLED for (int b = 0; b < l; b++) {
		cnt[l][b] = psize[b];
		KILN_ROLLED for (int a = 0; a < l; a++)
			cnt[l][b] -= cnt[a][b];
		cnt[l][l] -= cnt[l][b];
		mx = cnt[l][b] > mx ? cnt[l][b] : mx;
	}
	top += cnt[l][l] > mx ? cnt[l][l] : mx;
	if (ASTC_ENC_CPU_SHORTCUTS && (uint32_t)(n - top) >= cut)
		return n - top;
	/* the best assignment over every permutation (6 or 24) */
	int best = 0;
	KILN_ROLLED for (int q = 0; q < (k == 4 ? 24 : 6); q++) {
		const uint8_t *to = astc_enc_perms[q];
		int sum = cnt[0][to[0]] + cnt[1][to[1]] + cnt[2][to[2]] + (k == 4 ? cnt[3][to[3]] : 0);
		best = sum > best ? sum : best;
	}
	return n - best;
}

/* What the ranking of one fit's modes (astc_enc_estimate) knows of each endpoint kind
 * before it visits the modes: the colour ranges its values can take, read by the bits a
 * mode's weights leave (crange[kind][left[kind] - weight_bits], a row of the context's
 * table: -1 where the values do not fit or the kind does not apply), the expected
 * endpoint quantisation error of each colour range, and the error the kind adds. */
typedef struct astc_enc_kinds {
	const int8_t *crange[ASTC_ENC_KINDS];
	int left[ASTC_ENC_KINDS];
	float cterm_of[ASTC_RANGES];
	float kterm[ASTC_ENC_KINDS];
} astc_enc_kinds;

/* Whether a mode of colour terms cterm (of the kinds ok) can enter the full list (last
 * error thr) at an error e before them: astc_enc_mode_cterms's test. */
KILN_HD int astc_enc_mode_live(const astc_enc_kinds *ks, const float *cterm, const int *ok, float e, float thr)
{
	int live = 0;
	for (int kind = 0; kind < ASTC_ENC_KINDS; kind++)
		live = live || (ok[kind] && e + cterm[kind] + ks->kterm[kind] < thr);
	return live;
}

/* The colour terms of a mode with weight_bits per endpoint kind (ok[kind] 0: its values do
 * not fit); returns whether the mode can enter the candidate list at a weight error of
 * dec: the list is not full, or some kind's error without the weight quantisation term
 * (>= 0; float addition is monotonic) is below thr, the list's last error. More weight
 * bits leave the colour values fewer, so a colour range no finer (astc_color_range takes
 * the finest that fits) and a colour term no smaller (cterm_of falls with the range):
 * where a mode cannot enter, no mode with more weight bits can. */
KILN_HD int astc_enc_mode_cterms(const astc_enc_kinds *ks, int weight_bits, float dec, int full, float thr,
				 float *cterm, int *ok)
{
	int live = !full;
	for (int kind = 0; kind < ASTC_ENC_KINDS; kind++) {
		int cr = ks->crange[kind][ks->left[kind] - weight_bits];
		ok[kind] = cr >= 0;
		if (!ok[kind])
			continue;
		cterm[kind] = ks->cterm_of[cr];
		live = live || dec + cterm[kind] + ks->kterm[kind] < thr;
	}
	return live;
}

/* The bound below which a candidate of grid g enters the full list of the ranking (errs,
 * cgrid, count entries): the last entry's error, or the least float above it where that
 * entry is of a grid after g (the full grid, ranked first), which a tie leaves behind. */
KILN_HD float astc_enc_entry_cut(const float *errs, const int *cgrid, int count, int g)
{
	return cgrid[count - 1] > g ? astc_enc_float_up(errs[count - 1]) : errs[count - 1];
}

/* Ranks the block modes of one plane count for a fit without encoding them: per weight
 * grid, the error of the ideal (unquantised) weights after decimation to the grid, plus
 * per mode the error of quantising those grid weights to its range and an expected
 * error of quantising the endpoints to its colour range; all in units of the exact error
 * (squared 8-bit differences). ep are the fit's line endpoints; ef says how many
 * candidates, which grids and how many correction steps. Fills cand[] with the ef->cand
 * best (mode, kind) candidates (ties to the earlier grid, then the lower mode and kind)
 * and returns how many it found. */
ASTC_ENC_OUTLINE int astc_enc_estimate(const astc_enc_ctx *ctx, const astc_enc_block *blk, const astc_enc_fit *fit,
				       int ep[4][2][4], int dual, const astc_enc_effort *ef, int *cand, float *errs,
				       astc_enc_grid_cache *gc)
{
	int count = ef->cand;
	int n = blk->n, parts = fit->parts, ccs = dual ? fit->ccs : 4;
	/* squared length of each partition's line per plane, in 0..255 units */
	float len[2][4];
	KILN_ROLLED for (int p = 0; p < parts; p++) {
		len[0][p] = 0.0f;
		len[1][p] = 0.0f;
		for (int k = 0; k < 4; k++) {
			float d = (float)(ep[p][1][k] - ep[p][0][k]);
			if (k == ccs)
				len[1][p] += d * d;
			else
				len[0][p] += d * d;
		}
	}
	float lmean[2] = {0.0f, 0.0f};
	KILN_ROLLED for (int i = 0; i < n; i++) {
		lmean[0] += len[0][fit->part[i]];
		lmean[1] += len[1][fit->part[i]];
	}
	lmean[0] = lmean[0] / (float)n / 4096.0f;
	lmean[1] = lmean[1] / (float)n / 4096.0f;
	int channels = 0;
	KILN_ROLLED for (int p = 0; p < parts; p++)
		channels += fit->alpha[p] || ccs == 3 ? 4 : 3;
	channels = channels * n / parts;
	/* base+scale endpoints lie on a ray from black: the distance of the darker endpoint
	 * from the brighter one's ray, over a third of the texels on average */
	float scale_err = 0.0f;
	KILN_ROLLED for (int p = 0; p < parts; p++) {
		int hi = ep[p][1][0] + ep[p][1][1] + ep[p][1][2] >= ep[p][0][0] + ep[p][0][1] + ep[p][0][2] ? 1 : 0;
		float dot = 0.0f, hh = 0.0f, ll = 0.0f;
		for (int k = 0; k < 3; k++) {
			float a = (float)ep[p][hi][k], b = (float)ep[p][1 - hi][k];
			dot += a * b;
			hh += a * a;
			ll += b * b;
		}
		float off = hh > 0.0f ? ll - dot * dot / hh : ll;
		scale_err += (off > 0.0f ? off : 0.0f) * (float)fit->count[p] / 3.0f;
	}

	int have = 0, cgrid[ASTC_ENC_MAX_CAND]; /* the grid of each entry */
	/* the CEMs of each endpoint kind do not depend on the mode */
	astc_symbolic tmp;
	tmp.partitions = (uint8_t)parts;
	tmp.mode.dual = (uint8_t)dual;
	astc_enc_kinds ks;
	for (int kind = 0; kind < ASTC_ENC_KINDS; kind++) {
		int config, values = astc_enc_kind_cems(&tmp, fit, ccs, kind, &config);
		ks.crange[kind] = ctx->crange[values ? values / 2 - 1 : ASTC_MAX_VALUES / 2];
		ks.left[kind] = ASTC_ENC_CRANGE_PAD + 128 - config;
		ks.kterm[kind] = kind == 1 ? scale_err : (kind == 2 ? (float)fit->gray_err : 0.0f);
	}
	KILN_ROLLED for (int r = 0; r < ASTC_RANGES; r++)
		ks.cterm_of[r] = (float)channels * ctx->color_step[r] * ctx->color_step[r] / 18.0f * ((float)ef->est_cw / 16.0f);
	/* The full grid (if any) is ranked first: it has no decimation term and its weights
	 * are the texels' own, so its modes are cheap to rank, and at 4x4 one of them heads the
	 * final list in 9 of 10 fits (kodim03, fast), which lets the tests below drop most
	 * other grids after part of their decimation term instead of ranking their modes.
	 * The list stays the one of the grid order: an entry goes after those of equal error
	 * from earlier grids (lower cgrid) or of its own grid (its earlier modes), before those
	 * of later grids, and every test against the list's last error goes through
	 * astc_enc_entry_cut, which admits a tie where the last entry ranks after the grid. */
	KILN_ROLLED for (int gi = -1; gi < ctx->grid_count; gi++) {
		int g = gi < 0 ? ctx->full_grid : gi;
		if (g < 0 || (gi >= 0 && g == ctx->full_grid))
			continue;
		int first = ctx->grid_first[2 * g + dual], end = ctx->grid_first[2 * g + dual + 1];
		if (first == end)
			continue;
		const astc_enc_grid *gr = &ctx->grids[g];
		int ng = gr->w * gr->h;
		int share = dual ? ef->dual_share : ef->grid_share;
		if ((share && ng * share * parts < n) || (!gr->full && parts == 1 && !dual && ef->full_only))
			continue;
		/* once the list is full, a grid none of whose modes could enter it even with no
		 * weight error (the decimation and quantisation terms are >= 0, and float
		 * addition is monotonic: the `live` test below with dec = 0), that is whose mode
		 * of fewest weight bits could not, is not fitted */
		float cterm[ASTC_ENC_KINDS];
		int ok[ASTC_ENC_KINDS];
		if (have == count &&
		    !astc_enc_mode_cterms(&ks, ctx->grid_wb_min[first], 0.0f, 1, astc_enc_entry_cut(errs, cgrid, count, g), cterm, ok))
			continue;
		/* the decimation term only grows texel by texel and plane by plane: once the list
		 * is full, where it alone leaves the grid's mode of fewest weight bits out at
		 * each quarter of a plane's texels (the test above at dec), the grid
		 * is dropped (its modes would not enter: the mode loop below stops at its first)
		 * before the rest of its weights are fitted (ASTC_ENC_CPU_SHORTCUTS) */
		float ideal[2][ASTC_MAX_WEIGHTS], dec = 0.0f;
		uint8_t near[2][ASTC_MAX_WEIGHTS]; /* the ideal weights rounded, for every mode */
		int dropped = 0;
		KILN_ROLLED for (int pl = 0; pl <= dual && !dropped; pl++) {
			const float *tw = pl ? fit->w1 : fit->w;
			astc_enc_grid_from_texels(gr, n, tw, ideal[pl], ef->est_steps);
			if (gr->full)
				continue;
			KILN_ROLLED for (int i0 = 0; i0 < n && !dropped; i0 += (n + 3) / 4) {
				int i1 = i0 + (n + 3) / 4 < n ? i0 + (n + 3) / 4 : n;
				KILN_ROLLED for (int i = i0; i < i1; i++) {
					float d = tw[i] * 64.0f - astc_enc_infill16(gr, i, ideal[pl]) / 16.0f;
					dec += d * d * len[pl][fit->part[i]] / 4096.0f;
				}
				dropped = ASTC_ENC_CPU_SHORTCUTS && have == count &&
					  !astc_enc_mode_live(&ks, cterm, ok, dec, astc_enc_entry_cut(errs, cgrid, count, g));
			}
		}
		if (dropped)
			continue;
		/* (rounded only for the grids that go on to their modes: most are dropped above) */
		KILN_ROLLED for (int pl = 0; pl <= dual; pl++)
			KILN_ROLLED for (int j = 0; j < ng; j++)
				near[pl][j] = (uint8_t)astc_enc_round64(ideal[pl][j]);
		int inserted = 0;
		KILN_ROLLED for (int t = first; t < end; t++) {
			int mi = ctx->grid_modes[t];
			const astc_enc_mode *m = &ctx->modes[mi];
			/* a mode that cannot enter the full list is dropped before its weight
			 * quantisation term is computed, and with it the rest of the grid's where
			 * their mode of fewest weight bits cannot either (the list's last error only
			 * falls) */
			int full = have == count;
			float thr = full ? astc_enc_entry_cut(errs, cgrid, count, g) : 0.0f;
			if (!astc_enc_mode_cterms(&ks, m->weight_bits, dec, full, thr, cterm, ok)) {
				if (!astc_enc_mode_cterms(&ks, ctx->grid_wb_min[t], dec, full, thr, cterm, ok))
					break;
				continue;
			}
			float e = dec;
			KILN_ROLLED for (int pl = 0; pl <= dual; pl++) {
				float q = 0.0f;
				if (gr->full) {
					/* a full grid's den is 16 at every point (each texel its own
					 * point at factor 16): the sum of d * d * 16 over 16 is the sum of
					 * d * d bit for bit (scaling by a power of 2 is exact, and so
					 * commutes with each rounded addition; no value here is near
					 * overflow) */
					KILN_ROLLED for (int j = 0; j < ng; j++) {
						float d = ideal[pl][j] - ctx->wrecon[m->wrange][near[pl][j]];
						q += d * d;
					}
				} else {
					KILN_ROLLED for (int j = 0; j < ng; j++) {
						float d = ideal[pl][j] - ctx->wrecon[m->wrange][near[pl][j]];
						q += d * d * gr->den[j];
					}
					q = q / 16.0f;
				}
				e += q * lmean[pl] * ((float)ef->est_qw / 16.0f);
			}
			for (int kind = 0; kind < ASTC_ENC_KINDS; kind++) {
				/* a luminance candidate costs at least the block's distance from gray:
				 * skipped once that cannot enter the list */
				if (kind == 2 && have == count && astc_enc_entry_cut(errs, cgrid, count, g) <= (float)fit->gray_err)
					continue;
				if (!ok[kind])
					continue;
				float ek = e + cterm[kind] + ks.kterm[kind];
				/* insertion into the sorted list; ties keep the candidate of the earlier grid,
				 * or the earlier mode of a grid, first */
				int at = have;
				while (at > 0 && (errs[at - 1] > ek || (errs[at - 1] == ek && cgrid[at - 1] > g)))
					at--;
				if (at >= count)
					continue;
				int last = have < count ? have : count - 1;
				KILN_ROLLED for (int j = last; j > at; j--) {
					cand[j] = cand[j - 1];
					errs[j] = errs[j - 1];
					cgrid[j] = cgrid[j - 1];
				}
				cand[at] = ASTC_ENC_KINDS * mi + kind;
				errs[at] = ek;
				cgrid[at] = g;
				if (have < count)
					have++;
				inserted = 1;
			}
		}
		/* (a full grid's weights are the texels' own: nothing to keep; nothing kept on the
		 * GPU below ASTC_ENC_GPU_CACHE_TEXELS: ASTC_ENC_CPU_SHORTCUTS) */
		if ((!ASTC_ENC_CPU_SHORTCUTS && n < ASTC_ENC_GPU_CACHE_TEXELS) || !inserted || gr->full)
			continue;
		/* each plane's weights go to an empty slot, or replace those of the slot whose grid
		 * stands lowest in the list where that is below this grid's first place */
		int mine = -1;
		KILN_ROLLED for (int pl = 0; pl <= dual; pl++) {
			int worst = -1, wpos = -1;
			KILN_ROLLED for (int c = 0; c < ASTC_ENC_GRID_CACHE && worst < 0; c++)
				if (gc->key[c] < 0)
					worst = c;
			if (worst < 0) {
				if (mine < 0) {
					mine = have;
					KILN_ROLLED for (int t = 0; t < have && mine == have; t++)
						if (cgrid[t] == g)
							mine = t;
				}
				KILN_ROLLED for (int c = 0; c < ASTC_ENC_GRID_CACHE; c++) {
					int pos = have;
					KILN_ROLLED for (int t = 0; t < have && pos >= have; t++)
						if (2 * cgrid[t] == (gc->key[c] & ~1))
							pos = t;
					if (pos > wpos) {
						wpos = pos;
						worst = c;
					}
				}
				if (wpos <= mine)
					break;
			}
			gc->key[worst] = 2 * g + pl;
			gc->steps[worst] = ef->est_steps;
			KILN_ROLLED for (int j = 0; j < ng; j++)
				gc->v[worst][j] = ideal[pl][j];
		}
	}
	return have;
}

/* Whether a fit of several partitions, ranked (best ranked error est), cannot come near
 * the best error so far (pred_w, pred_cut). The residual off the fit's lines bounds the
 * error of its encodings from below (any encoding puts each partition's texels on a
 * line); the ranking's error, at pred_w / 16, stands for the rest (which it overestimated
 * about twice before its terms were reweighed: astc_enc_effort_of). */
KILN_HD int astc_enc_hopeless(const astc_enc_effort *ef, const astc_enc_fit *fit, float est, uint32_t best_err)
{
	if (!ef->pred_cut || fit->parts < 2)
		return 0;
	float floor = 0.0f;
	for (int k = 0; k < 4; k++)
		floor += k == fit->ccs ? 0.0f : (float)fit->resid[k];
	return floor + est * (float)ef->pred_w / 16.0f >= (float)best_err * (float)ef->pred_cut / 16.0f;
}

/* Every block mode of the fit's plane count with a single fit (no refinement), then the
 * best few refined and polished: keeps *best / *best_err when nothing beats them. */
ASTC_ENC_OUTLINE void astc_enc_search(const astc_enc_ctx *ctx, const astc_enc_block *blk,
				      const astc_enc_fit *fit, int seed, const astc_enc_effort *ef, astc_symbolic *best,
				      uint32_t *best_err)
{
	int keep = ef->keep;
	int dual = fit->ccs < 4;
	int list[ASTC_ENC_SHORTLIST], kinds[ASTC_ENC_SHORTLIST], have = 0;
	uint32_t errs[ASTC_ENC_SHORTLIST];
	/* with one candidate kept and no refinement rounds, encoding it again would give the
	 * same encoding and error: it is kept from the first encoding instead, in the buffer
	 * it was encoded into (cand and kept trade buffers) */
	astc_symbolic bufs[2];
	astc_symbolic *cand = &bufs[0], *kept = &bufs[1];
	int reuse = keep == 1 && ef->iterations == 0;
	/* with refinement rounds, each entry's first iteration is kept (firsts[slot[t]]) and its
	 * refinement goes on from there; `spare`: the slot no entry holds */
	astc_enc_first firsts[ASTC_ENC_SHORTLIST + 1];
	int slot[ASTC_ENC_SHORTLIST], spare = 0, resume = ef->iterations > 0;
	/* Where the ranking's encodings are kept (reused, or resumed), one that comes closer
	 * than *best is not copied there: an encoding that improves *best goes to the head of
	 * the list (its error is below every entry's) and stays there until a closer one
	 * replaces it, and the head's final encoding (polished, refined: never farther) is
	 * copied once below. kept_best: the head is the best encoding so far. Copies of an
	 * astc_symbolic are a GPU thread's local memory. */
	int kept_best = 0;
	int modes[ASTC_ENC_MAX_CAND];
	float merrs[ASTC_ENC_MAX_CAND];
	/* the ranking's error only adds to the residual in astc_enc_hopeless (it is a sum of
	 * non-negative terms): where the residual alone is hopeless, the ranking is not made */
	if (astc_enc_hopeless(ef, fit, 0.0f, *best_err))
		return;
	int line_ep[4][2][4];
	astc_enc_line_endpoints(blk, fit, line_ep);
	astc_enc_grid_memo memo;
	memo.grid = -1;
	astc_enc_grid_cache gc;
	KILN_ROLLED for (int c = 0; c < ASTC_ENC_GRID_CACHE; c++)
		gc.key[c] = -1;
	int nmodes = astc_enc_estimate(ctx, blk, fit, line_ep, dual, ef, modes, merrs, &gc);
	if (astc_enc_hopeless(ef, fit, nmodes > 0 ? merrs[0] : 0.0f, *best_err))
		return;
	KILN_ROLLED for (int c = 0; c < nmodes; c++) {
		int m = modes[c] / ASTC_ENC_KINDS;
		uint32_t limit = have == keep ? errs[have - 1] : UINT32_MAX;
		int kind = modes[c] % ASTC_ENC_KINDS;
		/* with refinement rounds the first iteration is made in the free slot itself */
		astc_symbolic *into = resume ? &firsts[spare].s : cand;
		uint32_t e = astc_enc_try_mode(ctx, blk, fit, line_ep, &ctx->modes[m], seed, 0, ef->grid_steps, limit, kind,
					       into, &memo, &gc, resume ? &firsts[spare] : 0);
		int improved = e < *best_err;
		if (improved) {
			*best_err = e;
			if (reuse || resume)
				kept_best = 1;
			else
				astc_symbolic_copy(best, into);
		}
		int at = have;
		while (at > 0 && errs[at - 1] > e)
			at--;
		if (at >= keep)
			continue;
		int last = have < keep ? have : keep - 1, freed = have < keep ? have + 1 : slot[keep - 1];
		KILN_ROLLED for (int j = last; j > at; j--) {
			list[j] = list[j - 1];
			kinds[j] = kinds[j - 1];
			errs[j] = errs[j - 1];
			slot[j] = slot[j - 1];
		}
		list[at] = m;
		kinds[at] = kind;
		errs[at] = e;
		slot[at] = spare;
		spare = freed;
		if (have < keep)
			have++;
		/* an entry is an encoding that ran to its end (its error is below the limit); in a
		 * list of one, every encoding that improves *best enters it */
		if (reuse) {
			astc_symbolic *t = kept;
			kept = cand;
			cand = t;
		}
	}
	KILN_ROLLED for (int t = 0; t < have; t++) {
		const astc_enc_mode *md = &ctx->modes[list[t]];
		uint32_t e;
		/* the head's encoding is the best so far where the ranking found it so (the copy
		 * it left to here; its mode encoded there, so it encodes here: e is below
		 * UINT32_MAX) */
		int better = t == 0 && kept_best;
		if (reuse) {
			e = errs[t];
			cand = kept;
		} else {
			e = astc_enc_try_mode(ctx, blk, fit, line_ep, md, seed, ef->iterations, ef->grid_steps, UINT32_MAX,
					      kinds[t], cand, &memo, &gc, resume ? &firsts[slot[t]] : 0);
		}
		if (e == UINT32_MAX)
			continue;
		if (!ef->polish_gate || (uint64_t)e * 16 < (uint64_t)*best_err * ef->polish_gate)
			e = astc_enc_polish(ctx, blk, &ctx->grids[md->grid], fit->part, cand, e, ef->passes);
		if (e < *best_err) {
			*best_err = e;
			better = 1;
		}
		if (better)
			astc_symbolic_copy(best, cand);
	}
}

/* The residual off the lines of a seed's partitioning (its pattern's planes, as
 * astc_enc_pattern_part reads them, into f->parts partitions), which ranks the seeds of a
 * partition count: from the texels' moments at moment_score (only at or above cut where
 * it reaches it), else from line fits (f's partitions then set from the pattern). */
KILN_HD uint32_t astc_enc_partitioning_score(const astc_enc_effort *ef, const astc_enc_block *blk, astc_enc_fit *f,
					     const uint64_t *plane0, const uint64_t *plane1, uint32_t cut)
{
	if (ef->moment_score)
		return astc_enc_moment_resid(blk, f->parts, plane0, plane1, cut);
	astc_enc_set_pattern(f, blk->n, plane0, plane1);
	astc_enc_line_fit(blk, f, 0);
	return f->resid[0] + f->resid[1] + f->resid[2] + f->resid[3];
}

/* The score of a seed's partitioning (its pattern's planes into f->parts partitions;
 * astc_enc_partitioning_score) of which astc_enc_select picks the `full` lowest, the seeds
 * scored in order; low holds the *nlow (at most full) lowest scores before it, sorted. A
 * score at or above the full-th of those is not picked, whatever it is exactly (those
 * seeds come first at equal scores), and the score is left partial there, at or above it:
 * it keeps the seed out as the whole would, and those scored after it are picked as they
 * would be (below the partial score it ranks as it would; at or above it, they are out,
 * behind the same `full`). */
KILN_HD uint32_t astc_enc_seed_score(const astc_enc_effort *ef, const astc_enc_block *blk, astc_enc_fit *f,
				     const uint64_t *plane0, const uint64_t *plane1, int full, uint32_t *low, int *nlow)
{
	int use = full > 0 && full <= ASTC_ENC_MAX_CUT;
	uint32_t sc = astc_enc_partitioning_score(ef, blk, f, plane0, plane1,
						  use && *nlow == full ? low[full - 1] : UINT32_MAX);
	if (use && (*nlow < full || sc < low[full - 1])) {
		int at = *nlow < full ? (*nlow)++ : full - 1;
		KILN_ROLLED for (; at > 0 && low[at - 1] > sc; at--)
			low[at] = low[at - 1];
		low[at] = sc;
	}
	return sc;
}

/* k partitions (3, 4): the `tries` seeds whose patterns best match a k-means clustering,
 * re-ranked by the residual off a line per partition, the best `full` searched; the
 * fits are made in *scratch. */
ASTC_ENC_OUTLINE void astc_enc_search_parts(const astc_enc_ctx *ctx, const astc_enc_block *blk,
					    const astc_enc_fit *line,
					    int k, int tries, int full, const astc_enc_effort *ef, astc_enc_fit *scratch,
					    astc_symbolic *best, uint32_t *best_err)
{
	int n = blk->n;
	uint64_t masks[4][3];
	astc_enc_k_means(blk, line, k, masks);
	int msize[4];
	KILN_ROLLED for (int a = 0; a < k; a++)
		msize[a] = astc_enc_popcount(masks[a][0]) + astc_enc_popcount(masks[a][1]) + astc_enc_popcount(masks[a][2]);
	int seeds[ASTC_ENC_MAX_TRY_SEEDS], have = 0, nlow = 0;
	uint32_t scores[ASTC_ENC_MAX_TRY_SEEDS], low[ASTC_ENC_MAX_CUT];
	KILN_ROLLED for (int s = 0; s < ASTC_ENC_SEEDS; s++) {
		if (!((ctx->part34_ok[s] >> (k - 3)) & 1))
			continue;
		/* a seed whose bound cannot enter the full shortlist is dropped on the bound */
		uint32_t sc = (uint32_t)astc_enc_pattern_mismatch_k(ctx, s, k, masks, msize, n,
								    have == tries ? scores[tries - 1] : UINT32_MAX);
		astc_enc_shortlist_add(seeds, scores, &have, tries, s, sc);
	}
	astc_enc_fit *f = scratch;
	f->parts = k;
	f->ccs = 4;
	const uint64_t(*pl)[ASTC_ENC_SEEDS][2][3] = &ctx->part34[k - 3];
	KILN_ROLLED for (int t = 0; t < have; t++)
		scores[t] = astc_enc_seed_score(ef, blk, f, (*pl)[seeds[t]][0], (*pl)[seeds[t]][1], full, low, &nlow);
	KILN_ROLLED for (int j = 0; j < full && j < have && *best_err > 0; j++) {
		int sd = astc_enc_select(seeds, scores, have, j);
		astc_enc_set_pattern(f, n, (*pl)[sd][0], (*pl)[sd][1]);
		astc_enc_fit_lines(blk, f);
		astc_enc_search(ctx, blk, f, sd, ef, best, best_err);
	}
}

/* ---- one partition, one plane, the full grid alone, at 4x4 ---------------------------- */

/* Where the effort ranks the full grid alone (full_only), the first stage at 4x4 is
 * astc_enc_search over the full grid's modes: astc_enc_search_full16 below is that search
 * (with one candidate kept and no refinement round, fast's form) written for 16 texels,
 * the same arithmetic in the same order, so the same encoding and error
 * (tests/unit/test_astc.c compares the two on every block of Kodak crops). Written for
 * the case, a GPU thread keeps the block, its weights and its per-texel errors in
 * registers (loops of a fixed count over texels packed in 32-bit words) instead of the
 * local memory the general search indexes, and runs no grid but the full one; the
 * decoded values come from each channel's base and slope (astc_enc_decode_at) instead of
 * tables. Early exits that only cut work (eval's limit, the polish's colour moves) are
 * left out: a full sum gives the same decisions. */

/* channel k of a texel packed as R | G << 8 | B << 16 | A << 24 */
KILN_HD int astc_enc_ch16(uint32_t t, int k)
{
	return (int)((t >> (8 * k)) & 255u);
}

/* A texel's squared error at weight w between endpoints of bases b and slopes sl (the
 * alpha channel only where `alpha`: astc_enc_eval). */
KILN_HD uint32_t astc_enc_err16(uint32_t t, const int *b, const int *sl, int w, int srgb, int alpha)
{
	int d0 = astc_enc_decode_at(b[0], sl[0], w, srgb) - astc_enc_ch16(t, 0);
	int d1 = astc_enc_decode_at(b[1], sl[1], w, srgb) - astc_enc_ch16(t, 1);
	int d2 = astc_enc_decode_at(b[2], sl[2], w, srgb) - astc_enc_ch16(t, 2);
	int d3 = alpha ? astc_enc_decode_at(b[3], sl[3], w, srgb) - astc_enc_ch16(t, 3) : 0;
	return (uint32_t)(d0 * d0 + d1 * d1 + d2 * d2 + d3 * d3);
}

/* The bases and slopes of partition 0's decoded endpoints (astc_enc_base, astc_enc_slope);
 * returns them decoded in e. */
KILN_HD void astc_enc_ramp16(const astc_symbolic *s, int srgb, int e[2][4], int *b, int *sl)
{
	astc_enc_decoded_endpoints(s, 0, e[0], e[1]);
	for (int k = 0; k < 4; k++) {
		b[k] = astc_enc_base(e[0][k], srgb);
		sl[k] = astc_enc_slope(e[0][k], e[1][k], srgb);
	}
}

/* astc_enc_refit of one partition with one plane: endpoints ep by least squares against
 * the texel weights W (kept where they do not determine a line). */
KILN_HD void astc_enc_refit16(const uint32_t *px, const int *W, const astc_enc_fit *fit, int ep[2][4])
{
	int32_t s1 = 0, c2 = 0, pw[4] = {0, 0, 0, 0};
	for (int i = 0; i < ASTC_ENC_N16; i++) {
		int32_t w = W[i];
		s1 += w;
		c2 += w * w;
		pw[0] += w * astc_enc_ch16(px[i], 0);
		pw[1] += w * astc_enc_ch16(px[i], 1);
		pw[2] += w * astc_enc_ch16(px[i], 2);
		pw[3] += w * astc_enc_ch16(px[i], 3);
	}
	int e0[4], e1[4];
	if (astc_enc_lsq(fit->count[0], s1, c2, fit->sum[0], pw, 0, 4, e0, e1))
		for (int k = 0; k < 4; k++) {
			ep[0][k] = e0[k];
			ep[1][k] = e1[k];
		}
}

/* astc_enc_try_mode without refinement: mode m of the full grid and endpoint kind `kind`
 * from the rounded positions gv and the line's endpoints line_ep; fills s, returns its
 * error (UINT32_MAX where the kind's values do not fit). Inline: out of line, the texels
 * and positions it reads went through local memory (H100, fast 4x4: 2,000 -> 2,060
 * Mpix/s inline). astc_enc_polish_full16 stays out of line: inline as well it was 0.4%
 * slower (and, with the polish's earlier channel loop, gave the GPU other bytes than
 * the CPU: docs/PERFORMANCE.md, session 25). */
KILN_HD uint32_t astc_enc_try_full16(const astc_enc_ctx *ctx, const astc_enc_block *blk, const astc_enc_fit *fit,
				     const uint32_t *px, const int *gv, int line_ep[2][4], const astc_enc_mode *m,
				     int kind, astc_symbolic *s)
{
	int wr = m->wrange;
	s->kind = ASTC_KIND_NORMAL;
	s->partitions = 1;
	s->seed = 0;
	s->ccs = 0;
	s->block_mode = m->mode;
	s->mode.grid_w = m->grid_w;
	s->mode.grid_h = m->grid_h;
	s->mode.dual = 0;
	s->mode.wrange = m->wrange;
	s->mode.weight_bits = m->weight_bits;
	if (!astc_enc_set_cems(ctx, s, fit, 4, kind, m->weight_bits))
		return UINT32_MAX;
	int W[ASTC_ENC_N16], ep[4][2][4];
	for (int i = 0; i < ASTC_ENC_N16; i++) {
		uint8_t c = astc_weight_quant[wr][gv[i]];
		s->weights[i] = c;
		W[i] = astc_weight_unquant[wr][c];
	}
	for (int k = 0; k < 4; k++) {
		ep[0][0][k] = line_ep[0][k];
		ep[0][1][k] = line_ep[1][k];
	}
	astc_enc_refit16(px, W, fit, ep[0]);
	if (astc_enc_quant_endpoints(s, ep))
		for (int i = 0; i < ASTC_ENC_N16; i++) {
			uint8_t c = astc_weight_quant[wr][64 - gv[i]];
			s->weights[i] = c;
			W[i] = astc_weight_unquant[wr][c];
		}
	int e[2][4], b[4], sl[4];
	astc_enc_ramp16(s, blk->srgb, e, b, sl);
	int alpha = !blk->opaque || e[0][3] != 255 || e[1][3] != 255;
	uint32_t err = 0;
	for (int i = 0; i < ASTC_ENC_N16; i++)
		err += astc_enc_err16(px[i], b, sl, W[i], blk->srgb, alpha);
	return err;
}

/* astc_enc_polish on the full grid with one plane and one partition: the weight moves
 * touch one texel each, the colour moves the channels whose decoded endpoints move;
 * `passes` sweeps at most. Returns the new error of s. */
ASTC_ENC_OUTLINE uint32_t astc_enc_polish_full16(const astc_enc_ctx *ctx, const astc_enc_block *blk,
						 const uint32_t *px, astc_symbolic *s, int passes)
{
	int srgb = blk->srgb, wr = s->mode.wrange;
	int W[ASTC_ENC_N16];
	uint32_t terr[ASTC_ENC_N16];
	int32_t cerr[4] = {0, 0, 0, 0};
	int cur[2][4], b[4], sl[4];
	astc_enc_ramp16(s, srgb, cur, b, sl);
	uint32_t err = 0;
	for (int i = 0; i < ASTC_ENC_N16; i++) {
		W[i] = astc_weight_unquant[wr][s->weights[i]];
		uint32_t t = 0;
		for (int k = 0; k < 4; k++) {
			int d = astc_enc_decode_at(b[k], sl[k], W[i], srgb) - astc_enc_ch16(px[i], k);
			cerr[k] += d * d;
			t += (uint32_t)(d * d);
		}
		terr[i] = t;
		err += t;
	}
	int last = -1, settled = 0, nv = astc_cem_values(s->cem[0]);
	KILN_ROLLED for (int pass = 0; pass < passes && err > 0 && !settled; pass++) {
		int improved = 0, pos = 0;
		for (int j = 0; j < ASTC_ENC_N16; j++, pos++) {
			if (pass > 0 && !improved && pos > last) {
				settled = 1;
				break;
			}
			uint8_t old = s->weights[j];
			uint8_t nc0 = ctx->wstep[wr][old][0], nc1 = ctx->wstep[wr][old][1];
			int b0 = astc_weight_unquant[wr][nc0], b1 = astc_weight_unquant[wr][nc1];
			int32_t delta0 = (int32_t)astc_enc_err16(px[j], b, sl, b0, srgb, 1) - (int32_t)terr[j];
			int32_t delta1 = (int32_t)astc_enc_err16(px[j], b, sl, b1, srgb, 1) - (int32_t)terr[j];
			if (delta0 < 0 || delta1 < 0) {
				int dir = delta0 < 0 ? 0 : 1, w = dir ? b1 : b0;
				s->weights[j] = dir ? nc1 : nc0;
				uint32_t t = 0;
				for (int k = 0; k < 4; k++) {
					int d = astc_enc_decode_at(b[k], sl[k], W[j], srgb) - astc_enc_ch16(px[j], k);
					int e = astc_enc_decode_at(b[k], sl[k], w, srgb) - astc_enc_ch16(px[j], k);
					cerr[k] += e * e - d * d;
					t += (uint32_t)(e * e);
				}
				W[j] = w;
				terr[j] = t;
				err = (uint32_t)((int64_t)err + (dir ? delta1 : delta0));
				improved = 1;
				last = pos;
			}
		}
		KILN_ROLLED for (int v = 0; v < nv && !settled; v++, pos++) {
			if (pass > 0 && !improved && pos > last) {
				settled = 1;
				break;
			}
			uint8_t old = s->colors[v];
			KILN_ROLLED for (int dir = 0; dir < 2; dir++) {
				uint8_t nc = ctx->cstep[s->crange][old][dir];
				if (nc == old)
					continue;
				s->colors[v] = nc;
				int ne[2][4], nb[4], nsl[4], ch = 0;
				int32_t was = 0, now = 0, nerr[4] = {0, 0, 0, 0};
				astc_enc_ramp16(s, srgb, ne, nb, nsl);
				for (int k = 0; k < 4; k++) {
					if (ne[0][k] != cur[0][k] || ne[1][k] != cur[1][k]) {
						ch |= 1 << k;
						was += cerr[k];
					}
				}
				/* the changed channels one after another, the channel a value and not a
				 * branch: the threads of a warp, whose blocks change different channels,
				 * run the texels' loop together */
				for (int rem = ch; rem; rem &= rem - 1) {
					int k = rem & 1 ? 0 : (rem & 2 ? 1 : (rem & 4 ? 2 : 3));
					int base = k == 0 ? nb[0] : (k == 1 ? nb[1] : (k == 2 ? nb[2] : nb[3]));
					int slope = k == 0 ? nsl[0] : (k == 1 ? nsl[1] : (k == 2 ? nsl[2] : nsl[3]));
					int32_t e = 0;
					for (int i = 0; i < ASTC_ENC_N16; i++) {
						int d = astc_enc_decode_at(base, slope, W[i], srgb) - astc_enc_ch16(px[i], k);
						e += d * d;
					}
					for (int c = 0; c < 4; c++)
						nerr[c] = c == k ? e : nerr[c];
					now += e;
				}
				int64_t delta = (int64_t)now - was;
				if (delta < 0) {
					for (int k = 0; k < 4; k++) {
						cur[0][k] = ne[0][k];
						cur[1][k] = ne[1][k];
						b[k] = nb[k];
						sl[k] = nsl[k];
						if ((ch >> k) & 1)
							cerr[k] = nerr[k];
					}
					for (int i = 0; i < ASTC_ENC_N16; i++)
						terr[i] = astc_enc_err16(px[i], b, sl, W[i], srgb, 1);
					err = (uint32_t)((int64_t)err + delta);
					improved = 1;
					last = pos;
					break;
				}
				s->colors[v] = old;
			}
		}
		if (!improved)
			break;
	}
	return err;
}

/* Whether a block's first stage is astc_enc_search_full16's case: 16 texels, the full
 * grid alone, one candidate kept and no refinement round. */
KILN_HD int astc_enc_full16_applies(const astc_enc_ctx *ctx, const astc_enc_block *blk, const astc_enc_effort *ef)
{
	return blk->n == ASTC_ENC_N16 && ef->full_only && ctx->full_grid >= 0 && ef->keep == 1 && ef->iterations == 0;
}

/* astc_enc_search for the line of a 4x4 block (fit: one partition, one plane) over the
 * full grid's modes, with one candidate kept and no refinement round (the effort's
 * keep 1, iterations 0): astc_enc_estimate's ranking of that grid alone, each
 * candidate encoded (astc_enc_try_full16), the best polished. Replaces *best and
 * *best_err when it finds a closer encoding. */
ASTC_ENC_OUTLINE void astc_enc_search_full16(const astc_enc_ctx *ctx, const astc_enc_block *blk,
					     const astc_enc_fit *fit, const astc_enc_effort *ef, astc_symbolic *best,
					     uint32_t *best_err)
{
	uint32_t px[ASTC_ENC_N16];
	float ideal[ASTC_ENC_N16]; /* the full grid's weights before quantisation ... */
	int gv[ASTC_ENC_N16];      /* ... and rounded */
	for (int i = 0; i < ASTC_ENC_N16; i++) {
		const uint8_t *x = blk->px[i];
		px[i] = (uint32_t)x[0] | (uint32_t)x[1] << 8 | (uint32_t)x[2] << 16 | (uint32_t)x[3] << 24;
		ideal[i] = fit->w[i] * 64.0f;
		gv[i] = astc_enc_round64(ideal[i]);
	}
	/* the line's endpoints (astc_enc_line_endpoints) */
	int line_ep[2][4], cnt = fit->count[0];
	for (int k = 0; k < 4; k++)
		line_ep[0][k] = line_ep[1][k] = cnt ? (fit->sum[0][k] + cnt / 2) / cnt : 0;
	astc_enc_refit16(px, gv, fit, line_ep);

	/* the ranking (astc_enc_estimate with one grid, one plane, one partition) */
	float len = 0.0f;
	for (int k = 0; k < 4; k++) {
		float d = (float)(line_ep[1][k] - line_ep[0][k]);
		len += d * d;
	}
	float lmean = 0.0f;
	for (int i = 0; i < ASTC_ENC_N16; i++)
		lmean += len;
	lmean = lmean / (float)ASTC_ENC_N16 / 4096.0f;
	int channels = (fit->alpha[0] ? 4 : 3) * ASTC_ENC_N16;
	int hi = line_ep[1][0] + line_ep[1][1] + line_ep[1][2] >= line_ep[0][0] + line_ep[0][1] + line_ep[0][2] ? 1 : 0;
	float dot = 0.0f, hh = 0.0f, ll = 0.0f;
	for (int k = 0; k < 3; k++) {
		float a = (float)line_ep[hi][k], c = (float)line_ep[1 - hi][k];
		dot += a * c;
		hh += a * a;
		ll += c * c;
	}
	float off = hh > 0.0f ? ll - dot * dot / hh : ll;
	float scale_err = 0.0f;
	scale_err += (off > 0.0f ? off : 0.0f) * (float)cnt / 3.0f;
	astc_symbolic tmp;
	tmp.partitions = 1;
	tmp.mode.dual = 0;
	astc_enc_kinds ks;
	for (int kind = 0; kind < ASTC_ENC_KINDS; kind++) {
		int config, values = astc_enc_kind_cems(&tmp, fit, 4, kind, &config);
		ks.crange[kind] = ctx->crange[values ? values / 2 - 1 : ASTC_MAX_VALUES / 2];
		ks.left[kind] = ASTC_ENC_CRANGE_PAD + 128 - config;
		ks.kterm[kind] = kind == 1 ? scale_err : (kind == 2 ? (float)fit->gray_err : 0.0f);
	}
	KILN_ROLLED for (int r = 0; r < ASTC_RANGES; r++)
		ks.cterm_of[r] = (float)channels * ctx->color_step[r] * ctx->color_step[r] / 18.0f * ((float)ef->est_cw / 16.0f);
	int count = ef->cand, have = 0, cand[ASTC_ENC_MAX_CAND];
	float errs[ASTC_ENC_MAX_CAND];
	int g = ctx->full_grid, end = ctx->grid_first[2 * g + 1];
	KILN_ROLLED for (int t = ctx->grid_first[2 * g]; t < end; t++) {
		int mi = ctx->grid_modes[t];
		const astc_enc_mode *m = &ctx->modes[mi];
		int full = have == count;
		float thr = full ? errs[count - 1] : 0.0f, cterm[ASTC_ENC_KINDS];
		int ok[ASTC_ENC_KINDS];
		if (!astc_enc_mode_cterms(&ks, m->weight_bits, 0.0f, full, thr, cterm, ok)) {
			if (!astc_enc_mode_cterms(&ks, ctx->grid_wb_min[t], 0.0f, full, thr, cterm, ok))
				break;
			continue;
		}
		float q = 0.0f;
		for (int j = 0; j < ASTC_ENC_N16; j++) {
			float d = ideal[j] - ctx->wrecon[m->wrange][gv[j]];
			q += d * d;
		}
		float e = 0.0f;
		e += q * lmean * ((float)ef->est_qw / 16.0f);
		KILN_ROLLED for (int kind = 0; kind < ASTC_ENC_KINDS; kind++) {
			if (kind == 2 && have == count && errs[count - 1] <= (float)fit->gray_err)
				continue;
			if (!ok[kind])
				continue;
			float ek = e + cterm[kind] + ks.kterm[kind];
			int at = have;
			while (at > 0 && errs[at - 1] > ek)
				at--;
			if (at >= count)
				continue;
			KILN_ROLLED for (int j = have < count ? have : count - 1; j > at; j--) {
				cand[j] = cand[j - 1];
				errs[j] = errs[j - 1];
			}
			cand[at] = ASTC_ENC_KINDS * mi + kind;
			errs[at] = ek;
			if (have < count)
				have++;
		}
	}

	/* each candidate encoded; the closest (the first of equal errors) kept in the buffer
	 * it was encoded into, then polished (astc_enc_search's form for keep 1) */
	astc_symbolic bufs[2];
	astc_symbolic *enc = &bufs[0], *kept = &bufs[1];
	int kept_any = 0, kept_best = 0;
	uint32_t kerr = UINT32_MAX;
	KILN_ROLLED for (int c = 0; c < have; c++) {
		uint32_t e = astc_enc_try_full16(ctx, blk, fit, px, gv, line_ep, &ctx->modes[cand[c] / ASTC_ENC_KINDS],
						 cand[c] % ASTC_ENC_KINDS, enc);
		int improved = e < *best_err;
		if (improved)
			*best_err = e;
		if (!kept_any || kerr > e) {
			astc_symbolic *t = kept;
			kept = enc;
			enc = t;
			kerr = e;
			kept_any = 1;
			kept_best = improved;
		}
	}
	/* (an encoding of error UINT32_MAX is never the best so far) */
	if (!kept_any || kerr == UINT32_MAX)
		return;
	uint32_t e = kerr;
	if (!ef->polish_gate || (uint64_t)e * 16 < (uint64_t)*best_err * ef->polish_gate)
		e = astc_enc_polish_full16(ctx, blk, px, kept, ef->passes);
	/* one copy: the polish changes the kept encoding only where it lowers its error */
	if (e < *best_err)
		*best_err = e;
	else if (!kept_best)
		return;
	astc_symbolic_copy(best, kept);
}

/* A block's search in stages, each a function of the block and the error so far, so that
 * a GPU can run every block's first stage and then only the blocks that want a later one
 * side by side (astc_cuda.cu) while the CPU runs them one after the other:
 *  - ONE: a void extent for a constant block, else one partition with one plane;
 *  - DUAL: one partition with a second plane;
 *  - PARTS: 2, 3 and 4 partitions.
 * A later stage replaces the block's encoding only with a closer one, as one search over
 * every candidate would. */
enum { ASTC_ENC_STAGE_ONE, ASTC_ENC_STAGE_DUAL, ASTC_ENC_STAGE_PARTS, ASTC_ENC_STAGES };

/* The GPU backend (astc_cuda.cu) runs a batch in windows of ASTC_GPU_WINDOW blocks and
 * lists the blocks that want each later stage in the batch's scratch (kiln_astc_temp_size):
 * 8 bytes a block of the window for each later stage's list and for the sorted copy of
 * one, 24 MiB, and its counters. A batch of 32 Kodak images at 4x4 is 786,432 blocks. */
#define ASTC_GPU_WINDOW (1u << 20)
/* the most items of an effort that splits the PARTS stage (astc_enc_parts_items;
 * tests/unit/test_astc.c checks every preset): a GPU keeps each listed block's key (8
 * bytes, 8 MiB more for the window), an item's index in its low 8 bits */
#define ASTC_ENC_SPLIT_MAX 255
#define ASTC_GPU_QUEUE_BYTES (2048 + (size_t)(ASTC_ENC_STAGES + 1) * ASTC_GPU_WINDOW * 8)

/* The second-plane channels the DUAL stage tries for a block of n texels whose line
 * leaves the residuals resid (astc_enc_fit) and whose error so far is err: none where the
 * largest residual does not pass the residual gates (dual_rgate, dual_rfrac). */
KILN_HD int astc_enc_dual_tries(const astc_enc_effort *ef, int n, const uint32_t *resid, uint32_t err)
{
	uint32_t rmax = 0;
	for (int k = 0; k < 4; k++)
		rmax = resid[k] > rmax ? resid[k] : rmax;
	if ((ef->dual_rgate && rmax <= (uint32_t)(ef->dual_rgate * n)) ||
	    (ef->dual_rfrac && (uint64_t)rmax * ef->dual_rfrac <= err))
		return 0;
	return ef->dual_tries;
}

/* The 2-partition seeds the PARTS stage scores for such a block: none under the error
 * gate (p2_gate) or where the residual of all channels does not pass the residual gates
 * (p2_rgate, p2_rfrac). */
KILN_HD int astc_enc_p2_tries(const astc_enc_effort *ef, int n, const uint32_t *resid, uint32_t err)
{
	uint32_t rsum = resid[0] + resid[1] + resid[2] + resid[3];
	if ((ef->p2_rgate && rsum <= (uint32_t)(ef->p2_rgate * n)) ||
	    (ef->p2_rfrac && (uint64_t)rsum * ef->p2_rfrac <= err) || err <= (uint32_t)(ef->p2_gate * n))
		return 0;
	return ef->p2_tries;
}

/* Whether a later stage can change a block of n texels whose error so far is err and
 * whose line leaves the residuals resid: a stage turned away here would search nothing
 * (its gates as astc_enc_search_stage applies them, a DUAL stage none where every
 * residual is 0), so a GPU lists only blocks with work. */
KILN_HD int astc_enc_stage_wanted(const astc_enc_effort *ef, int stage, int n, uint32_t err, const uint32_t *resid)
{
	if (err == 0)
		return 0;
	if (stage == ASTC_ENC_STAGE_DUAL)
		return err > (uint32_t)(ef->dual_gate * n) && astc_enc_dual_tries(ef, n, resid, err) > 0 &&
		       (resid[0] | resid[1] | resid[2] | resid[3]) != 0;
	return astc_enc_p2_tries(ef, n, resid, err) > 0 ||
	       ((ef->tries3 > 0 || ef->tries4 > 0) && err > (uint32_t)(ef->gate * n));
}

/* astc_enc_block_line of a 4x4 block: astc_enc_line_fit for one partition and one plane
 * written for 16 texels, the same arithmetic in the same order (tests/unit/test_astc.c
 * compares the two), with the texels read once into a GPU thread's registers (as
 * astc_enc_search_full16 does) instead of from local memory at each of the fit's passes. */
ASTC_ENC_OUTLINE void astc_enc_block_line16(const astc_enc_block *blk, astc_enc_fit *fit)
{
	uint32_t px[ASTC_ENC_N16];
	uint32_t g9 = 0;
	int32_t sum[4] = {0, 0, 0, 0};
	int alpha = 0, gray = 1;
	for (int i = 0; i < ASTC_ENC_N16; i++) {
		const uint8_t *x = blk->px[i];
		px[i] = (uint32_t)x[0] | (uint32_t)x[1] << 8 | (uint32_t)x[2] << 16 | (uint32_t)x[3] << 24;
		int r = x[0], g = x[1], b = x[2], a = x[3], rgb = r + g + b;
		int d0 = 3 * r - rgb, d1 = 3 * g - rgb, d2 = 3 * b - rgb;
		g9 += (uint32_t)(d0 * d0 + d1 * d1 + d2 * d2);
		sum[0] += r;
		sum[1] += g;
		sum[2] += b;
		sum[3] += a;
		alpha |= a != 255;
		gray &= r == g && g == b;
		fit->part[i] = 0;
	}
	fit->parts = 1;
	fit->ccs = 4;
	fit->gray_err = (g9 + 4) / 9;
	fit->alpha[0] = (uint8_t)alpha;
	fit->gray[0] = (uint8_t)gray;
	fit->count[0] = ASTC_ENC_N16;
	float mean[4];
	for (int c = 0; c < 4; c++) {
		fit->sum[0][c] = sum[c];
		mean[c] = (float)sum[c] / (float)ASTC_ENC_N16;
	}
	float cov[4][4] = {{0}};
	for (int i = 0; i < ASTC_ENC_N16; i++) {
		float d[4];
		for (int k = 0; k < 4; k++)
			d[k] = (float)astc_enc_ch16(px[i], k) - mean[k];
		astc_enc_cov_add(cov, d);
	}
	float v[4], vv = astc_enc_line_axis(cov, v);
	float tmin = FLT_MAX, tmax = -FLT_MAX, t16[ASTC_ENC_N16];
	uint32_t resid[4] = {0, 0, 0, 0};
	for (int i = 0; i < ASTC_ENC_N16; i++) {
		float d[4], t = 0.0f;
		for (int k = 0; k < 4; k++) {
			d[k] = (float)astc_enc_ch16(px[i], k) - mean[k];
			t += d[k] * v[k];
		}
		t = vv > 0.0f ? t / vv : 0.0f;
		for (int k = 0; k < 4; k++) {
			float r = d[k] - t * v[k];
			resid[k] += (uint32_t)(r * r);
		}
		t16[i] = t;
		tmin = t < tmin ? t : tmin;
		tmax = t > tmax ? t : tmax;
	}
	float span = tmax - tmin;
	for (int i = 0; i < ASTC_ENC_N16; i++)
		fit->w[i] = span > 0.0f ? (t16[i] - tmin) / span : 0.5f;
	for (int k = 0; k < 4; k++)
		fit->resid[k] = resid[k];
}

/* The line of the whole block (every texel in partition 0, one plane): searched at ONE,
 * the start of the later stages. */
KILN_HD void astc_enc_block_line(const astc_enc_block *blk, astc_enc_fit *fit)
{
	if (blk->n == ASTC_ENC_N16) {
		astc_enc_block_line16(blk, fit);
		return;
	}
	fit->parts = 1;
	fit->ccs = 4;
	KILN_ROLLED for (int i = 0; i < blk->n; i++)
		fit->part[i] = 0;
	astc_enc_fit_lines(blk, fit);
}

/* The PARTS stage's searches (items), in order: the effort's p2_full best 2-partition
 * seeds (astc_enc_p2_seeds), the best of them with a second plane (dual2), 3 partitions,
 * 4 partitions; each is gated on the error it starts from (astc_enc_parts_open). */
enum { ASTC_ENC_ITEM_P2, ASTC_ENC_ITEM_DUAL2, ASTC_ENC_ITEM_P3, ASTC_ENC_ITEM_P4 };

KILN_HD int astc_enc_parts_items(const astc_enc_effort *ef)
{
	return (ef->p2_full > 0) + (ef->dual2 != 0) + (ef->tries3 > 0) + (ef->tries4 > 0);
}

/* The kind of item i (ASTC_ENC_ITEM_*). */
KILN_HD int astc_enc_parts_kind(const astc_enc_effort *ef, int i)
{
	if (ef->p2_full > 0 && i-- == 0)
		return ASTC_ENC_ITEM_P2;
	if (ef->dual2 && i-- == 0)
		return ASTC_ENC_ITEM_DUAL2;
	if (ef->tries3 > 0 && i == 0)
		return ASTC_ENC_ITEM_P3;
	return ASTC_ENC_ITEM_P4;
}

/* Whether item i of the PARTS stage passes its gates for a block of n texels whose best
 * encoding so far is best (NULL: one the stage did not make), of error err: the second
 * plane with 2 partitions and 3 partitions above gate per texel, 4 partitions there where
 * 3 won or the error is above p4_mult times that; the 2-partition seeds always (their gates
 * are astc_enc_p2_tries'). A GPU tests a split stage's items here before it loads their
 * blocks. */
KILN_HD int astc_enc_parts_open(const astc_enc_effort *ef, int i, int n, uint32_t err, const astc_symbolic *best)
{
	int kind = astc_enc_parts_kind(ef, i);
	uint32_t gate = (uint32_t)(ef->gate * n);
	if (kind == ASTC_ENC_ITEM_P2)
		return 1;
	if (err <= gate)
		return 0;
	return kind != ASTC_ENC_ITEM_P4 || ef->p4_mult == 0 || err > ef->p4_mult * gate ||
	       (best && best->kind == ASTC_KIND_NORMAL && best->partitions == 3);
}

/* The 2-partition seeds the PARTS stage searches in full for a block whose line is fit and
 * whose error so far is err, best first (at most p2_full; none under the gates of
 * astc_enc_p2_tries): of the seeds whose patterns best match a 2-means clustering
 * (astc_enc_two_means), those whose lines leave the least residual. f: scratch. */
KILN_HD int astc_enc_p2_seeds(const astc_enc_ctx *ctx, const astc_enc_block *blk, const astc_enc_effort *ef,
			      const astc_enc_fit *fit, uint32_t err, astc_enc_fit *f, int *sd)
{
	int n = blk->n, tries = astc_enc_p2_tries(ef, n, fit->resid, err), full = ef->p2_full;
	if (tries <= 0)
		return 0;
	astc_enc_clusters cl;
	astc_enc_two_means(blk, fit, &cl);
	int seeds[ASTC_ENC_MAX_TRY_SEEDS], have = 0, nlow = 0;
	uint32_t scores[ASTC_ENC_MAX_TRY_SEEDS], low[ASTC_ENC_MAX_CUT];
	KILN_ROLLED for (int s = 0; s < ASTC_ENC_SEEDS; s++) {
		if (!ctx->part2_ok[s])
			continue;
		uint32_t sc = (uint32_t)astc_enc_pattern_mismatch(ctx, s, &cl, n);
		astc_enc_shortlist_add(seeds, scores, &have, tries, s, sc);
	}
	f->parts = 2;
	f->ccs = 4;
	KILN_ROLLED for (int t = 0; t < have; t++)
		scores[t] = astc_enc_seed_score(ef, blk, f, ctx->part2[seeds[t]], NULL, full, low, &nlow);
	/* stable selection of the `full` lowest residuals */
	int count = 0;
	KILN_ROLLED for (; count < full && count < have; count++)
		sd[count] = astc_enc_select(seeds, scores, have, count);
	return count;
}

/* The search of one stage for a block that is not constant, whose line (astc_enc_block_line)
 * is fit: replaces *best and *best_err when it finds a closer encoding. At PARTS, item
 * names the one search to run (astc_enc_parts_items), or is -1: all of them in order,
 * each from the best error of those before it. */
ASTC_ENC_OUTLINE void astc_enc_search_stage(const astc_enc_ctx *ctx, const astc_enc_block *blk,
					    const astc_enc_effort *ef, int stage, int item, const astc_enc_fit *fit,
					    astc_symbolic *best, uint32_t *best_err)
{
	int n = blk->n;
	/* one scratch fit for every other partitioning (a fit is most of a GPU thread's
	 * local memory) */
	astc_enc_fit alt;
	if (stage == ASTC_ENC_STAGE_ONE) {
		if (astc_enc_full16_applies(ctx, blk, ef))
			astc_enc_search_full16(ctx, blk, fit, ef, best, best_err);
		else
			astc_enc_search(ctx, blk, fit, 0, ef, best, best_err);
	} else if (stage == ASTC_ENC_STAGE_DUAL) {
		/* a second weight plane for the channel farthest from the line (all that vary
		 * at high) */
		astc_enc_fit *f1 = &alt;
		f1->parts = 1;
		KILN_ROLLED for (int i = 0; i < n; i++)
			f1->part[i] = 0;
		int order[4] = {0, 1, 2, 3};
		for (int a = 1; a < 4; a++)
			KILN_ROLLED for (int b = a; b > 0 && fit->resid[order[b]] > fit->resid[order[b - 1]]; b--) {
				int t = order[b];
				order[b] = order[b - 1];
				order[b - 1] = t;
			}
		int tries = astc_enc_dual_tries(ef, n, fit->resid, *best_err);
		KILN_ROLLED for (int t = 0; t < tries && *best_err > 0; t++) {
			if (fit->resid[order[t]] == 0)
				break;
			f1->ccs = order[t];
			astc_enc_fit_lines(blk, f1);
			astc_enc_search(ctx, blk, f1, 0, ef, best, best_err);
		}
	} else {
		int first = item < 0 ? 0 : item, end = item < 0 ? astc_enc_parts_items(ef) : item + 1;
		/* the 2-partition seeds, where this call searches one */
		int sd[ASTC_ENC_MAX_TRY_SEEDS], nsd = 0;
		if (astc_enc_parts_kind(ef, first) <= ASTC_ENC_ITEM_DUAL2)
			nsd = astc_enc_p2_seeds(ctx, blk, ef, fit, *best_err, &alt, sd);
		astc_enc_fit *f2 = &alt;
		KILN_ROLLED for (int i = first; i < end; i++) {
			int kind = astc_enc_parts_kind(ef, i);
			if (kind == ASTC_ENC_ITEM_P2) {
				KILN_ROLLED for (int t = 0; t < nsd; t++) {
					astc_enc_set_pattern(f2, n, ctx->part2[sd[t]], NULL);
					f2->ccs = 4;
					astc_enc_fit_lines(blk, f2);
					astc_enc_search(ctx, blk, f2, sd[t], ef, best, best_err);
				}
			} else if (kind == ASTC_ENC_ITEM_DUAL2) {
				/* the best-fitting seed with a second weight plane for the channel
				 * farthest from its lines */
				if (nsd > 0 && astc_enc_parts_open(ef, i, n, *best_err, best)) {
					astc_enc_set_pattern(f2, n, ctx->part2[sd[0]], NULL);
					f2->ccs = 4;
					astc_enc_fit_lines(blk, f2);
					int far = 0;
					for (int c = 1; c < 4; c++)
						if (f2->resid[c] > f2->resid[far])
							far = c;
					if (f2->resid[far] > 0) {
						f2->ccs = far;
						astc_enc_fit_lines(blk, f2);
						astc_enc_search(ctx, blk, f2, sd[0], ef, best, best_err);
					}
				}
			} else if (astc_enc_parts_open(ef, i, n, *best_err, best)) {
				int k = kind == ASTC_ENC_ITEM_P3 ? 3 : 4;
				astc_enc_search_parts(ctx, blk, fit, k, k == 3 ? ef->tries3 : ef->tries4, k == 3 ? ef->full3 : ef->full4,
						      ef, &alt, best, best_err);
			}
		}
	}
}

/* Whether every texel of the block is the same colour (a void extent). */
KILN_HD int astc_enc_constant(const astc_enc_block *blk)
{
	int constant = 1;
	KILN_ROLLED for (int i = 1; i < blk->n && constant; i++)
		for (int k = 0; k < 4; k++)
			constant &= blk->px[i][k] == blk->px[0][k];
	return constant;
}

/* Runs one stage of a block's search. ONE encodes the block into out (16 bytes) and sets
 * *err to its squared error (0 for a void extent); a later stage takes out and *err as
 * they are and replaces them when it finds a closer encoding. line: the block's line
 * where the caller has fitted it (astc_enc_block_line; the block is then not constant),
 * else NULL (it is fitted here); resid gets the line's residuals, for
 * astc_enc_stage_wanted (zeros for a void extent). */
ASTC_ENC_OUTLINE void astc_encode_stage(const astc_enc_ctx *ctx, const astc_enc_block *blk,
					const astc_enc_effort *ef, int stage, int item, const astc_enc_fit *line,
					uint8_t *out, uint32_t *err, uint32_t *resid)
{
	astc_symbolic best;
	best.kind = ASTC_KIND_NORMAL;
	best.partitions = 1;
	int constant = stage == ASTC_ENC_STAGE_ONE && !line && astc_enc_constant(blk);
	uint32_t best_err = stage == ASTC_ENC_STAGE_ONE ? UINT32_MAX : *err;
	for (int k = 0; k < 4; k++)
		resid[k] = 0;
	if (constant) {
		best.kind = ASTC_KIND_VOID;
		for (int k = 0; k < 4; k++)
			best.void_color[k] = (uint16_t)(blk->px[0][k] * 257);
		best_err = 0;
	} else {
		astc_enc_fit own;
		if (!line) {
			astc_enc_block_line(blk, &own);
			line = &own;
		}
		for (int k = 0; k < 4; k++)
			resid[k] = line->resid[k];
		astc_enc_search_stage(ctx, blk, ef, stage, item, line, &best, &best_err);
	}
	if (stage == ASTC_ENC_STAGE_ONE || best_err < *err) {
		astc_pack(&best, out);
		*err = best_err;
	}
}

/* A later stage of a block as astc_encode_stage, the PARTS stage of a split effort item by
 * item, each from the error before the stage, the closest kept (the first of equal
 * errors): what a GPU computes side by side and merges (astc_cuda.cu, encode_split). */
KILN_HD void astc_encode_later(const astc_enc_ctx *ctx, const astc_enc_block *blk, const astc_enc_effort *ef,
			       int stage, const astc_enc_fit *line, uint8_t *out, uint32_t *err, uint32_t *resid)
{
	if (stage != ASTC_ENC_STAGE_PARTS || !ef->split) {
		astc_encode_stage(ctx, blk, ef, stage, -1, line, out, err, resid);
		return;
	}
	uint32_t before = *err;
	KILN_ROLLED for (int i = 0; i < astc_enc_parts_items(ef); i++) {
		uint8_t cand[16];
		uint32_t e = before;
		astc_encode_stage(ctx, blk, ef, stage, i, line, cand, &e, resid);
		if (e < *err) {
			*err = e;
			memcpy(out, cand, 16);
		}
	}
}

/* Encodes one block into 16 bytes: every stage it wants, in order, from one fit of the
 * block's line (a GPU runs the stages apart and fits it at each). */
KILN_HD void astc_encode_block(const astc_enc_ctx *ctx, const astc_enc_block *blk, int quality,
			       uint8_t *out)
{
	astc_enc_effort ef;
	astc_enc_effort_of(quality, ctx->bw * ctx->bh, &ef);
	astc_enc_fit line;
	int constant = astc_enc_constant(blk);
	if (!constant)
		astc_enc_block_line(blk, &line);
	uint32_t err, resid[4];
	astc_encode_stage(ctx, blk, &ef, ASTC_ENC_STAGE_ONE, -1, constant ? 0 : &line, out, &err, resid);
	/* a later stage wants an error above 0, which a constant block does not leave */
	for (int stage = ASTC_ENC_STAGE_ONE + 1; stage < ASTC_ENC_STAGES; stage++)
		if (astc_enc_stage_wanted(&ef, stage, blk->n, err, resid))
			astc_encode_later(ctx, blk, &ef, stage, &line, out, &err, resid);
}

#endif
