/* SPDX-License-Identifier: MIT */
/*
 * tools/replay/sim.c - a serving loop over kvslab, as SGLang's scheduler
 * runs one, for measuring memory and cache behaviour on a trace.
 *
 * A step of simulated time (step_ms) does what one scheduler iteration
 * does: admit waiting requests that have arrived, in arrival order, while
 * there are running slots and memory for their uncached tokens plus a
 * decode reserve (the head of the queue blocks the rest, as a FIFO policy
 * does, and a share of every running request's remaining output stays
 * reserved, as SGLang's new-token ratio does); prefill them, all at once or
 * a chunk a step (chunked prefill, with
 * cache_unfinished after each chunk); decode one token for every running
 * request; cache finished requests.  Memory comes through the library's
 * request flows, whichever the cache (kvs_flow_create() over the radix
 * tree, kvs_flow_create_hashed() over vLLM's hashed blocks,
 * kvs_flow_create_tiered() over the tiered tree with --host-pool), which
 * evict from the cache when the pool is short; when even that fails, the
 * newest running request is preempted: its memory is released and it goes
 * back to the head of the queue.
 *
 * A request's first output token comes out of its prefill, so a request
 * with N outputs runs N - 1 decode steps and finally caches input + N - 1
 * tokens (the last token has no KV), as SGLang does.
 *
 * Accounting, every step: mapped = bytes the pool has mapped; live = KV
 * bytes of tokens in use (request-owned tokens of running requests plus
 * the tokens the tree holds); held = whole pages held, so held - live is
 * the internal fragmentation of partly filled pages; cached = evictable
 * tokens of the tree.  Fragmentation = 1 - live / mapped.
 *
 * What the memory is for, every step: need = held pages the cache cannot
 * give back (the running requests', their shared prefixes included: held -
 * cached); cached = what an elastic strategy can give back; mapped = what
 * the strategy holds.  The packed floor is the memory of the held pages
 * packed densely into whole slabs of this pool's shape: ceil(held pages /
 * pages a slab) x slab bytes.  Static and paged pools have the same slab
 * shape (--granules), so their floor is what their own pages would need
 * if they were packed into slabs; held_over_floor = mapped / floor, over
 * every step that holds a page.
 *
 * --cache-max caps the cache's evictable tokens at a share of the budget:
 * after every step, before the release policy runs, the cache is evicted
 * down to it.  --limit-schedule changes the slab strategy's budget at
 * given simulated times through s->set_limit (see limit_by_tool()).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sim.h"

struct sreq {
	kvs_req_t req;
	int32_t *tokens;
	size_t idx;
	uint32_t input, out, generated;
	int prefilling;
};

struct lat {
	uint64_t *v;
	size_t n, cap;
};

struct ratios {
	double *v;
	size_t n, cap;
	double sum;
};

struct sim {
	const struct rp_trace *t;
	const struct rp_sim_opts *o;
	struct rp_result *res;
	kvs_drv_t *drv;
	kvs_pool_t *pool;
	kvs_reqtab_t *tab;
	kvs_radix_t *radix;		/* --cache radix without --host-pool */
	kvs_hcache_t *hc;		/* --cache hash */
	kvs_hpool_t *hp;		/* --host-pool: the host tier, */
	kvs_hiradix_t *hr;		/* the tiered cache over it, */
	kvs_store_t *store;		/* and --storage's store under it (closed after hr) */
	kvs_flow_t *flow;		/* the library's request flows over the cache */
	struct sreq **run;
	size_t nrun;
	size_t *requeue;		/* preempted requests, taken before new ones */
	size_t nrequeue;
	size_t next;			/* next trace request not yet admitted */
	int32_t out_next;		/* output token ids */
	uint8_t *counted;		/* hit accounted on first admission */
	uint8_t *prefetched;		/* --storage: prefetch done, once a request */
	uint64_t *l3;			/* --storage: tokens its prefetch brought */
	uint8_t *verdict;		/* per request: 0 may run, else rp_reject + 1 */
	struct sreq *head;		/* the waiting head, built, not admitted */
	struct lat alloc_lat, match_lat;
	double t_ms;
	double sum_frag;
	uint64_t frag_steps;
	struct ratios hof;		/* mapped / packed floor, every step */
	/* --limit-schedule: the budget now (0: none), the next change, when a
	 * lowered limit was set and not yet honoured (< 0: none), and the hook
	 * that applies a change (NULL: the strategy has no elastic limit). */
	uint64_t limit;
	size_t next_limit;
	/* The schedule's budget now, for every strategy (0: -M), and the
	 * next point: what limit_preempted counts under. */
	uint64_t sched;
	size_t next_sched;
	double limit_since;
	int (*set_limit)(struct sim *s, uint64_t bytes);
	uint64_t tab_drv[RP_OP__COUNT];	/* the request table's driver calls */
};

uint64_t rp_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void rp_sim_defaults(struct rp_sim_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->driver = "host";
	kvs_model_preset("llama-3-8b", &o->model);
	o->kv_bytes = 8ull << 30;
	o->max_running = 128;
	o->reserve = 64;
	o->reserve_ratio = 0.7;
	o->step_ms = 25;
	o->use_timestamps = 1;
	o->min_empty = 1;
	o->max_empty = 4;
	o->shrink_quiet = 65536;
	o->slab_aware = 1;
	o->sample_every = 1;
	o->hash_fn = KVS_HASH_SHA256_CBOR;
	o->write_policy = KVS_WRITE_THROUGH;
	o->load_threshold = UINT64_MAX;
	o->model_name = "default";
	o->prefetch_threshold = 256;
	/* Copies take no simulated time: wait for what the store has. */
	o->prefetch_policy = KVS_PREFETCH_WAIT_COMPLETE;
	o->cache_max = -1;
}

/* @arr (of *@cap elements of @size bytes, @n used) with room for one
 * more: @arr itself, or a copy with twice the room (@first at first); NULL,
 * @arr and *@cap unchanged, when there is no memory. */
static void *grow(void *arr, size_t *cap, size_t n, size_t size, size_t first)
{
	size_t want = *cap ? 2 * *cap : first;
	void *nw;

	if (n < *cap)
		return arr;
	nw = realloc(arr, want * size);
	if (nw)
		*cap = want;
	return nw;
}

