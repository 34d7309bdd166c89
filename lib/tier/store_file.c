/* SPDX-License-Identifier: MIT */
/*
 * lib/tier/store_file.c - the file backend of the storage tier (file:///dir):
 * one object per page, "{name}.kvs" in the directory; the core's name
 * ends with the namespace's fingerprint (".{16 hex}"), so two namespaces
 * never share a file, and ".kvs" never meets SGLang's
 * "{key}_{model}_{rank}_{size}.bin" files of raw bytes.
 *
 * Files are the owner's alone, 0600 in directories made 0700 (0640 and
 * 0750 with KVS_STORE_SHARE_GROUP), before the umask; a directory that is
 * already there keeps its mode.
 *
 * Nothing the store did not write is removed: a read opens with
 * O_NONBLOCK | O_NOFOLLOW, so a FIFO or a link under an object's name
 * never blocks it, and anything but a regular file is reported present
 * with nothing read (a miss the core leaves alone); the core removes an
 * object that does not verify only when its header is this namespace's;
 * the size limit removes only files that begin with kvslab's magic.  A
 * set writes over an empty regular file under its name (a crash's
 * leftover, nothing to lose) and over nothing else.
 *
 * Writes never tear an object: it is written to a temporary name of its
 * own ("{file}.tmp.{pid}.{counter}"), fsynced as attr.fsync says
 * (NONE: never; DATA: fdatasync before the rename; FULL: that, and an
 * fsync of the directory after it), and renamed over the final name, which
 * is atomic.  A writer killed midway leaves a temporary file that no reader
 * opens; open removes those of dead writers (their pid is gone) and those
 * older than a minute.  A key already present is not rewritten.
 *
 * The size limit (attr.max_bytes).  Open scans the directory: every object
 * in it, of any namespace, counts toward the limit.  An index in memory
 * maps each object's file name to its size and its place in an LRU list
 * (most recent first; at open, by modification time).  A get, exists or
 * set that finds an object moves it to the front; an object another
 * process wrote is added when first seen.  Before a write, objects are
 * removed from the back until the new one fits, and its bytes are reserved
 * so that concurrent writers never pass the limit together; bytes_stored
 * is the index's total.  Several processes sharing a directory each keep
 * their own index: the limit holds per process, not across them.
 *
 * Failures (a missing directory, a full disk, EFBIG, a short read, an I/O
 * error) are misses or objects not stored, counted in io_errors; a short
 * object is handed to the core as short, which removes it if it is ours.
 *
 * Locking: f->lock guards the index, the LRU list and f->bytes; it is
 * taken around index updates and evictions (whose unlinks run under it, so
 * that a concurrent set of the same name cannot lose its new object).
 * Object I/O runs outside it, each call on its own descriptors.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "tier/storage_be.h"

/* Temporary files older than this are a dead writer's, pid or not. */
#define STALE_TMP_S 60

struct ent {
	struct ent *hnext;		/* hash chain */
	struct ent *prev, *next;	/* LRU list, most recent after the head */
	uint64_t size;
	uint64_t hash;
	char name[];			/* the file name, ".kvs" included */
};

struct fstore {
	int dirfd;
	_Atomic uint64_t seq;		/* temporary names */
	pthread_mutex_t lock;
	struct ent **tab;
	size_t nbuckets, nents;
	struct ent lru;			/* sentinel */
	uint64_t bytes;			/* objects indexed plus writes reserved */
};

#define OBJ_PATH_MAX (STORE_NAME_MAX + 64)

/* The file of object @name: "{name}.kvs". */
static void obj_path(char *buf, const char *name)
{
	snprintf(buf, OBJ_PATH_MAX, "%s.kvs", name);
}

/* Open @file for reading without blocking on a FIFO or following a
 * symbolic link; -1 with errno as openat(2). */
static int obj_open(struct fstore *f, const char *file)
{
	return openat(f->dirfd, file, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
}

/* Is @file a regular file that begins with kvslab's magic? */
static bool obj_is_kvslab(struct fstore *f, const char *file)
{
	char m[8];
	struct stat st;
	bool ok;
	int fd = obj_open(f, file);

	if (fd < 0)
		return false;
	ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && pread(fd, m, 8, 0) == 8 &&
	     memcmp(m, STORE_MAGIC, 8) == 0;
	close(fd);
	return ok;
}

/* ------------------------------------------------------------ the index */

static uint64_t name_hash(const char *p)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (; *p; p++)
		h = (h ^ (uint8_t)*p) * 0x100000001b3ull;
	return h;
}

