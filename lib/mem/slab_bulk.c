/* SPDX-License-Identifier: MIT */
/*
 * lib/mem/slab_bulk.c - the slab allocator's run paths: freeing many pages
 * a run of consecutive pages at a time (kvs_slab_free_bulk(), and the
 * pool's and the radix cache's frees of locations and runs), contiguous
 * allocation, references, the lock-free reads of a run's counts that the
 * radix cache's checks and slab-aware eviction use, and flushing the
 * calling thread's magazine.  The allocator's design is in lib/mem/slab.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mem/slab_cpu.h"

/* ----------------------------------------------------------- bulk free */

/*
 * The bulk free paths work in runs of consecutive pages, not page by page:
 * the common caller hands back what kvs_slab_alloc_bulk() gave, runs of
 * up to a slab, and the radix cache frees thousands of consecutive pages
 * at page size 1.  A run whose pages are all at count 1 is dropped four
 * counts at a time; the others page by page as before, and a page alone
 * (what a fragmented pool gave) without a run's set-up.  Both phases of a
 * free (drop, then give back, both under the lock) read the runs from a
 * run_src, each once.
 */

/* Where a bulk free reads its pages: an array of pages
 * (kvs_slab_free_bulk()), or of token locations in pages of @ps tokens
 * (kvsi_slab_free_locs()). */
struct run_src {
	const struct kvsi_page_run *runs;	/* the runs themselves, or NULL */
	const uint32_t *pages;		/* or NULL, and then @locs */
	const int32_t *locs;
	size_t n, i;			/* entries, the next one */
	uint64_t ps;
	int shift;			/* log2(ps) for a power of two, else -1 */
};

/*
 * The next run of @r into @run: 1, 0 at the end, -1 for a negative
 * location.  For locations, adjacent tokens of one page count once
 * (kvs_pool_free(3)) and a run goes on while the next token is in the next
 * page: one shift (or one division, for a page size not a power of two)
 * per run, compares for the rest.  Page size 1 is the page case.
 */
static inline __attribute__((always_inline)) int src_next(struct run_src *r,
							  struct kvsi_page_run *run)
{
	size_t i = r->i, left = r->n - i;
	uint64_t lo, pg;
	int64_t loc;

	if (left == 0)
		return 0;
	if (r->runs) {
		run->first = r->runs[i].first;
		run->len = r->runs[i].len;
		r->i = i + 1;
		return run->len ? 1 : -1;
	}
	if (left > UINT32_MAX)
		left = UINT32_MAX;
	if (r->pages || r->ps == 1) {
		const uint32_t *v = r->pages ? r->pages + i : (const uint32_t *)(r->locs + i);

		run->first = v[0];
		/* A page alone (a fragmented pool's holes) without the
		 * vector loop's set-up. */
		if (left == 1 || v[1] != v[0] + 1)
			run->len = 1;
		else
			run->len = (uint32_t)kvsi_run_len(v, left);
		r->i = i + run->len;
		/* As locations, values from 2^31 up are negative. */
		if (!r->pages && (uint64_t)v[0] + run->len > (uint64_t)INT32_MAX + 1)
			return -1;
		return 1;
	}
	loc = r->locs[i];
	if (loc < 0)
		return -1;
	pg = r->shift >= 0 ? (uint64_t)loc >> r->shift : (uint64_t)loc / r->ps;
	lo = pg * r->ps;	/* first token of the run's last page */
	run->first = (uint32_t)pg;
	run->len = 1;
	for (i++; i < r->n; i++) {
		uint64_t d;

		loc = r->locs[i];
		if (loc < 0)
			break;
		d = (uint64_t)loc - lo;	/* huge below lo */
		if (d < r->ps)
			continue;	/* the same page */
		if (d >= 2 * r->ps || run->len == UINT32_MAX)
			break;
		lo += r->ps;		/* the next page */
		run->len++;
	}
	r->i = i;
	return 1;
}

/* Give back the references dropped on pages [@p, @end): a page found dying
 * was dropped to it by this call (nobody else may touch it then), the
 * others had more.  The order of the undo does not matter: of the entries
 * of one page, whichever comes first finds it dying. */
