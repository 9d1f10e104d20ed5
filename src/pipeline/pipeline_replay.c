/* SPDX-License-Identifier: MIT */
/*
 * pipeline_replay.c - what a replay of the sequencer on counts needs (the
 * seeds of its choices, its window, the request seek_plan.h takes), shared
 * by the sequencer, the resume's seek plan (pipeline.c) and the first
 * batches read by offset (pipeline_head.c). It calls none of them.
 */
#include "pipeline/pipeline_impl.h"

/* Seeds of the sequencer's random choices for this rank and epoch. */
uint64_t stk__pipeline_sequencer_seed(const struct stk__pipeline_config *cfg, uint64_t purpose) {
    uint64_t base = stk__mix(stk__mix(cfg->opts.seed, cfg->opts.epoch),
                             ((uint64_t)cfg->rank << 32) | (uint64_t)cfg->world_size);
    return stk__mix(base, purpose);
}

size_t stk__pipeline_shuffle_window(const struct stk_options *o) {
    return o->shuffle && o->shuffle_buffer > 1 ? o->shuffle_buffer : 1;
}

struct stk__seek_request stk__pipeline_seek_request(const struct stk__pipeline_config *cfg,
                                                    struct stk__plan_cursor *cursor,
                                                    unsigned n_slots, uint64_t output) {
    const struct stk_options *o = &cfg->opts;
    return (struct stk__seek_request){
        .cursor = cursor,
        .shard_samples = cfg->shard_samples,
        .n_slots = n_slots,
        .shuffle = o->shuffle,
        .interleave_seed = stk__pipeline_sequencer_seed(cfg, INTERLEAVE_SEED),
        .shuffle_seed = stk__pipeline_sequencer_seed(cfg, SHUFFLE_SEED),
        .window = stk__pipeline_shuffle_window(o),
        .output_position = output,
        .target = o->samples_per_rank ? o->samples_per_rank : UINT64_MAX,
    };
}