static int ratio_add(struct ratios *r, double x)
{
	double *v = grow(r->v, &r->cap, r->n, sizeof(*v), 4096);

	if (!v)
		return -1;
	r->v = v;
	r->v[r->n++] = x;
	r->sum += x;
	return 0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static struct rp_ratio ratio_summary(struct ratios *r)
{
	struct rp_ratio out = {0, 0, 0};

	if (!r->n)
		return out;
	qsort(r->v, r->n, sizeof(*r->v), cmp_double);
	out.mean = r->sum / (double)r->n;
	out.p99 = r->v[(size_t)((double)(r->n - 1) * 0.99)];
	out.max = r->v[r->n - 1];
	return out;
}

static int lat_add(struct lat *l, uint64_t ns)
{
	uint64_t *v = grow(l->v, &l->cap, l->n, sizeof(*v), 4096);

	if (!v)
		return -1;
	l->v = v;
	l->v[l->n++] = ns;
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static void lat_quantiles(struct lat *l, uint64_t *p50, uint64_t *p99)
{
	*p50 = *p99 = 0;
	if (!l->n)
		return;
	qsort(l->v, l->n, sizeof(*l->v), cmp_u64);
	*p50 = l->v[(l->n - 1) / 2];
	*p99 = l->v[(size_t)((double)(l->n - 1) * 0.99)];
}

/* ------------------------------------------------------------- requests */

static struct sreq *sreq_new(struct sim *s, size_t idx)
{
	const struct rp_req *q = &s->t->req[idx];
	struct sreq *r = calloc(1, sizeof(*r));
	uint32_t k;

	if (!r)
		return NULL;
	r->idx = idx;
	r->input = q->input_len;
	r->out = q->output_len;
	r->tokens = malloc(((size_t)r->input + r->out + 1) * sizeof(int32_t));
	if (!r->tokens) {
		free(r);
		return NULL;
	}
	rp_req_input(q, r->tokens);
	for (k = 0; k < r->out; k++)
		r->tokens[r->input + k] = RP_OUTPUT_BASE + s->out_next++ % (1 << 29);
	kvs_req_init(&r->req, r->tokens, 0, 0, 0);
	r->prefilling = 1;
	return r;
}

static void sreq_free(struct sreq *r)
{
	if (r) {
		free(r->tokens);
		free(r);
	}
}

static void run_remove(struct sim *s, size_t i)
{
	memmove(&s->run[i], &s->run[i + 1], (s->nrun - i - 1) * sizeof(*s->run));
	s->nrun--;
}

/* The tiered cache's copies take no simulated time: wait until no
 * backup or load is in flight, and every backup queued for the store is
 * written, so that what the cache holds at each step does not depend on
 * the speed of the copy threads and a replay is reproducible.  Between
 * the flows' calls, as kvs_flow_create_tiered(3) allows. */
static int settle(struct sim *s)
{
	kvs_hiradix_usage_t u;

	if (!s->hr)
		return 0;
	for (;;) {
		if (kvs_hiradix_poll(s->hr) < 0 || kvs_hiradix_usage(s->hr, &u) < 0)
			return -1;
		if (!u.backups_pending && !u.loads_pending)
			return s->store ? kvs_hiradix_l3_wait(s->hr) : 0;
		nanosleep(&(struct timespec){0, 20000}, NULL);
	}
}

/*
 * The prefix cache's side of the loop, any cache: the library's request
 * flows over the radix cache, the tiered cache or the hashed block cache
 * (vLLM's manager).  Each call's time counts in res->cache_ns.
 */
static ssize_t c_match(struct sim *s, struct sreq *r)
{
	uint64_t t0 = rp_now_ns();
	ssize_t m = kvs_flow_match(s->flow, &r->req);

	s->res->cache_ns += rp_now_ns() - t0;
	return m;
}

static void c_release(struct sim *s, struct sreq *r)
{
	uint64_t t0 = rp_now_ns();

	kvs_flow_release(s->flow, &r->req);
	s->res->cache_ns += rp_now_ns() - t0;
}

static int c_finish(struct sim *s, struct sreq *r)
{
	uint64_t t0 = rp_now_ns();
	int rc = kvs_flow_cache_finished(s->flow, &r->req);

	if (rc == 0)
		rc = settle(s); /* the backups its insert started */
	s->res->cache_ns += rp_now_ns() - t0;
	return rc;
}

/* The loads back an extend started, every layer of them, as the forward
 * pass would wait for them.  A request whose load failed was released:
 * it is admitted again at the next prefill. */
static void wait_loads(struct sim *s, kvs_req_t *const *batch, size_t n)
{
	uint32_t l;
	size_t i;

	for (i = 0; i < n && !batch[i]->loaded_len; i++)
		;
	if (i == n)
		return;
	for (l = 0; l < s->o->model.layers; l++)
		(void)kvs_flow_wait_layer(s->flow, l);
}

/* New tokens for a batch: extend (prefill) or decode. */
static int c_batch(struct sim *s, struct sreq **rs, kvs_req_t **batch, size_t n, int extend)
{
	uint64_t t0 = rp_now_ns();
	int rc;
	size_t i;

	for (i = 0; i < n; i++)
		batch[i] = &rs[i]->req;
	if (extend) {
		rc = kvs_flow_prepare_extend(s->flow, batch, n, NULL) < 0 ? -1 : 0;
		if (rc == 0 && s->hr)
			wait_loads(s, batch, n);
	} else {
		rc = kvs_flow_prepare_decode(s->flow, batch, n, NULL);
	}
	t0 = rp_now_ns() - t0;
	s->res->cache_ns += t0;
	lat_add(&s->alloc_lat, t0);
	return rc;
}

static int c_cache_unfinished(struct sim *s, struct sreq *r)
{
	uint64_t t0 = rp_now_ns();
	int rc = kvs_flow_cache_unfinished(s->flow, &r->req);

	if (rc == 0)
		rc = settle(s);
	s->res->cache_ns += rp_now_ns() - t0;
	return rc;
}

static kvs_hcache_stats_t hstats(struct sim *s)
{
	kvs_hcache_stats_t st;

	if (kvs_hcache_stats(s->hc, &st) < 0)
		memset(&st, 0, sizeof(st));
	return st;
}

/* Device tokens the tiered cache holds. */
static uint64_t device_tokens(struct sim *s)
{
	kvs_hiradix_usage_t u;

	return kvs_hiradix_usage(s->hr, &u) < 0 ? 0 : u.device_tokens;
}

/* Tokens the cache could give back (evictable). */
static uint64_t c_evictable(struct sim *s)
{
	uint64_t d, locked = 0;
	size_t i;

	if (s->hc)
		return hstats(s).free_queue_blocks * kvs_pool_page_size(s->pool);
	if (!s->hr)
		return kvs_radix_evictable(s->radix);
	/* The tiered cache: what the running requests do not lock.  Prefixes
	 * shared by several requests count more than once: an underestimate,
	 * so admission errs on the side of waiting. */
	d = device_tokens(s);
	for (i = 0; i < s->nrun; i++)
		if (s->run[i]->req.slot >= 0)
			locked += s->run[i]->req.prefix_len;
	return d > locked ? d - locked : 0;
}

/* Evict about @tokens from the cache: the tokens freed. */
static uint64_t c_evict(struct sim *s, uint64_t tokens)
{
	uint64_t t0 = rp_now_ns(), got;
	size_t n = tokens > SIZE_MAX / 2 ? SIZE_MAX / 2 : (size_t)tokens;
	ssize_t k;

	if (s->hc) {
		uint32_t ps = kvs_pool_page_size(s->pool);

		k = kvs_hcache_evict(s->hc, (n + ps - 1) / ps);
		got = k > 0 ? (uint64_t)k * ps : 0;
	} else {
		k = s->hr ? kvs_hiradix_evict_device(s->hr, n) : kvs_radix_evict(s->radix, n);
		got = k > 0 ? (uint64_t)k : 0;
	}
	s->res->cache_ns += rp_now_ns() - t0;
	return got;
}

/* Pages held now, in tokens. */
static uint64_t held_tokens(struct sim *s)
{
	return kvs_slab_stat(kvs_pool_slab(s->pool), KVS_SLAB_STAT_objects) *
	       (uint64_t)kvs_pool_page_size(s->pool);
}

/*
 * The elastic limit: the budget becomes @bytes for admission (no request is
 * admitted past it) and the library's kvs_pool_set_limit() caps the slab's
 * mapped memory, evicting cached pages slab by slab (the radix cache's) and
 * unmapping the slabs it empties.  Running requests are never touched: when
 * they alone exceed the limit the library refuses it (counted in
 * limit_refused) and trim() evicts the cache down to it after every step
 * instead; a step whose mapped memory is above the limit is counted in
 * limit_over_steps.
 */
static int limit_by_tool(struct sim *s, uint64_t bytes)
{
	kvs_limit_report_t rep;

	s->limit = bytes;
	if (kvs_pool_set_limit(s->pool, bytes, s->radix, &rep) < 0) {
		if (errno != ENOMEM && errno != EBUSY)
			return -1;
		if (errno == ENOMEM && rep.floor_bytes > bytes && !s->res->limit_refused) {
			char b[3][32];	/* the first refusal: the floor, and --compact's */

			rp_fmt_bytes(bytes, b[0], 32);
			rp_fmt_bytes(rep.floor_bytes, b[1], 32);
			rp_fmt_bytes(rep.packed_bytes, b[2], 32);
			fprintf(stderr, "kvslab-replay: limit %s at %g s refused: the lowest it could "
				"honour was %s; compaction %s (%s packed)\n", b[0], s->t_ms / 1e3, b[1],
				rep.packed_bytes <= bytes ? "would let it through" : "would not", b[2]);
		}
		s->res->limit_refused++;
		return 0;
	}
	s->res->limit_returned_bytes += rep.bytes_returned;
	s->res->limit_ns += rep.elapsed_ns;
	if (rep.elapsed_ns > s->res->limit_ns_max)
		s->res->limit_ns_max = rep.elapsed_ns;
	return 0;
}

/* After a step: the cache down to --cache-max and to the limit. */
static void trim(struct sim *s)
{
	uint64_t ev, want = 0;

	if (s->o->cache_max < 0 && !s->limit)
		return; /* nothing to trim to: no count needed */
	ev = c_evictable(s);
	if (s->o->cache_max >= 0) {
		uint64_t cap = (uint64_t)(s->o->cache_max * (double)s->res->capacity_tokens);

		if (ev > cap)
			want = ev - cap;
	}
	if (s->limit) {
		uint64_t lim = s->limit / s->res->cell, held = held_tokens(s);

		if (held > lim && held - lim > want)
			want = held - lim < ev ? held - lim : ev;
	}
	if (want)
		s->res->cache_evicted_tokens += c_evict(s, want);
}

/* Release the newest running request and send it back to the queue. */
static int preempt_newest(struct sim *s)
{
	struct sreq *r;

	if (s->nrun == 0)
		return -1;
	r = s->run[s->nrun - 1];
	c_release(s, r);
	s->requeue[s->nrequeue++] = r->idx;
	s->res->preempted++;
	if (s->sched && s->sched < s->o->kv_bytes)
		s->res->limit_preempted++;
	sreq_free(r);
	s->nrun--;
	return 0;
}

static int finish(struct sim *s, size_t i)
{
	struct sreq *r = s->run[i];

	if (c_finish(s, r) < 0)
		return -1;
	s->res->requests_done++;
	sreq_free(r);
	run_remove(s, i);
	return 0;
}

/* ------------------------------------------------------------ one step */

/* The request to admit next, or SIZE_MAX. */
static size_t peek_waiting(const struct sim *s)
{
	if (s->nrequeue)
		return s->requeue[s->nrequeue - 1];
	if (s->next < s->t->n &&
	    (!s->o->use_timestamps || s->t->req[s->next].arrival_ms <= s->t_ms))
		return s->next;
	return SIZE_MAX;
}

static void pop_waiting(struct sim *s)
{
	if (s->nrequeue)
		s->nrequeue--;
	else
		s->next++;
}

static uint32_t round_up(uint32_t v, uint32_t ps)
{
	return (v + ps - 1) / ps * ps;
}

/* Decode tokens to keep free for a request with @out outputs, @gen done:
 * a share of what it still has to generate (SGLang's new-token ratio), at
 * least the fixed reserve. */
static uint64_t decode_reserve(const struct sim *s, uint32_t out, uint32_t gen)
{
	uint64_t left = out > gen ? out - gen : 0, r = (uint64_t)(left * s->o->reserve_ratio);

	if (r < s->o->reserve)
		r = s->o->reserve < left ? s->o->reserve : left;
	return r;
}

/* Tokens the running requests are expected to need still. */
static uint64_t reserved(const struct sim *s)
{
	uint64_t sum = 0;
	size_t i;

	for (i = 0; i < s->nrun; i++)
		sum += decode_reserve(s, s->run[i]->out, s->run[i]->generated);
	return sum;
}

/*
 * --storage: prefetch @req's input (whole pages, its last token left to
 * compute) from the store as operation @id and wait until the policy says
 * it is over (copies take no simulated time; wait_complete: every page the
 * store has is read): the tokens it put on the host, or -1.  Its pages
 * become host-only nodes that the first prefill's match loads back like
 * any host hit.  The backups queued before are written first: the
 * prefetch's exists query would otherwise race the backup thread.
 */
static ssize_t prefetch(struct sim *s, uint64_t id, const kvs_req_t *req)
{
	uint32_t ps = kvs_pool_page_size(s->pool);
	size_t got = 0;
	ssize_t n;
	int done;

	if (kvs_hiradix_l3_wait(s->hr) < 0)
		return -1;
	n = kvs_hiradix_prefetch(s->hr, id, req->tokens,
				 req->ntokens ? (req->ntokens - 1) / ps * ps : 0);
	if (n <= 0)
		return n;
	while ((done = kvs_hiradix_prefetch_done(s->hr, id, &got)) == 0)
		nanosleep(&(struct timespec){0, 20000}, NULL);
	if (done < 0)
		return -1;
	return (ssize_t)got;
}

/* Whether request @idx alone, input and output, fits the limit now. */
static bool fits_limit(const struct sim *s, size_t idx)
{
	const struct rp_req *q = &s->t->req[idx];
	uint64_t ps = s->res->strat.page_size, len = (uint64_t)q->input_len + q->output_len;

	return (len + ps - 1) / ps * ps + ps <= s->limit / s->res->cell;
}

/* Whether a later point of the schedule raises the limit. */
static bool limit_rises(const struct sim *s)
{
	size_t j;

	for (j = s->next_limit; j < s->o->nlimits; j++)
		if (s->o->limits[j].bytes > s->limit)
			return true;
	return false;
}

static int admit(struct sim *s)
{
	uint32_t ps = kvs_pool_page_size(s->pool);

	while (s->nrun < s->o->max_running) {
		size_t idx = peek_waiting(s);
		struct sreq *r;
		uint64_t avail, need, ev, t0;
		ssize_t m;

		if (idx == SIZE_MAX)
			break;
		if (s->verdict[idx]) {
			pop_waiting(s); /* can never fit */
			s->res->rejected++;
			s->res->rejects[s->verdict[idx] - 1]++;
			continue;
		}
		/* Nor can one larger than a lowered limit, admitted alone: it
		 * would be preempted over and over.  It waits while the schedule
		 * raises the limit later, else the limit is its budget. */
		if (s->limit && !fits_limit(s, idx)) {
			if (limit_rises(s))
				break;
			if (s->head && s->head->idx == idx) {
				sreq_free(s->head);
				s->head = NULL;
			}
			pop_waiting(s);
			s->res->rejected++;
			s->res->rejects[RP_REJECT_over_budget]++;
			continue;
		}
		/* The head of the queue is built once and kept while it waits. */
		if (s->head && s->head->idx != idx) {
			sreq_free(s->head);
			s->head = NULL;
		}
		r = s->head ? s->head : sreq_new(s, idx);
		s->head = NULL;
		if (!r)
			return -1;
		r->req.ntokens = r->input;
		/* SGLang prefetches from L3 when a request arrives and admits it
		 * once the prefetch is over: once a request (not again after a
		 * preemption), its pages then host hits to its match. */
		if (s->store && !s->prefetched[idx]) {
			ssize_t got = prefetch(s, (uint64_t)idx + 1, &r->req);

			if (got < 0) {
				sreq_free(r);
				return -1;
			}
			s->prefetched[idx] = 1;
			s->l3[idx] = (uint64_t)got;
		}
		t0 = rp_now_ns();
		m = c_match(s, r);
		lat_add(&s->match_lat, rp_now_ns() - t0);
		if (m < 0) {
			sreq_free(r);
			return -1;
		}
		need = round_up(r->input - (uint32_t)m, ps) + decode_reserve(s, r->out, 0);
		ev = c_evictable(s);
		avail = kvs_pool_available(s->pool) + ev;
		if (s->limit) {
			uint64_t lim = s->limit / s->res->cell, pinned = held_tokens(s) - ev;

			if (avail > (lim > pinned ? lim - pinned : 0))
				avail = lim > pinned ? lim - pinned : 0;
		}
		if (need + reserved(s) > avail && s->nrun > 0) {
			s->head = r;
			break; /* wait for memory: the head of the queue blocks */
		}
		if (s->o->chunk && (uint32_t)m + s->o->chunk < r->input)
			r->req.ntokens = (uint32_t)m + s->o->chunk;
		pop_waiting(s);
		s->run[s->nrun++] = r;
	}
	return 0;
}

/* Prefill (a chunk of) every request that is still prefilling. */
static int prefill(struct sim *s)
{
	kvs_req_t **batch = NULL;
	struct sreq **rs = NULL;
	size_t i, n = 0;
	int rc = 0;

	batch = malloc((s->nrun + 1) * sizeof(*batch));
	rs = malloc((s->nrun + 1) * sizeof(*rs));
	if (!batch || !rs) {
		rc = -1;
		goto out;
	}
	for (;;) {
		n = 0;
		for (i = 0; i < s->nrun; i++) {
			struct sreq *r = s->run[i];

			if (!r->prefilling)
				continue;
			if (r->req.slot >= 0 && s->o->chunk)
				r->req.ntokens = r->req.kv_len + s->o->chunk < r->input
							 ? r->req.kv_len + s->o->chunk
							 : r->input;
			rs[n++] = r;
		}
		if (!n)
			break;
		if (c_batch(s, rs, batch, n, 1) == 0)
			break;
		if (errno != ENOMEM || preempt_newest(s) < 0) {
			rc = -1;
			goto out;
		}
	}
	for (i = 0; i < s->nrun; i++) {
		struct sreq *r = s->run[i];

		if (!r->prefilling || r->req.slot < 0)
			continue;
		if (!s->counted[r->idx]) {
			s->counted[r->idx] = 1;
			s->res->hit_tokens += r->req.prefix_len;
			s->res->req_tokens += r->input;
			if (s->hr) {
				uint64_t l2 = r->req.loaded_len, l3 = 0;

				if (l2 > r->req.prefix_len)
					l2 = r->req.prefix_len;
				/* What the prefetch put on the host is the last
				 * of the host hit; loaded back, it is L3's. */
				if (s->l3) {
					uint64_t pf = s->l3[r->idx], hh = r->req.host_hit_len;
					uint64_t off = pf > hh ? pf - hh : 0;
					uint64_t l1 = r->req.prefix_len - l2;

					l3 = pf < l2 ? pf : l2;
					s->l3[r->idx] = 0;
					s->res->l3_prefetched += pf;
					s->res->l3_unloaded += (pf < hh ? pf : hh) - l3;
					s->res->l3_on_device += off < l1 ? off : l1;
					s->res->l3_gone += off - (off < l1 ? off : l1);
				}
				s->res->l3_tokens += l3;
				s->res->l2_tokens += l2 - l3;
				s->res->l1_tokens += r->req.prefix_len - l2;
			}
		}
		/* As SGLang's scheduler does after every prefill (chunk) of a
		 * request that goes on: its tokens enter the tree, so that
		 * requests admitted next can match them. */
		if ((r->req.kv_len < r->input || r->out > 1) && c_cache_unfinished(s, r) < 0) {
			rc = -1;
			goto out;
		}
		if (r->req.kv_len < r->input)
			continue;
		r->prefilling = 0;
		r->generated = r->out ? 1 : 0;
	}
out:
	free(batch);
	free(rs);
	return rc;
}

static int decode(struct sim *s)
{
	kvs_req_t **batch = malloc((s->nrun + 1) * sizeof(*batch));
	struct sreq **rs = malloc((s->nrun + 1) * sizeof(*rs));
	size_t i, n;
	int rc = 0;

	if (!batch || !rs) {
		rc = -1;
		goto out;
	}
	for (;;) {
		n = 0;
		for (i = 0; i < s->nrun; i++)
			if (!s->run[i]->prefilling && s->run[i]->generated < s->run[i]->out)
				rs[n++] = s->run[i];
		if (!n)
			break;
		if (c_batch(s, rs, batch, n, 0) == 0) {
			for (i = 0; i < s->nrun; i++)
				if (!s->run[i]->prefilling && s->run[i]->generated < s->run[i]->out)
					s->run[i]->generated++;
			break;
		}
		if (errno != ENOMEM || preempt_newest(s) < 0) {
			rc = -1;
			break;
		}
	}
out:
	free(batch);
	free(rs);
	if (rc)
		return rc;
	for (i = 0; i < s->nrun;) {
		struct sreq *r = s->run[i];

		if (!r->prefilling && r->generated >= r->out) {
			if (finish(s, i) < 0)
				return -1;
		} else {
			i++;
		}
	}
	return 0;
}

static int sample(struct sim *s, uint64_t step)
{
	kvs_slab_t *sl = kvs_pool_slab(s->pool);
	struct rp_result *res = s->res;
	uint64_t own = 0, mapped, live, held, cached, need, floor, pages;
	uint32_t ps = kvs_pool_page_size(s->pool);
	uint64_t pps = kvs_slab_pages_per_slab(sl);
	size_t i, waiting;

	mapped = kvs_slab_stat(sl, KVS_SLAB_STAT_bytes_mapped);
	if (s->hc) {
		/* Every block is a page: whole blocks less the unwritten tails
		 * of the running requests' last blocks (a shared block is full). */
		kvs_hcache_stats_t st = hstats(s);
		uint64_t tail = 0;

		for (i = 0; i < s->nrun; i++)
			if (s->run[i]->req.slot >= 0 && s->run[i]->req.kv_len % ps)
				tail += ps - s->run[i]->req.kv_len % ps;
		live = ((st.used_blocks + st.free_queue_blocks) * ps - tail) * res->cell;
	} else {
		for (i = 0; i < s->nrun; i++)
			own += s->run[i]->req.kv_len - s->run[i]->req.prefix_len;
		live = (own + (s->hr ? device_tokens(s) : kvs_radix_tokens(s->radix))) * res->cell;
		if (s->hr) {
			kvs_hiradix_usage_t u;

			if (kvs_hiradix_usage(s->hr, &u) == 0 && u.host_tokens > res->host_tokens_peak)
				res->host_tokens_peak = u.host_tokens;
		}
	}
	pages = kvs_slab_stat(sl, KVS_SLAB_STAT_objects);
	held = pages * ps * res->cell;
	cached = c_evictable(s) * res->cell;
	need = held > cached ? held - cached : 0;
	floor = (pages + pps - 1) / pps * pps * ps * res->cell;
	if (floor && ratio_add(&s->hof, (double)mapped / (double)floor) < 0)
		return -1;
	if (need > res->need_peak)
		res->need_peak = need;
	if (floor > res->floor_peak)
		res->floor_peak = floor;
	res->need_mean += (double)need;
	res->floor_mean += (double)floor;
	if (s->limit) {
		if (mapped > s->limit)
			res->limit_over_steps++;
		if (s->limit_since >= 0 && mapped <= s->limit) {
			if (s->t_ms - s->limit_since > res->limit_lag_max_ms)
				res->limit_lag_max_ms = s->t_ms - s->limit_since;
			s->limit_since = -1;
		}
	}
	if (live > mapped)
		res->live_over_mapped++;
	if (mapped > res->mapped_peak)
		res->mapped_peak = mapped;
	if (live > res->live_peak)
		res->live_peak = live;
	if (held > res->held_peak)
		res->held_peak = held;
	res->mapped_mean += (double)mapped;
	res->live_mean += (double)live;
	res->held_mean += (double)held;
	res->cached_mean += (double)cached;
	if (mapped) {
		double f = 1.0 - (double)live / (double)mapped;

		s->sum_frag += f;
		s->frag_steps++;
		if (f > res->frag_peak)
			res->frag_peak = f;
	}
	if (held)
		res->internal_frag_mean += 1.0 - (double)live / (double)held;
	if (step % s->o->sample_every == 0) {
		struct rp_sample *p = grow(res->samples, &res->cap_samples, res->nsamples,
					   sizeof(*p), 1024);

		if (!p)
			return -1;
		res->samples = p;
		waiting = s->nrequeue + (s->t->n - s->next);
		p = &res->samples[res->nsamples++];
		p->step = step;
		p->t_ms = s->t_ms;
		p->mapped = mapped;
		p->live = live;
		p->held = held;
		p->cached = cached;
		p->need = need;
		p->floor = floor;
		p->limit = s->limit;
		p->running = (uint32_t)s->nrun;
		p->waiting = (uint32_t)waiting;
	}
	return 0;
}

/* ---------------------------------------------------------------- setup */

__attribute__((format(printf, 2, 3)))
static int fail_msg(struct sim *s, const char *fmt, ...)
{
	int e = errno;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(s->res->error, sizeof(s->res->error), fmt, ap);
	va_end(ap);
	errno = e;
	return -1;
}

/*
 * Sort the trace's requests into those that may run and those that never
 * can, before anything is sized by them: a request whose input + output
 * (in 64 bits: each may be near 2^31) rounded to pages, plus a page of
 * slack, exceeds the pool's capacity is over_budget; one that fits but
 * would make the request table's row longer than RP_TABLE_MAX_BYTES allow
 * for max_running rows is over_table.  The table's columns are then the
 * longest request that may run, plus RP_TABLE_SLACK: sized by what the
 * run admits, never by the trace's worst line.
 */
static int classify(struct sim *s, uint32_t *cols)
{
	uint64_t cap = s->res->capacity_tokens, ps = s->res->strat.page_size;
	uint64_t col_max = RP_TABLE_MAX_BYTES / ((uint64_t)s->o->max_running * sizeof(int32_t));
	uint64_t longest = 0;
	size_t i;

	if (col_max > (uint64_t)INT32_MAX)
		col_max = INT32_MAX;
	s->verdict = calloc(s->t->n + 1, 1);
	if (!s->verdict) {
		errno = ENOMEM;
		return -1;
	}
	for (i = 0; i < s->t->n; i++) {
		const struct rp_req *q = &s->t->req[i];
		uint64_t len = (uint64_t)q->input_len + q->output_len;	/* < 2^33 */

		if ((len + ps - 1) / ps * ps + ps > cap)
			s->verdict[i] = RP_REJECT_over_budget + 1;
		else if (len + 1 + RP_TABLE_SLACK > col_max)
			s->verdict[i] = RP_REJECT_over_table + 1;
		else if (len > longest)
			longest = len;
	}
	*cols = (uint32_t)(longest + 1 + RP_TABLE_SLACK);	/* <= col_max <= INT32_MAX */
	return 0;
}

/* The driver's calls so far, by kind. */
static void drv_ops(struct sim *s, uint64_t *v)
{
	static const enum kvs_drv_stat item[] = {
#define RP_X_ITEM(n, st) st,
		RP_DRV_OPS(RP_X_ITEM)
#undef RP_X_ITEM
	};
	int k;

	for (k = 0; k < RP_OP__COUNT; k++)
		v[k] = kvs_drv_stat(s->drv, item[k]);
}

/*
 * --storage: open the store (pages of the host pool's bytes, which is
 * PAGE_FIRST for it) and put it under the still empty cache, backups on.
 * -1 with errno, *stage saying which step failed.
 */
static int setup_store(struct sim *s, const char **stage)
{
	const struct rp_sim_opts *o = s->o;
	kvs_store_attr_t sa;
	kvs_hiradix_l3_attr_t la;
	int32_t page;
	void *p;
	size_t pb;
	int rc, e;

	*stage = "cannot size the pages of";
	/* The host pool's page bytes, from a page of it, given back. */
	if (kvs_hpool_alloc(s->hp, 1, &page) < 0)
		return -1;
	rc = kvs_hpool_page_bytes(s->hp, page, &p, &pb);
	e = errno;
	kvs_hpool_free(s->hp, 1, &page);
	if (rc < 0) {
		errno = e;
		return -1;
	}
	kvs_store_attr_init(&sa);
	sa.model = o->model_name;
	sa.layout = KVS_HPOOL_PAGE_FIRST;
	sa.page_bytes = pb;
	/* A replay's store is scratch: a crash may lose pages, never tear one. */
	sa.fsync = KVS_FSYNC_NONE;
	*stage = "cannot open";
	s->store = kvs_store_open(o->storage, &sa);
	if (!s->store)
		return -1;
	kvs_hiradix_l3_attr_init(&la);
	la.prefetch_policy = o->prefetch_policy;
	la.prefetch_threshold = o->prefetch_threshold;
	la.backup = 1;
	*stage = "cannot attach";
	if (kvs_hiradix_set_store(s->hr, s->store, &la) < 0) {
		e = errno;
		kvs_store_close(s->store);
		s->store = NULL;
		errno = e;
		return -1;
	}
	return 0;
}

/*
 * --host-pool: a host pool of host_bytes, or host_ratio times the device
 * pool's pages, under a hierarchical radix cache with the write policy and
 * load-back threshold asked for; --storage's store under it.
 */
static int setup_tiers(struct sim *s)
{
	const struct rp_sim_opts *o = s->o;
	kvs_hpool_attr_t ha;
	kvs_hiradix_attr_t ra;

	kvs_hpool_attr_init(&ha);
	if (o->host_bytes) {
		ha.ratio = 0;
		ha.bytes = (size_t)o->host_bytes;
	} else {
		ha.ratio = o->host_ratio;
	}
	if (o->storage)
		ha.layout = KVS_HPOOL_PAGE_FIRST; /* the store's unit */
	s->hp = kvs_hpool_create(s->pool, &ha);
	if (s->hp) {
		kvs_hiradix_attr_init(&ra);
		ra.write_policy = o->write_policy;
		if (o->load_threshold != UINT64_MAX)
			ra.load_back_threshold = o->load_threshold;
		s->hr = kvs_hiradix_create(s->pool, s->hp, &ra);
	}
	if (!s->hr)
		return fail_msg(s, "cannot create the host pool and hierarchical radix "
				   "cache: %s", strerror(errno));
	s->res->host_pool_bytes =
		kvs_hpool_capacity(s->hp) * kvs_pool_page_size(s->pool) * s->res->cell;
	if (o->storage) {
		const char *stage = "";
		int e;

		if (setup_store(s, &stage) < 0) {
			e = errno;
			return fail_msg(s, "--storage %s: %s the store: %s (errno %d)%s",
					o->storage, stage, strerror(e), e,
					e == ENOTSUP ? ": a scheme this build lacks, or no "
						       "SHA-256 (libcrypto)"
					: e == EINVAL ? ": a malformed or unknown URI"
						      : "");
		}
		s->prefetched = calloc(s->t->n + 1, 1);
		s->l3 = calloc(s->t->n + 1, sizeof(*s->l3));
		if (!s->prefetched || !s->l3) {
			errno = ENOMEM;
			return fail_msg(s, "no memory for %zu requests' prefetches", s->t->n);
		}
	}
	return 0;
}

/* --metrics: the run's objects, each under the strategy's name, so that a
 * scrape sees the run in progress. */
static int metrics_add(struct sim *s)
{
	kvs_metrics_t *m = s->o->metrics;
	const char *l = s->res->strat.name;

	if (!m)
		return 0;
	if (kvs_metrics_add_drv(m, s->drv, l) < 0 || kvs_metrics_add_pool(m, s->pool, l) < 0 ||
	    (s->radix && kvs_metrics_add_radix(m, s->radix, l) < 0) ||
	    (s->hc && kvs_metrics_add_hcache(m, s->hc, l) < 0) ||
	    (s->hp && kvs_metrics_add_hpool(m, s->hp, l) < 0) ||
	    (s->hr && kvs_metrics_add_hiradix(m, s->hr, l) < 0) ||
	    (s->store && kvs_metrics_add_store(m, s->store, l) < 0))
		return fail_msg(s, "--metrics: cannot register the run's objects: %s",
				strerror(errno));
	return 0;
}

/* And out again before they are destroyed (those registered: ENOENT for
 * the others is fine). */
static void metrics_remove(struct sim *s)
{
	const void *objs[] = {s->drv, s->pool, s->radix, s->hc, s->hp, s->hr, s->store};

	if (!s->o->metrics)
		return;
	for (size_t i = 0; i < sizeof(objs) / sizeof(objs[0]); i++)
		if (objs[i])
			(void)kvs_metrics_remove(s->o->metrics, objs[i]);
}

static int setup(struct sim *s)
{
	const struct rp_sim_opts *o = s->o;
	const struct rp_strategy *st = &s->res->strat;
	kvs_drv_attr_t da;
	kvs_pool_attr_t pa;
	uint64_t tokens, slab_tok;
	uint32_t cols;
	char b1[32], b2[32];

	kvs_drv_attr_init(&da);
	/* host: account, never touch, and move no byte: device memory and the
	 * host tier (its block is the driver's) of any size (see the man page). */
	da.flags = KVS_DRV_F_LAZY | KVS_DRV_F_NO_COPY;
	da.granularity = o->granularity;
	s->drv = kvs_drv_open(o->driver, &da);
	if (!s->drv) {
		const char *why = kvs_drv_open_error();

		return fail_msg(s, "cannot open driver \"%s\": %s%s%s%s", o->driver,
				*why ? why : strerror(errno), *why ? " (" : "",
				*why ? strerror(errno) : "", *why ? ")" : "");
	}
	rp_fmt_bytes(o->kv_bytes, b1, sizeof(b1));
	tokens = o->kv_bytes / s->res->cell;
	if (tokens > (1u << 30)) /* locations are int32: keep room for rounding */
		tokens = 1u << 30;
	tokens = tokens / st->page_size * st->page_size;
	if (tokens == 0) {
		errno = EINVAL;
		rp_fmt_bytes((uint64_t)st->page_size * s->res->cell, b2, sizeof(b2));
		return fail_msg(s, "budget %s is smaller than one page of %s (%u token%s at %zu "
				   "bytes a token)", b1, b2, st->page_size,
				st->page_size == 1 ? "" : "s", s->res->cell);
	}
	slab_tok = rp_slab_tokens(&o->model, st->page_size, kvs_drv_granularity(s->drv),
				  st->slab_granules ? st->slab_granules : 1);
	if (slab_tok && slab_tok <= UINT64_MAX / s->res->cell &&
	    slab_tok * s->res->cell > o->kv_bytes) {
		rp_fmt_bytes(slab_tok * s->res->cell, b2, sizeof(b2));
		errno = EINVAL;
		return fail_msg(s, "budget %s is smaller than one slab of %s (%llu tokens at %zu "
				   "bytes a token: pages of %u, %u granule%s of %zu bytes a buffer)",
				b1, b2, (unsigned long long)slab_tok, s->res->cell, st->page_size,
				st->slab_granules ? st->slab_granules : 1,
				st->slab_granules > 1 ? "s" : "", kvs_drv_granularity(s->drv));
	}
	kvs_pool_attr_init(&pa);
	pa.model = o->model;
	pa.page_size = st->page_size;
	pa.max_tokens = tokens;
	/* Whole slabs may round the capacity up: the budget is a hard limit. */
	pa.max_mapped = o->kv_bytes;
	pa.slab_granules = st->slab_granules ? st->slab_granules : 1;
	if (st->kind == RP_SLAB) {
		pa.min_empty = o->min_empty;
		pa.max_empty = o->max_empty;
		/* Unmapped slabs keep their chunks for the next growth: creation
		 * is the costly call on a GPU. */
		pa.chunk_pool = o->max_empty;
		pa.shrink_quiet = o->shrink_quiet;
		/* Simulated time runs faster than the clock: release by the
		 * page-count hysteresis only, so a replay is reproducible. */
		pa.decay_ms = 0;
		pa.slab_flags = o->worker ? KVS_SLAB_F_WORKER : 0;
	} else {
		pa.slab_flags = KVS_SLAB_F_STATIC;
	}
	s->pool = kvs_pool_create(s->drv, &pa);
	if (!s->pool) {
		const char *why = kvs_drv_strerror(s->drv);

		return fail_msg(s, "cannot create a pool of %llu tokens (pages of %u) within %s: "
				   "%s%s%s", (unsigned long long)tokens, st->page_size, b1,
				strerror(errno), *why ? ": " : "", why);
	}
	s->res->capacity_tokens =
		kvs_slab_available(kvs_pool_slab(s->pool)) * (uint64_t)st->page_size;
	if (s->res->capacity_tokens > tokens)
		s->res->capacity_tokens = tokens;
	if (classify(s, &cols) < 0)
		return fail_msg(s, "no memory to sort %zu requests", s->t->n);
	s->res->table_rows = o->max_running;
	s->res->table_cols = cols;
	s->res->slab_tokens = (uint64_t)kvs_slab_pages_per_slab(kvs_pool_slab(s->pool)) *
			      st->page_size;
	s->res->granularity = kvs_drv_granularity(s->drv);
	if (st->kind == RP_SLAB && o->nlimits)
		s->set_limit = limit_by_tool;
	s->limit_since = -1;
	drv_ops(s, s->tab_drv);
	s->tab = kvs_reqtab_create(s->drv, o->max_running, cols);
	if (!s->tab) {
		const char *why = kvs_drv_strerror(s->drv);

		return fail_msg(s, "cannot create the request table (%u rows of %u tokens): %s%s%s",
				o->max_running, cols, strerror(errno), *why ? ": " : "", why);
	}
	{
		uint64_t after[RP_OP__COUNT];
		int k;

		drv_ops(s, after);
		for (k = 0; k < RP_OP__COUNT; k++)
			s->tab_drv[k] = after[k] - s->tab_drv[k];
	}
	if (st->cache == RP_CACHE_HASH) {
		kvs_block_hasher_attr_t ha;

		s->hc = kvs_hcache_create(s->pool, NULL);
		if (!s->hc)
			return fail_msg(s, "cannot create the hashed block cache: %s",
					strerror(errno));
		/* --no-cache: vLLM without prefix caching, nothing hashed. */
		kvs_block_hasher_attr_init(&ha);
		ha.fn = o->hash_fn;
		ha.block_size = st->page_size;
		s->flow = kvs_flow_create_hashed(s->pool, s->tab, s->hc, o->no_cache ? NULL : &ha);
		if (!s->flow)
			return fail_msg(s, "cannot create the hashed block cache's flows: %s",
					errno == ENOTSUP ? "this build has no library for the chosen "
							   "--block-hash"
							 : strerror(errno));
	} else if (RP_TIERED(o)) {
		if (setup_tiers(s) < 0)
			return -1;
		s->flow = kvs_flow_create_tiered(s->pool, s->tab, s->hr);
		if (!s->flow)
			return fail_msg(s, "cannot create the tiered cache's flows: %s",
					strerror(errno));
	} else {
		kvs_radix_attr_t ra;

		kvs_radix_attr_init(&ra);
		ra.disabled = o->no_cache;
		ra.slab_aware = (uint32_t)(st->slab_aware >= 0 ? st->slab_aware : o->slab_aware);
		s->radix = kvs_radix_create(s->pool, &ra);
		if (!s->radix)
			return fail_msg(s, "cannot create the radix cache: %s", strerror(errno));
		s->flow = kvs_flow_create(s->pool, s->tab, s->radix);
		if (!s->flow)
			return fail_msg(s, "cannot create the request flows: %s", strerror(errno));
	}
	s->run = calloc(o->max_running + 1, sizeof(*s->run));
	s->requeue = calloc(o->max_running + 1, sizeof(*s->requeue));
	s->counted = calloc(s->t->n + 1, 1);
	if (!s->run || !s->requeue || !s->counted) {
		errno = ENOMEM;
		return fail_msg(s, "no memory for %u running requests", o->max_running);
	}
	return metrics_add(s);
}

static void teardown(struct sim *s)
{
	size_t i;

	metrics_remove(s);
	for (i = 0; i < s->nrun; i++) {
		if (s->flow)
			kvs_flow_release(s->flow, &s->run[i]->req);
		sreq_free(s->run[i]);
	}
	sreq_free(s->head);
	kvs_flow_destroy(s->flow);
	kvs_radix_destroy(s->radix);
	kvs_hcache_destroy(s->hc);
	if (s->hr)
		kvs_hiradix_destroy(s->hr);
	if (s->store)
		kvs_store_close(s->store);
	if (s->hp)
		kvs_hpool_destroy(s->hp);
	kvs_reqtab_destroy(s->tab);
	kvs_pool_destroy(s->pool);
	kvs_drv_close(s->drv);
	free(s->run);
	free(s->requeue);
	free(s->counted);
	free(s->prefetched);
	free(s->l3);
	free(s->verdict);
	free(s->alloc_lat.v);
	free(s->match_lat.v);
	free(s->hof.v);
}

/**
 * rp_simulate() - replay @t with strategy @st.
 *
 * Return: 0, or -1 with errno (the library's, or EINVAL for options).
 */
int rp_simulate(const struct rp_trace *t, const struct rp_sim_opts *o,
		const struct rp_strategy *st, struct rp_result *res, rp_progress_cb cb, void *arg)
{
	struct sim s;
	uint64_t step = 0, wall0 = rp_now_ns();
	int rc = -1, e = 0;

	memset(res, 0, sizeof(*res));
	memset(&s, 0, sizeof(s));
	res->strat = *st;
	res->tiered = o && RP_TIERED(o);
	res->write_policy = o ? o->write_policy : 0;
	res->storage = res->tiered ? o->storage : NULL;
	res->prefetch_policy = o ? o->prefetch_policy : 0;
	res->cell = kvs_model_cell_size(&o->model);
	if (!t || !o || !res->cell || st->page_size == 0 || o->max_running == 0 ||
	    o->sample_every == 0 || !(o->step_ms > 0) || o->cache_max > 1 ||
	    (RP_TIERED(o) && (st->cache != RP_CACHE_RADIX || o->no_cache ||
			      !rp_write_policy_name(o->write_policy))) ||
	    (o->storage && (!RP_TIERED(o) || !o->model_name ||
			    !rp_prefetch_policy_name(o->prefetch_policy)))) {
		errno = EINVAL;
		return -1;
	}
	s.t = t;
	s.o = o;
	s.res = res;
	if (setup(&s) < 0)
		goto out;
	while (s.next < t->n || s.nrequeue || s.nrun) {
		if (s.nrun == 0 && !s.nrequeue && o->use_timestamps &&
		    t->req[s.next].arrival_ms > s.t_ms)
			s.t_ms = t->req[s.next].arrival_ms; /* idle: skip to the next arrival */
		while (s.next_sched < o->nlimits && o->limits[s.next_sched].t_ms <= s.t_ms)
			s.sched = o->limits[s.next_sched++].bytes;
		while (s.set_limit && s.next_limit < o->nlimits &&
		       o->limits[s.next_limit].t_ms <= s.t_ms) {
			uint64_t b = o->limits[s.next_limit++].bytes;

			if (s.set_limit(&s, b) < 0)
				goto out;
			res->limit_changes++;
			s.limit_since = s.t_ms;
		}
		if (admit(&s) < 0 || prefill(&s) < 0 || decode(&s) < 0)
			goto out;
		if (s.hr && kvs_hiradix_poll(s.hr) < 0)
			goto out;
		trim(&s);
		if (o->compact_pages && st->kind == RP_SLAB && s.radix) {
			uint64_t c0 = rp_now_ns();
			ssize_t moved = kvs_pool_compact(s.pool, s.tab, s.radix, o->compact_pages);

			if (moved < 0)
				goto out;
			res->compacted_pages += (uint64_t)moved;
			res->compact_ns += rp_now_ns() - c0;
		}
		/* Between forward passes, as a scheduler would: frees never
		 * unmap, so the release policy runs here (or on the worker). */
		if (!o->worker && kvs_slab_reclaim(kvs_pool_slab(s.pool)) < 0)
			goto out;
		if (s.limit && kvs_slab_stat(kvs_pool_slab(s.pool), KVS_SLAB_STAT_bytes_mapped) >
				       s.limit) {
			kvs_slab_flush(kvs_pool_slab(s.pool));
			if (kvs_slab_shrink(kvs_pool_slab(s.pool)) < 0)
				goto out;
		}
		if (sample(&s, step) < 0)
			goto out;
		step++;
		s.t_ms += o->step_ms;
		if (cb && step % 256 == 0)
			cb(arg, res->requests_done + res->rejected, t->n);
	}
	if (cb)
		cb(arg, t->n, t->n);
	res->steps = step;
	res->sim_ms = s.t_ms;
	if (step) {
		res->mapped_mean /= (double)step;
		res->live_mean /= (double)step;
		res->held_mean /= (double)step;
		res->cached_mean /= (double)step;
		res->need_mean /= (double)step;
		res->floor_mean /= (double)step;
		res->internal_frag_mean /= (double)step;
	}
	res->held_over_floor = ratio_summary(&s.hof);
	res->frag_mean = s.frag_steps ? s.sum_frag / (double)s.frag_steps : 0;
	lat_quantiles(&s.alloc_lat, &res->alloc_p50_ns, &res->alloc_p99_ns);
	lat_quantiles(&s.match_lat, &res->match_p50_ns, &res->match_p99_ns);
	/* Drain: empty the cache and give back what the allocator can.
	 * (Block hashing runs inside the hashed flow: hash_ns stays 0.) */
	if (s.hc) {
		kvs_hcache_evict(s.hc, SIZE_MAX);
	} else if (s.hr) {
		kvs_hiradix_t *h = s.hr;
		kvs_store_t *l3 = s.store;

		/* Every backup in the store before the counters are read and
		 * the cache goes: a replay that follows sees them all. */
		if (l3) {
			if (settle(&s) < 0)
				goto out;
			res->prefetches = kvs_hiradix_stat(h, KVS_HIRADIX_STAT_prefetches);
			res->prefetch_tokens = kvs_hiradix_stat(h, KVS_HIRADIX_STAT_prefetch_tokens);
			res->l3_backup_pages = kvs_hiradix_stat(h, KVS_HIRADIX_STAT_l3_backup_pages);
			res->l3_backup_fail = kvs_hiradix_stat(h, KVS_HIRADIX_STAT_l3_backup_fail);
		}
		res->backup_tokens = kvs_hiradix_stat(h, KVS_HIRADIX_STAT_backup_tokens);
		res->load_backs = kvs_hiradix_stat(h, KVS_HIRADIX_STAT_load_backs);
		res->evict_host_tokens = kvs_hiradix_stat(h, KVS_HIRADIX_STAT_evict_host_tokens);
		/* Backups in flight lock their nodes: let them land first. */
		(void)settle(&s);
		(void)kvs_hiradix_evict_device(h, SIZE_MAX / 2);
		/* The drain's evictions may back up more (write back). */
		if (l3) {
			int k;

			if (settle(&s) < 0)
				goto out;
			res->l3_backup_pages = kvs_hiradix_stat(h, KVS_HIRADIX_STAT_l3_backup_pages);
			res->l3_backup_fail = kvs_hiradix_stat(h, KVS_HIRADIX_STAT_l3_backup_fail);
			for (k = 0; k < KVS_STORE_STAT__COUNT; k++)
				res->store_stats[k] = kvs_store_stat(l3, (enum kvs_store_stat)k);
		}
	} else
		kvs_radix_evict(s.radix, UINT64_MAX / 2);
	kvs_slab_flush(kvs_pool_slab(s.pool));
	kvs_slab_shrink(kvs_pool_slab(s.pool));
	res->end_mapped = kvs_slab_stat(kvs_pool_slab(s.pool), KVS_SLAB_STAT_bytes_mapped);
	res->drv_calls = kvs_slab_stat(kvs_pool_slab(s.pool), KVS_SLAB_STAT_drv_calls);
	res->drv_ns = kvs_slab_stat(kvs_pool_slab(s.pool), KVS_SLAB_STAT_drv_ns);
	{
		uint64_t now[RP_OP__COUNT];
		int k;

		drv_ops(&s, now);
		for (k = 0; k < RP_OP__COUNT; k++)
			res->drv_ops[k] = now[k] - s.tab_drv[k];
	}
	rc = 0;
out:
	if (rc)
		e = errno;
	teardown(&s);
	res->wall_s = (double)(rp_now_ns() - wall0) / 1e9;
	if (rc)
		errno = e;
	return rc;
}

void rp_result_free(struct rp_result *res)
{
	free(res->samples);
	res->samples = NULL;
	res->nsamples = res->cap_samples = 0;
}

static const char *const policy_names[] = {
	[KVS_WRITE_THROUGH] = "write_through",
	[KVS_WRITE_THROUGH_SELECTIVE] = "write_through_selective",
	[KVS_WRITE_BACK] = "write_back",
};

const char *rp_write_policy_name(uint32_t policy)
{
	return policy < sizeof(policy_names) / sizeof(policy_names[0]) ? policy_names[policy]
									  : NULL;
}

static const char *const prefetch_names[] = {
	[KVS_PREFETCH_BEST_EFFORT] = "best_effort",
	[KVS_PREFETCH_WAIT_COMPLETE] = "wait_complete",
	[KVS_PREFETCH_TIMEOUT] = "timeout",
};

const char *rp_prefetch_policy_name(uint32_t policy)
{
	return policy < sizeof(prefetch_names) / sizeof(prefetch_names[0]) ? prefetch_names[policy]
									    : NULL;
}

int rp_prefetch_policy_parse(const char *name, uint32_t *policy)
{
	uint32_t k;

	for (k = 0; k < sizeof(prefetch_names) / sizeof(prefetch_names[0]); k++)
		if (!strcmp(name, prefetch_names[k])) {
			*policy = k;
			return 0;
		}
	return -1;
}

int rp_write_policy_parse(const char *name, uint32_t *policy)
{
	uint32_t k;

	for (k = 0; k < sizeof(policy_names) / sizeof(policy_names[0]); k++)
		if (!strcmp(name, policy_names[k])) {
			*policy = k;
			return 0;
		}
	return -1;
}

static const char *const reject_names[] = {
#define RP_X_NAME(n, d) #n,
	RP_REJECTS(RP_X_NAME)
#undef RP_X_NAME
};

static const char *const reject_descs[] = {
#define RP_X_DESC(n, d) d,
	RP_REJECTS(RP_X_DESC)
#undef RP_X_DESC
};

const char *rp_reject_name(enum rp_reject r)
{
	return (unsigned int)r < RP_REJECT__COUNT ? reject_names[r] : "?";
}

const char *rp_reject_desc(enum rp_reject r)
{
	return (unsigned int)r < RP_REJECT__COUNT ? reject_descs[r] : "?";
}

int rp_result_verdict(const struct rp_result *res, char *msg, size_t size)
{
	size_t len;
	int k, first = 1;

	if (size)
		msg[0] = 0;
	if (res->requests_done)
		return 0;
	len = (size_t)snprintf(msg, size, "no request completed: %llu rejected",
			       (unsigned long long)res->rejected);
	for (k = 0; k < RP_REJECT__COUNT && len < size; k++) {
		if (!res->rejects[k])
			continue;
		len += (size_t)snprintf(msg + len, size - len, "%s%llu %s", first ? " (" : ", ",
					(unsigned long long)res->rejects[k],
					rp_reject_name((enum rp_reject)k));
		first = 0;
	}
	if (!first && len < size)
		snprintf(msg + len, size - len, ")");
	return -1;
}

void rp_fmt_bytes(uint64_t b, char *buf, size_t size)
{
	static const char *const unit[] = {"KiB", "MiB", "GiB", "TiB"};
	int k;

	for (k = 3; k >= 0; k--) {
		uint64_t u = 1ull << (10 * (k + 1));

		if (b >= u) {
			if (b % u == 0)
				snprintf(buf, size, "%llu %s", (unsigned long long)(b / u), unit[k]);
			else
				snprintf(buf, size, "%.1f %s", (double)b / (double)u, unit[k]);
			return;
		}
	}
	snprintf(buf, size, "%llu byte%s", (unsigned long long)b, b == 1 ? "" : "s");
}

static uint64_t gcd64(uint64_t a, uint64_t b)
{
	while (b) {
		uint64_t t = a % b;

		a = b;
		b = t;
	}
	return a;
}

/* As lib/mem/slab.c's slab_tokens(), for the pool's equal buffers. */
uint64_t rp_slab_tokens(const kvs_model_t *m, uint32_t page_size, size_t granularity,
			uint32_t granules)
{
	size_t cell = kvs_model_cell_size(m);
	uint64_t nbuf = (uint64_t)m->layers * (m->attn == KVS_ATTN_MLA ? 1 : 2), tb, need, t, k;
	uint64_t want;

	if (!cell || !nbuf || !granularity || !page_size)
		return 0;
	tb = cell / nbuf;
	if (!tb)
		return 0;
	need = granularity / gcd64(granularity, tb);
	t = page_size / gcd64(page_size, need);
	if (__builtin_mul_overflow(t, need, &t) || t > (1ull << 32))
		return 0;
	if (__builtin_mul_overflow((uint64_t)(granules ? granules : 1), (uint64_t)granularity,
				   &want))
		return 0;
	k = want / tb / t + 1;
	if (tb <= UINT64_MAX / t && want % (t * tb) == 0)
		k = want / (t * tb);
	if (k == 0)
		k = 1;
	return t * k;
}
