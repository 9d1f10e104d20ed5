/* SPDX-License-Identifier: MIT */
/*
 * options_fixture.h - options shared by the unit tests that read epochs.
 */
#ifndef STK_TEST_OPTIONS_FIXTURE_H
#define STK_TEST_OPTIONS_FIXTURE_H

#include "stoker.h"

/* o reading in storage order (shuffle 0), with shuffle_buffer back at its
 * default: a loader refuses a shuffle window it would ignore, and the
 * tests set one for their shuffled runs. */
static inline struct stk_options storage_order(struct stk_options o)
{
    struct stk_options d;
    stk_options_init(&d);
    o.shuffle = 0;
    o.shuffle_buffer = d.shuffle_buffer;
    return o;
}

#endif