static void undo_pages(struct kvs_slab *s, uint64_t p, uint64_t end)
{
	for (; p < end; p++) {
		if (atomic_load_explicit(&s->ref[p], memory_order_relaxed) == REF_DYING)
			atomic_store_explicit(&s->ref[p], 1, memory_order_relaxed);
		else
			atomic_fetch_add_explicit(&s->ref[p], 1, memory_order_relaxed);
	}
	slab_share_changed(s);
}

/* Drop one reference to each page of @run, leaving REF_DYING on the last;
 * *nlast counts those.  0, or -1 with none of the run's references dropped
 * (a page free or dying). */
static int drop_run(struct kvs_slab *s, const struct kvsi_page_run *run, size_t *nlast)
{
	uint64_t p = run->first, end = p + run->len, q;

	for (q = p; q < end; q++) {
		int r = unref(s, (uint32_t)q, REF_DYING);

		if (r < 0) {
			undo_pages(s, p, q);
			return -1;
		}
		*nlast += (size_t)r;
	}
	return 0;
}

/*
 * The body of both bulk frees, under slab->lock from start to end (the
 * counts are atomics all the same: kvs_slab_free() and kvs_slab_ref() work
 * on them without it).
 *
 * First every reference is dropped, all or nothing: on a bad entry the runs
 * dropped so far are read again and undone.  A run whose counts are all 1
 * is the common case (what kvs_slab_alloc_bulk() gave, freed by its only
 * holder): by the kref rule no one else may change those counts, so they
 * are checked and cleared to 0 four at a time, and the run is marked whole.
 * A page listed again later finds 0 and fails the call.  The other runs go
 * page by page, the last reference leaving REF_DYING, and so does a run of
 * one page (a fragmented pool's holes: one count, nothing to gain from
 * checking it four at a time), inline.  Then the runs are read again from
 * @src and the pages go back: the whole runs without looking at a count
 * again, the others by their REF_DYING marks, a page alone inline.  Only
 * the first 64 runs may be whole (a bit is kept for each of them alone).
 */
static inline __attribute__((always_inline)) int free_runs(struct kvs_slab *s,
							   struct run_src *src)
{
	struct slab_putc c = SLAB_PUTC_INIT(s);
	struct kvsi_page_run run;
	_Atomic uint16_t *ref = s->ref;
	uint64_t whole = 0;
	size_t nruns = 0, nlast = 0;
	int rc;

	pthread_mutex_lock(&s->lock);
	while ((rc = src_next(src, &run)) > 0) {
		if ((uint64_t)run.first + run.len > s->npages) {
			rc = -1;
			break;
		}
		if (run.len == 1) {
			/* A page alone, held once: the last reference. */
			if (likely(atomic_load_explicit(&ref[run.first], memory_order_relaxed) == 1)) {
				atomic_store_explicit(&ref[run.first], REF_DYING, memory_order_relaxed);
				nlast++;
			} else {
				int r = unref(s, run.first, REF_DYING);

				if (r < 0) {
					rc = -1;
					break;
				}
				nlast += (size_t)r;
			}
		} else if (nruns < 64 && ref_run_swap(s, run.first, run.len, 1, 0)) {
			whole |= 1ULL << nruns;
			nlast += run.len;
		} else if (drop_run(s, &run, &nlast) < 0) {
			rc = -1;
			break;
		}
		nruns++;
	}
	if (rc < 0) {
		/* A page dropped whole is at 0 now, like a dying one: the
		 * undo of either gives it its one reference back. */
		src->i = 0;
		while (nruns-- > 0 && src_next(src, &run) > 0)
			undo_pages(s, run.first, (uint64_t)run.first + run.len);
		pthread_mutex_unlock(&s->lock);
		return kvs_fail(EINVAL);
	}
	if (nlast) {
		size_t k;

		src->i = 0;
		for (k = 0; src_next(src, &run) > 0; k++) {
			if (run.len == 1)
				slab_putc_page(s, &c, run.first);
			else
				slab_putc_run(s, &c, run.first, run.len, k < 64 && (whole >> k & 1));
		}
		slab_putc_end(s, &c);
		ST(s, free_slow) += nlast;
		slab_after_free_locked(s);
	}
	pthread_mutex_unlock(&s->lock);
	return 0;
}

