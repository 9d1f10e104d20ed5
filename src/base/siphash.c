/* SPDX-License-Identifier: MIT */
/*
 * siphash.c - SipHash-2-4-128, after the reference implementation.
 */
#include "base/siphash.h"

#include <string.h>
#include <sys/random.h>
#include <time.h>

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))

static void round_(uint64_t v[4])
{
    v[0] += v[1];
    v[1] = ROTL(v[1], 13);
    v[1] ^= v[0];
    v[0] = ROTL(v[0], 32);
    v[2] += v[3];
    v[3] = ROTL(v[3], 16);
    v[3] ^= v[2];
    v[0] += v[3];
    v[3] = ROTL(v[3], 21);
    v[3] ^= v[0];
    v[2] += v[1];
    v[1] = ROTL(v[1], 17);
    v[1] ^= v[2];
    v[2] = ROTL(v[2], 32);
}

static void rounds(uint64_t v[4], int n)
{
    while (n-- > 0)
        round_(v);
}

static uint64_t load_le(const unsigned char *p, size_t n)
{
    uint64_t x = 0;
    for (size_t i = 0; i < n; i++)
        x |= (uint64_t)p[i] << (8 * i);
    return x;
}

void stk__siphash128(const uint64_t key[2], const void *data, size_t len, uint64_t out[2])
{
    const unsigned char *p = data;
    uint64_t v[4] = {0x736f6d6570736575ull ^ key[0], 0x646f72616e646f6dull ^ key[1] ^ 0xee,
                     0x6c7967656e657261ull ^ key[0], 0x7465646279746573ull ^ key[1]};
    size_t words = len / 8;
    for (size_t i = 0; i < words; i++, p += 8) {
        uint64_t m = load_le(p, 8);
        v[3] ^= m;
        rounds(v, 2);
        v[0] ^= m;
    }
    uint64_t last = ((uint64_t)len << 56) | load_le(p, len % 8);
    v[3] ^= last;
    rounds(v, 2);
    v[0] ^= last;
    v[2] ^= 0xee;
    rounds(v, 4);
    out[0] = v[0] ^ v[1] ^ v[2] ^ v[3];
    v[1] ^= 0xdd;
    rounds(v, 4);
    out[1] = v[0] ^ v[1] ^ v[2] ^ v[3];
}

void stk__siphash_random_key(uint64_t key[2])
{
    if (getrandom(key, 2 * sizeof key[0], GRND_NONBLOCK) == (ssize_t)(2 * sizeof key[0]))
        return;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t seed[2] = {(uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30),
                        (uint64_t)(uintptr_t)key};
    uint64_t mixed[2];
    stk__siphash128(seed, &ts, sizeof ts, mixed);
    memcpy(key, mixed, sizeof mixed);
}
