/* SPDX-License-Identifier: MIT */
/*
 * lib/mem/slab_stat.c - the slab allocator's statistics and validation.
 *
 * What it owns.  Reading: the slab family of the statistics module
 * (lib/stats.h): one snapshot of the counters of kvs_slab_stat()
 * (lock-protected event counts, gauges computed from the books, and the
 * magazines' per-thread fast-path counts summed on read) and the print's
 * header line, over which lib/stats.c gives the four accessors; and
 * kvs_slab_validate(), which recounts every page and every chunk from
 * scratch against the books.
 *
 * Locking (the order is in common/common.h).  Everything here takes
 * slab->lock to read a consistent snapshot; driver-call counters are
 * atomics read without it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mem/slab_cpu.h"

/**
 * kvs_slab_validate() - check every invariant of the allocator.
 * @slab: allocator.
 *
 * Recounts from scratch: each page is exactly one of free in a mapped slab,
 * cached by one thread, held (refcount > 0), or parked in a broken slab;
 * lists, counts and bytes agree with the recount; mapped bytes are within
 * the limit; every chunk the allocator created and has not released is in
 * the chunk pool, behind a mapped or broken slab, or parked.  Slabs another
 * thread (the worker) is mapping or unmapping are counted as such.
 *
 * Context: MT-Unsafe: no other thread may use @slab meanwhile (the worker
 * may run).
 * Return: 0, or -1 with errno EUCLEAN (an invariant is broken) or ENOMEM.
 */
KVS_EXPORT int kvs_slab_validate(kvs_slab_t *s)
{
	uint64_t i, p, n_empty = 0, n_partial = 0, n_full = 0, n_unmapped = 0, mapped = 0;
	uint64_t busy = 0, broken = 0, tail_seen = 0;
	uint64_t free_bits = 0, inuse = 0, *seen;
	struct mag *m;
	int bad = 0;

	if (!s)
		return kvs_fail(EINVAL);
	seen = calloc((s->npages + 63) / 64, sizeof(uint64_t));
	if (!seen)
		return kvs_fail(ENOMEM);
	pthread_mutex_lock(&s->lock);
	for (m = s->mags; m; m = m->next) {
		uint32_t k, n = atomic_load_explicit(&m->count, memory_order_relaxed);

		for (k = 0; k < n; k++) {
			p = m->pages[k];
			if (p >= s->npages || bit_test(seen, p) || bit_test(s->freebits, p) ||
			    atomic_load_explicit(&s->ref[p], memory_order_relaxed) != 0 ||
			    s->si[p / s->pps].state != S_MAPPED)
				bad = 1;
			else
				bit_set(seen, p);
		}
	}
	/* The summary of the free bitmap: a bit for each word not 0. */
	for (p = 0; p < (s->npages + 63) / 64 && !bad; p++)
		if (bit_test(s->freewords, p) != (s->freebits[p] != 0))
			bad = 1;
	for (i = 0; i < s->nslabs && !bad; i++) {
		struct slab_info *x = &s->si[i];
		uint64_t nfree = 0;

		if (x->state == S_UNMAPPED) {
			n_unmapped++;
			if (!bit_test(s->unmapped, i) || x->list != L_NONE || x->cs)
				bad = 1;
		} else if (x->state == S_MAPPED) {
			mapped++;
			if (bit_test(s->unmapped, i) || !x->cs)
				bad = 1;
		} else if (x->state == S_BROKEN) {
			broken++;
			if (bit_test(s->unmapped, i) || !x->cs || x->list != L_NONE ||
			    x->bad_lo >= x->bad_hi || x->bad_hi > s->nbuf)
				bad = 1;
		} else {
			busy++; /* being mapped or unmapped by another thread */
		}
		for (p = i * s->pps; p < (i + 1) * s->pps && !bad; p++) {
			uint16_t r = atomic_load_explicit(&s->ref[p], memory_order_relaxed);

			if (x->state != S_MAPPED) {
				/* unmapped, or parked in a broken slab */
				if (r || bit_test(s->freebits, p) || bit_test(seen, p))
					bad = 1;
			} else if (bit_test(s->freebits, p)) {
				nfree++;
				if (r)
					bad = 1;
			} else if (!r && !bit_test(seen, p)) {
				bad = 1; /* neither free, cached nor held: lost */
			} else if (r == REF_DYING) {
				bad = 1;
			}
		}
		if (x->state != S_MAPPED)
			continue;
		if (x->inuse != s->pps - nfree || x->list != slab_want_list(s, x->inuse))
			bad = 1;
		if ((int64_t)i == s->empty_tail)
			tail_seen = 1;
		free_bits += nfree;
		inuse += x->inuse;
		n_empty += x->list == L_EMPTY;
		n_partial += x->list >= 0;
		n_full += x->list == L_FULL;
	}
	if (!bad && (n_empty != s->n_empty || n_partial != s->n_partial || n_full != s->n_full ||
		     n_unmapped != s->n_unmapped || free_bits != s->free_in_slabs ||
		     inuse != s->inuse_total || busy != s->n_busy || broken != s->n_broken ||
		     s->n_mapping > busy || (n_empty > 0) != (tail_seen == 1) ||
		     (n_empty > 0 && s->si[s->empty_tail].list != L_EMPTY) ||
		     /* a slab being unmapped is still counted as mapped; one
		      * being mapped is not yet, but both are charged; a broken
		      * one is both */
		     (mapped + broken + busy - s->n_mapping) * s->slab_total != s->bytes_mapped ||
		     (mapped + broken + busy) * s->slab_total != s->bytes_charged ||
		     (s->max_mapped && s->bytes_charged > s->max_mapped)))
		bad = 1;
	/* Every chunk: pooled, behind a mapped or broken slab, or parked.
	 * Chunks of slabs in flight are between those places: skip then. */
	if (!bad && busy == 0 && s->filling == 0) {
		uint64_t parked = 0, pooled = 0;
		struct chunkset *cs;

		for (cs = s->parked; cs; cs = cs->next)
			for (uint32_t b = 0; b < s->nbuf; b++)
				parked += cs->c[b] != NULL;
		for (cs = s->pool; cs; cs = cs->next)
			pooled++;
		if (parked != s->n_parked || pooled != s->pool_count ||
		    s->nchunks != (pooled + mapped + broken) * s->nbuf + parked + s->n_releasing)
			bad = 1;
	}
	pthread_mutex_unlock(&s->lock);
	free(seen);
	return bad ? kvs_fail(EUCLEAN) : 0;
}

