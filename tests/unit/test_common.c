/* Unit tests of the common layer: errors, buffers, sizes, pool, host limits, images, devices. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/buf.h"
#include "common/error.h"
#include "common/image.h"
#include "common/log.h"
#include "common/host.h"
#include "common/pool.h"
#include "common/texture.h"
#include "kernels/codec.h"
#include "kernels/gpu.h"

Test(error, every_status_has_a_message)
{
	for (int s = 0; s < KILN_ERR_COUNT_; s++)
		cr_expect_str_neq(kiln_strerror((kiln_status)s), "unknown error", "status %d", s);
	cr_expect_str_eq(kiln_strerror((kiln_status)9999), "unknown error");
}

Test(alloc, overflow_is_detected)
{
	size_t out;
	cr_expect(kiln_size_mul(1u << 20, 1u << 20, &out));
	cr_expect_eq(out, (size_t)1 << 40);
	cr_expect_not(kiln_size_mul(SIZE_MAX / 2 + 1, 2, &out));
	cr_expect_not(kiln_size_add(SIZE_MAX, 1, &out));
	cr_expect_not(kiln_size_mul3(1u << 31, 1u << 31, 1u << 31, &out));
	cr_expect_null(kiln_malloc_array(SIZE_MAX / 4, 8));
}

Test(buf, grows_and_stops_at_its_cap)
{
	kiln_buf b;
	kiln_buf_init(&b, 1000);
	uint8_t chunk[300];
	memset(chunk, 7, sizeof chunk);
	cr_assert_eq(kiln_buf_append(&b, chunk, 300), KILN_OK);
	cr_assert_eq(kiln_buf_append(&b, chunk, 300), KILN_OK);
	cr_assert_eq(kiln_buf_append(&b, chunk, 300), KILN_OK);
	cr_expect_eq(kiln_buf_append(&b, chunk, 200), KILN_ERR_TOO_LARGE);
	cr_expect_eq(b.len, 900u);
	cr_expect_eq(kiln_buf_put_u32le(&b, 0x04030201u), KILN_OK);
	cr_expect_eq(memcmp(b.data + 900, "\x01\x02\x03\x04", 4), 0);
	cr_expect_eq(kiln_buf_append(&b, chunk, SIZE_MAX), KILN_ERR_TOO_LARGE);
	kiln_buf_free(&b);
	kiln_buf_free(NULL);
	cr_expect_null(b.data);
}

Test(buf, read_file_respects_cap)
{
	char path[] = "/tmp/kiln-buf-XXXXXX";
	int fd = mkstemp(path);
	cr_assert(fd >= 0);
	char data[5000];
	memset(data, 'x', sizeof data);
	cr_assert_eq(write(fd, data, sizeof data), (ssize_t)sizeof data);
	close(fd);
	kiln_buf b;
	kiln_buf_init(&b, 5000);
	cr_expect_eq(kiln_buf_read_file(&b, path), KILN_OK);
	cr_expect_eq(b.len, 5000u);
	kiln_buf_free(&b);
	kiln_buf_init(&b, 4999);
	cr_expect_eq(kiln_buf_read_file(&b, path), KILN_ERR_TOO_LARGE);
	kiln_buf_free(&b);
	unlink(path);
	kiln_buf_init(&b, 100);
	cr_expect_eq(kiln_buf_read_file(&b, "/nonexistent/kiln"), KILN_ERR_NOT_FOUND);
	cr_expect_eq(kiln_buf_read_file(&b, "/tmp"), KILN_ERR_IO, "a directory is no file");
	kiln_buf_free(&b);
}

/* A regular file is read into one allocation of its size (and the byte that shows its
 * end), appended after what the buffer holds; files without a size (procfs) and empty
 * files read as they are. */
Test(buf, read_file_sizes_once_and_appends)
{
	char path[] = "/tmp/kiln-buf-XXXXXX";
	int fd = mkstemp(path);
	cr_assert(fd >= 0);
	static uint8_t data[300000];
	for (size_t i = 0; i < sizeof data; i++)
		data[i] = (uint8_t)(i * 7 + i / 256);
	cr_assert_eq(write(fd, data, sizeof data), (ssize_t)sizeof data);
	close(fd);
	kiln_buf b;
	kiln_buf_init(&b, 1 << 20);
	cr_assert_eq(kiln_buf_append(&b, "head", 4), KILN_OK);
	cr_expect_eq(kiln_buf_read_file(&b, path), KILN_OK);
	cr_expect_eq(b.len, 4 + sizeof data);
	cr_expect_eq(memcmp(b.data, "head", 4), 0);
	cr_expect_eq(memcmp(b.data + 4, data, sizeof data), 0);
	cr_expect_leq(b.cap, 4 + sizeof data + 256, "one allocation of the file's size, not a doubling: cap %zu", b.cap);
	kiln_buf_free(&b);

	kiln_buf_init(&b, 1 << 20);
	cr_expect_eq(kiln_buf_read_file(&b, "/proc/self/status"), KILN_OK);
	cr_expect_gt(b.len, 0u, "procfs files have no size but have content");
	kiln_buf_free(&b);

	fd = open(path, O_WRONLY | O_TRUNC);
	cr_assert(fd >= 0);
	close(fd);
	kiln_buf_init(&b, 100);
	cr_expect_eq(kiln_buf_read_file(&b, path), KILN_OK);
	cr_expect_eq(b.len, 0u);
	kiln_buf_free(&b);
	unlink(path);
}

