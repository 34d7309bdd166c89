/* SPDX-License-Identifier: MIT */
/*
 * lib/mem/plan.c - model shapes and the memory planner: how many KV bytes a
 * token takes, and how many tokens and requests fit in a device's memory.
 *
 * What it owns.  The table of model presets (the config.json numbers of a
 * few public models), the arithmetic of a token's KV cell (SGLang's
 * kv_heads/tp * head_dim * layers * 2 * dtype_size, or the MLA latent width)
 * and SGLang's planner: mem_fraction_static of the device's memory goes to
 * weights and KV, what is left of it after the weights goes to KV, and the
 * request table is sized from the tokens that fit.  The KV pool (lib/mem/pool.c)
 * builds on these numbers; nothing here allocates or maps anything.
 *
 * Data structures.  None that live: a const table of presets, and the
 * caller's kvs_model_t, kvs_plan_attr_t and kvs_plan_t, which are plain
 * values.  A plan is written only once every number in it is known to
 * fit, so a failed call leaves the caller's plan as it was.  Every product
 * of a caller's number is checked (__builtin_mul_overflow): EOVERFLOW when
 * one does not fit its type, EINVAL for a shape or an attribute that makes
 * no sense.
 *
 * Locking: none.  Every function reads its arguments and const data only
 * (kvs_plan() may ask the driver for its memory, a call that is MT-Safe on
 * its own), so all are MT-Safe.
 */
#include <string.h>

#include "internal.h"
#include "kvslab/pool.h"

/* ---------------------------------------------------------------- models */

struct preset {
	const char *name;
	kvs_model_t m;
};

/* Public model configurations (config.json of each model). */
static const struct preset presets[] = {
	{"llama-3-8b", {.layers = 32, .kv_heads = 8, .head_dim = 128, .dtype_size = 2,
			.tp_size = 1, .context_len = 8192}},
	{"llama-3-70b-tp8", {.layers = 80, .kv_heads = 8, .head_dim = 128, .dtype_size = 2,
			     .tp_size = 8, .context_len = 8192}},
	{"qwen2.5-7b", {.layers = 28, .kv_heads = 4, .head_dim = 128, .dtype_size = 2,
			.tp_size = 1, .context_len = 32768}},
	{"deepseek-v3-tp8", {.layers = 61, .kv_heads = 1, .head_dim = 576, .dtype_size = 2,
			     .tp_size = 8, .attn = KVS_ATTN_MLA, .kv_lora_rank = 512,
			     .qk_rope_head_dim = 64, .context_len = 163840}},
	/* Two bytes a token: lets tests and replays hold 10^8 tokens in memory. */
	{"tiny", {.layers = 1, .kv_heads = 1, .head_dim = 1, .dtype_size = 1, .tp_size = 1,
		  .context_len = 1 << 20}},
};

#define NPRESETS (sizeof(presets) / sizeof(presets[0]))

/**
 * kvs_model_preset() - fill @model with a named shape.
 * @name: "llama-3-8b", "llama-3-70b-tp8", "qwen2.5-7b", "deepseek-v3-tp8" or
 *        "tiny" (see kvs_model_preset_name()).
 * @model: receives the shape.
 *
 * Context: MT-Safe.
 * Return: 0, or -1 with errno EINVAL (NULL) or ENOENT (unknown name).
 */
KVS_EXPORT int kvs_model_preset(const char *name, kvs_model_t *model)
{
	size_t i;

	if (!name || !model)
		return kvs_fail(EINVAL);
	for (i = 0; i < NPRESETS; i++) {
		if (strcmp(name, presets[i].name) == 0) {
			*model = presets[i].m;
			return 0;
		}
	}
	return kvs_fail(ENOENT);
}

/**
 * kvs_model_preset_name() - the name of preset @index.
 * @index: 0, 1, ...
 *
 * Context: MT-Safe.
 * Return: a static string, or NULL past the last preset.
 */