static struct ent *idx_find(struct fstore *f, const char *name, uint64_t h)
{
	struct ent *e;

	for (e = f->tab[h & (f->nbuckets - 1)]; e; e = e->hnext)
		if (e->hash == h && strcmp(e->name, name) == 0)
			return e;
	return NULL;
}

static void lru_unlink(struct ent *e)
{
	e->prev->next = e->next;
	e->next->prev = e->prev;
}

static void lru_front(struct fstore *f, struct ent *e)
{
	e->next = f->lru.next;
	e->prev = &f->lru;
	f->lru.next->prev = e;
	f->lru.next = e;
}

static void idx_grow(struct fstore *f)
{
	size_t nb = f->nbuckets * 2, i;
	struct ent **t = calloc(nb, sizeof(*t)), *e, *nx;

	if (!t)
		return; /* longer chains, still correct */
	for (i = 0; i < f->nbuckets; i++)
		for (e = f->tab[i]; e; e = nx) {
			nx = e->hnext;
			e->hnext = t[e->hash & (nb - 1)];
			t[e->hash & (nb - 1)] = e;
		}
	free(f->tab);
	f->tab = t;
	f->nbuckets = nb;
}

/* Add @name (not indexed yet) at the front of the LRU list; NULL when out
 * of memory (the object is then simply not tracked). */
static struct ent *idx_add(struct fstore *f, const char *name, uint64_t h, uint64_t size)
{
	size_t len = strlen(name) + 1;
	struct ent *e = malloc(sizeof(*e) + len);

	if (!e)
		return NULL;
	memcpy(e->name, name, len);
	e->size = size;
	e->hash = h;
	if (f->nents >= f->nbuckets)
		idx_grow(f);
	e->hnext = f->tab[h & (f->nbuckets - 1)];
	f->tab[h & (f->nbuckets - 1)] = e;
	f->nents++;
	lru_front(f, e);
	f->bytes += size;
	return e;
}

static void idx_del(struct fstore *f, struct ent *e)
{
	struct ent **pp = &f->tab[e->hash & (f->nbuckets - 1)];

	while (*pp != e)
		pp = &(*pp)->hnext;
	*pp = e->hnext;
	lru_unlink(e);
	f->nents--;
	f->bytes -= e->size;
	free(e);
}

/* Remove least recently used objects, never @keep, until @need more bytes
 * fit under the limit.  Call with f->lock held. */
static void evict_locked(struct kvs_store *s, struct fstore *f, uint64_t need,
			 const struct ent *keep)
{
	uint64_t max = s->attr.max_bytes;
	struct ent *e;

	if (!max)
		return;
	while (f->bytes + need > max) {
		e = f->lru.prev;
		if (e == keep)
			e = e->prev;
		if (e == &f->lru)
			break;
		/* One that cannot be removed leaves the index all the same:
		 * counted, and never tried again in a loop.  A file that does
		 * not carry kvslab's magic is not ours to remove: it only
		 * leaves the index. */
		if (!obj_is_kvslab(f, e->name))
			; /* foreign, or gone */
		else if (unlinkat(f->dirfd, e->name, 0) == 0)
			store_count(s, KVS_STORE_STAT_evicted, 1);
		else if (errno != ENOENT)
			store_count(s, KVS_STORE_STAT_io_errors, 1);
		idx_del(f, e);
	}
}

/* @file, of @size bytes, is the most recently used object now: moved to
 * the front (false), or added (true; *@added the entry, NULL without
 * memory).  f->lock held. */
static bool idx_use_locked(struct fstore *f, const char *file, uint64_t size,
			   struct ent **added)
{
	uint64_t h = name_hash(file);
	struct ent *e = idx_find(f, file, h);

	if (!e) {
		*added = idx_add(f, file, h, size);
		return true;
	}
	/* Written over (an empty file replaced) since last seen. */
	f->bytes += size - e->size;
	e->size = size;
	lru_unlink(e);
	lru_front(f, e);
	return false;
}

/* An object of @size bytes was found (get, exists, set of a present key):
 * the most recently used now, added if another process wrote it. */
static void idx_touch(struct kvs_store *s, const char *file, uint64_t size)
{
	struct fstore *f = s->be_priv;
	struct ent *e;

	pthread_mutex_lock(&f->lock);
	if (idx_use_locked(f, file, size, &e))
		evict_locked(s, f, 0, e);
	store_gauge(s, KVS_STORE_STAT_bytes_stored, f->bytes);
	pthread_mutex_unlock(&f->lock);
}

