/* SPDX-License-Identifier: MIT */
/*
 * abi.c - copying caller structs of another header version (abi.h).
 */
#include "base/abi.h"

#include <string.h>

void stk__struct_copy(void *dst, size_t dst_size, const void *src, size_t src_size)
{
    size_t n = src_size < dst_size ? src_size : dst_size;
    memcpy(dst, src, n);
    memset((unsigned char *)dst + n, 0, dst_size - n);
}

int stk__struct_import(void *dst, size_t dst_size, const void *src, size_t src_size)
{
    const unsigned char *s = src;
    for (size_t i = dst_size; i < src_size; i++)
        if (s[i] != 0)
            return -1;
    stk__struct_copy(dst, dst_size, src, src_size);
    return 0;
}

int stk__options_import(struct stk_options *dst, const struct stk_options *opts,
                        struct stk__err *err)
{
    if (opts == NULL)
        return stk__errf(err, STK_EINVAL, "options are NULL");
    size_t size = opts->struct_size;
    if (size < sizeof opts->struct_size)
        return stk__errf(err, STK_EINVAL, "options were not set up by stk_options_init() "
                         "(struct_size %zu)", size);
    if (stk__struct_import(dst, sizeof *dst, opts, size) < 0)
        return stk__errf(err, STK_EINVAL, "the options set fields that stoker %s does not know "
                         "(a program built against a newer stoker.h: struct_size %zu, this "
                         "library's %zu)", STK_VERSION_STRING, size, sizeof *dst);
    dst->struct_size = sizeof *dst;
    return 0;
}
