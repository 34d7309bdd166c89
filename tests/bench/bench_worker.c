/* SPDX-License-Identifier: MIT */
/*
 * tests/bench/bench_worker.c - spurious ENOMEM while the worker maps.
 *
 * A two-slab allocator with the worker and min_empty 1, slabs of 128 MiB
 * (prefaulted, so a map takes tens of milliseconds).  Each round takes all
 * of the mapped slab, which sends the worker to map the second, then asks
 * for one more page: it counts the allocations that failed with ENOMEM and
 * the times kvs_slab_available() said 0 until the page came, and how long
 * that took.  Before issue 9 the allocator failed for the whole length of
 * the map; now it waits for the slab in flight.  Usage: bench_worker [ROUNDS]
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <kvslab.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc, char **argv){
	int rounds = argc > 1 ? atoi(argv[1]) : 20;
 kvs_drv_attr_t da; kvs_drv_attr_init(&da);
 kvs_drv_t *d=kvs_drv_open("host",&da);
 static const size_t tb[2]={2048,2048};
 kvs_slab_attr_t a; kvs_slab_attr_init(&a); a.nbuffers=2;a.token_bytes=tb;a.slab_granules=32;a.min_empty=1;a.max_empty=2;a.chunk_pool=0;a.magazine=0;a.flags=KVS_SLAB_F_WORKER;
 a.capacity_pages = 2 * 32 * 1024;
 unsigned long fails=0, zero=0; double waited=0;
 for (int r=0;r<rounds;r++){
  kvs_slab_t *s=kvs_slab_create(d,&a);
  uint32_t pps=kvs_slab_pages_per_slab(s); uint32_t *p=malloc((pps+1)*4);
  while(kvs_slab_stat(s,KVS_SLAB_STAT_slabs_empty)<1) usleep(100);
  if (kvs_slab_alloc_bulk(s,pps,p)!=(int)pps) {perror("bulk"); return 1;}
  usleep(500);
  double t0=now();
  for(;;){ if (kvs_slab_available(s)==0) zero++; int64_t x=kvs_slab_alloc(s); if (x>=0){p[pps]=(uint32_t)x;break;} if(errno!=ENOMEM){perror("alloc");return 1;} fails++; }
  waited+=now()-t0;
  kvs_slab_free_bulk(s,pps+1,p); free(p); kvs_slab_destroy(s);
 }
 printf("rounds %d  slab %d MiB  spurious ENOMEM %lu  available()==0 seen %lu  mean wait for the page %.2f ms\n", rounds, 32 * 2 * 2, fails, zero, waited/rounds*1e3);
 return 0;}