/* An object is gone (removed, or found absent): out of the index. */
static void idx_forget(struct kvs_store *s, const char *file)
{
	struct fstore *f = s->be_priv;
	struct ent *e;

	pthread_mutex_lock(&f->lock);
	e = idx_find(f, file, name_hash(file));
	if (e)
		idx_del(f, e);
	store_gauge(s, KVS_STORE_STAT_bytes_stored, f->bytes);
	pthread_mutex_unlock(&f->lock);
}

/* ------------------------------------------------------------ open */

/* mkdir -p, each directory made with @mode (those there are left as they
 * are). */
static int make_dirs(const char *path, mode_t mode)
{
	char *p = strdup(path), *c;
	int rc = 0;

	if (!p)
		return kvs_fail(ENOMEM);
	for (c = p + 1; *c; c++) {
		if (*c != '/')
			continue;
		*c = 0;
		if (mkdir(p, mode) < 0 && errno != EEXIST)
			rc = -1;
		*c = '/';
		if (rc)
			break;
	}
	if (!rc && mkdir(p, mode) < 0 && errno != EEXIST)
		rc = -1;
	free(p);
	return rc;
}

/* A temporary file of a writer that is gone: its pid does not exist, or
 * it is older than STALE_TMP_S. */
static bool tmp_stale(const char *name, const struct stat *st)
{
	const char *t = strstr(name, ".kvs.tmp.");
	long pid = t ? strtol(t + 9, NULL, 10) : 0;

	if (time(NULL) - st->st_mtime > STALE_TMP_S)
		return true;
	return pid > 0 && pid != (long)getpid() && kill((pid_t)pid, 0) < 0 && errno == ESRCH;
}

struct scanned {
	char *name;
	uint64_t size;
	struct timespec mtime;
};

static int by_mtime(const void *a, const void *b)
{
	const struct scanned *x = a, *y = b;

	if (x->mtime.tv_sec != y->mtime.tv_sec)
		return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
	if (x->mtime.tv_nsec != y->mtime.tv_nsec)
		return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
	return strcmp(x->name, y->name);
}

/* Index the directory's objects, oldest last used, and remove stale
 * temporary files.  -1 with errno ENOMEM, or the directory's error. */
static int scan_dir(struct kvs_store *s, struct fstore *f)
{
	struct scanned *v = NULL, *nv;
	size_t n = 0, cap = 0, i;
	struct dirent *de;
	struct stat st;
	DIR *d;
	int fd, rc = 0;

	fd = dup(f->dirfd);
	if (fd < 0)
		return -1;
	d = fdopendir(fd);
	if (!d) {
		close(fd);
		return -1;
	}
	while ((de = readdir(d))) {
		size_t len = strlen(de->d_name);

		if (de->d_name[0] == '.' ||
		    fstatat(f->dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
		    !S_ISREG(st.st_mode))
			continue;
		if (strstr(de->d_name, ".kvs.tmp.")) {
			if (tmp_stale(de->d_name, &st))
				(void)unlinkat(f->dirfd, de->d_name, 0);
			continue;
		}
		if (len < 5 || strcmp(de->d_name + len - 4, ".kvs") != 0)
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 256;
			nv = realloc(v, cap * sizeof(*v));
			if (!nv) {
				rc = kvs_fail(ENOMEM);
				break;
			}
			v = nv;
		}
		v[n].name = strdup(de->d_name);
		if (!v[n].name) {
			rc = kvs_fail(ENOMEM);
			break;
		}
		v[n].size = (uint64_t)st.st_size;
		v[n].mtime = st.st_mtim;
		n++;
	}
	closedir(d);
	if (rc == 0 && n) {
		qsort(v, n, sizeof(*v), by_mtime);
		/* Oldest first, each at the front: the newest ends there. */
		for (i = 0; i < n; i++)
			if (!idx_add(f, v[i].name, name_hash(v[i].name), v[i].size)) {
				rc = kvs_fail(ENOMEM);
				break;
			}
	}
	for (i = 0; i < n; i++)
		free(v[i].name);
	free(v);
	if (rc == 0) {
		evict_locked(s, f, 0, NULL);
		store_gauge(s, KVS_STORE_STAT_bytes_stored, f->bytes);
	}
	return rc;
}

static void fstore_free(struct fstore *f)
{
	struct ent *e, *nx;

	for (e = f->lru.next; e && e != &f->lru; e = nx) {
		nx = e->next;
		free(e);
	}
	free(f->tab);
	if (f->dirfd >= 0)
		close(f->dirfd);
	pthread_mutex_destroy(&f->lock);
	free(f);
}

