/* SPDX-License-Identifier: MIT */
/*
 * jpeg_fixture.c - synthetic JPEGs for unit tests.
 */
#include <stddef.h>
#include <stdio.h>

#include <jpeglib.h>
#include <stdlib.h>

#include "jpeg_fixture.h"

void jpeg_fixture(int width, int height, unsigned seed, unsigned char **out, size_t *size)
{
    jpeg_fixture_sampled(width, height, seed, 2, 2, out, size);
}

void jpeg_fixture_sampled(int width, int height, unsigned seed, int h_samp, int v_samp,
                          unsigned char **out, size_t *size)
{
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr err;
    c.err = jpeg_std_error(&err);
    jpeg_create_compress(&c);
    unsigned long len = 0;
    *out = NULL;
    jpeg_mem_dest(&c, out, &len);
    c.image_width = (JDIMENSION)width;
    c.image_height = (JDIMENSION)height;
    c.input_components = 3;
    c.in_color_space = JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, 90, TRUE);
    c.comp_info[0].h_samp_factor = h_samp;
    c.comp_info[0].v_samp_factor = v_samp;
    jpeg_start_compress(&c, TRUE);
    unsigned char *row = malloc((size_t)width * 3);
    if (row == NULL)
        abort();
    while (c.next_scanline < c.image_height) {
        int y = (int)c.next_scanline;
        for (int x = 0; x < width; x++) {
            row[3 * x] = (unsigned char)((x * 255) / width + seed * 37);
            row[3 * x + 1] = (unsigned char)((y * 255) / height + seed * 11);
            row[3 * x + 2] = (unsigned char)(((x + y) * 3 + seed * 101) & 0xff);
        }
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    free(row);
    *size = len;
}
