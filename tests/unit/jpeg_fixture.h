/* SPDX-License-Identifier: MIT */
/*
 * jpeg_fixture.h - encode small synthetic JPEGs for unit tests (through
 * libjpeg-turbo, the same library stoker decodes with).
 */
#ifndef STK_TEST_JPEG_FIXTURE_H
#define STK_TEST_JPEG_FIXTURE_H

#include <stddef.h>

/* A width x height RGB JPEG of a smooth pattern seeded by `seed`; the
 * caller frees *out with free(). */
void jpeg_fixture(int width, int height, unsigned seed, unsigned char **out, size_t *size);

/* The same with the luma sampling factors h_samp x v_samp (chroma 1 x 1):
 * 1 x 1 is 4:4:4, 2 x 1 4:2:2, 2 x 2 4:2:0 (jpeg_fixture's). */
void jpeg_fixture_sampled(int width, int height, unsigned seed, int h_samp, int v_samp,
                          unsigned char **out, size_t *size);

#endif
