/* Test helpers for storage and SigV4 (see storage_testutil.h). */
#define _GNU_SOURCE  /* strcasestr, memmem */
#include "storage_testutil.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- botocore reference ---- */

static const char *python(void)
{
	const char *env = getenv("KILN_PYTHON");
	if (env && *env)
		return env;
	/* Debian's interpreter is the one python3-botocore installs into. */
	return access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
}

void ref_begin(kiln_buf *b, char kind)
{
	kiln_buf_append(b, &kind, 1);
}

void ref_field(kiln_buf *b, const void *data, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *p = data;
	kiln_buf_append(b, "\t", 1);
	for (size_t i = 0; i < len; i++) {
		char pair[2] = {hex[p[i] >> 4], hex[p[i] & 15]};
		kiln_buf_append(b, pair, 2);
	}
}

void ref_field_str(kiln_buf *b, const char *s)
{
	ref_field(b, s ? s : "", s ? strlen(s) : 0);
}

void ref_field_pairs(kiln_buf *b, const kiln_sigv4_kv *kv, size_t count)
{
	kiln_buf list;
	kiln_buf_init(&list, 1 << 20);
	for (size_t i = 0; i < count; i++) {
		if (i)
			kiln_buf_append(&list, "\x01", 1);
		kiln_buf_append(&list, kv[i].name, strlen(kv[i].name));
		kiln_buf_append(&list, "", 1);
		kiln_buf_append(&list, kv[i].value, strlen(kv[i].value));
	}
	ref_field(b, list.data, list.len);
	kiln_buf_free(&list);
}

void ref_end(kiln_buf *b)
{
	kiln_buf_append(b, "\n", 1);
}

size_t ref_run(const kiln_buf *input, char *out, size_t cap, size_t max_lines)
{
	char path[] = "/tmp/kiln-sigv4-ref-XXXXXX";
	int fd = mkstemp(path);
	size_t n = 0;
	if (fd < 0)
		return 0;
	if (write(fd, input->data, input->len) != (ssize_t)input->len) {
		close(fd);
		unlink(path);
		return 0;
	}
	close(fd);
	char cmd[512];
	snprintf(cmd, sizeof cmd, "%s tests/tools/sigv4_ref.py < %s", python(), path);
	FILE *p = popen(cmd, "r");
	if (p) {
		while (n < max_lines && fgets(out + n * cap, (int)cap, p)) {
			char *line = out + n * cap;
			line[strcspn(line, "\r\n")] = '\0';
			n++;
		}
		pclose(p);
	}
	unlink(path);
	return n;
}

/* ---- s3rver ---- */

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	remove(path);
	return 0;
}

