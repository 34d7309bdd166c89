/* SPDX-License-Identifier: MIT */
/*
 * lib/store_file.c - the file backend of the storage tier (file:///dir):
 * one object per page, "{name}.bin" in the directory, as SGLang's file
 * backend keeps them.
 *
 * Writes never tear an object: it is written to a temporary name of its
 * own (the name, ".tmp.", the process and a counter), fsynced as the
 * policy says, and renamed over the final name, which is atomic; a writer
 * killed midway leaves a temporary file that no reader opens (and that
 * open removes when old).  A key already present is not rewritten.
 *
 * Locking: none; every call works on its own descriptors.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "internal.h"
#include "storage_be.h"

struct fstore {
	int dirfd;
	_Atomic uint64_t seq;		/* temporary names */
};

#define OBJ_PATH_MAX (STORE_NAME_MAX + 64)

static void obj_path(char *buf, const char *name)
{
	snprintf(buf, OBJ_PATH_MAX, "%s.bin", name);
}

/* mkdir -p */
static int make_dirs(const char *path)
{
	char *p = strdup(path), *c;
	int rc = 0;

	if (!p)
		return kvs_fail(ENOMEM);
	for (c = p + 1; *c; c++) {
		if (*c != '/')
			continue;
		*c = 0;
		if (mkdir(p, 0777) < 0 && errno != EEXIST)
			rc = -1;
		*c = '/';
		if (rc)
			break;
	}
	if (!rc && mkdir(p, 0777) < 0 && errno != EEXIST)
		rc = -1;
	free(p);
	return rc;
}

static int file_open(struct kvs_store *s, const char *uri)
{
	const char *path = uri + strlen("file://");
	struct fstore *f;
	int e;

	if (path[0] != '/')
		return kvs_fail(EINVAL); /* file:///absolute/dir */
	if (make_dirs(path) < 0)
		return -1;
	f = calloc(1, sizeof(*f));
	if (!f)
		return kvs_fail(ENOMEM);
	f->dirfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (f->dirfd < 0) {
		e = errno;
		free(f);
		return kvs_fail(e);
	}
	s->be_priv = f;
	return 0;
}

static void file_close(struct kvs_store *s)
{
	struct fstore *f = s->be_priv;

	close(f->dirfd);
	free(f);
}

static size_t file_exists(struct kvs_store *s, const char *const *names, size_t n)
{
	struct fstore *f = s->be_priv;
	char p[OBJ_PATH_MAX];
	size_t i;

	for (i = 0; i < n; i++) {
		obj_path(p, names[i]);
		if (faccessat(f->dirfd, p, F_OK, 0) < 0) {
			if (errno != ENOENT)
				store_count(s, KVS_STORE_STAT_io_errors, 1);
			break;
		}
	}
	return i;
}

static void file_get(struct kvs_store *s, const char *const *names, size_t n, void *const *hdr,
		     void *const *val, ssize_t *got)
{
	struct fstore *f = s->be_priv;
	char p[OBJ_PATH_MAX];
	size_t i;

	for (i = 0; i < n; i++) {
		struct iovec iov[2] = {{hdr[i], STORE_HDR_BYTES}, {val[i], s->attr.page_bytes}};
		size_t want = STORE_HDR_BYTES + s->attr.page_bytes, have = 0;
		int fd;

		obj_path(p, names[i]);
		got[i] = -1;
		fd = openat(f->dirfd, p, O_RDONLY | O_CLOEXEC);
		if (fd < 0) {
			if (errno != ENOENT)
				store_count(s, KVS_STORE_STAT_io_errors, 1);
			continue;
		}
		while (have < want) {
			ssize_t r = preadv(fd, iov, 2, (off_t)have);

			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0)
				break;
			have += (size_t)r;
			/* Move the vectors past what was read. */
			{
				size_t k = (size_t)r;
				int j;

				for (j = 0; j < 2 && k; j++) {
					size_t t = k < iov[j].iov_len ? k : iov[j].iov_len;

					iov[j].iov_base = (char *)iov[j].iov_base + t;
					iov[j].iov_len -= t;
					k -= t;
				}
			}
		}
		close(fd);
		got[i] = (ssize_t)have;
	}
}

static int write_all(int fd, const void *a, size_t na, const void *b, size_t nb)
{
	struct iovec iov[2] = {{(void *)a, na}, {(void *)b, nb}};
	size_t want = na + nb, done = 0;

	while (done < want) {
		ssize_t r = pwritev(fd, iov, 2, (off_t)done);
		size_t k;
		int j;

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		done += (size_t)r;
		for (k = (size_t)r, j = 0; j < 2 && k; j++) {
			size_t t = k < iov[j].iov_len ? k : iov[j].iov_len;

			iov[j].iov_base = (char *)iov[j].iov_base + t;
			iov[j].iov_len -= t;
			k -= t;
		}
	}
	return 0;
}

static void file_set(struct kvs_store *s, const char *const *names, size_t n,
		     const void *const *hdr, const void *const *val, int *res)
{
	struct fstore *f = s->be_priv;
	char p[OBJ_PATH_MAX], t[OBJ_PATH_MAX + 48];
	size_t i;

	for (i = 0; i < n; i++) {
		int fd;

		obj_path(p, names[i]);
		res[i] = 0;
		if (faccessat(f->dirfd, p, F_OK, 0) == 0) {
			res[i] = 2;
			continue;
		}
		snprintf(t, sizeof(t), "%s.tmp.%ld.%llu", p, (long)getpid(),
			 (unsigned long long)atomic_fetch_add(&f->seq, 1));
		fd = openat(f->dirfd, t, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
		if (fd < 0) {
			store_count(s, KVS_STORE_STAT_io_errors, 1);
			continue;
		}
		if (write_all(fd, hdr[i], STORE_HDR_BYTES, val[i], s->attr.page_bytes) < 0 ||
		    (s->attr.fsync != KVS_FSYNC_NONE && fdatasync(fd) < 0)) {
			close(fd);
			unlinkat(f->dirfd, t, 0);
			store_count(s, KVS_STORE_STAT_io_errors, 1);
			continue;
		}
		close(fd);
		if (renameat(f->dirfd, t, f->dirfd, p) < 0) {
			unlinkat(f->dirfd, t, 0);
			store_count(s, KVS_STORE_STAT_io_errors, 1);
			continue;
		}
		if (s->attr.fsync == KVS_FSYNC_FULL)
			(void)fsync(f->dirfd);
		res[i] = 1;
	}
}

static int file_remove(struct kvs_store *s, const char *name)
{
	struct fstore *f = s->be_priv;
	char p[OBJ_PATH_MAX];

	obj_path(p, name);
	return unlinkat(f->dirfd, p, 0);
}

const struct store_backend store_file_backend = {
	.scheme = "file",
	.open = file_open,
	.close = file_close,
	.exists = file_exists,
	.get = file_get,
	.set = file_set,
	.remove = file_remove,
};
