/* SPDX-License-Identifier: MIT */
/*
 * fuzz.h - the libFuzzer entry point shared by the targets and replay.c.
 *
 * Each fuzz_*.c defines LLVMFuzzerTestOneInput; it is linked either with
 * libFuzzer (clang, -Dfuzzing=true) or with replay.c, a plain main() that
 * feeds it every file of a corpus, so the normal test build (gcc with
 * ASan/UBSan) replays the seeds and regressions on every run.
 */
#ifndef STK_FUZZ_H
#define STK_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* An invariant of the code under test does not hold: crash so that libFuzzer
 * (or the replay test) reports the input. */
#define FUZZ_CHECK(cond)                                                                           \
    do {                                                                                           \
        if (!(cond))                                                                               \
            fuzz_fail(__FILE__, __LINE__, #cond);                                                  \
    } while (0)

#include <stdio.h>

__attribute__((noreturn, unused)) static void fuzz_fail(const char *file, int line,
                                                        const char *what) {
    fprintf(stderr, "%s:%d: invariant violated: %s\n", file, line, what);
    fflush(stderr);
    __builtin_trap();
}

/* FNV-1a over p[0..n), continuing from h (start: 0xcbf29ce484222325):
 * a digest for comparing what two runs delivered. */
__attribute__((unused)) static uint64_t fuzz_fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

#endif
