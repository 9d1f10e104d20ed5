/* SPDX-License-Identifier: MIT */
/*
 * test_run.c - the run context (base/run.h): the one counter snapshot puts
 * every counter in the field of its name, the log reaches the callback
 * (and nowhere without one), and the table's kinds are what Python and
 * Prometheus read.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "base/run.h"
#include "stoker.h"

/* Counter i holds 1000 + i; its field, found by name through the public
 * table, must hold the same after a snapshot (wall_ns is computed). */
static void test_snapshot_fills_every_field_by_name(void **state)
{
    (void)state;
    struct stk__run run;
    stk__run_init(&run, NULL);
    atomic_uint_fast64_t *c = (atomic_uint_fast64_t *)&run.counters;
    const size_t n = sizeof run.counters / sizeof *c;
    for (size_t i = 0; i < n; i++)
        atomic_store(&c[i], 1000 + i);
    struct stk_stats s;
    memset(&s, 0xff, sizeof s);
    stk__run_snapshot(&run, &s);
    const struct stk_stats_field *f;
    size_t i = 0;
    for (; (f = stk_stats_field_at(i)) != NULL; i++) {
        uint64_t v;
        memcpy(&v, (const char *)&s + f->offset, sizeof v);
        if (strcmp(f->name, "wall_ns") == 0)
            assert_int_equal(v, 0); /* not started */
        else
            assert_int_equal(v, 1000 + i);
    }
    assert_int_equal(i, n);
    atomic_store(&run.started_ns, 1);
    stk__run_snapshot(&run, &s);
    assert_true(s.wall_ns > 0);
}

static void test_kinds(void **state)
{
    (void)state;
    const struct stk_stats_field *f;
    for (size_t i = 0; (f = stk_stats_field_at(i)) != NULL; i++) {
        size_t len = strlen(f->name);
        int ns = len > 3 && strcmp(f->name + len - 3, "_ns") == 0;
        assert_int_equal(f->kind == STK_STAT_NS, ns);
        if (strcmp(f->name, "read_threads") == 0)
            assert_int_equal(f->kind, STK_STAT_GAUGE);
        if (strcmp(f->name, "samples") == 0)
            assert_int_equal(f->kind, STK_STAT_COUNT);
    }
}

static void collect(void *data, enum stk_log_level level, const char *message)
{
    assert_int_equal(level, STK_LOG_WARN);
    strncpy(data, message, 63);
}

/* An epoch's part of the run (its pipeline's counts): it starts at zero
 * with the run's log and policy, and merging or adding it sums every COUNT
 * and NS row and leaves every GAUGE row the run's own. */
static void test_part_merges_counts_not_gauges(void **state)
{
    (void)state;
    struct stk_options o;
    stk_options_init(&o);
    o.on_error = STK_ON_ERROR_SKIP;
    struct stk__run run, part;
    stk__run_init(&run, &o);
    atomic_store(&run.counters.bytes_read, 100);
    atomic_store(&run.counters.read_threads, 4);
    stk__run_init_part(&part, &run);
    assert_int_equal(part.skip_bad, 1);
    assert_int_equal(atomic_load(&part.counters.bytes_read), 0);
    atomic_store(&part.counters.bytes_read, 23);
    atomic_store(&part.counters.read_ns, 7);
    atomic_store(&part.counters.read_threads, 9);
    struct stk_stats st;
    stk__run_snapshot(&run, &st);
    stk__run_snapshot_add(&part, &st);
    assert_int_equal(st.bytes_read, 123);
    assert_int_equal(st.read_ns, 7);
    assert_int_equal(st.read_threads, 4);
    stk__run_merge(&run, &part);
    stk__run_snapshot(&run, &st);
    assert_int_equal(st.bytes_read, 123);
    assert_int_equal(st.read_ns, 7);
    assert_int_equal(st.read_threads, 4);
}

static void test_log(void **state)
{
    (void)state;
    struct stk__run run;
    char seen[64] = "";
    stk__run_init(&run, NULL);
    stk__run_log(&run, STK_LOG_WARN, "dropped %d", 1); /* no callback: nothing */
    struct stk_options o;
    stk_options_init(&o);
    o.log = collect;
    o.log_data = seen;
    o.on_error = STK_ON_ERROR_SKIP;
    stk__run_init(&run, &o);
    assert_int_equal(run.skip_bad, 1);
    stk__run_log(&run, STK_LOG_WARN, "%s: sample %d skipped", "shard-0.tar", 7);
    assert_string_equal(seen, "shard-0.tar: sample 7 skipped");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_snapshot_fills_every_field_by_name),
        cmocka_unit_test(test_kinds),
        cmocka_unit_test(test_log),
        cmocka_unit_test(test_part_merges_counts_not_gauges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