/*
 * Mark the pages alone among @v[0, @k) dying: phase one of free_pages()
 * left them at 0 while every page it met was held once, and from now on a
 * page may be met at 0 that another holder freed (see free_pages()).  The
 * array is cut into runs as free_pages() cuts it; the pages of runs are
 * left as they are (a run dropped whole goes back by its bit).  Lock held.
 */
static void mark_lone_dying(struct kvs_slab *s, const uint32_t *v, size_t k)
{
	size_t j = 0;

	while (j < k) {
		if (j + 1 < k && v[j + 1] == v[j] + 1) {
			j += kvsi_run_len(v + j, k - j < UINT32_MAX ? k - j : UINT32_MAX);
			continue;
		}
		atomic_store_explicit(&s->ref[v[j]], REF_DYING, memory_order_relaxed);
		j++;
	}
}

/*
 * Phase one of free_pages() for pages alone held once, from @v[@k] (one
 * such) on: each count left at @lone, until an entry starts a run, leaves
 * the allocator or is not at 1.  Out of line, so that the run paths keep
 * their registers.  Returns the index of that entry (or @n).  Lock held.
 */
static __attribute__((noinline)) size_t drop_lone(_Atomic uint16_t *ref, const uint32_t *v,
						  size_t k, size_t n, uint64_t limit, uint16_t lone)
{
	uint64_t p = v[k];

	for (;;) {
		atomic_store_explicit(&ref[p], lone, memory_order_relaxed);
		if (++k == n)
			break;
		p = v[k];
		if ((k + 1 < n && v[k + 1] == p + 1) || p >= limit ||
		    atomic_load_explicit(&ref[p], memory_order_relaxed) != 1)
			break;
	}
	return k;
}

/*
 * free_runs() for an array of @n pages (kvs_slab_free_bulk(), and
 * kvsi_slab_free_locs() at page size 1, whose locations are pages), each
 * below @limit: the same two phases, with the runs found in place and a
 * page alone (what a fragmented pool gave: the holes of many slabs) taken
 * without a run's set-up, in registers.  Both phases cut the array into
 * the same runs, so the bit of @whole of the k-th run of two pages or more
 * means the same in both.
 *
 * While every page met is held once (the common case: what
 * kvs_slab_alloc_bulk() gave, freed by its only holder), phase one leaves
 * each page alone at 0 rather than dying, as it does a run dropped whole:
 * no one else may touch those counts, and a page listed twice finds 0 the
 * second time and fails the call.  Phase two then gives every page alone
 * back without reading its count again.  The first page met with more
 * references (or a run that is not all at 1) makes the call a shared one:
 * the pages alone dropped so far are marked dying, and from then on the
 * call works as free_runs() does, the give-back going by the marks (a page
 * at 0 may then be one that its other holder freed meanwhile into its own
 * cache).  Phase two keeps its give-back cursor and the summary bits it
 * sets in registers, storing a summary word when it moves to another.
 *
 * The undo of a failed call gives back each entry before the bad one, as
 * undo_pages() does a run: a count at 0 or dying was the last reference.
 */
