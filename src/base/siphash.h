/* SPDX-License-Identifier: MIT */
/*
 * siphash.h - SipHash-2-4 with a 128-bit tag (Aumasson and Bernstein).
 *
 * A keyed hash: with a secret key nobody can construct inputs that collide
 * or that land in the same buckets of a table, so tables indexed by it keep
 * their expected cost on hostile input (hash flooding), and 128-bit tags
 * can stand in for the strings they were computed from.
 */
#ifndef STK_SIPHASH_H
#define STK_SIPHASH_H

#include <stddef.h>
#include <stdint.h>

/* The tag of data[0..len) under key (key[0] holds key bytes 0-7, little
 * endian); out[0] holds tag bytes 0-7 as the reference implementation
 * writes them, little endian, out[1] bytes 8-15. */
void stk__siphash128(const uint64_t key[2], const void *data, size_t len, uint64_t out[2]);

/* A key from the kernel's random source (a clock-derived one if that
 * fails): unpredictable to whoever writes the input. */
void stk__siphash_random_key(uint64_t key[2]);

#endif
