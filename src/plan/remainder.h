/* SPDX-License-Identifier: MIT */
/*
 * remainder.h - elastic resume: the samples of an epoch that the ranks of
 * an interrupted run have not delivered, as ranges of its sequence.
 *
 * Split by sample (plan.h), an epoch is one sequence of N positions (the
 * shards' samples in permutation order, or the global order) and rank r of
 * W reads the contiguous run of it that the split gives, padding wrapping
 * to the sequence's start. Where a rank delivers its run front to back (a
 * global order, or no shuffle: no window reorders it), what it delivered
 * after k samples is the first k positions of its run; so the whole
 * group's progress is W numbers, and what no rank delivered yet is a few
 * ranges of positions: at most (ranges before) + 2 * W + 1 of them, whatever
 * the dataset's size. A resumed epoch splits those ranges over the new
 * ranks as a fresh epoch splits the whole sequence (plan.c), and an epoch
 * resumed that way can be interrupted and resumed again: its sequence is
 * the ranges', and the new remainder is again ranges of the epoch's
 * positions. Memory: two ranges per old rank, never a set of samples.
 *
 * Under a shuffle window a rank delivers its run out of order, but the
 * window's output depends only on (seed, W, input count) and the
 * interleave's on the segments' counts (shuffle.h, interleave.h): replaying
 * both for delivered[r] outputs (stk__seek_plan_delivered) gives the
 * pieces of its run it delivered, which stk__plan_remainder_runs() takes.
 * Those are the front each shard slot consumed (a whole segment or a part
 * of one, at most K slots' fronts) less the samples the window still held,
 * at most 2W + 1 single positions; so the rest is at most (ranges before)
 * + (list segments) + W1 * (K + 2W + 3) + 1 ranges, K the slots
 * (shards_in_flight). The held samples are a random part of about the last
 * W inputs and runs of them merge: measured at the default W = 2000, K =
 * 16, 8 ranks of 8,000 samples stopped mid-epoch, 2,733 ranges (0.17 W per
 * rank; tests/unit/test_remainder.c prints it), 44 KB as integers in the
 * merged state, where the bound allows 32,000. A resumed epoch reads the
 * held ones as short segments of their shards, each by its offset (so not
 * over compressed shards, which have none: loader.c refuses). A remainder
 * so made is again ranges of the epoch's sequence: resumed again the same
 * way.
 */
#ifndef STK_REMAINDER_H
#define STK_REMAINDER_H

#include <stddef.h>
#include <stdint.h>

/* Positions in ranges: n [begin, end) pairs (2 * n numbers). */
uint64_t stk__plan_ranges_total(const uint64_t *ranges, size_t n);

/* 0 when ranges are ascending, disjoint, non-empty and end at or below
 * total; else -1. */
int stk__plan_ranges_check(const uint64_t *ranges, size_t n, uint64_t total);

/* The remainder after an interrupted epoch: the sequence's positions (of
 * total; or only those in ranges, n_ranges pairs, when ranges is not NULL)
 * that world ranks split as plan.c does (pad: equal shares of ceil(R /
 * world), wrapping; else [r * R / world, (r + 1) * R / world)) have not
 * delivered when rank r has delivered delivered[r] samples (more than its
 * share counts as its share). *out (pairs, freed with stk__free) holds
 * *n_out ranges, ascending; 0 or STK_ENOMEM. */
int stk__plan_remainder(uint64_t total, const uint64_t *ranges, size_t n_ranges, int world, int pad,
                        const uint64_t *delivered, uint64_t **out, size_t *n_out);

/* The same when rank r delivered the pieces done[r] of its run (n_done[r]
 * [begin, end) pairs of its run's positions, from 0; past the run counts
 * as the run), not its front: under a shuffle window. At most n_ranges +
 * (the pieces, each cut at most share / R + 2 times) + 1 ranges; 0 or
 * STK_ENOMEM. */
int stk__plan_remainder_runs(uint64_t total, const uint64_t *ranges, size_t n_ranges, int world,
                             int pad, const uint64_t *const *done, const size_t *n_done,
                             uint64_t **out, size_t *n_out);
/* The same after an epoch of a run under node affinity (plan.h): its
 * nodes each split their own sequence (node g's: lengths[g] positions)
 * over their ranks_per_node ranks, each rank a run of share samples (pad;
 * the run's equal share, cycling over the node's sequence) or its part
 * (uneven). The positions out are of the concatenation of the nodes'
 * sequences, node 0's first (what stk__plan_cursor_by_sample splits with
 * seq_nodes set); delivered[g * ranks_per_node + j] is node g's rank j's.
 * A node's tail that its ranks' shares leave out is in the remainder: an
 * epoch so resumed delivers every sample. 0 or STK_ENOMEM. */
int stk__plan_node_remainder(const uint64_t *lengths, int nodes, int ranks_per_node, uint64_t share,
                             int pad, const uint64_t *delivered, uint64_t **out, size_t *n_out);

#endif
