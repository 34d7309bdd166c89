/* SPDX-License-Identifier: MIT */
/*
 * drv/host_int.h - what the host backend's files share: its records
 * (arenas, chunks, reservations, the copy queue, the backend itself) and
 * the memory-limit reads of drv/host_mem.c (the machine's and the memory
 * cgroup's) that drv/host.c's chunk creation and mem_info use.  The
 * design is drv/host.c's essay.
 */
#ifndef KVSLAB_HOST_INT_H
#define KVSLAB_HOST_INT_H

#include <pthread.h>
#include <stdbool.h>

#include "backend.h"

struct host_arena {
	int fd;
	bool mirror;		/* a reservation's: never searched first fit */
	bool bound;		/* mirror of the live reservation at rbase */
	kvs_devptr_t rbase;	/* mirror: granule i is address rbase + i * gran */
	size_t ngran;		/* granules in the file */
	size_t nfree;		/* granules not used by a chunk */
	size_t hint;		/* no free granule below this one */
	uint64_t *used;		/* one bit per granule */
};

struct host_chunk {
	size_t arena;		/* index in hb->arenas; NO_SLOT: no range yet */
	size_t first, ngran;	/* granules [first, first + ngran) of the arena */
	bool placed;		/* mapped once: its range is final */
	size_t next_free;	/* chain of free slots; NO_SLOT ends it */
};

/* A reservation, for the mirror placement of its first mappings. */
struct host_res {
	kvs_devptr_t base;
	size_t size;
	size_t arena;		/* its mirror arena; NO_SLOT: none open */
};

/* One entry of the copy queue: a copy, or a batch of @nvec copies (vec
 * non-NULL, owned by the entry) that the worker runs as one. */
struct copy_req {
	void *dst;
	const void *src;
	size_t n;
	kvs_copy_t *vec;
	size_t nvec;
	struct copy_req *next;
};

struct host_be {
	size_t total;
	size_t gran;
	bool populate, lazy;
	bool nocopy;			/* KVS_DRV_F_NO_COPY */
	/* The memory cgroup, found once at open (cgroup_locate()): the
	 * directory of the process's cgroup (NULL: no memory controller),
	 * the length of its mount's part, and whether it is cgroup v1. */
	char *cg_dir;
	size_t cg_base;
	bool cg_v1;

	pthread_mutex_t alock;		/* arenas and chunk table */
	struct host_arena *arenas;
	size_t narenas, cap_arenas;
	struct host_chunk *chunks;
	size_t nchunks, cap_chunks;	/* slots in use or chained free */
	size_t free_slot;		/* first free slot, NO_SLOT: none */
	struct host_res *res;		/* reservations, sorted by base */
	size_t nres, cap_res;

	pthread_mutex_t qlock;
	pthread_cond_t qwork, qdone;
	struct copy_req *head, *tail;
	uint64_t submitted, completed;
	bool worker_started, stop;
	pthread_t worker;
};

struct host_event {
	uint64_t seq;
};

/* drv/host_mem.c */
void host_cgroup_locate(struct host_be *hb);
size_t host_mem_available(const struct host_be *hb);
size_t host_machine_available(void);
size_t host_cgroup_headroom(const struct host_be *hb);

#endif /* KVSLAB_HOST_INT_H */