void rm_tree(const char *path)
{
	nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Runs tools/s3rver.sh on port (0: a free one) over s->dir/data with bucket, its output
 * to s->dir/<log_name>; waits up to timeout_s until it listens and records its port. */
static bool s3rver_launch(s3rver *s, int port, const char *log_name, const char *bucket, const char *extra_opt,
			  const char *extra_val, double timeout_s)
{
	char data[160], log[160], port_arg[16];
	snprintf(data, sizeof data, "%s/data", s->dir);
	snprintf(log, sizeof log, "%s/%s", s->dir, log_name);
	snprintf(port_arg, sizeof port_arg, "%d", port);
	s->pid = fork();
	if (s->pid < 0)
		return false;
	if (s->pid == 0) {
		/* The server must not outlive a test that crashes. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		const char *argv[10] = {"s3rver.sh", port_arg, data};
		int n = 3;
		if (extra_opt) {
			argv[n++] = extra_opt;
			argv[n++] = extra_val;
		}
		/* Last: s3rver takes the words after a bucket name as its config files. */
		argv[n++] = "--configure-bucket";
		argv[n++] = bucket;
		argv[n] = NULL;
		execv("tools/s3rver.sh", (char **)argv);
		_exit(127);
	}
	double deadline = now_s() + timeout_s;
	while (now_s() < deadline) {
		char text[8192] = "";
		FILE *f = fopen(log, "r");
		if (f) {
			size_t len = fread(text, 1, sizeof text - 1, f);
			text[len] = '\0';
			fclose(f);
		}
		const char *at = strstr(text, "listening on 127.0.0.1:");
		if (at) {
			s->port = atoi(at + strlen("listening on 127.0.0.1:"));
			snprintf(s->endpoint, sizeof s->endpoint, "http://127.0.0.1:%d", s->port);
			return s->port > 0;
		}
		int wst;
		if (waitpid(s->pid, &wst, WNOHANG) == s->pid) {
			fprintf(stderr, "s3rver exited early:\n%s\n", text);
			s->pid = 0;
			return false;
		}
		usleep(20000);
	}
	fprintf(stderr, "s3rver did not start in time\n");
	return false;
}

bool s3rver_start(s3rver *s, const char *bucket, const char *extra_opt, const char *extra_val)
{
	memset(s, 0, sizeof *s);
	strcpy(s->dir, "/tmp/kiln-s3rver-XXXXXX");
	if (!mkdtemp(s->dir))
		return false;
	/* The first run installs s3rver from npm, which can take a while. */
	return s3rver_launch(s, 0, "log", bucket, extra_opt, extra_val, 120);
}

bool s3rver_restart(s3rver *s, const char *bucket)
{
	return s3rver_launch(s, s->port, "log2", bucket, NULL, NULL, 30);
}

void s3rver_stop(s3rver *s)
{
	if (s->pid > 0) {
		kill(s->pid, SIGTERM);
		int wst;
		double deadline = now_s() + 3;
		while (waitpid(s->pid, &wst, WNOHANG) == 0) {
			if (now_s() > deadline) {
				kill(s->pid, SIGKILL);
				waitpid(s->pid, &wst, 0);
				break;
			}
			usleep(10000);
		}
		s->pid = 0;
	}
	if (s->dir[0])
		rm_tree(s->dir);
}

/* ---- fault server ---- */

void fault_init(fault_server *fs)
{
	memset(fs, 0, sizeof *fs);
	fs->mode = FAULT_OK;
	fs->retry_after_s = -1;
	fs->listen_fd = -1;
	pthread_mutex_init(&fs->lock, NULL);
	kiln_buf_init(&fs->last_body, 1 << 20);
}

static bool send_all(int fd, const void *data, size_t len)
{
	const char *p = data;
	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
		if (n <= 0) {
			if (n < 0 && errno == EINTR)
				continue;
			return false;
		}
		p += n;
		len -= (size_t)n;
	}
	return true;
}

static void respond(int fd, int status, const char *headers, const char *body, bool head_only)
{
	char head[1024];
	size_t blen = body ? strlen(body) : 0;
	int n = snprintf(head, sizeof head,
			 "HTTP/1.1 %d Injected\r\nContent-Length: %zu\r\nConnection: close\r\n%s\r\n",
			 status, blen, headers ? headers : "");
	send_all(fd, head, (size_t)n);
	if (!head_only && blen)
		send_all(fd, body, blen);
}

static void respond_error(fault_server *fs, int fd, bool head_only)
{
	char headers[128] = "Content-Type: application/xml\r\n", body[512];
	if (fs->retry_after_s >= 0)
		snprintf(headers + strlen(headers), sizeof headers - strlen(headers),
			 "Retry-After: %d\r\n", fs->retry_after_s);
	snprintf(body, sizeof body,
		 "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>%s</Code>"
		 "<Message>injected failure</Message></Error>",
		 fs->code ? fs->code : "InternalError");
	respond(fd, fs->status, headers, body, head_only);
}

