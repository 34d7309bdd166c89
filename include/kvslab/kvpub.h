/* SPDX-License-Identifier: MIT */
/*
 * kvslab/kvpub.h - publish a prefix cache's KV events the way vLLM does:
 * msgpack-encoded event batches on a ZeroMQ PUB socket, with a ROUTER
 * socket that replays recent batches.  See kvs_kvpub_create(3) and
 * kvslab-kvevents(7).
 *
 * Declared in every build; in one configured without libzmq and msgpack-c
 * the functions fail with ENOTSUP.
 */
#ifndef KVSLAB_KVPUB_H
#define KVSLAB_KVPUB_H

#include <stddef.h>
#include <stdint.h>

#include <kvslab/radix.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvs_kvpub kvs_kvpub_t;

/* kvs_kvpub_attr_t.bind */
#define KVS_KVPUB_AUTO 0	/* vLLM's rule: bind if the endpoint has '*' or "::", or is ipc:// or inproc:// */
#define KVS_KVPUB_BIND 1
#define KVS_KVPUB_CONNECT 2

/* kvs_kvpub_attr_t.format: how each event of a batch is encoded */
#define KVS_KVPUB_FORMAT_ARRAY 0 /* a positional array (vLLM's array_like events) */
#define KVS_KVPUB_FORMAT_MAP 1	 /* a map of named fields (vLLM since PR #42892) */

/* kvs_kvpub_attr_t.replay_framing: the frames of a replay answer after the
 * client's identity and the empty delimiter */
#define KVS_KVPUB_REPLAY_SEQ 0	 /* seq, payload (vLLM before PR #45177) */
#define KVS_KVPUB_REPLAY_TOPIC 1 /* topic, seq, payload (vLLM since PR #45177, 0.26.0) */

/* The LoRA adapter of a stored event's extra key: called when the event is
 * encoded; nonzero when it set *lora_id (>= 0) and/or *lora_name. */
typedef int (*kvs_kvpub_lora_cb)(void *arg, uint64_t extra_key, int64_t *lora_id,
				 const char **lora_name);

/** Attributes of kvs_kvpub_create(); start from kvs_kvpub_attr_init(). */
typedef struct kvs_kvpub_attr {
	const char *endpoint;		/* PUB socket, default tcp://127.0.0.1:5557 */
	int bind;			/* KVS_KVPUB_AUTO, _BIND (default) or _CONNECT */
	const char *replay_endpoint;	/* ROUTER socket, always bound; NULL: no replay */
	const char *topic;		/* first frame of every message, default "" */
	size_t buffer_steps;		/* batches kept for replay, default 10000 */
	size_t max_batch_events;	/* events per batch at most, default 1024 */
	size_t max_queue;		/* events queued at most, default 100000 */
	uint32_t flush_interval_ms;	/* background sends, default 10; 0: no thread */
	int hwm;			/* PUB high-water mark, default 100000 */
	int data_parallel_rank;		/* the batches' data_parallel_rank, default 0 */
	int format;			/* KVS_KVPUB_FORMAT_ARRAY (default) or _MAP */
	size_t max_queue_tokens;	/* stored events' token ids queued at most, default 1 << 20 */
	size_t replay_max_batches;	/* batches one replay request gets at most, default 1000 */
	int replay_framing;		/* KVS_KVPUB_REPLAY_SEQ (default) or _TOPIC */
	kvs_kvpub_lora_cb lora_cb;	/* optional: lora_id and lora_name of stored events */
	void *lora_arg;
	uint64_t _reserved[3];
} kvs_kvpub_attr_t;

int kvs_kvpub_attr_init(kvs_kvpub_attr_t *attr);
kvs_kvpub_t *kvs_kvpub_create(const kvs_kvpub_attr_t *attr);
int kvs_kvpub_destroy(kvs_kvpub_t *pub);
void kvs_kvpub_event_cb(void *pub, const kvs_kv_event_t *ev);
int kvs_kvpub_flush(kvs_kvpub_t *pub);
uint64_t kvs_kvpub_dropped(kvs_kvpub_t *pub);

#ifdef __cplusplus
}
#endif

#endif /* KVSLAB_KVPUB_H */
