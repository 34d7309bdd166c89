/* SPDX-License-Identifier: MIT */
/*
 * lib/elastic/elastic.c - elastic KV memory: a limit on what a pool maps that an
 * engine lowers and raises at run time (engines sharing a device give
 * memory to each other), and compaction.
 *
 * Both work on every cache registered on the pool (lib/mem/cacheops.h:
 * the radix, hashed and tiered caches register at creation), or on the
 * one radix cache the caller names, through the caches' operations; this
 * file knows no cache's structure.
 *
 * Lowering the limit is planned before anything changes.  A census of the
 * slabs (lib/mem/slab_limit.c) and, per page, how many caches hold it in
 * an evictable entry (unlocked_pages()) tell, for every mapped slab,
 * whether a page in it is *pinned*: its count exceeds the caches'
 * evictable references (a running request, a locked node, a block in use,
 * a page shared by a request and a cache).  A slab with a pinned page
 * cannot empty; those slabs, and the ones in flight or broken, are the
 * floor: a limit below it fails ENOMEM with nothing changed.  Otherwise
 * the slabs to give back are the empty ones first, then the unpinned
 * slabs with the fewest live pages (slab-aware eviction: whole slabs
 * empty, and no page outside them is evicted, apart from the nodes below
 * an evicted node, which cannot outlive it).  The cap goes on first, so
 * nothing maps past it meanwhile; each cache evicts what holds pages of
 * the chosen slabs (evict_slabs()); the emptied slabs go back through the
 * allocator's fenced release (the call waits for the fence), and the
 * chunk pool too when it is what stands above the limit.
 *
 * Compaction plans the same way (a page can move when its count is the
 * caches' movable references, held_pages(), plus the request table's rows
 * naming it), then isolates the pages to move in every cache (their
 * holders pinned: no eviction, reset or limit can drop them), copies the
 * bytes with no lock held (device to device, in batches on the driver's
 * copy queue, which waits on the device for the engine's streams that the
 * pool was given: compact_copy()), and commits inside every cache's
 * writer section
 * (the caches' migrate() nested in registration order, the commit
 * innermost): a page moves only if its count is still what the plan saw,
 * compared and moved under slab->lock (kvsi_slab_move_refs()), then the
 * rows are rewritten and each cache names the new pages; last, the caches
 * put their entries back.  Rows are the caller's to keep still (the
 * documented rule: no other thread uses the table meanwhile); a reference
 * taken or dropped behind the call's back is caught by the count check.
 *
 * Locking (the order is in common/common.h).  pool->elastic serializes
 * these calls on one pool and the caches' registration; each cache's
 * writer lock and slab->lock are taken under it, one cache at a time,
 * except in compaction's commit, where the caches' writer locks nest in
 * registration order (only there).  Allocation, free and matching may run
 * meanwhile: the plan is a snapshot, so a limit may end up unmet (EBUSY:
 * pages cached by another thread, or taken meanwhile), which the report
 * shows; the engine calls these between forward passes.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"
#include "elastic/elastic_int.h"
#include "kvslab/elastic.h"
#include "mem/cacheops.h"
#include "mem/fence.h"
#include "mem/slab_defs.h"

/* The caches an elastic call works with: @cache alone, or every cache
 * registered on @p when it is NULL.  Under pool->elastic. */
struct use {
	const struct kvsi_cache_ops *ops;
	void *obj;
};

struct uses {
	struct use *v;
	unsigned n;
};

static int uses_get(kvs_pool_t *p, void *cache, struct uses *u)
{
	unsigned i, n = kvsi_pool_ncaches(p);

	u->n = 0;
	u->v = calloc(n ? n : 1, sizeof(*u->v));
	if (!u->v)
		return kvs_fail(ENOMEM);
	for (i = 0; i < n; i++) {
		const struct kvsi_cache_ops *ops;
		void *obj = kvsi_pool_cache(p, i, &ops);

		if (!cache || obj == cache)
			u->v[u->n++] = (struct use){ops, obj};
	}
	return 0;
}

/* One more for @cnt[page] of every page set in @map. */
static void count_pages(const uint64_t *map, uint64_t npages, uint16_t *cnt)
{
	uint64_t pg;

	for (pg = bits_next_set(map, 0, npages); pg < npages; pg = bits_next_set(map, pg + 1, npages))
		cnt[pg]++;
}

