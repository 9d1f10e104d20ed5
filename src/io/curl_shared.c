/* SPDX-License-Identifier: MIT */
/*
 * curl_shared.c - libcurl's process-wide state.
 *
 * DESIGN. libcurl must be initialized once before any thread uses it:
 * pthread_once does that. DNS answers and TLS session tickets live in one
 * CURLSH shared by every transfer; libcurl locks it through the callbacks
 * below, one mutex per curl_lock_data kind (as CURLSHOPT_LOCKFUNC asks).
 *
 * Connections are not put in the share: libcurl does not support sharing a
 * connection cache between concurrent threads (CURLSHOPT_SHARE(3),
 * CURL_LOCK_DATA_CONNECT). Instead each transfer uses a (multi, easy) pair
 * whose multi handle keeps its own connection cache, and a finished source
 * returns its pair to a pool guarded by pool_mutex; the next shard, on any
 * thread, takes a pair and so reuses the kept-alive connection. A pair is
 * only ever used by the thread that took it, and the mutex hand-off orders
 * those uses. Lock order: pool_mutex is never held while calling libcurl
 * except curl_*_cleanup of pairs already unlinked (no share lock inside).
 */
#include "io/curl_shared.h"

#include <pthread.h>
#include <stdlib.h>

#include "base/alloc.h"
#include "stoker.h"
#include "base/threads.h"

/* Idle pairs kept: enough for every shard in flight of a few loaders; each
 * holds at most a handful of idle connections. */
#define POOL_MAX 32

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static CURLSH *share;
static int init_failed; /* CURLcode or -1 for the share */
static pthread_mutex_t share_locks[CURL_LOCK_DATA_LAST];

static pthread_mutex_t pool_mutex = PTHREAD_MUTEX_INITIALIZER;
static struct stk__curl_pair *pool; /* guarded by pool_mutex */
static unsigned pool_size;          /* guarded by pool_mutex */

static void lock_cb(CURL *handle, curl_lock_data data, curl_lock_access access, void *userp)
{
    (void)handle;
    (void)access;
    (void)userp;
    stk__mutex_lock(&share_locks[data]);
}

static void unlock_cb(CURL *handle, curl_lock_data data, void *userp)
{
    (void)handle;
    (void)userp;
    stk__mutex_unlock(&share_locks[data]);
}

static void init(void)
{
    CURLcode rc = curl_global_init(CURL_GLOBAL_DEFAULT);
    if (rc != CURLE_OK) {
        init_failed = (int)rc;
        return;
    }
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
        stk__mutex_init(&share_locks[i]);
    share = curl_share_init();
    if (share == NULL || curl_share_setopt(share, CURLSHOPT_LOCKFUNC, lock_cb) != CURLSHE_OK ||
        curl_share_setopt(share, CURLSHOPT_UNLOCKFUNC, unlock_cb) != CURLSHE_OK ||
        curl_share_setopt(share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS) != CURLSHE_OK ||
        curl_share_setopt(share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION) != CURLSHE_OK) {
        init_failed = -1;
        if (share != NULL)
            curl_share_cleanup(share);
        share = NULL;
    }
}

CURLSH *stk__curl_share(struct stk__err *err)
{
    pthread_once(&init_once, init);
    if (share == NULL)
        stk__errf(err, STK_EIO, "cannot initialize libcurl: %s",
                  init_failed > 0 ? curl_easy_strerror((CURLcode)init_failed)
                                  : "curl_share_init failed");
    return share;
}

struct stk__curl_pair *stk__curl_pair_get(struct stk__err *err)
{
    if (stk__curl_share(err) == NULL)
        return NULL;
    stk__mutex_lock(&pool_mutex);
    struct stk__curl_pair *p = pool;
    if (p != NULL) {
        pool = p->next;
        pool_size--;
    }
    stk__mutex_unlock(&pool_mutex);
    if (p != NULL) {
        p->next = NULL;
        curl_easy_reset(p->easy);
        return p;
    }
    p = stk__calloc(1, sizeof *p);
    if (p != NULL) {
        p->multi = curl_multi_init();
        p->easy = curl_easy_init();
    }
    if (p == NULL || p->multi == NULL || p->easy == NULL) {
        if (p != NULL) {
            curl_multi_cleanup(p->multi);
            curl_easy_cleanup(p->easy);
            stk__free(p);
        }
        stk__errf(err, STK_ENOMEM, "out of memory creating a libcurl handle");
        return NULL;
    }
    return p;
}

void stk__curl_pair_put(struct stk__curl_pair *p)
{
    if (p == NULL)
        return;
    stk__mutex_lock(&pool_mutex);
    int keep = pool_size < POOL_MAX;
    if (keep) {
        p->next = pool;
        pool = p;
        pool_size++;
    }
    stk__mutex_unlock(&pool_mutex);
    if (!keep) {
        curl_easy_cleanup(p->easy);
        curl_multi_cleanup(p->multi);
        stk__free(p);
    }
}

const char *stk__curl_ca_bundle(const char *configured)
{
    const char *ca = configured;
    if (ca == NULL || ca[0] == '\0')
        ca = getenv("STOKER_CA_BUNDLE");
    if (ca == NULL || ca[0] == '\0')
        ca = getenv("CURL_CA_BUNDLE");
    return ca != NULL && ca[0] != '\0' ? ca : NULL;
}