static int free_pages(struct kvs_slab *s, size_t n, const uint32_t *v, uint64_t limit)
{
	_Atomic uint16_t *ref = s->ref;
	uint64_t whole = 0;
	size_t k = 0, nruns = 0, nlast = 0, len;
	uint32_t lens[64];		/* of the first 64 runs, not found twice */
	uint16_t lone = 0;		/* what a page alone held once is left at */
	bool shared = false;

	if (limit > s->npages)
		limit = s->npages;
	pthread_mutex_lock(&s->lock);
	while (k < n) {
		uint64_t p = v[k];

		if (k + 1 < n && v[k + 1] == p + 1) {
			struct kvsi_page_run run;

			len = kvsi_run_len(v + k, n - k < UINT32_MAX ? n - k : UINT32_MAX);
			if (p + len > limit)
				goto bad;
			run.first = (uint32_t)p;
			run.len = (uint32_t)len;
			if (nruns < 64) {
				lens[nruns] = (uint32_t)len;
				if (ref_run_swap(s, p, len, 1, 0)) {
					whole |= 1ULL << nruns;
					nlast += len;
					nruns++;
					k += len;
					continue;
				}
			}
			if (!shared) {
				mark_lone_dying(s, v, k);
				shared = true;
				lone = REF_DYING;
			}
			if (drop_run(s, &run, &nlast) < 0)
				goto bad;
			nruns++;
			k += len;
			continue;
		}
		if (p >= limit)
			goto bad;
		/* A page alone, held once: the last reference.  Its
		 * followers alike in a loop of their own, counted by k. */
		if (likely(atomic_load_explicit(&ref[p], memory_order_relaxed) == 1)) {
			size_t k0 = k;

			k = drop_lone(ref, v, k, n, limit, lone);
			nlast += k - k0;
			continue;
		} else {
			int r;

			if (!shared) {
				mark_lone_dying(s, v, k);
				shared = true;
				lone = REF_DYING;
			}
			r = unref(s, (uint32_t)p, REF_DYING);
			if (r < 0)
				goto bad;
			nlast += (size_t)r;
		}
		k++;
	}
	if (nlast) {
		/* The cursor's fields in registers: the atomics below are
		 * compiler barriers, s->... would be read again every page. */
		struct slab_putc c = SLAB_PUTC_INIT(s);
		uint64_t *fb = s->freebits, *fw = s->freewords, pps = s->pps;
		uint64_t ci = c.i, cfirst = c.first, fwi = 0, facc = 0;
		uint32_t cnt = 0, minw = UINT32_MAX;
		size_t j = 0, kr = 0;

		while (j < n) {
			uint64_t p = v[j], w;

			if (j + 1 < n && v[j + 1] == p + 1) {
				len = kr < 64 ? lens[kr]
					      : kvsi_run_len(v + j, n - j < UINT32_MAX ? n - j : UINT32_MAX);
				c.i = ci;
				c.first = cfirst;
				c.cnt = cnt;
				c.minw = minw;
				slab_putc_run(s, &c, p, len, kr < 64 && (whole >> kr & 1));
				ci = c.i;
				cfirst = c.first;
				cnt = c.cnt;
				minw = c.minw;
				kr++;
				j += len;
				continue;
			}
			/* Pages alone of the cursor's slab and summary word,
			 * given back with no count to look at: a loop of
			 * their own, counted by j. */
			if (!shared && p - cfirst < pps && p >> 12 == fwi) {
				size_t j0 = j;

				for (;;) {
					fb[p >> 6] |= 1ULL << (p & 63);
					facc |= 1ULL << (p >> 6 & 63);
					w = (p - cfirst) >> 6;
					if (w < minw)
						minw = (uint32_t)w;
					if (++j == n)
						break;
					p = v[j];
					if ((j + 1 < n && v[j + 1] == p + 1) || p - cfirst >= pps ||
					    p >> 12 != fwi)
						break;
				}
				cnt += (uint32_t)(j - j0);
				continue;
			}
			j++;
			/* slab_putc_page(), its cursor's fields in registers. */
			if (shared) {
				if (atomic_load_explicit(&ref[p], memory_order_relaxed) != REF_DYING)
					continue;
				atomic_store_explicit(&ref[p], 0, memory_order_relaxed);
			}
			if (unlikely(p - cfirst >= pps)) {
				if (ci != UINT64_MAX)
					slab_put_done(s, ci, cnt, minw);
				ci = p / pps;
				cfirst = ci * pps;
				cnt = 0;
				minw = UINT32_MAX;
			}
			fb[p >> 6] |= 1ULL << (p & 63);
			if (unlikely(p >> 12 != fwi)) {
				if (facc)
					fw[fwi] |= facc;
				fwi = p >> 12;
				facc = 0;
			}
			facc |= 1ULL << (p >> 6 & 63);
			cnt++;
			w = (p - cfirst) >> 6;
			if (w < minw)
				minw = (uint32_t)w;
		}
		if (facc)
			fw[fwi] |= facc;
		c.i = ci;
		c.first = cfirst;
		c.cnt = cnt;
		c.minw = minw;
		slab_putc_end(s, &c);
		ST(s, free_slow) += nlast;
		slab_after_free_locked(s);
	}
	pthread_mutex_unlock(&s->lock);
	return 0;
bad:
	/* A page dropped whole or alone is at 0 now, like a dying one: the
	 * undo of either gives it its one reference back, entry by entry. */
	while (k-- > 0)
		undo_pages(s, v[k], (uint64_t)v[k] + 1);
	pthread_mutex_unlock(&s->lock);
	return kvs_fail(EINVAL);
}