/* Add to @cnt[page] one for every cache whose @which page set holds it
 * (unlocked_pages or held_pages); @map is scratch of @words words. */
static int uses_count(const struct uses *u, bool held, uint64_t *map, size_t words,
		      uint16_t *cnt, uint64_t npages)
{
	unsigned i;

	for (i = 0; i < u->n; i++) {
		int rc;

		memset(map, 0, words * sizeof(*map));
		rc = held ? u->v[i].ops->held_pages(u->v[i].obj, map)
			  : u->v[i].ops->unlocked_pages(u->v[i].obj, map);
		if (rc < 0)
			return -1;
		count_pages(map, npages, cnt);
	}
	return 0;
}

struct cand {
	uint64_t slab;
	uint32_t live, inuse;
};

static int cand_cmp(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;

	if (x->live != y->live)
		return x->live < y->live ? -1 : 1;
	if (x->inuse != y->inuse)
		return x->inuse < y->inuse ? -1 : 1;
	return x->slab < y->slab ? -1 : x->slab > y->slab;
}

/**
 * kvs_pool_set_limit() - lower or raise the bytes @pool may map, now.
 * @pool: pool.
 * @bytes: the new limit on mapped bytes, all buffers (0 gives back all it
 *         can).  Above the pool's creation budget, the budget still binds.
 * @cache: the radix cache over @pool whose unlocked pages may be evicted
 *         to meet the limit, or NULL for every cache registered on @pool.
 * @rep: receives what was done, or NULL.
 *
 * See kvs_pool_set_limit(3).
 *
 * Context: MT-Safe; calls on one pool are serialized (pool->elastic), and
 * take each cache's writer lock and slab->lock under it.  Waits for the device
 * (the release fence) with no lock of the cache or the allocator held.
 * Return: 0, or -1 with errno EINVAL, ENOMEM (the running requests' slabs
 * alone exceed @bytes: the limit is not applied, nothing is evicted),
 * EOPNOTSUPP (a static pool), EBUSY (applied, but pages cached by other
 * threads or allocated meanwhile keep the mapped bytes above it), or the
 * driver's errno (applied; what failed to unmap is retried later).
 */
