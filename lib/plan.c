/* SPDX-License-Identifier: MIT */
/*
 * lib/plan.c - model shapes and the memory planner: how many KV bytes a
 * token takes, and how many tokens and requests fit in a device's memory.
 *
 * What it owns.  The table of model presets (the config.json numbers of a
 * few public models), the arithmetic of a token's KV cell (SGLang's
 * kv_heads/tp * head_dim * layers * 2 * dtype_size, or the MLA latent width)
 * and SGLang's planner: mem_fraction_static of the device's memory goes to
 * weights and KV, what is left of it after the weights goes to KV, and the
 * request table is sized from the tokens that fit.  The KV pool (lib/pool.c)
 * builds on these numbers; nothing here allocates or maps anything.
 *
 * Data structures.  None that live: a const table of presets, and the
 * caller's kvs_model_t, kvs_plan_attr_t and kvs_plan_t, which are plain
 * values.
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
		return m->kv_lora_rank + m->qk_rope_head_dim > 0;
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

/* Bytes one token takes in one buffer. */
static size_t token_bytes_of(const kvs_model_t *m)
{
	if (m->attn == KVS_ATTN_MLA)
		return (size_t)(m->kv_lora_rank + m->qk_rope_head_dim) * m->dtype_size;
	return (size_t)kvs_model_kv_heads_per_rank(m) * m->head_dim * m->dtype_size;
}

/**
 * kvs_model_cell_size() - KV bytes of one token on one rank, all layers.
 * @model: shape.
 *
 * MHA: kv_heads/tp * head_dim * layers * 2 * dtype_size; MLA:
 * (kv_lora_rank + qk_rope_head_dim) * layers * dtype_size.
 *
 * Context: MT-Safe.
 * Return: the size, or 0 with errno EINVAL for an invalid shape.
 */
KVS_EXPORT size_t kvs_model_cell_size(const kvs_model_t *m)
{
	if (!model_valid(m)) {
		errno = EINVAL;
		return 0;
	}
	return token_bytes_of(m) * m->layers * (m->attn == KVS_ATTN_MLA ? 1 : 2);
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
	if (!attr)
		return kvs_fail(EINVAL);
	memset(attr, 0, sizeof(*attr));
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
 * Context: MT-Safe.
 * Return: 0, or -1 with errno EINVAL (bad attributes) or ENOMEM (no memory
 * left for KV once the non-static share is set aside).
 */
KVS_EXPORT int kvs_plan(kvs_drv_t *drv, const kvs_plan_attr_t *a, kvs_plan_t *plan)
{
	size_t total, freeb, cell;
	double rest;
	uint64_t tokens;
	uint32_t ctx;

	if (!a || !plan || a->page_size == 0 || !(a->mem_fraction_static > 0) ||
	    a->mem_fraction_static > 1)
		return kvs_fail(EINVAL);
	cell = kvs_model_cell_size(&a->model);
	if (!cell)
		return kvs_fail(EINVAL);
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
	tokens = (uint64_t)(rest / (double)cell);
	memset(plan, 0, sizeof(*plan));
	/* As SGLang: requests from the profiled tokens, before any cap. */
	if (a->max_running_requests) {
		plan->max_requests = a->max_running_requests;
	} else {
		double r = (double)tokens / (double)ctx * 512.0;

		if (r < 2048)
			r = 2048;
		if (r > 4096)
			r = 4096;
		plan->max_requests = (uint32_t)r;
	}
	if (a->max_total_tokens && a->max_total_tokens < tokens)
		tokens = a->max_total_tokens;
	tokens = tokens / a->page_size * a->page_size;
	if (tokens == 0)
		return kvs_fail(ENOMEM);
	plan->cell_size = cell;
	plan->max_total_tokens = tokens;
	plan->req_rows = plan->max_requests + 1;
	plan->req_cols = ctx + 4;
	plan->kv_bytes = (size_t)tokens * cell;
	plan->rest_bytes = (size_t)rest;
	return 0;
}
