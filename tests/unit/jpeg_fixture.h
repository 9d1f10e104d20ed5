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

#endif