static void respond_ok(fault_server *fs, int fd, const char *method, const char *target)
{
	bool head = strcmp(method, "HEAD") == 0;
	if (strcmp(method, "PUT") == 0) {
		respond(fd, 200, "ETag: \"0123456789abcdef0123456789abcdef\"\r\n", NULL, false);
	} else if (strcmp(method, "POST") == 0 && strstr(target, "uploads")) {
		respond(fd, 200, NULL,
			"<InitiateMultipartUploadResult><Bucket>b</Bucket><Key>k</Key>"
			"<UploadId>upload&amp;1</UploadId></InitiateMultipartUploadResult>", false);
	} else if (strcmp(method, "POST") == 0) {
		atomic_fetch_add(&fs->completes, 1);
		respond(fd, 200, NULL, "<CompleteMultipartUploadResult><ETag>\"x-3\"</ETag>"
				       "</CompleteMultipartUploadResult>", false);
	} else if (strcmp(method, "DELETE") == 0) {
		atomic_fetch_add(&fs->aborts, 1);
		respond(fd, 204, NULL, NULL, false);
	} else if (strstr(target, "list-type=2")) {
		respond(fd, 200, NULL, "<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>",
			false);
	} else {
		respond(fd, 200, NULL, "hello", head);
	}
}

/* Reads one request; false if the client went away first. */
static bool read_request(fault_server *fs, int fd, char *head, size_t cap)
{
	size_t len = 0;
	char *end = NULL;
	while (!end) {
		if (len + 1 >= cap)
			return false;
		ssize_t n = recv(fd, head + len, cap - 1 - len, 0);
		if (n <= 0)
			return false;
		len += (size_t)n;
		head[len] = '\0';
		end = strstr(head, "\r\n\r\n");
	}
	size_t head_len = (size_t)(end - head) + 4;
	const char *cl = strcasestr(head, "\r\nContent-Length:");
	size_t body_len = cl ? strtoull(cl + 17, NULL, 10) : 0;
	pthread_mutex_lock(&fs->lock);
	memcpy(fs->last_head, head, head_len);
	fs->last_head[head_len] = '\0';
	kiln_buf_reset(&fs->last_body);
	size_t have = len - head_len;
	kiln_buf_append(&fs->last_body, head + head_len, have < body_len ? have : body_len);
	pthread_mutex_unlock(&fs->lock);
	char chunk[65536];
	while (have < body_len) {
		ssize_t n = recv(fd, chunk, sizeof chunk, 0);
		if (n <= 0)
			return false;
		pthread_mutex_lock(&fs->lock);
		kiln_buf_append(&fs->last_body, chunk, (size_t)n);  /* past 1 MiB: dropped */
		pthread_mutex_unlock(&fs->lock);
		have += (size_t)n;
	}
	return true;
}

static void wait_for_hangup(fault_server *fs, int fd)
{
	char sink[4096];
	while (!atomic_load(&fs->stop)) {
		struct pollfd p = {fd, POLLIN, 0};
		if (poll(&p, 1, 50) > 0 && recv(fd, sink, sizeof sink, 0) <= 0)
			return;
	}
}

static void serve(fault_server *fs, int fd)
{
	char head[16384], method[16] = "", target[8192] = "";
	if (!read_request(fs, fd, head, sizeof head))
		return;
	sscanf(head, "%15s %8191s", method, target);
	int n = atomic_fetch_add(&fs->requests, 1) + 1;
	bool head_only = strcmp(method, "HEAD") == 0;
	switch (fs->mode) {
	case FAULT_OK:
		respond_ok(fs, fd, method, target);
		break;
	case FAULT_FAIL_THEN_OK:
		if (n <= fs->failures)
			respond_error(fs, fd, head_only);
		else
			respond_ok(fs, fd, method, target);
		break;
	case FAULT_CLOSE_THEN_OK:
		if (n > fs->failures)
			respond_ok(fs, fd, method, target);
		break;
	case FAULT_SILENT:
		wait_for_hangup(fs, fd);
		break;
	case FAULT_HUGE_BODY: {
		static const char hdr[] = "HTTP/1.1 200 OK\r\nContent-Length: 1073741824\r\n"
					  "Connection: close\r\n\r\n";
		static char zeros[65536];
		bool ok = send_all(fd, hdr, sizeof hdr - 1);
		for (long sent = 0; ok && sent < (1L << 30) && !atomic_load(&fs->stop); sent += sizeof zeros)
			ok = send_all(fd, zeros, sizeof zeros);
		break;
	}
	case FAULT_SLOW: {
		/* Requests in progress count from their arrival until just before their answer:
		 * a client sees the answer before it may send another, so a finished request is
		 * never counted next to the one that replaces it (counting whole connections,
		 * closed after the answer, saw 5 at a limit of 4 now and then). */
		int open = atomic_fetch_add(&fs->open_now, 1) + 1;
		int peak = atomic_load(&fs->open_peak);
		while (open > peak && !atomic_compare_exchange_weak(&fs->open_peak, &peak, open))
			;
		usleep((useconds_t)fs->delay_ms * 1000);
		atomic_fetch_sub(&fs->open_now, 1);
		respond_ok(fs, fd, method, target);
		break;
	}
	case FAULT_MULTIPART:
		if (strcmp(method, "PUT") == 0 && strstr(target, "partNumber=2&"))
			respond_error(fs, fd, false);
		else
			respond_ok(fs, fd, method, target);
		break;
	}
}

