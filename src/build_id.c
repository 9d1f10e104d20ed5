/* SPDX-License-Identifier: MIT */
/*
 * build_id.c - stk_build_id(): what decides the bytes this build delivers,
 * as one line, so that two processes (a trainer and its Dask workers) can
 * tell whether their batches of the same range would be equal. The version
 * alone ("0.1.0") is carried by every commit; the commit and the decoder
 * libraries' versions are what change pixels.
 */
#include <stdio.h> /* before jpeglib.h, which uses size_t and FILE */

#include <jpeglib.h>
#include <pthread.h>
#include <spng.h>
#include <zlib.h>

#include "build_commit.h"
#include "stoker.h"

static char build_id[256];
static pthread_once_t build_id_once = PTHREAD_ONCE_INIT;

static void make_build_id(void)
{
    /* libjpeg-turbo has no run-time version call: the headers' version is
     * the one the soname pins. libspng and zlib say theirs at run time. */
    snprintf(build_id, sizeof build_id, "stoker %s commit %s libjpeg-turbo %d libspng %s zlib %s",
             STK_VERSION_STRING, STK_BUILD_COMMIT, LIBJPEG_TURBO_VERSION_NUMBER,
             spng_version_string(), zlibVersion());
}

const char *stk_build_id(void)
{
    pthread_once(&build_id_once, make_build_id);
    return build_id;
}
