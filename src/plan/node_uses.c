/* SPDX-License-Identifier: MIT */
/*
 * node_uses.c - the coming reads of a node's shards, from the plan alone.
 */
#include "plan/node_uses.h"

#include "base/alloc.h"
#include "stoker.h"

uint64_t stk__plan_use_time(uint64_t epoch, uint64_t g, uint64_t count)
{
    uint64_t along = g < count ? (g << 32) / count : UINT32_MAX;
    return (epoch << 32) | along;
}

int stk__plan_node_uses(const struct stk__plan_spec *spec, int first_rank, int node_ranks,
                        uint64_t epochs, struct stk__plan_use **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    size_t cap = 0;
    struct stk__plan_use *uses = NULL;
    for (uint64_t e = 0; e < epochs; e++) {
        for (int r = first_rank; r < first_rank + node_ranks; r++) {
            struct stk__plan_spec s = *spec;
            s.epoch = spec->epoch + e;
            s.rank = r;
            s.unbounded = 0;
            struct stk__plan_cursor c;
            if (stk__plan_cursor_open(&c, &s) < 0)
                goto nomem;
            if (*n + c.count > cap) {
                size_t grown = (*n + c.count) * 2 + 16;
                struct stk__plan_use *u = stk__realloc(uses, grown * sizeof *u);
                if (u == NULL) {
                    stk__plan_cursor_free(&c);
                    goto nomem;
                }
                uses = u;
                cap = grown;
            }
            struct stk__plan_segment seg;
            for (uint64_t g = 0; stk__plan_cursor_segment(&c, g, &seg); g++)
                uses[(*n)++] =
                    (struct stk__plan_use){seg.shard, stk__plan_use_time(s.epoch, g, c.count)};
            stk__plan_cursor_free(&c);
        }
    }
    *out = uses;
    return 0;
nomem:
    stk__free(uses);
    *n = 0;
    return STK_ENOMEM;
}
