/* SPDX-License-Identifier: MIT */
/*
 * lib/mem/slab_page.c - the slab allocator's books of pages: the slab lists and
 * moving pages between slabs and their takers.
 *
 * What it owns.  The lists of mapped slabs (the empty list, ordered by the
 * time each slab emptied, and NBUCKET partial lists bucketed by fullness;
 * full slabs on none), the per-page free bitmap and per-slab counts, and
 * the operations that take free pages from a slab or give them back.  A
 * slab that becomes empty is stamped with ++empty_gen and the time, for the
 * fenced, decayed release of lib/mem/slab_grow.c.  Everything else in the
 * allocator stands on this file; it calls none of them.
 *
 * Locking (the order is in common/common.h).  Every function here is called
 * with slab->lock held and never drops it.
 */
#include "mem/slab_defs.h"

/* ------------------------------------------------------------------ lists */

static inline __attribute__((always_inline)) int32_t want_list(struct kvs_slab *s,
								uint32_t inuse)
{
	if (inuse == 0)
		return L_EMPTY;
	if (inuse >= s->pps)
		return L_FULL;
	/* floor(inuse * NBUCKET / pps) without a division on the hot path */
	return (int32_t)(((uint64_t)inuse * s->bucket_mul) >> 32);
}

int32_t slab_want_list(struct kvs_slab *s, uint32_t inuse)
{
	return want_list(s, inuse);
}

static int64_t *list_head(struct kvs_slab *s, int32_t list)
{
	return list == L_EMPTY ? &s->empty_head : &s->bucket_head[list];
}

/* The bodies of slab_list_del() and slab_list_add(), inline in
 * slab_relist(): a fragmented pool relists a slab every few pages. */
static inline __attribute__((always_inline)) void list_del(struct kvs_slab *s, uint64_t i)
{
	struct slab_info *x = &s->si[i];

	if (x->list == L_FULL) {
		s->n_full--;
	} else if (x->list != L_NONE) {
		int64_t *head = list_head(s, x->list);

		if (x->prev >= 0)
			s->si[x->prev].next = x->next;
		else
			*head = x->next;
		if (x->next >= 0)
			s->si[x->next].prev = x->prev;
		if (x->list == L_EMPTY) {
			if (s->empty_tail == (int64_t)i)
				s->empty_tail = x->prev;
			s->n_empty--;
		} else {
			s->n_partial--;
			if (*head < 0)
				s->bucket_mask &= ~(1ULL << x->list);
		}
	}
	x->list = L_NONE;
	x->prev = x->next = -1;
}

static inline __attribute__((always_inline)) void list_add(struct kvs_slab *s, uint64_t i,
							   int32_t list)
{
	struct slab_info *x = &s->si[i];
	int64_t *head;

	x->list = list;
	x->prev = x->next = -1;
	if (list == L_FULL) {
		s->n_full++;
		return;
	}
	head = list_head(s, list);
	x->next = *head;
	if (*head >= 0)
		s->si[*head].prev = (int64_t)i;
	*head = (int64_t)i;
	if (list == L_EMPTY) {
		if (s->empty_tail < 0)
			s->empty_tail = (int64_t)i;
		s->n_empty++;
	} else {
		s->n_partial++;
		s->bucket_mask |= 1ULL << list;
	}
}

void slab_list_del(struct kvs_slab *s, uint64_t i)
{
	list_del(s, i);
}

void slab_list_add(struct kvs_slab *s, uint64_t i, int32_t list)
{
	list_add(s, i, list);
}

void slab_relist(struct kvs_slab *s, uint64_t i)
{
	struct slab_info *x = &s->si[i];
	int32_t want = want_list(s, x->inuse);

	if (x->list != want) {
		list_del(s, i);
		if (want == L_EMPTY) {
			/* Pages of it may still be read by the device: it
			 * is unmapped only behind a fence recorded after now.
			 * When: for decay alone (decay_ms is set at create). */
			x->empty_seq = ++s->empty_gen;
			if (s->decay_ns)
				x->empty_ns = slab_decay_now(s);
		}
		list_add(s, i, want);
	}
}