struct sum_ctx {
	atomic_ullong sum;
	atomic_uint calls;
};

static void add_range(void *p, size_t begin, size_t end)
{
	struct sum_ctx *ctx = p;
	unsigned long long s = 0;
	for (size_t i = begin; i < end; i++)
		s += i;
	atomic_fetch_add(&ctx->sum, s);
	atomic_fetch_add(&ctx->calls, 1);
}

Test(pool, parallel_for_covers_every_item_once)
{
	kiln_pool *pool;
	cr_assert_eq(kiln_pool_create(4, &pool), KILN_OK);
	cr_expect_eq(kiln_pool_threads(pool), 4u);
	for (size_t n = 0; n < 2000; n += 97) {
		struct sum_ctx ctx = {0};
		kiln_pool_for(pool, n, 0, add_range, &ctx);
		cr_expect_eq(atomic_load(&ctx.sum), (unsigned long long)n * (n ? n - 1 : 0) / 2, "n=%zu", n);
	}
	struct sum_ctx ctx = {0};
	kiln_pool_for(pool, 1000, 10, add_range, &ctx);
	cr_expect_eq(atomic_load(&ctx.calls), 100u);
	kiln_pool_destroy(pool);
	kiln_pool_destroy(NULL);
	struct sum_ctx serial = {0};
	kiln_pool_for(NULL, 100, 0, add_range, &serial);
	cr_expect_eq(atomic_load(&serial.sum), 4950u);
}

/* The pool's worker threads carry the name given and their index, as top -H and perf
 * show them. */
Test(pool, threads_are_named)
{
	kiln_pool *pool;
	cr_assert_eq(kiln_pool_create(4, &pool), KILN_OK);
	kiln_pool_set_name(pool, "kt-pool");
	kiln_pool_set_name(NULL, "ignored");
	unsigned seen = 0; /* bit i: "kt-pool/i" found */
	DIR *d = opendir("/proc/self/task");
	cr_assert(d);
	for (struct dirent *e; (e = readdir(d));) {
		char path[300], comm[32] = "";
		snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
		FILE *f = e->d_name[0] != '.' ? fopen(path, "r") : NULL;
		if (!f)
			continue;
		unsigned i;
		if (fgets(comm, sizeof comm, f) && sscanf(comm, "kt-pool/%u", &i) == 1 && i < 8)
			seen |= 1u << i;
		fclose(f);
	}
	closedir(d);
	cr_expect_eq(seen, 7u, "threads kt-pool/0..2 expected, found mask %#x", seen);
	kiln_pool_destroy(pool);
}

Test(image, limits_are_checked_before_allocation)
{
	kiln_image img;
	kiln_image_limits lim = {.max_width = 100, .max_height = 100, .max_pixels = 5000};
	cr_expect_eq(kiln_image_alloc(&img, 101, 1, &lim), KILN_ERR_TOO_LARGE);
	cr_expect_eq(kiln_image_alloc(&img, 100, 51, &lim), KILN_ERR_TOO_LARGE);
	cr_expect_eq(kiln_image_alloc(&img, 0, 5, &lim), KILN_ERR_INVALID_ARG);
	cr_expect_eq(kiln_image_alloc(&img, 100000, 100000, NULL), KILN_ERR_TOO_LARGE);
	cr_assert_eq(kiln_image_alloc(&img, 100, 50, &lim), KILN_OK);
	cr_expect_eq(img.stride, 400u);
	kiln_image_free(&img);
	kiln_image_free(NULL);
}

Test(texture, sizes_and_mip_counts)
{
	kiln_texture t;
	cr_assert_eq(kiln_texture_init(&t, KILN_TEXFMT_BC1_RGB, 0, 0, true), KILN_OK);
	cr_expect_eq(kiln_texture_level_size(&t, 1, 1), 8u);
	cr_expect_eq(kiln_texture_level_size(&t, 5, 3), 16u);
	cr_expect_eq(kiln_texture_level_size(&t, 4099, 17), 1025u * 5 * 8);
	cr_expect_eq(kiln_mip_count(1, 1), 1u);
	cr_expect_eq(kiln_mip_count(768, 512), 10u);
	cr_expect_eq(kiln_mip_count(16384, 1), 15u);
	cr_expect_eq(kiln_texture_init(&t, KILN_TEXFMT_ASTC, 3, 4, false), KILN_ERR_INVALID_ARG);
	cr_assert_eq(kiln_texture_init(&t, KILN_TEXFMT_ASTC, 6, 5, false), KILN_OK);
	cr_expect_eq(kiln_texture_level_size(&t, 13, 11), 3u * 3 * 16);
}