/* ---------------------------------------------------------- statistics */

/* Every statistic in one snapshot: the books under slab->lock, the
 * magazines' counts summed, the driver-call counters after. */
static void slab_fill(void *obj, uint64_t *v)
{
	struct kvs_slab *s = obj;
	uint64_t cached = 0, af = 0, ff = 0, mapped_slabs;
	struct mag *m;

	pthread_mutex_lock(&s->lock);
	memcpy(v, s->stats, sizeof(s->stats));
	for (m = s->mags; m; m = m->next) {
		cached += atomic_load_explicit(&m->count, memory_order_relaxed);
		af += atomic_load_explicit(&m->alloc_fast, memory_order_relaxed);
		ff += atomic_load_explicit(&m->free_fast, memory_order_relaxed);
	}
	mapped_slabs = s->n_empty + s->n_partial + s->n_full;
	v[KVS_SLAB_STAT_objects] = s->inuse_total - cached;
	v[KVS_SLAB_STAT_objects_free] = s->free_in_slabs + cached;
	v[KVS_SLAB_STAT_cpu_cached] = cached;
	v[KVS_SLAB_STAT_objs_per_slab] = s->pps;
	v[KVS_SLAB_STAT_total_objects] = mapped_slabs * s->pps;
	v[KVS_SLAB_STAT_slabs_full] = s->n_full;
	v[KVS_SLAB_STAT_slabs_partial] = s->n_partial;
	v[KVS_SLAB_STAT_slabs_empty] = s->n_empty;
	v[KVS_SLAB_STAT_slabs_unmapped] = s->n_unmapped;
	v[KVS_SLAB_STAT_bytes_mapped] = s->bytes_mapped;
	v[KVS_SLAB_STAT_bytes_mapped_peak] = s->bytes_peak;
	v[KVS_SLAB_STAT_bytes_live] = (s->inuse_total - cached) * (s->slab_total / s->pps);
	v[KVS_SLAB_STAT_bytes_pooled] = (uint64_t)s->pool_count * s->slab_total;
	v[KVS_SLAB_STAT_alloc_fast] = s->stats[KVS_SLAB_STAT_alloc_fast] + af;
	v[KVS_SLAB_STAT_free_fast] = s->stats[KVS_SLAB_STAT_free_fast] + ff;
	v[KVS_SLAB_STAT_slabs_broken] = s->n_broken;
	v[KVS_SLAB_STAT_chunks_parked] = s->n_parked;
	pthread_mutex_unlock(&s->lock);
	v[KVS_SLAB_STAT_drv_calls] = atomic_load_explicit(&s->drv_calls, memory_order_relaxed);
	v[KVS_SLAB_STAT_drv_calls_caller] =
		atomic_load_explicit(&s->drv_calls_caller, memory_order_relaxed);
	v[KVS_SLAB_STAT_drv_creates_caller] =
		atomic_load_explicit(&s->drv_creates_caller, memory_order_relaxed);
	v[KVS_SLAB_STAT_drv_ns] = atomic_load_explicit(&s->drv_ns, memory_order_relaxed);
}

/**
 * kvs_slab_fragmentation() - 1 - live bytes / mapped bytes.
 * @slab: allocator.
 *
 * Context: MT-Safe.
 * Return: a value in [0, 1]; 0 when nothing is mapped.
 */
KVS_EXPORT double kvs_slab_fragmentation(kvs_slab_t *s)
{
	uint64_t v[KVS_SLAB_STAT__COUNT];

	if (!s)
		return 0;
	slab_fill(s, v);
	if (!v[KVS_SLAB_STAT_bytes_mapped])
		return 0;
	return 1.0 - (double)v[KVS_SLAB_STAT_bytes_live] / (double)v[KVS_SLAB_STAT_bytes_mapped];
}

static void slab_header(void *obj, char *line, size_t size)
{
	const struct kvs_slab *s = obj;

	snprintf(line, size, "slab page_size %u pages_per_slab %u slabs %llu buffers %u\n",
		 s->page_size, s->pps, (unsigned long long)s->nslabs, s->nbuf);
}

/**
 * kvs_slab_stat() - read one statistic; kvs_slab_stat_get() reads one by
 * name, kvs_slab_stat_name() names one, kvs_slab_stats_print() prints every
 * one through a callback (a header line, then "name value  # description"
 * lines), all through lib/stats.c.
 * @slab: allocator.
 * @item: statistic.
 *
 * Context: MT-Safe (each read takes slab->lock; write_cb is called without
 * it).
 * Return: kvs_slab_stat(): its value, 0 for NULL or an unknown item;
 * kvs_slab_stat_name(): a static string, NULL for an unknown item; the
 * others: 0, or -1 with errno EINVAL (a NULL argument) or ENOENT (no such
 * statistic).
 */
KVSI_STATS_FAMILY(slab, KVS_SLAB_STATS, slab_fill, slab_header, &kvsi_style_desc, NULL, kvs_slab_t,
		  enum kvs_slab_stat);
