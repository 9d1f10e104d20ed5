/* SPDX-License-Identifier: MIT */
/*
 * fuzz_index.c - libFuzzer target: arbitrary bytes as a dataset index file
 * (index_json.h), which a loader reads from index_path and every Dask worker
 * receives from the trainer.
 *
 * The input is written to an anonymous file (memfd) and read through
 * stk__index_json_read(), as a loader reads it: in chunks, as a stream.
 * Checked (a violation traps):
 *  - success: every shard has a URL; its offsets, when there, are as many
 *    as its samples, increasing, on 512-byte blocks and below its size when
 *    that is known; the total is the sum of the counts;
 *  - failure: err.code == rc with a message, rc one of STK_EINDEX,
 *    STK_ENOMEM (never tar's codes);
 *  - stk__index_file_free() releases everything (ASan's leak check).
 */
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz.h"
#include "index_json.h"
#include "stoker.h"

#define MAX_INPUT (1u << 20)

static void check_file(const struct stk__index_file *f)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < f->n; i++) {
        const struct stk__index_entry *e = &f->entries[i];
        FUZZ_CHECK(e->url != NULL);
        sum += e->samples;
        for (uint64_t k = 0; e->offsets != NULL && k < e->samples; k++) {
            FUZZ_CHECK(e->offsets[k] % 512 == 0);
            FUZZ_CHECK(k == 0 || e->offsets[k] > e->offsets[k - 1]);
            FUZZ_CHECK(!e->stamp.has_size || e->offsets[k] < e->stamp.size);
        }
    }
    FUZZ_CHECK(sum == f->samples);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > MAX_INPUT)
        return 0;
    int fd = memfd_create("fuzz-index", MFD_CLOEXEC);
    if (fd < 0)
        return 0;
    size_t done = 0;
    while (done < size) {
        ssize_t n = write(fd, data + done, size - done);
        if (n <= 0)
            break;
        done += (size_t)n;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    struct stk__index_file f;
    struct stk__err err;
    stk__err_clear(&err);
    int rc = done == size ? stk__index_json_read(path, &f, &err) : 0;
    if (done == size && rc == 0) {
        check_file(&f);
        stk__index_file_free(&f);
    } else if (done == size) {
        FUZZ_CHECK(err.code == rc && err.msg[0] != '\0');
        FUZZ_CHECK(rc == STK_EINDEX || rc == STK_ENOMEM);
    }
    close(fd);
    return 0;
}