/**
 * kvs_slab_free_bulk() - drop one reference to each of @n pages.
 * @slab: allocator.
 * @n: number of entries.
 * @pages: pages; a page may appear several times if it has that many
 *         references.
 *
 * All or nothing: if one entry is invalid, no reference is dropped.  Never
 * makes a driver call, never waits for the device, never allocates.
 *
 * Context: MT-Safe.
 * Return: 0, or -1 with errno EINVAL (an entry out of range or free).
 */
KVS_EXPORT int kvs_slab_free_bulk(kvs_slab_t *s, size_t n, const uint32_t *pages)
{
	if (!s || (!pages && n))
		return kvs_fail(EINVAL);
	return free_pages(s, n, pages, UINT64_MAX);
}

/*
 * kvsi_slab_free_locs() - kvs_slab_free_bulk() over token locations: drop
 * one reference to the page of each run of adjacent tokens of one page in
 * @locs (pages of @ps tokens).  All or nothing; never allocates, never calls
 * the driver.  For kvs_pool_free().
 *
 * Context: MT-Safe; takes slab->lock.
 * Return: 0, or -1 with errno EINVAL (a negative location, a page out of
 * range, or a free one).
 */
int kvsi_slab_free_locs(kvs_slab_t *s, size_t n, const int32_t *locs, uint32_t ps)
{
	struct run_src src = {.locs = locs, .n = n, .ps = ps, .shift = -1};

	if (!s || (!locs && n) || ps == 0)
		return kvs_fail(EINVAL);
	/* At page size 1 the locations are pages; from 2^31 up, negative. */
	if (ps == 1)
		return free_pages(s, n, (const uint32_t *)locs, (uint64_t)INT32_MAX + 1);
	if ((ps & (ps - 1)) == 0)
		src.shift = __builtin_ctz(ps);
	return free_runs(s, &src);
}

/*
 * kvsi_slab_free_page_runs() - kvs_slab_free_bulk() of the pages of @n runs
 * [first, first + len) the caller found already (the radix cache's
 * eviction reads a node's locations once for the held map and this).  All
 * or nothing, as kvs_slab_free_bulk(); a run of length 0 is invalid.
 *
 * Context: MT-Safe; takes slab->lock.
 * Return: 0, or -1 with errno EINVAL.
 */
int kvsi_slab_free_page_runs(kvs_slab_t *s, size_t n, const struct kvsi_page_run *runs)
{
	struct run_src src = {.runs = runs, .n = n, .shift = -1};

	if (!s || (!runs && n))
		return kvs_fail(EINVAL);
	return free_runs(s, &src);
}