/* ------------------------------------------------------------ page moves */

/*
 * The holes of a fragmented slab, one after another: words of summary word
 * @sw (its bits left to visit in *@sbits) with one free page each, each a
 * find-first-set on the summary and one on the word, until @n pages are in
 * @out or a word holds more (or none: then the caller looks at it).  The
 * summary bits of the words emptied go into *@sclr.  Returns the pages in
 * @out.  Lock held.
 */
static inline __attribute__((always_inline)) uint32_t
take_holes(uint64_t *fb, _Atomic uint16_t *ref, uint64_t sw, uint64_t *sbits, uint64_t *sclr,
	   uint32_t *out, uint32_t got, uint32_t n, bool hold)
{
	uint64_t sb = *sbits, clr = *sclr, base = sw * 64;

	while (sb) {
		uint64_t b = sb & -sb, w = base + (uint64_t)__builtin_ctzll(sb);
		uint64_t bits = fb[w], p;

		if (!bits || (bits & (bits - 1)))
			break;
		p = w * 64 + (uint64_t)__builtin_ctzll(bits);
		out[got++] = (uint32_t)p;
		if (hold)
			atomic_store_explicit(&ref[p], 1, memory_order_relaxed);
		fb[w] = 0;
		clr |= b;
		sb ^= b;
		if (got == n)
			break;
	}
	*sbits = sb;
	*sclr = clr;
	return got;
}

/*
 * Take up to @n free pages of mapped slab @i, lowest first; with @hold, give
 * each its first reference (count 1) on the way.  The words with a free bit
 * are found through the summary (freewords), read a summary word at a time
 * and kept in a register: a nearly full slab costs the pages it gives, not
 * its size.  The summary bits of the words it empties are gathered in a
 * register too and cleared with one store per summary word (a store per
 * page would make each hole wait for the one before it).  In a word, a page
 * alone (the holes of a fragmented slab) costs a find-first-set, two loads
 * and three stores, a word all free gives 64 pages in one go, a longer run
 * one iteration; never one bit at a time.  Lock held.
 */
