/* SPDX-License-Identifier: MIT */
/* tests/common/failslab.h - fail the calling thread's Nth allocation. */
#ifndef KVSLAB_FAILSLAB_H
#define KVSLAB_FAILSLAB_H

#include <stdint.h>

/* Fail this thread's @nth next malloc/calloc/realloc (from 1), once; 0 off. */
void fs_fail_nth(uint64_t nth);
/* Fail each of this thread's allocations with probability @p, seeded. */
void fs_fail_random(double p, uint64_t seed);
/* Count this thread's allocations without failing any. */
void fs_count(void);
/* Disarm; the allocations seen since arming. */
uint64_t fs_off(void);
/* Allocations failed since arming. */
uint64_t fs_failed(void);
/* This thread's allocations made minus its frees since arming: what the
 * calls under test kept (0 for a call that failed and freed what it took). */
int64_t fs_net(void);

#endif