KVS_EXPORT int kvs_pool_set_limit(kvs_pool_t *p, size_t bytes, kvs_radix_t *cache,
				  kvs_limit_report_t *rep)
{
	uint64_t t0 = kvs_now_ns(), nslabs, npages, i, floor = 0, pinned = 0, ncand = 0, nempty = 0,
		 stuck = 0;
	size_t slab_total, mapped0, pooled0, mapped, pooled, old, need = 0;
	kvs_limit_report_t r;
	uint64_t *unlocked = NULL, *target = NULL;
	uint16_t *evcnt = NULL;
	struct uses u = {0};
	struct cand *cand = NULL;
	uint32_t pps, *inuse = NULL;
	pthread_mutex_t *lk;
	kvs_slab_t *s;
	int err = 0, n;

	if (!p || (cache && kvs_radix_pool(cache) != p))
		return kvs_fail(EINVAL);
	s = kvs_pool_slab(p);
	lk = kvsi_pool_elastic(p);
	memset(&r, 0, sizeof(r));
	kvsi_slab_geom(s, &pps, &nslabs, &slab_total);
	npages = nslabs * pps;
	pthread_mutex_lock(lk);
	old = kvsi_slab_limit(s);
	kvsi_slab_held(s, &mapped0, &pooled0);
	if (mapped0 + pooled0 <= bytes) {
		/* Raising, or lowering to what is held already: the cap alone. */
		if (kvsi_slab_set_limit(s, bytes, NULL) < 0) {
			err = errno;
			goto out;
		}
		r.limit = kvsi_slab_limit(s);
		r.bytes_mapped = mapped0;
		goto out;
	}
	inuse = malloc(nslabs * sizeof(*inuse));
	unlocked = calloc((npages + 63) / 64, sizeof(*unlocked));
	evcnt = calloc(npages, sizeof(*evcnt));
	target = calloc((nslabs + 63) / 64, sizeof(*target));
	cand = malloc(nslabs * sizeof(*cand));
	if (!inuse || !unlocked || !evcnt || !target || !cand || uses_get(p, cache, &u) < 0) {
		err = ENOMEM;
		goto out_state;
	}
	if (kvsi_slab_set_limit(s, old, NULL) < 0) { /* EOPNOTSUPP before any work */
		err = errno;
		goto out_state;
	}
	/* Per page, the references eviction could drop: one for each cache
	 * holding it in an evictable entry. */
	if (uses_count(&u, false, unlocked, (npages + 63) / 64, evcnt, npages) < 0) {
		err = errno;
		goto out_state;
	}
	kvsi_slab_census(s, inuse, &mapped0, &pooled0);

	/* Which slabs can empty, and what it costs. */
	for (i = 0; i < nslabs; i++) {
		uint32_t live = 0, q;
		bool pin = false;

		if (inuse[i] == KVSI_SLAB_UNMAPPED)
			continue;
		if (inuse[i] == KVSI_SLAB_STUCK) {
			floor++;
			stuck++;
			continue;
		}
		for (q = 0; q < pps; q++) {
			uint32_t pg = (uint32_t)(i * pps + q);
			int rc = kvs_slab_refcount(s, pg);

			if (rc <= 0)
				continue;
			live++;
			if ((uint32_t)rc > evcnt[pg]) {
				pin = true;
				pinned++;
			}
		}
		if (pin)
			floor++;
		else if (inuse[i] == 0)
			nempty++;
		else
			cand[ncand++] = (struct cand){i, live, inuse[i]};
	}
	/* The floor, and what compaction could bring it to: the pinned pages
	 * packed into whole slabs, beside the slabs nobody can empty now. */
	r.floor_bytes = floor * slab_total;
	r.packed_bytes = ((pinned + pps - 1) / pps + stuck) * slab_total;
	if (bytes < r.floor_bytes) {
		err = ENOMEM;
		goto out_state;
	}
	/* Slabs to give back beyond the empty ones: the cheapest to empty. */
	if (mapped0 > bytes)
		need = (mapped0 - bytes + slab_total - 1) / slab_total;
	if (need > nempty) {
		qsort(cand, ncand, sizeof(*cand), cand_cmp);
		for (i = 0; i < need - nempty && i < ncand; i++)
			bit_set(target, cand[i].slab);
	}
	kvsi_slab_set_limit(s, bytes, NULL);
	for (unsigned c = 0; need > nempty && c < u.n; c++) {
		long ev = u.v[c].ops->evict_slabs(u.v[c].obj, target);

		if (ev < 0 && r.evicted_tokens == 0) {
			err = errno; /* ENOMEM: nothing was evicted */
			kvsi_slab_set_limit(s, old, NULL);
			goto out_state;
		}
		/* A later cache short of memory leaves its pages: the limit
		 * may end up unmet (EBUSY below). */
		if (ev > 0)
			r.evicted_tokens += (uint64_t)ev;
	}
	n = kvsi_slab_give_back(s, bytes);
	if (n < 0)
		err = errno;
	else
		r.slabs_unmapped = (uint64_t)n;
	kvsi_slab_held(s, &mapped, &pooled);
	if (!err && mapped > bytes)
		err = EBUSY;
	r.limit = kvsi_slab_limit(s);
	r.bytes_mapped = mapped;
	if (mapped0 + pooled0 > mapped + pooled)
		r.bytes_returned = mapped0 + pooled0 - (mapped + pooled);
	goto out;
out_state:
	r.limit = kvsi_slab_limit(s);
	r.bytes_mapped = mapped0;
out:
	pthread_mutex_unlock(lk);
	KVS_FREE_ALL(inuse, unlocked, evcnt, u.v, target, cand);
	r.elapsed_ns = kvs_now_ns() - t0;
	if (rep)
		*rep = r;
	if (err)
		return kvs_fail(err);
	return 0;
}

/**
 * kvs_pool_limit() - the limit on @pool's mapped bytes in force: the
 * smaller of its creation budget and the last kvs_pool_set_limit(), and
 * never more than its reservation can map.
 * @pool: pool.
 *
 * Context: MT-Safe.
 * Return: the limit in bytes; 0 for NULL.
 */
KVS_EXPORT size_t kvs_pool_limit(kvs_pool_t *p)
{
	return p ? kvsi_slab_limit(kvs_pool_slab(p)) : 0;
}

/* ----------------------------------------------------------- compaction */

void (*kvsi_compact_test_hook)(void *arg, int stage);
void *kvsi_compact_test_arg;