uint32_t slab_take_runs(struct kvs_slab *s, uint64_t i, uint32_t n, uint32_t *out, bool hold)
{
	struct slab_info *x = &s->si[i];
	uint64_t first = i * s->pps, end = first + s->pps;
	uint64_t w = (first + (uint64_t)x->hint * 64) / 64, wend = (end + 63) / 64;
	uint64_t *fb = s->freebits, *fw = s->freewords;
	uint64_t sw = w >> 6, sbits = fw[sw] & (~0ULL << (w & 63)), sclr = 0;
	/* Words shared with the neighbour slabs: only the first and last. */
	bool edges = (first | end) & 63;
	_Atomic uint16_t *ref = s->ref;
	uint32_t got = 0;

	/* The summary bits of words past the slab's last are not ours. */
	if (sw == (wend - 1) >> 6 && (wend & 63))
		sbits &= ~0ULL >> (64 - (wend & 63));
	for (;;) {
		uint64_t bits, left, taken = 0;

		/* The next word with a free bit, 64 words a load. */
		while (!sbits) {
			if (sclr)
				fw[sw] &= ~sclr;
			sclr = 0;
			if (++sw * 64 >= wend)
				goto out;
			sbits = fw[sw];
			if (sw == (wend - 1) >> 6 && (wend & 63))
				sbits &= ~0ULL >> (64 - (wend & 63));
		}
		w = sw * 64 + (uint64_t)__builtin_ctzll(sbits);
		sbits &= sbits - 1;
		bits = fb[w];
		if (unlikely(edges)) {
			/* A word may be shared with the neighbour slabs:
			 * mask them off. */
			if (w * 64 < first)
				bits &= ~0ULL << (first - w * 64);
			if (w * 64 + 64 > end)
				bits &= ~0ULL >> (w * 64 + 64 - end);
		}
		if (bits && !(bits & (bits - 1))) {
			/* One page free in the word: a fragmented slab's hole. */
			uint64_t p = w * 64 + (uint64_t)__builtin_ctzll(bits), rest;

			out[got++] = (uint32_t)p;
			if (hold)
				atomic_store_explicit(&ref[p], 1, memory_order_relaxed);
			rest = fb[w] & ~bits;
			fb[w] = rest;
			sclr |= (uint64_t)(rest == 0) << (w & 63);
			if (got == n)
				break;
			/* More holes, in a loop of their own (fewer values
			 * live, none spilled), one for each @hold. */
			if (likely(!edges) && sbits) {
				if (hold)
					got = take_holes(fb, ref, sw, &sbits, &sclr, out, got, n, true);
				else
					got = take_holes(fb, ref, sw, &sbits, &sclr, out, got, n, false);
				if (got == n)
					goto done;
			}
			continue;
		}
		if (bits == ~0ULL && n - got >= 64) {
			/* A word all free: 64 pages, four indices and four
			 * counts a store. */
			const v4u_t four = {4, 4, 4, 4};
			v4u_t v = {0, 1, 2, 3};
			uint32_t *o = out + got;
			uint64_t j;

			v += (uint32_t)(w * 64);
			for (j = 0; j < 64; j += 16, v += four) {
				*(v4u_t *)(void *)(o + j) = v;
				v += four;
				*(v4u_t *)(void *)(o + j + 4) = v;
				v += four;
				*(v4u_t *)(void *)(o + j + 8) = v;
				v += four;
				*(v4u_t *)(void *)(o + j + 12) = v;
				if (hold) {
					ref4_store(ref + w * 64 + j, REF4(1));
					ref4_store(ref + w * 64 + j + 4, REF4(1));
					ref4_store(ref + w * 64 + j + 8, REF4(1));
					ref4_store(ref + w * 64 + j + 12, REF4(1));
				}
			}
			got += 64;
			taken = ~0ULL;
		}
		for (left = bits & ~taken; left && got < n;) {
			uint32_t lo = (uint32_t)__builtin_ctzll(left), len;
			uint64_t zeros, m;

			if (!(left >> lo & 2)) {
				/* A page alone. */
				uint64_t p = w * 64 + lo;

				out[got++] = (uint32_t)p;
				if (hold)
					atomic_store_explicit(&ref[p], 1, memory_order_relaxed);
				taken |= left & -left;
				left &= left - 1;
				continue;
			}
			zeros = ~(left >> lo);	/* 0 only for a full word */
			len = zeros ? (uint32_t)__builtin_ctzll(zeros) : 64;
			if (len > n - got)
				len = n - got;
			kvsi_iota_u32(out + got, (uint32_t)(w * 64 + lo), len);
			if (hold)
				ref_run_set(s, w * 64 + lo, len, 1);
			got += len;
			m = bits_mask(lo, (uint64_t)lo + len);
			left &= ~m;
			taken |= m;
		}
		if (!(fb[w] &= ~taken))
			sclr |= 1ULL << (w & 63);
		if (got == n)
			break;
	}
	if (0) {
out:
		w = wend;
	}
done:
	if (sclr)
		fw[sw] &= ~sclr;
	x->hint = (uint32_t)((w > first / 64 ? w * 64 - first : 0) / 64);
	if (x->hint * 64ULL >= s->pps)
		x->hint = 0;
	x->inuse += got;
	s->inuse_total += got;
	s->free_in_slabs -= got;
	slab_relist(s, i);
	return got;
}

/* slab_take_runs() leaving the counts at 0: for the magazines. */
uint32_t slab_take_many(struct kvs_slab *s, uint64_t i, uint32_t n, uint32_t *out)
{
	return slab_take_runs(s, i, n, out, false);
}

/* Give free page @p back to its slab.  Lock held. */
void slab_put(struct kvs_slab *s, uint32_t p)
{
	uint64_t i = p / s->pps;
	struct slab_info *x = &s->si[i];
	uint32_t w = (uint32_t)((p - i * s->pps) / 64);

	bit_set(s->freebits, p);
	bit_set(s->freewords, p / 64);
	if (w < x->hint)
		x->hint = w;
	s->freed_since_grow++;
	x->inuse--;
	s->inuse_total--;
	s->free_in_slabs++;
	slab_relist(s, i);
}