Test(device, parse_and_resolve)
{
	kiln_device d, r;
	cr_expect_eq(kiln_device_parse("auto", &d), KILN_OK);
	cr_expect_eq(d.kind, KILN_DEVICE_AUTO);
	cr_expect_eq(kiln_device_parse("cpu", &d), KILN_OK);
	cr_expect_eq(d.kind, KILN_DEVICE_CPU);
	cr_expect_eq(kiln_device_parse("gpu:3", &d), KILN_OK);
	cr_expect_eq(d.index, 3);
	cr_expect_eq(kiln_device_parse("gpu:", &d), KILN_ERR_INVALID_ARG);
	cr_expect_eq(kiln_device_parse("gpu:1x", &d), KILN_ERR_INVALID_ARG);
	cr_expect_eq(kiln_device_parse("tpu", &d), KILN_ERR_INVALID_ARG);
	kiln_device_parse("auto", &d);
	cr_expect_eq(kiln_device_resolve(&d, &r), KILN_OK);
	cr_expect_eq(r.kind, kiln_gpu_count() > 0 ? KILN_DEVICE_GPU : KILN_DEVICE_CPU);
	kiln_device_parse("gpu:1000", &d);
	cr_expect_eq(kiln_device_resolve(&d, &r), KILN_ERR_NO_GPU);
	cr_expect_eq(kiln_quality_parse("medium"), KILN_QUALITY_MEDIUM);
	cr_expect_eq(kiln_quality_parse("ultra"), -1);
}

Test(log, quoting_escapes)
{
	char out[64];
	cr_expect_str_eq(kiln_log_quote("a \"b\"\nc", out, sizeof out), "\"a \\\"b\\\"\\nc\"");
	cr_expect_str_eq(kiln_log_quote("abcdefghij", out, 6), "\"ab\"");
	cr_expect_eq(kiln_log_level_parse("WARN"), KILN_LOG_WARN);
	cr_expect_eq(kiln_log_level_parse("loud"), -1);
}

Test(host, cpu_quota_text_rounds_up_and_knows_no_limit)
{
	cr_expect_eq(kiln_cpu_quota("200000 100000\n"), 2u);
	cr_expect_eq(kiln_cpu_quota("150000 100000"), 2u);
	cr_expect_eq(kiln_cpu_quota("50000 100000"), 1u);
	cr_expect_eq(kiln_cpu_quota("400000 50000"), 8u);
	cr_expect_eq(kiln_cpu_quota("max 100000\n"), 0u);
	cr_expect_eq(kiln_cpu_quota("-1 100000"), 0u);
	cr_expect_eq(kiln_cpu_quota("100000 0"), 0u);
	cr_expect_eq(kiln_cpu_quota(""), 0u);
	cr_expect_eq(kiln_cpu_quota(NULL), 0u);
}

/* A process bound to one CPU (taskset, a cpuset) counts one, and a pool sized by default
 * starts one thread: run in a child, whose affinity the test may change freely. */
Test(host, cpu_count_follows_the_affinity_mask)
{
	cpu_set_t all;
	cr_assert_eq(sched_getaffinity(0, sizeof all, &all), 0);
	cr_expect_leq(kiln_cpu_count(), (unsigned)CPU_COUNT(&all));
	cr_expect_geq(kiln_cpu_count(), 1u);
	int first = -1;
	for (int c = 0; c < CPU_SETSIZE && first < 0; c++)
		if (CPU_ISSET(c, &all))
			first = c;
	cr_assert_geq(first, 0);
	pid_t pid = fork();
	cr_assert_neq(pid, -1);
	if (pid == 0) {
		cpu_set_t one;
		CPU_ZERO(&one);
		CPU_SET(first, &one);
		if (sched_setaffinity(0, sizeof one, &one) != 0)
			_exit(10);
		kiln_pool *pool = NULL;
		if (kiln_cpu_count() != 1 || kiln_pool_create(0, &pool) != KILN_OK || kiln_pool_threads(pool) != 1)
			_exit(11);
		kiln_pool_destroy(pool);
		_exit(0);
	}
	int status = 0;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
}

Test(host, memory_limit_texts_in_bytes)
{
	cr_expect_eq(kiln_memory_limit_of("8589934592\n"), 8589934592ull);
	cr_expect_eq(kiln_memory_limit_of("268435456"), 268435456ull);
	cr_expect_eq(kiln_memory_limit_of("max\n"), 0u);
	/* cgroup v1's "no limit": LLONG_MAX rounded down to a page */
	cr_expect_eq(kiln_memory_limit_of("9223372036854771712\n"), 0u);
	cr_expect_eq(kiln_memory_limit_of("0"), 0u);
	cr_expect_eq(kiln_memory_limit_of("-1"), 0u);
	cr_expect_eq(kiln_memory_limit_of("12x"), 0u);
	cr_expect_eq(kiln_memory_limit_of(""), 0u);
	cr_expect_eq(kiln_memory_limit_of(NULL), 0u);
	/* this process: known on Linux, and no more than the machine has */
	long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
	uint64_t limit = kiln_memory_limit();
	cr_expect_gt(limit, 0u);
	cr_expect_leq(limit, (uint64_t)pages * (uint64_t)page);
}