struct compact {
	kvs_pool_t *p;
	kvs_reqtab_t *tab;
	int32_t *newpage;
	uint32_t ps;
	size_t n;
	const uint32_t *from, *to;
	const uint16_t *rc0;		/* each page's count when planned */
	uint16_t *expect;
	bool *ok;			/* which moved */
	size_t done;
	/* The chain of the caches' migrate() (lib/mem/cacheops.h). */
	const struct uses *u;
	unsigned next;
	bool inner_ran;
};

/*
 * Inside every cache's writer section: move the reference counts of the
 * pages whose counts are what the plan saw (and that no cache kept back),
 * then rewrite every run of the table's columns naming a moved page.  A
 * page that stays gets newpage -1, so the caches leave its holders alone.
 */
static int compact_inside(struct compact *c)
{
	int32_t buf[256];
	size_t k;
	int err = 0;

	c->inner_ran = true;
	for (k = 0; k < c->n; k++)
		c->expect[k] = c->newpage[c->from[k]] >= 0 ? c->rc0[k] : 0;
	c->done = kvsi_slab_move_refs(kvs_pool_slab(c->p), c->n, c->from, c->to, c->expect, c->ok);
	for (k = 0; k < c->n; k++)
		if (!c->ok[k])
			c->newpage[c->from[k]] = -1;
	if (c->tab && c->done) {
		uint32_t slot, nreq = kvs_reqtab_max_reqs(c->tab), ctx = kvs_reqtab_max_context(c->tab);

		for (slot = 0; slot < nreq; slot++) {
			const int32_t *row = kvs_reqtab_row(c->tab, slot);
			uint32_t col = 0;

			if (!row)
				continue;
			while (col < ctx) {
				uint32_t n = 0;

				while (col + n < ctx && n < 256 && row[col + n] >= 0 &&
				       c->newpage[(uint32_t)row[col + n] / c->ps] >= 0) {
					int32_t l = row[col + n];

					buf[n++] = c->newpage[(uint32_t)l / c->ps] * (int32_t)c->ps +
						   l % (int32_t)c->ps;
				}
				if (n == 0) {
					col++;
					continue;
				}
				if (kvs_reqtab_write(c->tab, slot, col, n, buf) < 0 && !err)
					err = errno;
				col += n;
			}
		}
	}
	if (err)
		return kvs_fail(err);
	return 0;
}

/* One link of the chain: the next cache's migrate() around the rest, the
 * commit innermost.  A migrate() that failed before its inner step leaves
 * every page where it is, so the caches outside it change nothing. */
static int compact_chain(void *arg)
{
	struct compact *c = arg;
	const struct use *use;
	size_t k;
	int rc;

	if (c->next == c->u->n)
		return compact_inside(c);
	use = &c->u->v[c->next++];
	rc = use->ops->migrate(use->obj, c->newpage, compact_chain, c);
	if (rc < 0 && !c->inner_ran)
		for (k = 0; k < c->n; k++)
			c->newpage[c->from[k]] = -1;
	return rc;
}

/* How many of @v[0, @n) are consecutive pages in @v[0]'s slab (@pps pages). */
static size_t slab_run(const uint32_t *v, size_t n, uint32_t pps)
{
	size_t r = kvsi_run_len(v, n), room = pps - v[0] % pps;

	return r < room ? r : room;
}

/* Copy the bytes of pages @from to pages @to in every buffer of @p, device
 * to device on the driver's copy queue, ordered after the engine's work as
 * the allocator's own fence sees it (the pool's streams, or the engine's
 * fence: the fence module, lib/mem/fence.h; on the device for streams, a
 * host wait for an engine fence): one copy a run of pages consecutive on both sides
 * within a slab, gathered into kvs_drv_copy_batch() submissions of up to
 * COPY_BATCH copies, then a wait for the last one's event (the caller
 * frees the source pages next). */
#define COPY_BATCH 4096

