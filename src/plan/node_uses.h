/* SPDX-License-Identifier: MIT */
/*
 * node_uses.h - when a node reads each of its shards in the coming epochs,
 * for a node cache that evicts the shard used farthest ahead (Belady's
 * rule) instead of the least recently used.
 *
 * A use's time is its epoch in the high 32 bits and, in the low 32, how far
 * along its rank's list it comes (position / list length): the ranks of a
 * node step together under DDP, so position k of one rank and position k of
 * another happen at about the same time. The reader that opens a shard
 * advances its cache's clock to that shard's time (stk__plan_use_time), so
 * what came before is in the past.
 */
#ifndef STK_NODE_USES_H
#define STK_NODE_USES_H

#include <stddef.h>
#include <stdint.h>

#include "plan/plan.h"

struct stk__plan_use {
    size_t shard; /* index into the URL list */
    uint64_t when;
};

/* The time of position g of a list of count shards in epoch (a position of
 * a later pass over the list counts as its end). */
uint64_t stk__plan_use_time(uint64_t epoch, uint64_t g, uint64_t count);

/* Every read of the node of spec's rank in epochs spec->epoch ..
 * spec->epoch + epochs - 1: its ranks are first_rank .. first_rank +
 * node_ranks - 1 (spec's rank among them), each one's list as spec gives
 * it, one pass. *out (stk__free) holds *n uses. 0 or STK_ENOMEM. */
int stk__plan_node_uses(const struct stk__plan_spec *spec, int first_rank, int node_ranks,
                        uint64_t epochs, struct stk__plan_use **out, size_t *n);

#endif