KVS_EXPORT const char *kvs_model_preset_name(unsigned int index)
{
	return index < NPRESETS ? presets[index].name : NULL;
}

static bool model_valid(const kvs_model_t *m)
{
	if (!m || m->layers == 0 || m->dtype_size == 0 || m->tp_size == 0)
		return false;
	if (m->attn == KVS_ATTN_MLA)
		return (uint64_t)m->kv_lora_rank + m->qk_rope_head_dim > 0;
	return m->attn == KVS_ATTN_MHA && m->kv_heads > 0 && m->head_dim > 0;
}

/**
 * kvs_model_kv_heads_per_rank() - KV heads one TP rank holds.
 * @model: shape.
 *
 * As SGLang does: kv_heads / tp_size, at least 1 (heads are replicated when
 * there are more ranks than heads).
 *
 * Context: MT-Safe.
 * Return: the count; 0 for an invalid shape.
 */
KVS_EXPORT uint32_t kvs_model_kv_heads_per_rank(const kvs_model_t *m)
{
	uint32_t h;

	if (!model_valid(m))
		return 0;
	if (m->attn == KVS_ATTN_MLA)
		return 1;
	h = m->kv_heads / m->tp_size;
	return h ? h : 1;
}

/*
 * Bytes one token takes in all buffers (the cell).  Every
 * field is the caller's uint32_t, so each product is checked: three such
 * fields multiplied together already pass 2^64.
 */
static int model_cell(const kvs_model_t *m, size_t *cell)
{
	size_t tb, c;

	if (!model_valid(m))
		return kvs_fail(EINVAL);
	if (m->attn == KVS_ATTN_MLA) {
		if (__builtin_mul_overflow((uint64_t)m->kv_lora_rank + m->qk_rope_head_dim,
					   (uint64_t)m->dtype_size, &tb) ||
		    __builtin_mul_overflow(tb, (size_t)m->layers, &c))
			return kvs_fail(EOVERFLOW);
	} else {
		if (__builtin_mul_overflow((size_t)kvs_model_kv_heads_per_rank(m),
					   (size_t)m->head_dim, &tb) ||
		    __builtin_mul_overflow(tb, (size_t)m->dtype_size, &tb) ||
		    __builtin_mul_overflow(tb, (size_t)m->layers, &c) ||
		    __builtin_mul_overflow(c, (size_t)2, &c))
			return kvs_fail(EOVERFLOW);
	}
	*cell = c;
	return 0;
}

/**
 * kvs_model_cell_size() - KV bytes of one token on one rank, all layers.
 * @model: shape.
 *
 * MHA: kv_heads/tp * head_dim * layers * 2 * dtype_size; MLA:
 * (kv_lora_rank + qk_rope_head_dim) * layers * dtype_size.
 *
 * Context: MT-Safe.
 * Return: the size, or 0 with errno EINVAL for an invalid shape or EOVERFLOW
 * when the size does not fit a size_t.
 */
KVS_EXPORT size_t kvs_model_cell_size(const kvs_model_t *m)
{
	size_t cell;

	return model_cell(m, &cell) < 0 ? 0 : cell;
}

/* --------------------------------------------------------------- planner */

/**
 * kvs_plan_attr_init() - planner defaults: page_size 1,
 * mem_fraction_static 0.88, memory from the driver, no caps.
 * @attr: attributes.
 *
 * Context: any thread.
 * Return: 0, or -1 with errno EINVAL.
 */
KVS_EXPORT int kvs_plan_attr_init(kvs_plan_attr_t *attr)
{
	KVS_ATTR_CLEAR(attr);
	attr->page_size = 1;
	attr->mem_fraction_static = 0.88;
	return 0;
}