static int file_open(struct kvs_store *s, const char *uri)
{
	const char *path = uri + strlen("file://");
	struct fstore *f;
	int e;

	if (path[0] != '/')
		return kvs_fail(EINVAL); /* file:///absolute/dir */
	if (make_dirs(path, s->attr.flags & KVS_STORE_SHARE_GROUP ? 0750 : 0700) < 0)
		return -1;
	f = calloc(1, sizeof(*f));
	if (!f)
		return kvs_fail(ENOMEM);
	f->dirfd = -1;
	f->lru.next = f->lru.prev = &f->lru;
	f->nbuckets = 256;
	f->tab = calloc(f->nbuckets, sizeof(*f->tab));
	if (!f->tab || pthread_mutex_init(&f->lock, NULL) != 0) {
		free(f->tab);
		free(f);
		return kvs_fail(ENOMEM);
	}
	s->be_priv = f;
	f->dirfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (f->dirfd < 0 || scan_dir(s, f) < 0) {
		e = errno;
		fstore_free(f);
		s->be_priv = NULL;
		return kvs_fail(e);
	}
	return 0;
}

static void file_close(struct kvs_store *s)
{
	fstore_free(s->be_priv);
}

/* ------------------------------------------------------------ calls */

static size_t file_exists(struct kvs_store *s, const char *const *names, size_t n)
{
	struct fstore *f = s->be_priv;
	char p[OBJ_PATH_MAX];
	struct stat st;
	size_t i;

	for (i = 0; i < n; i++) {
		obj_path(p, names[i]);
		if (fstatat(f->dirfd, p, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			if (errno != ENOENT)
				store_count(s, KVS_STORE_STAT_io_errors, 1);
			else
				idx_forget(s, p);
			break;
		}
		/* Something else under the name (a FIFO, a link, a file of
		 * another size) is no page. */
		if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size != STORE_HDR_BYTES + s->attr.page_bytes)
			break;
		idx_touch(s, p, (uint64_t)st.st_size);
	}
	return i;
}

/* Advance @iov (two vectors) past @k bytes. */
static void iov_advance(struct iovec *iov, size_t k)
{
	int j;

	for (j = 0; j < 2 && k; j++) {
		size_t t = k < iov[j].iov_len ? k : iov[j].iov_len;

		iov[j].iov_base = (char *)iov[j].iov_base + t;
		iov[j].iov_len -= t;
		k -= t;
	}
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
		struct stat st;
		bool ioerr = false;
		int fd;

		obj_path(p, names[i]);
		got[i] = -1;
		fd = obj_open(f, p);
		if (fd < 0) {
			if (errno == ELOOP)
				got[i] = 0; /* a symbolic link: present, not ours */
			else if (errno != ENOENT)
				store_count(s, KVS_STORE_STAT_io_errors, 1);
			else
				idx_forget(s, p);
			continue;
		}
		if (fstat(fd, &st) < 0) {
			close(fd);
			store_count(s, KVS_STORE_STAT_io_errors, 1);
			continue;
		}
		if (!S_ISREG(st.st_mode)) {
			/* A FIFO, a device, a directory: present, nothing read,
			 * so the core neither takes nor removes it. */
			close(fd);
			got[i] = 0;
			continue;
		}
		while (have < want) {
			ssize_t r = preadv(fd, iov, 2, (off_t)have);

			if (r < 0 && errno == EINTR)
				continue;
			if (r < 0)
				ioerr = true;
			if (r <= 0)
				break;
			have += (size_t)r;
			iov_advance(iov, (size_t)r);
		}
		close(fd);
		if (ioerr) {
			/* Not the object's fault: a miss, left in place. */
			store_count(s, KVS_STORE_STAT_io_errors, 1);
			continue;
		}
		/* Short (torn, truncated) or long: reported so, and removed
		 * by the core when it does not verify. */
		got[i] = have == want && (uint64_t)st.st_size != want ? (ssize_t)st.st_size
								      : (ssize_t)have;
		idx_touch(s, p, (uint64_t)st.st_size);
	}
}

static int write_all(int fd, const void *a, size_t na, const void *b, size_t nb)
{
	struct iovec iov[2] = {{(void *)a, na}, {(void *)b, nb}};
	size_t want = na + nb, done = 0;

	while (done < want) {
		ssize_t r = pwritev(fd, iov, 2, (off_t)done);

		if (r < 0 && errno == EINTR)
			continue;
		if (r == 0)
			errno = ENOSPC;
		if (r <= 0)
			return -1;
		done += (size_t)r;
		iov_advance(iov, (size_t)r);
	}
	return 0;
}