/* First run of @n available pages, or UINT64_MAX.  Lock held. */
static uint64_t find_run(struct kvs_slab *s, size_t n)
{
	uint64_t p = 0, start = 0, run = 0;

	while (p < s->npages) {
		uint64_t i = p / s->pps;

		if (p % s->pps == 0 && s->si[i].state != S_MAPPED) {
			if (s->si[i].state == S_UNMAPPED) {
				run += s->pps;
			} else {
				run = 0;
				start = p + s->pps;
			}
			p += s->pps;
		} else if (p % 64 == 0 && p + 64 <= (i + 1) * s->pps &&
			   s->freebits[p / 64] == ~0ULL) {
			run += 64;
			p += 64;
		} else {
			if (bit_test(s->freebits, p)) {
				run++;
			} else {
				run = 0;
				start = p + 1;
			}
			p++;
		}
		if (run >= n)
			return start;
	}
	return UINT64_MAX;
}

/**
 * kvs_slab_alloc_contig() - allocate @n pages with consecutive indices.
 * @slab: allocator.
 * @n: pages wanted (>= 1).
 * @first: receives the first page; pages *first .. *first + n - 1 each get
 *         one reference.
 *
 * Slabs the run needs are mapped.  The calling thread's cache is given back
 * first; other threads' caches are not searched.
 *
 * Context: MT-Safe.
 * Return: 0, or -1 with errno ENOMEM (no such run, or the limit) or EINVAL.
 */
KVS_EXPORT int kvs_slab_alloc_contig(kvs_slab_t *s, size_t n, uint32_t *first)
{
	struct mag *m;
	uint64_t start = UINT64_MAX, p;
	int tries;

	if (!s || !first || n == 0)
		return kvs_fail(EINVAL);
	m = slab_mag_get(s);
	pthread_mutex_lock(&s->lock);
	if (m)
		slab_mag_flush_locked(s, m, 0);
	for (tries = 0; tries < 8; tries++) {
		uint64_t i, last;
		bool ready = true;

		start = find_run(s, n);
		if (start == UINT64_MAX)
			break;
		last = (start + n - 1) / s->pps;
		for (i = start / s->pps; i <= last; i++) {
			if (s->si[i].state == S_UNMAPPED) {
				ready = false;
				if (slab_claim_locked(s, i) < 0)
					return alloc_failed_unlock(s, errno);
			}
		}
		if (ready)
			break;
		start = UINT64_MAX; /* the lock was dropped: search again */
	}
	if (start == UINT64_MAX)
		return alloc_failed_unlock(s, ENOMEM);
	for (p = start; p < start + n; p++) {
		uint64_t i = p / s->pps;

		bit_clear(s->freebits, p);
		slab_words_sync(s, p / 64, p / 64 + 1);
		s->si[i].inuse++;
		s->inuse_total++;
		s->free_in_slabs--;
		if (p + 1 == start + n || (p + 1) % s->pps == 0)
			slab_relist(s, i);
	}
	ST(s, alloc_slow) += n;
	slab_after_alloc_locked(s);
	pthread_mutex_unlock(&s->lock);
	for (p = start; p < start + n; p++)
		atomic_store_explicit(&s->ref[p], 1, memory_order_relaxed);
	*first = (uint32_t)start;
	return 0;
}

/**
 * kvs_slab_ref() - add a reference to a held page.
 * @slab: allocator.
 * @page: a page the caller holds a reference to.
 *
 * Context: MT-Safe.
 * Return: 0, or -1 with errno EINVAL (out of range or free) or EOVERFLOW
 * (65534 references already).
 */
KVS_EXPORT int kvs_slab_ref(kvs_slab_t *s, uint32_t page)
{
	uint16_t r;

	if (!s || page >= s->npages)
		return kvs_fail(EINVAL);
	r = atomic_load_explicit(&s->ref[page], memory_order_relaxed);
	do {
		if (r == 0 || r == REF_DYING)
			return kvs_fail(EINVAL);
		if (r == MAX_REF)
			return kvs_fail(EOVERFLOW);
	} while (!atomic_compare_exchange_weak_explicit(&s->ref[page], &r, r + 1,
							 memory_order_relaxed,
							 memory_order_relaxed));
	slab_share_changed(s);
	return 0;
}

/**
 * kvs_slab_refcount() - a page's reference count.
 * @slab: allocator.
 * @page: page index.
 *
 * Context: MT-Safe (the answer may be stale at once).
 * Return: the count (0: free), or -1 with errno EINVAL (out of range).
 */
