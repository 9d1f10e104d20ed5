/* SPDX-License-Identifier: MIT */
/*
 * epoch.c - a C program built the way a user builds one: against the
 * installed stoker.h and libstoker.so, found through pkg-config
 * (tests/integration/test_install.py).
 *
 *   epoch SHARD...   one epoch over the shards; prints "SAMPLES BATCHES"
 */
#include <stdio.h>

#include <stoker.h>

int main(int argc, char **argv)
{
    struct stk_options o;
    stk_options_init(&o);
    o.batch_size = 5;
    o.threads = 2;
    char msg[512];
    stk_loader *l;
    int rc = stk_loader_create(&o, (const char *const *)argv + 1, (size_t)(argc - 1), &l, msg,
                               sizeof msg);
    if (rc < 0) {
        fprintf(stderr, "epoch: %s: %s\n", stk_strerror(rc), msg);
        return 1;
    }
    unsigned long long samples = 0;
    struct stk_batch *b;
    while ((rc = stk_loader_next(l, &b)) == 0) {
        samples += b->n_samples;
        stk_batch_release(b);
    }
    if (rc != STK_EOF) {
        fprintf(stderr, "epoch: %s: %s\n", stk_strerror(rc), stk_loader_errmsg(l));
        stk_loader_destroy(l);
        return 1;
    }
    struct stk_stats s;
    stk_loader_stats(l, &s);
    printf("%llu %llu\n", samples, (unsigned long long)s.batches);
    stk_loader_destroy(l);
    return s.samples == samples ? 0 : 1;
}