/* Reserve @size bytes under the limit, evicting to make room; false if
 * the object can never fit. */
static bool reserve(struct kvs_store *s, struct fstore *f, uint64_t size)
{
	bool ok = true;

	pthread_mutex_lock(&f->lock);
	if (s->attr.max_bytes && size > s->attr.max_bytes) {
		ok = false;
	} else {
		evict_locked(s, f, size, NULL);
		f->bytes += size;
	}
	store_gauge(s, KVS_STORE_STAT_bytes_stored, f->bytes);
	pthread_mutex_unlock(&f->lock);
	return ok;
}

/* A reserved write done (@file written) or not (@file NULL). */
static void settle(struct kvs_store *s, struct fstore *f, const char *file, uint64_t size)
{
	struct ent *e;

	pthread_mutex_lock(&f->lock);
	f->bytes -= size;
	if (file) /* written twice at once: one object, counted once */
		(void)idx_use_locked(f, file, size, &e);
	store_gauge(s, KVS_STORE_STAT_bytes_stored, f->bytes);
	pthread_mutex_unlock(&f->lock);
}

static void file_set(struct kvs_store *s, const char *const *names, size_t n,
		     const void *const *hdr, const void *const *val, int *res)
{
	struct fstore *f = s->be_priv;
	char p[OBJ_PATH_MAX], t[OBJ_PATH_MAX + 48];
	uint64_t size = STORE_HDR_BYTES + s->attr.page_bytes;
	struct stat st;
	size_t i;

	for (i = 0; i < n; i++) {
		int fd;

		obj_path(p, names[i]);
		res[i] = 0;
		if (fstatat(f->dirfd, p, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		    !(S_ISREG(st.st_mode) && st.st_size == 0)) {
			if (S_ISREG(st.st_mode) && (uint64_t)st.st_size == size) {
				res[i] = 2;
				idx_touch(s, p, (uint64_t)st.st_size);
			} else {
				/* The name is taken by something that is not a
				 * page of ours to replace: not stored. */
				store_count(s, KVS_STORE_STAT_io_errors, 1);
			}
			continue;
		}
		/* Absent, or an empty file: what a crash leaves of an object
		 * renamed before its data reached the disk (fsync NONE).  It
		 * holds nothing to lose; the rename below goes over it. */
		if (!reserve(s, f, size)) {
			store_count(s, KVS_STORE_STAT_io_errors, 1);
			continue;
		}
		snprintf(t, sizeof(t), "%s.tmp.%ld.%llu", p, (long)getpid(),
			 (unsigned long long)atomic_fetch_add(&f->seq, 1));
		fd = openat(f->dirfd, t, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
			    s->attr.flags & KVS_STORE_SHARE_GROUP ? 0640 : 0600);
		if (fd < 0) {
			settle(s, f, NULL, size);
			store_count(s, KVS_STORE_STAT_io_errors, 1);
			continue;
		}
		if (write_all(fd, hdr[i], STORE_HDR_BYTES, val[i], s->attr.page_bytes) < 0 ||
		    (s->attr.fsync != KVS_FSYNC_NONE && fdatasync(fd) < 0)) {
			close(fd);
			unlinkat(f->dirfd, t, 0);
			settle(s, f, NULL, size);
			store_count(s, KVS_STORE_STAT_io_errors, 1);
			continue;
		}
		if (close(fd) < 0 || renameat(f->dirfd, t, f->dirfd, p) < 0) {
			unlinkat(f->dirfd, t, 0);
			settle(s, f, NULL, size);
			store_count(s, KVS_STORE_STAT_io_errors, 1);
			continue;
		}
		/* FULL: the rename itself survives a power loss. */
		if (s->attr.fsync == KVS_FSYNC_FULL && fsync(f->dirfd) < 0)
			store_count(s, KVS_STORE_STAT_io_errors, 1);
		settle(s, f, p, size);
		res[i] = 1;
	}
}

static int file_remove(struct kvs_store *s, const char *name)
{
	struct fstore *f = s->be_priv;
	char p[OBJ_PATH_MAX];
	int rc;

	obj_path(p, name);
	rc = unlinkat(f->dirfd, p, 0);
	if (rc < 0 && errno != ENOENT) {
		store_count(s, KVS_STORE_STAT_io_errors, 1);
		return -1;
	}
	idx_forget(s, p);
	return 0;
}

const struct store_backend store_file_backend = {
	.scheme = "file",
	.open = file_open,
	STORE_BACKEND_OPS(file),
};
