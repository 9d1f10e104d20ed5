/* SPDX-License-Identifier: MIT */
/*
 * cred_cache.c - the process-wide cache of temporary cloud credentials.
 *
 * DESIGN. One slot per provider, each guarded by its own mutex (no lock
 * order: a thread holds at most one, and never across a fetch). A fetch is
 * a few HTTP requests to a token endpoint; it runs with the mutex released
 * and `refreshing` set, so exactly one thread fetches at a time. Readers
 * whose credentials are still usable copy them and leave even while a
 * refresh runs (the refresh starts a margin before expiry precisely so
 * that nobody has to wait); only a caller without usable credentials
 * waits on `cond`, which the fetching thread broadcasts when done, and then
 * takes the outcome of that fetch, success or failure, rather than
 * fetching again itself (a down token endpoint is asked 4 times per shard
 * opened, not 4 times per thread). Wall-clock time (CLOCK_REALTIME) because
 * AWS expirations are absolute; a fetched expiry already in the past is
 * reported as clock skew instead of being fetched in a loop.
 */
#include "io/cred_cache.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/run.h"
#include "base/threads.h"
#include "io/cred_aws.h"
#include "io/cred_gcs.h"
#include "io/cred_http.h"
#include "io/retry.h"
#include "stoker.h"

#define ATTEMPTS 4
#define BACKOFF_MS 200u
#define MAX_MARGIN_MS 300000 /* refresh at most 5 minutes before expiry */

struct slot {
    pthread_mutex_t mu;
    pthread_cond_t cond;
    char fingerprint[4096]; /* the variables that picked the source */
    int resolved;           /* creds (or "no source") hold for fingerprint */
    int found;              /* 1: creds, 0: no source */
    int rejected;           /* a server refused creds: fetch before use */
    int refreshing;
    struct stk__cloud_creds creds;
    int64_t fetched_ms;
    int64_t quiet_until_ms;   /* after a failed refresh: the old creds serve until then */
    unsigned long generation; /* of creds; grows with each fetch */
    unsigned long fetches;    /* fetches ended, failed or not */
    struct stk__err last;     /* the last fetch's failure, code 0 when it worked */
};

static struct slot slots[2] = {{.mu = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER},
                               {.mu = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER}};

static const char *const GCS_VARS[] = {"GOOGLE_APPLICATION_CREDENTIALS", "CLOUDSDK_CONFIG", "HOME",
                                       "GCE_METADATA_HOST", "NO_GCE_CHECK"};
static const char *const AWS_VARS[] = {"HOME",
                                       "AWS_PROFILE",
                                       "AWS_CONFIG_FILE",
                                       "AWS_SHARED_CREDENTIALS_FILE",
                                       "AWS_WEB_IDENTITY_TOKEN_FILE",
                                       "AWS_ROLE_ARN",
                                       "AWS_ROLE_SESSION_NAME",
                                       "AWS_ENDPOINT_URL_STS",
                                       "AWS_REGION",
                                       "AWS_DEFAULT_REGION",
                                       "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                                       "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                                       "AWS_CONTAINER_AUTHORIZATION_TOKEN",
                                       "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
                                       "AWS_EC2_METADATA_SERVICE_ENDPOINT",
                                       "AWS_EC2_METADATA_DISABLED"};

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void fingerprint(enum stk__cloud_provider provider, char *out, size_t cap)
{
    const char *const *vars = provider == STK__CLOUD_GCS ? GCS_VARS : AWS_VARS;
    size_t n = provider == STK__CLOUD_GCS ? sizeof GCS_VARS / sizeof GCS_VARS[0]
                                          : sizeof AWS_VARS / sizeof AWS_VARS[0];
    size_t k = 0;
    out[0] = '\0';
    for (size_t i = 0; i < n && k < cap; i++) {
        const char *v = getenv(vars[i]);
        k += (size_t)snprintf(out + k, cap - k, "%s\x1f", v != NULL ? v : "");
    }
}

static int64_t margin_ms(const struct slot *s)
{
    int64_t life = s->creds.expires_ms - s->fetched_ms;
    int64_t m = life / 4;
    return m < MAX_MARGIN_MS ? m : MAX_MARGIN_MS;
}

/* Fresh: no refresh due. Usable: may still be sent (a refresh is due). */
static int usable(const struct slot *s, int64_t now)
{
    return s->resolved && !s->rejected &&
           (!s->found || s->creds.expires_ms == 0 || now < s->creds.expires_ms - margin_ms(s) / 4);
}

static int fresh(const struct slot *s, int64_t now)
{
    return usable(s, now) && (!s->found || s->creds.expires_ms == 0 ||
                              now < s->creds.expires_ms - margin_ms(s) || now < s->quiet_until_ms);
}

static void copy_out(const struct slot *s, struct stk__cloud_creds *c)
{
    memcpy(c->key_id, s->creds.key_id, sizeof c->key_id);
    memcpy(c->secret, s->creds.secret, sizeof c->secret);
    memcpy(c->token, s->creds.token, sizeof c->token);
    memcpy(c->bearer, s->creds.bearer, sizeof c->bearer);
    memcpy(c->source, s->creds.source, sizeof c->source);
    c->expires_ms = s->creds.expires_ms;
    c->generation = s->found ? s->generation : 0; /* "none" is never worth a retry */
}