/* Give back what one slab's share of the runs freed: @cnt pages, the lowest
 * in bitmap word @minw of the slab. */
void slab_put_done(struct kvs_slab *s, uint64_t i, uint32_t cnt, uint32_t minw)
{
	struct slab_info *x = &s->si[i];

	if (!cnt)
		return;
	if (minw < x->hint)
		x->hint = minw;
	s->freed_since_grow += cnt;
	x->inuse -= cnt;
	s->inuse_total -= cnt;
	s->free_in_slabs += cnt;
	slab_relist(s, i);
}

/* Give back free pages @pages (a magazine's), a stretch of pages of one
 * slab at a time, so each slab is relisted once per stretch.  Lock held. */
void slab_put_many(struct kvs_slab *s, size_t n, const uint32_t *pages)
{
	size_t k = 0;

	while (k < n) {
		uint64_t i = pages[k] / s->pps, first = i * s->pps;
		struct slab_info *x = &s->si[i];
		uint32_t cnt = 0, minw = x->hint;

		/* Pages of the same slab: one unsigned compare, no division. */
		for (; k < n && pages[k] - first < s->pps; k++) {
			uint32_t w = (uint32_t)((pages[k] - first) >> 6);

			bit_set(s->freebits, pages[k]);
			bit_set(s->freewords, pages[k] / 64);
			if (w < minw)
				minw = w;
			cnt++;
		}
		slab_put_done(s, i, cnt, minw);
	}
}

/* The give-back of cursor @c moves to the slab of page @p: the slab before
 * gets what it was given.  Lock held. */
void slab_putc_switch(struct kvs_slab *s, struct slab_putc *c, uint64_t p)
{
	slab_putc_end(s, c);
	c->i = p / s->pps;
	c->first = c->i * s->pps;
	c->cnt = 0;
	c->minw = UINT32_MAX;
}

/* The slab cursor @c is in gets what it was given (relisted once for the
 * stretch of pages given back in it).  Lock held. */
void slab_putc_end(struct kvs_slab *s, struct slab_putc *c)
{
	if (c->i != UINT64_MAX)
		slab_put_done(s, c->i, c->cnt, c->minw);
}

/*
 * Give back the pages of run [@p, @p + @len) (in range, the callers
 * checked; it may cross slabs) through cursor @c.  With @whole, the caller
 * dropped it whole, its counts already 0: all of it goes back, bits set a
 * word at a time.  Otherwise the pages whose count is REF_DYING
 * (kvs_slab_free_bulk() or kvsi_slab_free_locs() dropped their last
 * reference), setting it to 0, so a page listed twice goes back once.  A
 * slab is relisted once per stretch of runs that stays in it.  Lock held.
 */
void slab_putc_run(struct kvs_slab *s, struct slab_putc *c, uint64_t p, uint64_t len, bool whole)
{
	uint64_t end = p + len;

	while (p < end) {
		uint64_t q, stop;

		if (p - c->first >= s->pps)	/* another slab */
			slab_putc_switch(s, c, p);
		stop = end < c->first + s->pps ? end : c->first + s->pps;
		if (whole) {
			bits_fill(s->freebits, p, stop, true);
			bits_fill(s->freewords, p / 64, (stop - 1) / 64 + 1, true);
			c->cnt += (uint32_t)(stop - p);
			if ((uint32_t)((p - c->first) >> 6) < c->minw)
				c->minw = (uint32_t)((p - c->first) >> 6);
		} else {
			for (q = p; q < stop; q++)
				slab_putc_page(s, c, q);
		}
		p = stop;
	}
}

/* The mapped slab to allocate from: fullest partial, else the newest empty
 * one (the oldest are the next to be given back). */
int64_t slab_pick(struct kvs_slab *s)
{
	if (s->bucket_mask)
		return s->bucket_head[63 - __builtin_clzll(s->bucket_mask)];
	return s->empty_head;
}