struct connection {
	fault_server *fs;
	int fd;
};

static void *connection_thread(void *arg)
{
	struct connection *c = arg;
	fault_server *fs = c->fs;
	serve(fs, c->fd);
	close(c->fd);
	free(c);
	return NULL;
}

static void *fault_thread(void *arg)
{
	fault_server *fs = arg;
	while (!atomic_load(&fs->stop)) {
		struct pollfd p = {fs->listen_fd, POLLIN, 0};
		if (poll(&p, 1, 50) <= 0)
			continue;
		int fd = accept(fs->listen_fd, NULL, NULL);
		if (fd < 0)
			continue;
		struct connection *c = malloc(sizeof *c);
		if (!c || fs->worker_count == FAULT_MAX_CONNECTIONS) {
			free(c);
			close(fd);
			continue;
		}
		c->fs = fs;
		c->fd = fd;
		if (pthread_create(&fs->workers[fs->worker_count], NULL, connection_thread, c) == 0)
			fs->worker_count++;
		else {
			close(fd);
			free(c);
		}
	}
	for (int i = 0; i < fs->worker_count; i++)
		pthread_join(fs->workers[i], NULL);
	return NULL;
}

bool fault_start(fault_server *fs)
{
	struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = 0};
	socklen_t alen = sizeof addr;
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	fs->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fs->listen_fd < 0 || bind(fs->listen_fd, (struct sockaddr *)&addr, sizeof addr) != 0 ||
	    listen(fs->listen_fd, 128) != 0 ||
	    getsockname(fs->listen_fd, (struct sockaddr *)&addr, &alen) != 0)
		return false;
	fs->port = ntohs(addr.sin_port);
	return pthread_create(&fs->thread, NULL, fault_thread, fs) == 0;
}

void fault_stop(fault_server *fs)
{
	atomic_store(&fs->stop, true);
	if (fs->port)
		pthread_join(fs->thread, NULL);
	if (fs->listen_fd >= 0)
		close(fs->listen_fd);
	kiln_buf_free(&fs->last_body);
	pthread_mutex_destroy(&fs->lock);
}

bool fault_last_header(fault_server *fs, const char *name, char *out, size_t cap)
{
	bool found = false;
	size_t nlen = strlen(name);
	pthread_mutex_lock(&fs->lock);
	for (const char *line = strstr(fs->last_head, "\r\n"); line && line[2];
	     line = strstr(line + 2, "\r\n")) {
		const char *h = line + 2;
		if (strncasecmp(h, name, nlen) == 0 && h[nlen] == ':') {
			const char *v = h + nlen + 1;
			while (*v == ' ')
				v++;
			size_t vlen = strcspn(v, "\r\n");
			if (vlen < cap) {
				memcpy(out, v, vlen);
				out[vlen] = '\0';
				found = true;
			}
			break;
		}
	}
	pthread_mutex_unlock(&fs->lock);
	return found;
}