static int compact_copy(kvs_pool_t *p, size_t n, const uint32_t *from, const uint32_t *to)
{
	const kvs_model_t *m = kvsi_pool_model(p);
	struct kvs_slab *s = kvs_pool_slab(p);
	kvs_drv_t *d = kvsi_pool_drv(p);
	int which[2] = {KVS_KV_K, KVS_KV_V}, nb = m->attn == KVS_ATTN_MLA ? 1 : 2;
	uint32_t ps = kvs_pool_page_size(p), layer, pps;
	struct kvsi_fence fence;
	kvs_event_t *done = NULL;
	kvs_copy_t *c = NULL;
	size_t cap, nc = 0, k, r, slab_total;
	uint64_t nslabs;
	int err = 0;

	kvsi_slab_geom(s, &pps, &nslabs, &slab_total);
	cap = n * (size_t)nb * m->layers;
	cap = cap < COPY_BATCH ? cap : COPY_BATCH;
	if (kvsi_fence_init(&fence, d, s->fence.streams, s->fence.nstreams, &s->fence.engine) < 0)
		return -1;
	c = malloc((cap ? cap : 1) * sizeof(*c));
	if (!c) {
		err = ENOMEM;
		goto out;
	}
	if (kvs_event_create(d, &done) < 0 || kvsi_fence_order_copies(&fence) < 0) {
		err = errno;
		goto out;
	}
	for (layer = 0; layer < m->layers && !err; layer++) {
		for (int w = 0; w < nb && !err; w++) {
			kvs_devptr_t base;
			size_t stride, pb;

			if (kvs_pool_buffer(p, layer, which[w], &base, &stride) < 0) {
				err = errno;
				break;
			}
			pb = stride * ps;
			for (k = 0; k < n && !err; k += r) {
				size_t rt = slab_run(to + k, n - k, pps);

				r = slab_run(from + k, n - k, pps);
				r = r < rt ? r : rt;
				if (nc == cap) {
					if (kvs_drv_copy_batch(d, KVS_COPY_DTOD, c, nc, NULL) < 0)
						err = errno;
					nc = 0;
				}
				c[nc].dst = base + (uint64_t)to[k] * pb;
				c[nc].src = base + (uint64_t)from[k] * pb;
				c[nc].bytes = r * pb;
				nc++;
			}
		}
	}
	if (!err && kvs_drv_copy_batch(d, KVS_COPY_DTOD, c, nc, done) < 0)
		err = errno;
	/* Wait for what was queued, failed or not: the sources are freed or
	 * the destinations given back next. */
	if (err)
		kvs_drv_synchronize(d);
	else if (kvs_event_wait(done) < 0)
		err = errno;
out:
	kvsi_fence_fini(&fence);
	kvs_event_destroy(done);
	free(c);
	if (err)
		return kvs_fail(err);
	return 0;
}

struct dense {
	uint64_t slab;
	uint32_t inuse;
	bool source;		/* every page free or movable: it can empty */
};

static int dense_cmp(const void *a, const void *b)
{
	const struct dense *x = a, *y = b;

	if (x->inuse != y->inuse)
		return x->inuse < y->inuse ? -1 : 1;
	return x->slab < y->slab ? -1 : x->slab > y->slab;
}

/**
 * kvs_pool_compact() - migrate live pages out of the sparsest slabs into
 * free pages of denser ones, so the sparse slabs empty.
 * @pool: pool.
 * @tab: the request table whose rows name @pool's locations, or NULL.
 * @cache: the radix cache over @pool whose pages may move, or NULL for
 *         every cache registered on @pool.
 * @max_pages: most pages to move in this call.
 *
 * See kvs_pool_compact(3).
 *
 * Context: MT-Safe against other elastic calls on @pool (pool->elastic)
 * and against the caches' own calls (their holders of the pages to move
 * are isolated); the engine's scheduler calls it between forward passes,
 * with no other thread using @tab meanwhile.  Takes every cache's writer
 * lock for the commit (nested in registration order) and slab->lock under
 * them; waits for the driver's copies with none held.
 * Return: pages moved (0: nothing to gain, or every planned page's count
 * changed meanwhile), or -1 with errno EINVAL, ENOMEM or the driver's
 * errno (nothing changed).
 */