/**
 * kvs_plan() - size the KV pool and the request table as SGLang does.
 * @drv: driver to ask for free and total memory when @attr leaves them 0
 *       (may be NULL when both are given).
 * @attr: model, page size, mem_fraction_static and optional caps.
 * @plan: receives the plan.
 *
 * rest = free - total * (1 - mem_fraction_static); tokens = rest / cell
 * size; max requests = max_running_requests, else
 * min(max(tokens / context_len * 512, 2048), 4096) from those profiled
 * tokens; then max tokens = tokens capped by max_total_tokens and aligned
 * down to the page size; the request table
 * has max requests + 1 rows of context_len + 4 entries.
 *
 * Nothing is written to @plan unless the call succeeds.
 *
 * Context: MT-Safe.
 * Return: 0, or -1 with errno EINVAL (bad attributes), EOVERFLOW (the cell
 * size, the request table's rows or columns, or its bytes do not fit their
 * types), ENOMEM (no memory left for KV once the non-static share is set
 * aside) or the driver's errno.
 */
KVS_EXPORT int kvs_plan(kvs_drv_t *drv, const kvs_plan_attr_t *a, kvs_plan_t *plan)
{
	size_t total, freeb, cell, rest_bytes, kv_bytes, table;
	kvs_plan_t out;
	uint64_t tokens;
	uint32_t ctx;
	double rest;

	if (!a || !plan || a->page_size == 0 || !(a->mem_fraction_static > 0) ||
	    a->mem_fraction_static > 1)
		return kvs_fail(EINVAL);
	cell = kvs_model_cell_size(&a->model);
	if (!cell)
		return -1;
	ctx = a->context_len ? a->context_len : a->model.context_len;
	if (ctx == 0)
		return kvs_fail(EINVAL);
	total = a->total_bytes;
	freeb = a->free_bytes;
	if (!total || !freeb) {
		size_t f, t;

		if (!drv)
			return kvs_fail(EINVAL);
		if (kvs_drv_mem_info(drv, &f, &t) < 0)
			return -1;
		if (!total)
			total = t;
		if (!freeb)
			freeb = f;
	}
	rest = (double)freeb - (double)total * (1.0 - a->mem_fraction_static);
	if (rest < (double)cell * a->page_size)
		return kvs_fail(ENOMEM);
	/* rest <= free_bytes, but a double of SIZE_MAX is 2^64: converting it
	 * back would be undefined, so the top of the range is clamped. */
	rest_bytes = rest >= (double)SIZE_MAX ? SIZE_MAX : (size_t)rest;
	tokens = rest_bytes / cell;
	memset(&out, 0, sizeof(out));
	/* As SGLang: requests from the profiled tokens, before any cap. */
	if (a->max_running_requests) {
		out.max_requests = a->max_running_requests;
	} else {
		double r = (double)tokens / (double)ctx * 512.0;

		if (r < 2048)
			r = 2048;
		if (r > 4096)
			r = 4096;
		out.max_requests = (uint32_t)r;
	}
	/* The request table: rows * cols int32 entries, each count a uint32_t. */
	if (__builtin_add_overflow(out.max_requests, 1u, &out.req_rows) ||
	    __builtin_add_overflow(ctx, 4u, &out.req_cols) ||
	    __builtin_mul_overflow((size_t)out.req_rows, (size_t)out.req_cols, &table) ||
	    __builtin_mul_overflow(table, sizeof(int32_t), &table))
		return kvs_fail(EOVERFLOW);
	if (a->max_total_tokens && a->max_total_tokens < tokens)
		tokens = a->max_total_tokens;
	tokens = tokens / a->page_size * a->page_size;
	if (tokens == 0)
		return kvs_fail(ENOMEM);
	if (tokens > SIZE_MAX || __builtin_mul_overflow((size_t)tokens, cell, &kv_bytes))
		return kvs_fail(EOVERFLOW); /* cannot happen: tokens * cell <= rest */
	out.cell_size = cell;
	out.max_total_tokens = tokens;
	out.kv_bytes = kv_bytes;
	out.rest_bytes = rest_bytes;
	*plan = out;
	return 0;
}
