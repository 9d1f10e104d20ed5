/* SPDX-License-Identifier: MIT */
/*
 * source_seek.c - start a source at a byte offset.
 */
#include "io/source_seek.h"

#include "stoker.h"

int stk__source_seek(struct stk__source *src, uint64_t offset)
{
    uint64_t done = 0;
    while (done < offset && src->ops->skip != NULL) {
        int64_t n = src->ops->skip(src, offset - done);
        if (n < 0)
            return (int)n;
        if (n == 0)
            break;
        done += (uint64_t)n;
    }
    unsigned char scratch[16384];
    while (done < offset) {
        size_t want = offset - done < sizeof scratch ? (size_t)(offset - done) : sizeof scratch;
        ssize_t n = src->ops->read(src, scratch, want);
        if (n < 0)
            return (int)n;
        if (n == 0)
            return stk__errf(&src->err, STK_ETRUNC, "%s: ends at byte %llu, before offset %llu",
                             src->url, (unsigned long long)done, (unsigned long long)offset);
        done += (uint64_t)n;
    }
    src->start_offset = offset;
    return 0;
}