KVS_EXPORT ssize_t kvs_pool_compact(kvs_pool_t *p, kvs_reqtab_t *tab, kvs_radix_t *cache,
				    size_t max_pages)
{
	uint64_t nslabs, npages, i, *srcmap = NULL, *pinned = NULL;
	uint32_t pps, ps, *inuse = NULL, *refs = NULL, *mark = NULL, *from = NULL, *to = NULL;
	uint16_t *held = NULL, *held2 = NULL, *rc0 = NULL, *expect = NULL;
	int32_t *newpage = NULL;
	struct dense *ord = NULL;
	size_t slab_total, mapped, pooled, nord = 0, lo, hi, moved = 0, k, nkeep = 0;
	struct uses u = {0};
	void **tok = NULL;
	unsigned niso = 0, c;
	bool *ok = NULL;
	pthread_mutex_t *lk;
	kvs_slab_t *s;
	int err = 0;

	if (!p || (cache && kvs_radix_pool(cache) != p))
		return kvs_fail(EINVAL);
	if (max_pages == 0)
		return 0;
	s = kvs_pool_slab(p);
	ps = kvs_pool_page_size(p);
	kvsi_slab_geom(s, &pps, &nslabs, &slab_total);
	npages = nslabs * pps;
	if (max_pages > npages)
		max_pages = npages;
	lk = kvsi_pool_elastic(p);
	pthread_mutex_lock(lk);
	inuse = malloc(nslabs * sizeof(*inuse));
	srcmap = calloc((npages + 63) / 64, sizeof(*srcmap));
	held = calloc(npages, sizeof(*held));
	held2 = calloc(npages, sizeof(*held2));
	pinned = malloc((npages + 63) / 64 * sizeof(*pinned));
	refs = calloc(npages, sizeof(*refs));
	mark = calloc(npages, sizeof(*mark));
	newpage = malloc(npages * sizeof(*newpage));
	ord = malloc(nslabs * sizeof(*ord));
	from = malloc(max_pages * sizeof(*from));
	to = malloc(max_pages * sizeof(*to));
	rc0 = malloc(max_pages * sizeof(*rc0));
	expect = malloc(max_pages * sizeof(*expect));
	ok = malloc(max_pages * sizeof(*ok));
	if (!inuse || !srcmap || !held || !held2 || !pinned || !refs || !mark || !newpage || !ord ||
	    !from || !to || !rc0 || !expect || !ok || uses_get(p, cache, &u) < 0) {
		err = ENOMEM;
		goto out;
	}
	tok = calloc(u.n ? u.n : 1, sizeof(*tok));
	if (!tok) {
		err = ENOMEM;
		goto out;
	}
	for (i = 0; i < npages; i++)
		newpage[i] = -1;
	/* Per page, the caches' references (srcmap is scratch here). */
	if (uses_count(&u, true, srcmap, (npages + 63) / 64, held, npages) < 0) {
		err = errno;
		goto out;
	}
	memset(srcmap, 0, (npages + 63) / 64 * sizeof(*srcmap));
	/* Rows referencing each page, each row once. */
	if (tab) {
		uint32_t slot, nreq = kvs_reqtab_max_reqs(tab), ctx = kvs_reqtab_max_context(tab);

		for (slot = 0; slot < nreq; slot++) {
			const int32_t *row = kvs_reqtab_row(tab, slot);
			uint32_t col;

			if (!row)
				continue;
			for (col = 0; col < ctx; col++) {
				uint64_t pg = (uint64_t)(uint32_t)row[col] / ps;

				if (row[col] >= 0 && pg < npages && mark[pg] != slot + 1) {
					mark[pg] = slot + 1;
					refs[pg]++;
				}
			}
		}
	}
	kvsi_slab_census(s, inuse, &mapped, &pooled);
	/* Partial slabs whose every page is free or movable: every reference
	 * belongs to a cache or to a row that will be rewritten. */
	for (i = 0; i < nslabs; i++) {
		uint32_t q, live = 0;
		bool good = true;

		if (inuse[i] == KVSI_SLAB_UNMAPPED || inuse[i] == KVSI_SLAB_STUCK || inuse[i] == 0 ||
		    inuse[i] >= pps)
			continue;
		for (q = 0; q < pps; q++) {
			uint64_t pg = i * pps + q;
			int rc = kvs_slab_refcount(s, (uint32_t)pg);

			if (rc <= 0)
				continue;
			live++;
			if ((uint32_t)rc > (uint32_t)held[pg] + refs[pg])
				good = false;
		}
		/* A page cached by another thread counts in inuse but not live:
		 * that slab cannot empty now, so it is only a destination. */
		ord[nord++] = (struct dense){i, inuse[i], good && live == inuse[i]};
	}
	qsort(ord, nord, sizeof(*ord), dense_cmp);
	/* Sources from the sparse end, destinations from the dense end. */
	lo = 0;
	hi = nord ? nord - 1 : 0;
	while (nord && lo < hi) {
		uint64_t src = ord[lo].slab;
		uint32_t need = inuse[src], q;
		size_t avail = 0, j, start = moved;

		if (!ord[lo].source) {
			lo++;
			continue;
		}
		if (moved + need > max_pages)
			break;
		for (j = hi; j > lo && avail < need; j--)
			avail += pps - inuse[ord[j].slab];
		if (avail < need)
			break;
		for (q = 0; q < pps; q++) {
			uint32_t pg = (uint32_t)(src * pps + q), got;
			int rc = kvs_slab_refcount(s, pg);

			if (rc <= 0)
				continue;
			while (hi > lo && inuse[ord[hi].slab] >= pps)
				hi--;
			/* A page allocated since the census has a holder the
			 * plan cannot see: this source cannot empty. */
			got = hi > lo && (uint32_t)rc <= (uint32_t)held[pg] + refs[pg]
				      ? kvsi_slab_take_in(s, ord[hi].slab, 1, &to[moved]) : 0;
			if (!got) {
				/* Taken meanwhile: give this source's pages back. */
				if (moved > start)
					kvs_slab_free_bulk(s, moved - start, to + start);
				for (j = start; j < moved; j++)
					newpage[from[j]] = -1;
				moved = start;
				goto planned;
			}
			inuse[ord[hi].slab]++;
			from[moved] = pg;
			rc0[moved] = (uint16_t)rc;
			newpage[pg] = (int32_t)to[moved];
			moved++;
		}
		lo++;
	}
planned:
	if (moved == 0)
		goto out;
	/* Isolate: pin the caches' holders of the pages to move, so that no
	 * eviction can drop them while the bytes are copied. */
	if (kvsi_compact_test_hook)
		kvsi_compact_test_hook(kvsi_compact_test_arg, KVSI_COMPACT_PLANNED);
	for (k = 0; k < moved; k++)
		bit_set(srcmap, from[k]);
	/* Keep only the pages whose holders, now pinned, are still the ones
	 * planned: a page may have changed hands in between (evicted, then
	 * allocated to someone else, even cached again), and a count alone
	 * cannot tell.  Each cache says which pages it pinned, in the section
	 * that pinned them. */
	for (niso = 0; niso < u.n; niso++) {
		memset(pinned, 0, (npages + 63) / 64 * sizeof(*pinned));
		if (u.v[niso].ops->isolate(u.v[niso].obj, srcmap, pinned, &tok[niso]) < 0) {
			err = errno;
			goto undo;
		}
		count_pages(pinned, npages, held2);
	}
	for (k = 0; k < moved; k++) {
		if (held2[from[k]] != held[from[k]] || (uint32_t)rc0[k] != held2[from[k]] + refs[from[k]] ||
		    kvs_slab_refcount(s, from[k]) != rc0[k])
			newpage[from[k]] = -1;
	}
	if (compact_copy(p, moved, from, to) < 0) {
		err = errno;
		goto undo;
	}
	if (kvsi_compact_test_hook)
		kvsi_compact_test_hook(kvsi_compact_test_arg, KVSI_COMPACT_COPIED);
	{
		struct compact cc = {.p = p, .tab = tab, .newpage = newpage, .ps = ps,
				     .n = moved, .from = from, .to = to, .rc0 = rc0,
				     .expect = expect, .ok = ok, .u = &u};

		if (compact_chain(&cc) < 0) {
			err = errno;
			if (!cc.inner_ran)
				goto undo;
		}
		/* The destinations of the pages that stayed go back. */
		for (k = 0; k < moved; k++)
			if (!ok[k])
				to[nkeep++] = to[k];
		if (nkeep)
			kvs_slab_free_bulk(s, nkeep, to);
		moved = cc.done;
	}
	goto out_put;
undo:
	kvs_slab_free_bulk(s, moved, to);
	moved = 0;
out_put:
	for (c = 0; c < niso; c++)
		u.v[c].ops->putback(u.v[c].obj, tok[c]);
out:
	pthread_mutex_unlock(lk);
	KVS_FREE_ALL(inuse, srcmap, pinned, held, held2, refs, mark, newpage, ord, from, to, rc0,
	             expect, ok, tok, u.v);
	if (err)
		return kvs_fail(err);
	return (ssize_t)moved;
}