KVS_EXPORT int kvs_slab_refcount(kvs_slab_t *s, uint32_t page)
{
	uint16_t r;

	if (!s || page >= s->npages)
		return kvs_fail(EINVAL);
	r = atomic_load_explicit(&s->ref[page], memory_order_relaxed);
	return r == REF_DYING ? 0 : r;
}

/* Lanes of four 16-bit counts that are 0: a mask of their top bits
 * (exact, no borrow from lane to lane). */
static inline uint64_t lanes_zero(uint64_t x)
{
	const uint64_t low = 0x7fff7fff7fff7fffULL;

	return ~(((x & low) + low) | x) & ~low;
}

/*
 * kvsi_slab_run_held() - are pages [@first, @first + @n) all held (count
 * > 0, not dying)?  False when the run leaves the allocator.
 *
 * Context: MT-Safe (the answer may be stale at once).
 */
bool kvsi_slab_run_held(kvs_slab_t *s, uint32_t first, uint32_t n)
{
	_Atomic uint16_t *ref = s->ref;
	uint64_t p = first, end = (uint64_t)first + n, bad = 0;

	if (end > s->npages)
		return false;
	/* (count - 1) wraps 0 to the top: one compare for 0 and dying. */
	for (; p < end && (p & 3); p++)
		bad |= (uint16_t)(atomic_load_explicit(&ref[p], memory_order_relaxed) - 1) >= MAX_REF;
	/* Four counts a load: none 0, none dying (all ones). */
	for (; p + 4 <= end; p += 4) {
		uint64_t x = ref4_load(ref + p);

		bad |= lanes_zero(x) | lanes_zero(~x);
	}
	for (; p < end; p++)
		bad |= (uint16_t)(atomic_load_explicit(&ref[p], memory_order_relaxed) - 1) >= MAX_REF;
	return !bad;
}

/*
 * kvsi_slab_run_sole() - how many of pages [@first, @first + @n) are held
 * exactly once; 0 for a run leaving the allocator.
 *
 * Context: MT-Safe (the answer may be stale at once).
 */
uint32_t kvsi_slab_run_sole(kvs_slab_t *s, uint32_t first, uint32_t n)
{
	_Atomic uint16_t *ref = s->ref;
	uint64_t p = first, end = (uint64_t)first + n;
	uint32_t c = 0;

	if (end > s->npages)
		return 0;
	for (; p < end && (p & 3); p++)
		c += atomic_load_explicit(&ref[p], memory_order_relaxed) == 1;
	for (; p + 4 <= end; p += 4)
		/* The four lane bits summed into the top lane: no popcount
		 * instruction needed. */
		c += (uint32_t)(((lanes_zero(ref4_load(ref + p) ^ REF4(1)) >> 15) *
				 0x0001000100010001ULL) >> 48);
	for (; p < end; p++)
		c += atomic_load_explicit(&ref[p], memory_order_relaxed) == 1;
	return c;
}

/*
 * kvsi_slab_share_gen() - a count that moves whenever a held page gains or
 * loses a second reference: while it stands, which pages are held exactly
 * once has not changed (the radix cache keeps that per leaf).
 *
 * Context: MT-Safe.
 */
uint64_t kvsi_slab_share_gen(kvs_slab_t *s)
{
	return atomic_load_explicit(&s->share_gen, memory_order_acquire);
}

/**
 * kvs_slab_flush() - give the calling thread's cached pages back.
 * @slab: allocator.
 *
 * Context: MT-Safe.
 * Return: 0, or -1 with errno EINVAL.
 */
KVS_EXPORT int kvs_slab_flush(kvs_slab_t *s)
{
	struct mag *m;

	if (!s)
		return kvs_fail(EINVAL);
	m = slab_mag_get(s);
	if (!m)
		return 0;
	pthread_mutex_lock(&s->lock);
	slab_mag_flush_locked(s, m, 0);
	slab_after_free_locked(s);
	pthread_mutex_unlock(&s->lock);
	return 0;
}