/* Fetch with the slot unlocked: asked again with backoff while no answer
 * (or a transient one) comes. */
static int fetch(enum stk__cloud_provider provider, struct stk__cloud_creds *c,
                 struct stk__err *err)
{
    int rc = 0;
    for (unsigned attempt = 1; attempt <= ATTEMPTS; attempt++) {
        stk__cred_wipe(c, sizeof *c);
        c->region[0] = '\0';
        const char *region = getenv("AWS_REGION");
        if (region == NULL || region[0] == '\0')
            region = getenv("AWS_DEFAULT_REGION");
        snprintf(c->region, sizeof c->region, "%s",
                 region != NULL && region[0] != '\0' ? region : "us-east-1");
        stk__err_clear(err);
        rc = provider == STK__CLOUD_GCS ? stk__cred_gcs_fetch(c, err) : stk__cred_aws_fetch(c, err);
        if (rc != STK_EIO || attempt == ATTEMPTS)
            break;
        stk__sleep_unless(NULL, stk__backoff_ms(attempt, BACKOFF_MS, 0, (uint64_t)now_ms()));
    }
    if (rc == STK_EIO) {
        char why[STK__ERRMSG_MAX];
        snprintf(why, sizeof why, "%s", err->msg);
        stk__errf(err, rc, "%.900s (%d attempts)", why, ATTEMPTS);
    }
    int64_t now = now_ms();
    if (rc > 0 && c->expires_ms != 0 && c->expires_ms <= now) {
        long long ahead = (long long)(now - c->expires_ms) / 1000;
        rc = stk__errf(err, STK_EACCESS,
                       "%s handed out credentials that expired %llds before this host's clock "
                       "says it is now: the clock is wrong (clock skew; check NTP) or the source "
                       "serves stale credentials",
                       c->source, ahead);
    }
    if (rc < 0)
        stk__cred_wipe(c, sizeof *c);
    return rc;
}

int stk__cred_cache_get(enum stk__cloud_provider provider, struct stk__cloud_creds *c,
                        struct stk__counters *counters, struct stk__err *err)
{
    struct slot *s = &slots[provider == STK__CLOUD_GCS];
    char fp[sizeof s->fingerprint];
    fingerprint(provider, fp, sizeof fp);
    struct stk__cloud_creds *fetched = stk__calloc(1, sizeof *fetched);
    if (fetched == NULL)
        return stk__errf(err, STK_ENOMEM, "out of memory");
    int rc;
    stk__mutex_lock(&s->mu);
    if (strcmp(fp, s->fingerprint) != 0) {
        memcpy(s->fingerprint, fp, sizeof fp);
        s->resolved = 0;
        s->generation++;
    }
    for (;;) {
        int64_t now = now_ms();
        if (fresh(s, now) || (usable(s, now) && s->refreshing)) {
            copy_out(s, c);
            rc = s->found;
            break;
        }
        if (s->refreshing) {
            unsigned long seen = s->fetches;
            while (s->refreshing)
                stk__cond_wait(&s->cond, &s->mu);
            if (s->fetches != seen && s->last.code < 0 && !usable(s, now_ms())) {
                *err = s->last;
                rc = err->code;
                break;
            }
            continue;
        }
        s->refreshing = 1;
        unsigned long generation = s->generation;
        stk__mutex_unlock(&s->mu);
        struct stk__err ferr = {0};
        int got = fetch(provider, fetched, &ferr);
        stk__mutex_lock(&s->mu);
        s->refreshing = 0;
        s->fetches++;
        s->last = ferr;
        stk__cond_broadcast(&s->cond);
        if (got >= 0 && generation == s->generation) {
            stk__cred_wipe(&s->creds, sizeof s->creds);
            s->creds = *fetched;
            s->fetched_ms = now_ms();
            s->resolved = 1;
            s->found = got;
            s->rejected = 0;
            s->generation++;
            if (got > 0 && counters != NULL)
                atomic_fetch_add(&counters->cred_refreshes, 1);
        }
        if (got < 0 && usable(s, now_ms())) {
            /* The old ones still hold: go on with them, and ask again in a
             * second rather than on every shard opened meanwhile. */
            s->quiet_until_ms = now_ms() + 1000;
            copy_out(s, c);
            rc = s->found;
            break;
        }
        if (got < 0) {
            *err = ferr;
            rc = got;
            break;
        }
    }
    stk__mutex_unlock(&s->mu);
    stk__cred_wipe(fetched, sizeof *fetched);
    stk__free(fetched);
    return rc;
}

void stk__cred_cache_reject(enum stk__cloud_provider provider, unsigned long generation)
{
    struct slot *s = &slots[provider == STK__CLOUD_GCS];
    stk__mutex_lock(&s->mu);
    if (s->generation == generation && s->resolved && s->found)
        s->rejected = 1;
    stk__mutex_unlock(&s->mu);
}
