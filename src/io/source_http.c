/* SPDX-License-Identifier: MIT */
/*
 * source_http.c - stream a shard over HTTP(S), resuming where it broke.
 *
 * DESIGN. Each source owns a (multi, easy) pair (curl_shared.h) and drives
 * it from read() on the calling reader thread: curl_multi_perform moves
 * bytes, curl_multi_poll sleeps until the socket has more. The write
 * callback copies the body straight into the caller's buffer and keeps
 * what does not fit in a bounded spill buffer; when that is full it
 * returns CURL_WRITEFUNC_PAUSE and read() unpauses once it has drained.
 * A shard is thus read as it arrives, one request per shard, no thread of
 * its own and no lock: the source belongs to one reader thread at a time.
 *
 * Why not a transfer thread per stream (easy_perform into a bounded queue)?
 * It would keep downloading while the reader serves another shard, but the
 * kernel socket buffer already does that (several MiB with TCP autotuning)
 * and the loader hides latency by reading shards_in_flight shards at once,
 * so a thread would only add a thread and two hand-offs per chunk. Measured
 * (bench/remote_vs_local.py: nginx behind a 100 ms round-trip proxy, train
 * decode, 2 threads, 2-core VM): stoker spends 1.404 ms of CPU per image
 * over HTTP against 1.367 from local disk (2.7% more), and images/s reach
 * 0.947 of local; what remains is the first batch of an epoch (the shuffle
 * buffer fills over the network), which a transfer thread would not change.
 * The thread design was not built for comparison.
 *
 * Failures. A transfer fails by connection error, timeout (connect timeout,
 * or no byte for io_timeout_ms via CURLOPT_LOW_SPEED_*), a rate too low
 * (below), transient HTTP status (408, 429, 5xx) or a body shorter than
 * announced. It is retried
 * after a backoff (retry.h) with "Range: bytes=N-", N the count of bytes
 * already accepted from the stream, so no byte is lost or repeated: a 206
 * must start exactly at N (Content-Range), a 200 (server ignores Range) has
 * its first N bytes dropped, and a change of the total size between
 * attempts is an error (the object was replaced). io_retries bounds the
 * failed attempts in a row; an attempt that delivered bytes restarts that
 * count, so a long shard over a flaky link still completes. 401, 403, 404
 * and other 4xx fail at once, naming the (redacted) URL and the status.
 *
 * Slow streams. libcurl's low-speed check, at 1 byte/s, only catches a
 * stream that stops: one byte a second passes it forever. drive() also
 * measures its own waiting, with the bytes that came (retry.h,
 * stk__rate_*): each io_timeout_ms of waiting must bring io_min_rate bytes
 * a second. Judging only the time the reader waited makes the rule exact
 * whatever the consumer's pace (a stream that waits for its reader is never
 * slow) and independent of when libcurl samples its speed; libcurl's check
 * with a higher limit would also report a slow attempt as a timeout that
 * cannot be told from a stall. A too slow attempt is retried with Range
 * like any failure, and counts as failed although it brought bytes, so a
 * drip fails after io_retries + 1 attempts, naming the rate seen. That
 * also bounds a whole attempt's waiting to about its bytes / io_min_rate +
 * io_timeout_ms. A wall-clock deadline (CURLOPT_TIMEOUT_MS) would bound it
 * too, but would cut off a slow consumer's healthy stream of a large
 * shard, so there is none.
 *
 * Redirects. libcurl follows them itself for a plain GET. A request that
 * carries credentials (signed S3/GCS requests with their session token,
 * a bearer token, "user:password" in the URL) does not let libcurl follow:
 * on a redirect to another host libcurl drops only Authorization and
 * Cookie, and would send x-amz-security-token and the other headers of
 * the request to whatever the Location names. A signature is only valid
 * for its own host anyway. So such a request follows a redirect itself,
 * and only within its origin (scheme, host and port, compared as libcurl
 * parses them); a redirect elsewhere fails, naming both URLs redacted.
 */
#include "io/source_http.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "io/curl_shared.h"
#include "io/redact.h"
#include "io/retry.h"
#include "stoker.h"
#include "base/threads.h"

/* libcurl's receive buffer: larger than its 16 KiB default so that a 256 KiB
 * read() is served by a few callbacks, not sixteen. */
#define CURL_BUFFER_BYTES (128u << 10)
/* What the write callback may hold beyond the caller's buffer before it
 * pauses the transfer. */
#define SPILL_MAX (4 * CURL_BUFFER_BYTES)
/* How often a waiting read looks at the cancel flag. */
#define POLL_MS 100
/* Shorter jumps are read through: a new request costs a round trip. */
#define SKIP_BY_REQUEST_MIN (1u << 20)
/* Redirects followed per source (libcurl's own limit for plain GETs), and
 * the longest redirect body read (and dropped) to get there. */
#define MAX_REDIRECTS 5
#define REDIRECT_BODY_MAX (64u << 10)

struct http_source {
    struct stk__source base;
    struct stk__curl_pair *pair;
    const char *url; /* with credentials: given to libcurl during open only */
    char *shown;     /* redacted, base.url points here */
    const struct stk__http_request *req; /* during open only */
    struct curl_slist *headers; /* req->headers, owned: libcurl borrows the list */
    struct stk__source_config cfg;
    /* The request carries credentials: redirects are followed here, and
     * only within origin (the first URL's, redacted: it is only compared
     * and printed). */
    int own_redirects;
    char *origin;
    unsigned redirects;
    int redirect_body;           /* this attempt's response is a redirect */
    size_t redirect_body_bytes;  /* of its body, dropped */
    char errbuf[CURL_ERROR_SIZE];

    /* The stream. */
    uint64_t received;  /* bytes accepted: handed to the caller or spilled */
    int64_t total;      /* stream length once known, else -1 */
    int done;           /* every byte received */
    unsigned failures;  /* failed attempts in a row */
    uint64_t rng;       /* jitter */

    /* How fast bytes come while the reader waits (per attempt). */
    struct stk__rate_window rate;
    uint64_t wire_bytes;   /* accepted by the write callback, all attempts */
    uint64_t rated_bytes;  /* of those, already given to rate */
    int slow;              /* a window was too slow: end the attempt */
    uint64_t slow_rate;    /* its bytes per second */

    /* The current attempt. */
    int running;         /* easy handle is in the multi handle */
    int paused;          /* write callback returned CURL_WRITEFUNC_PAUSE */
    int checked;         /* response status and range checked */
    uint64_t start;      /* offset this attempt asked for */
    uint64_t skip;       /* bytes still to drop (200 answer to a Range request) */
    long status;         /* of the final response */
    char reason[64];     /* its reason phrase, if the server sent one */
    int fatal;           /* the callback found an error no retry can fix */

    /* Where the write callback puts bytes during read(). */
    unsigned char *dst;
    size_t dst_cap, dst_len;
    unsigned char *spill;
    size_t spill_pos, spill_len;
};

int stk__url_origin(const char *url, char *buf, size_t cap, int *has_user)
{
    static const CURLUPart parts[] = {CURLUPART_SCHEME, CURLUPART_HOST, CURLUPART_PORT};
    char *got[3] = {NULL, NULL, NULL}, *user = NULL;
    CURLU *u = curl_url();
    int rc = u != NULL && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK ? 0 : -1;
    for (size_t i = 0; rc == 0 && i < 3; i++)
        if (curl_url_get(u, parts[i], &got[i], i == 2 ? CURLU_DEFAULT_PORT : 0) != CURLUE_OK)
            rc = -1;
    if (rc == 0 && has_user != NULL)
        *has_user = curl_url_get(u, CURLUPART_USER, &user, 0) == CURLUE_OK;
    if (rc == 0 && (size_t)snprintf(buf, cap, "%s://%s:%s", got[0], got[1], got[2]) >= cap)
        rc = -1;
    for (char *p = buf; rc == 0 && *p != '\0'; p++)
        if (*p >= 'A' && *p <= 'Z')
            *p = (char)(*p - 'A' + 'a');
    for (size_t i = 0; i < 3; i++)
        curl_free(got[i]);
    curl_free(user);
    curl_url_cleanup(u);
    return rc;
}

static uint64_t next_random(struct http_source *h)
{
    /* xorshift64: jitter only needs to differ between clients. */
    h->rng ^= h->rng << 13;
    h->rng ^= h->rng >> 7;
    h->rng ^= h->rng << 17;
    return h->rng;
}

/* The status line of every response (redirects included) resets what we
 * know; its reason phrase makes messages readable ("404 Not Found"). */
static size_t on_header(char *data, size_t size, size_t n, void *userp)
{
    struct http_source *h = userp;
    size_t len = size * n;
    if (len > 5 && memcmp(data, "HTTP/", 5) == 0) {
        const char *sp = memchr(data, ' ', len);
        const char *reason = sp ? memchr(sp + 1, ' ', len - (size_t)(sp + 1 - data)) : NULL;
        h->reason[0] = '\0';
        if (reason != NULL) {
            size_t r = len - (size_t)(reason + 1 - data);
            while (r > 0 && (reason[r] == '\r' || reason[r] == '\n' || reason[r] == '\0'))
                r--;
            /* reason[1 .. r] */
            size_t k = r < sizeof h->reason - 1 ? r : sizeof h->reason - 1;
            memcpy(h->reason, reason + 1, k);
            h->reason[k] = '\0';
            while (k > 0 && (h->reason[k - 1] == '\r' || h->reason[k - 1] == '\n'))
                h->reason[--k] = '\0';
        }
    }
    return len;
}

static int fail_fatal(struct http_source *h, int code, const char *fmt, const char *detail)
{
    stk__errf(&h->base.err, code, fmt, h->shown, detail);
    h->fatal = code;
    return code;
}

/* First body bytes of an attempt: is this the stream we asked for? */
static int check_response(struct http_source *h)
{
    CURL *e = h->pair->easy;
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &h->status);
    h->checked = 1;
    if (h->own_redirects && h->status >= 300 && h->status < 400) {
        /* libcurl works out where a redirect goes (CURLINFO_REDIRECT_URL)
         * only for a transfer that ends well: read the body, drop it. */
        h->redirect_body = 1;
        return 0;
    }
    if (h->status != 200 && h->status != 206)
        return -1; /* classified by finish_attempt() */
    curl_off_t length = -1;
    curl_easy_getinfo(e, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length);
    int64_t total = -1;
    if (h->status == 206) {
        struct curl_header *hd = NULL;
        unsigned long long first = 0, last = 0, size = 0;
        char star = 0;
        if (curl_easy_header(e, "Content-Range", 0, CURLH_HEADER, -1, &hd) != CURLHE_OK ||
            (sscanf(hd->value, "bytes %llu-%llu/%llu", &first, &last, &size) != 3 &&
             sscanf(hd->value, "bytes %llu-%llu/%c", &first, &last, &star) != 3))
            return fail_fatal(h, STK_EIO, "%s: 206 response %s",
                              "without a usable Content-Range");
        if (first != h->start) {
            char detail[96];
            snprintf(detail, sizeof detail, "at byte %llu, asked for %" PRIu64, first, h->start);
            return fail_fatal(h, STK_EIO, "%s: server resumed %s", detail);
        }
        total = star ? -1 : (int64_t)size;
    } else {
        h->skip = h->start; /* the server ignored Range: drop what we have */
        total = length >= 0 ? (int64_t)length : -1;
    }
    if (total >= 0 && h->total >= 0 && total != h->total) {
        char detail[96];
        snprintf(detail, sizeof detail, "from %" PRId64 " to %" PRId64 " bytes", h->total, total);
        return fail_fatal(h, STK_EIO, "%s: changed size between requests %s", detail);
    }
    if (total >= 0) {
        h->total = total;
        h->base.stamp.size = (uint64_t)total;
        h->base.stamp.has_size = 1;
    }
    struct curl_header *etag = NULL;
    if (curl_easy_header(e, "ETag", 0, CURLH_HEADER, -1, &etag) == CURLHE_OK)
        snprintf(h->base.stamp.etag, sizeof h->base.stamp.etag, "%s", etag->value);
    return 0;
}

static size_t on_body(char *data, size_t size, size_t n, void *userp)
{
    struct http_source *h = userp;
    size_t len = size * n;
    if (!h->checked && check_response(h) < 0)
        return 0; /* aborts the transfer with CURLE_WRITE_ERROR */
    if (h->redirect_body) {
        h->redirect_body_bytes += len;
        h->wire_bytes += len;
        return h->redirect_body_bytes <= REDIRECT_BODY_MAX ? len : 0;
    }
    /* Spilled bytes only exist once the caller's buffer is full, and read()
     * empties the spill before it drives libcurl again, so order holds. */
    size_t room = h->dst != NULL && h->spill_len == 0 ? h->dst_cap - h->dst_len : 0;
    size_t skipped = len < h->skip ? len : (size_t)h->skip;
    size_t keep = len - skipped;
    if (keep > room && keep - room > SPILL_MAX - h->spill_len) {
        h->paused = 1; /* libcurl delivers this chunk again after unpausing */
        return CURL_WRITEFUNC_PAUSE;
    }
    h->skip -= skipped;
    size_t k = keep < room ? keep : room;
    if (k > 0)
        memcpy(h->dst + h->dst_len, data + skipped, k);
    h->dst_len += k;
    memcpy(h->spill + h->spill_len, data + skipped + k, keep - k);
    h->spill_len += keep - k;
    h->received += keep;
    h->wire_bytes += len;
    return len;
}

static int set_options(struct http_source *h, CURLSH *share)
{
    CURL *e = h->pair->easy;
    unsigned timeout = h->cfg.io_timeout_ms ? h->cfg.io_timeout_ms : STK__IO_TIMEOUT_MS;
    const char *ca = stk__curl_ca_bundle(h->cfg.ca_bundle);
    int bad = 0;
    bad |= curl_easy_setopt(e, CURLOPT_URL, h->url) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_SHARE, share) != CURLE_OK;
    /* Signals cannot interrupt name resolution in a threaded program. */
    bad |= curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https") != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, "http,https") != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, h->own_redirects ? 0L : 1L) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_MAXREDIRS, 5L) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_USERAGENT, "stoker/" STK_VERSION_STRING) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_BUFFERSIZE, (long)CURL_BUFFER_BYTES) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)timeout) != CURLE_OK;
    /* Stall detection has whole-second resolution in libcurl. */
    bad |= curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, (long)((timeout + 999) / 1000)) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_ERRORBUFFER, h->errbuf) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_WRITEDATA, h) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_HEADERDATA, h) != CURLE_OK;
    if (ca != NULL && ca[0] != '\0')
        bad |= curl_easy_setopt(e, CURLOPT_CAINFO, ca) != CURLE_OK;
    const struct stk__http_request *req = h->req;
    if (req != NULL) {
        for (size_t i = 0; i < req->n_headers; i++) {
            struct curl_slist *l = curl_slist_append(h->headers, req->headers[i]);
            if (l == NULL)
                return stk__errf(&h->base.err, STK_ENOMEM, "%s: out of memory", h->shown);
            h->headers = l;
        }
        if (h->headers != NULL)
            bad |= curl_easy_setopt(e, CURLOPT_HTTPHEADER, h->headers) != CURLE_OK;
        /* Signing sets CURLOPT_HTTPAUTH to CURLAUTH_AWS_SIGV4 by itself. */
        if (req->aws_sigv4 != NULL)
            bad |= curl_easy_setopt(e, CURLOPT_AWS_SIGV4, req->aws_sigv4) != CURLE_OK;
        if (req->userpwd != NULL)
            bad |= curl_easy_setopt(e, CURLOPT_USERPWD, req->userpwd) != CURLE_OK;
    }
    if (bad)
        return stk__errf(&h->base.err, STK_EIO, "%s: libcurl rejected an option", h->shown);
    return 0;
}

static int start_attempt(struct http_source *h)
{
    char range[32];
    h->start = h->received;
    h->checked = 0;
    h->redirect_body = 0;
    h->redirect_body_bytes = 0;
    h->skip = 0;
    h->status = 0;
    h->reason[0] = '\0';
    h->errbuf[0] = '\0';
    h->paused = 0;
    unsigned timeout = h->cfg.io_timeout_ms ? h->cfg.io_timeout_ms : STK__IO_TIMEOUT_MS;
    stk__rate_init(&h->rate, (uint64_t)timeout * 1000000u, h->cfg.io_min_rate);
    h->rated_bytes = h->wire_bytes;
    h->slow = 0;
    snprintf(range, sizeof range, "%" PRIu64 "-", h->received);
    curl_easy_setopt(h->pair->easy, CURLOPT_RANGE, h->received > 0 ? range : NULL);
    CURLMcode mc = curl_multi_add_handle(h->pair->multi, h->pair->easy);
    if (mc != CURLM_OK)
        return stk__errf(&h->base.err, STK_EIO, "%s: %s", h->shown, curl_multi_strerror(mc));
    h->running = 1;
    return 0;
}

static int retryable_curl(CURLcode rc)
{
    switch (rc) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_WEIRD_SERVER_REPLY:
        return 1;
    default:
        return 0;
    }
}

/* Wait before the next attempt, or fail for good. `problem` says what went
 * wrong with the last one. */
static int schedule_retry(struct http_source *h, int code, const char *problem, int progress)
{
    if (h->total >= 0 && h->received >= (uint64_t)h->total) {
        h->done = 1; /* it broke after the last byte: nothing left to ask for */
        return 0;
    }
    if (progress && h->received > h->start)
        h->failures = 0; /* progress: only failures in a row count */
    h->failures++;
    if (h->failures > h->cfg.io_retries)
        return stk__errf(&h->base.err, code, "%s: %s (%u attempt%s)", h->shown, problem,
                         h->failures, h->failures == 1 ? "" : "s");
    curl_off_t retry_after = 0;
    curl_easy_getinfo(h->pair->easy, CURLINFO_RETRY_AFTER, &retry_after);
    unsigned base = h->cfg.io_backoff_ms ? h->cfg.io_backoff_ms : STK__IO_BACKOFF_MS;
    uint64_t ms = stk__backoff_ms(h->failures, base, retry_after > 0 ? (uint64_t)retry_after * 1000 : 0,
                                  next_random(h));
    if (h->cfg.counters != NULL) {
        atomic_fetch_add(&h->cfg.counters->retries, 1);
        if (h->received > 0)
            atomic_fetch_add(&h->cfg.counters->resumes, 1);
    }
    if (stk__sleep_unless(h->cfg.cancel, ms))
        return stk__errf(&h->base.err, STK_EIO, "%s: cancelled", h->shown);
    return 0;
}

/* A redirect of a request with credentials: the next attempt asks location
 * if it is within the origin, else the source fails. */
static int follow(struct http_source *h, const char *location)
{
    char origin[STK__URL_ORIGIN_MAX], shown[512];
    stk__redact_url(location, shown, sizeof shown);
    if (h->origin == NULL || stk__url_origin(location, origin, sizeof origin, NULL) < 0 ||
        strcmp(origin, h->origin) != 0)
        return stk__errf(&h->base.err, STK_EHTTP,
                         "%s: redirected to %s, another origin (scheme, host or port); a "
                         "request with credentials is never sent there, so it is not followed",
                         h->shown, shown);
    if (h->redirects == MAX_REDIRECTS)
        return stk__errf(&h->base.err, STK_EHTTP, "%s: more than %d redirects (the last to %s)",
                         h->shown, MAX_REDIRECTS, shown);
    if (curl_easy_setopt(h->pair->easy, CURLOPT_URL, location) != CURLE_OK) /* copied */
        return stk__errf(&h->base.err, STK_ENOMEM, "%s: out of memory", h->shown);
    h->redirects++;
    return 0;
}

/* The code of a final HTTP status: a missing object is ENOENT; refused
 * credentials (401, 403) are EACCESS, which on_error=skip never skips, since
 * a token that expired mid-run would otherwise skip every later shard. */
static int http_failure_code(long status)
{
    if (status == 404 || status == 410)
        return STK_ENOENT;
    if (status == 401 || status == 403)
        return STK_EACCESS;
    return STK_EHTTP;
}

static int finish_attempt(struct http_source *h, CURLcode result)
{
    curl_multi_remove_handle(h->pair->multi, h->pair->easy);
    h->running = 0;
    if (h->fatal)
        return h->fatal;
    long status = 0;
    curl_easy_getinfo(h->pair->easy, CURLINFO_RESPONSE_CODE, &status);
    char *location = NULL;
    if (h->own_redirects && status >= 300 && status < 400 &&
        (result == CURLE_OK || result == CURLE_WRITE_ERROR) &&
        curl_easy_getinfo(h->pair->easy, CURLINFO_REDIRECT_URL, &location) == CURLE_OK &&
        location != NULL)
        return follow(h, location);
    char problem[CURL_ERROR_SIZE + 64];
    if ((result == CURLE_OK || result == CURLE_WRITE_ERROR) && status != 0 &&
        status != 200 && status != 206) {
        snprintf(problem, sizeof problem, "HTTP %ld%s%s", status, h->reason[0] ? " " : "",
                 h->reason);
        if (!stk__retry_http_status(status))
            return stk__errf(&h->base.err, http_failure_code(status), "%s: %s", h->shown,
                             problem);
        return schedule_retry(h, STK_EHTTP, problem, 1);
    }
    if (result == CURLE_OK) {
        if (!h->checked && check_response(h) < 0)
            return h->fatal ? h->fatal : STK_EINTERNAL;
        if (h->total < 0 || h->received >= (uint64_t)h->total) {
            h->done = 1;
            return 0;
        }
        snprintf(problem, sizeof problem, "body ended at byte %" PRIu64 " of %" PRId64,
                 h->received, h->total);
        return schedule_retry(h, STK_ETRUNC, problem, 1);
    }
    snprintf(problem, sizeof problem, "%s", h->errbuf[0] ? h->errbuf : curl_easy_strerror(result));
    if (!retryable_curl(result))
        return stk__errf(&h->base.err, STK_EIO, "%s: %s", h->shown, problem);
    return schedule_retry(h, STK_EIO, problem, 1);
}

/* Give the rate check ns more of waiting and the bytes that came since its
 * last call; a window too slow is noted in h->slow. */
static void rate_account(struct http_source *h, uint64_t ns)
{
    uint64_t rate;
    if (stk__rate_add(&h->rate, ns, h->wire_bytes - h->rated_bytes, &rate)) {
        h->slow = 1;
        h->slow_rate = rate;
    }
    h->rated_bytes = h->wire_bytes;
}

/* After a window too slow: end the attempt, to be retried. 0 with *ended
 * set (go on with the next attempt), or an error once retries are spent. */
static int end_if_slow(struct http_source *h, int *ended)
{
    *ended = h->slow && h->running && !h->done;
    h->slow = 0;
    if (!*ended)
        return 0;
    curl_multi_remove_handle(h->pair->multi, h->pair->easy);
    h->running = 0;
    h->paused = 0;
    char problem[160];
    snprintf(problem, sizeof problem,
             "too slow: %" PRIu64 " bytes/s over %.1f s of waiting, below io_min_rate %u bytes/s",
             h->slow_rate, (double)h->rate.window_ns / 1e9, h->cfg.io_min_rate);
    return schedule_retry(h, STK_EIO, problem, 0);
}

/* Move bytes until some reached the caller's buffer or the spill, or the
 * attempt ended. 0 or a negative code. */
static int drive(struct http_source *h)
{
    /* Bytes that came while nobody waited (a paused chunk, data left in
     * libcurl's buffer) count as there at once. */
    uint64_t mark = stk__now_ns();
    int ended;
    rate_account(h, 0);
    int rc = end_if_slow(h, &ended);
    if (rc < 0 || ended)
        return rc;
    for (;;) {
        int still = 0;
        CURLMcode mc = curl_multi_perform(h->pair->multi, &still);
        if (mc != CURLM_OK)
            return stk__errf(&h->base.err, STK_EIO, "%s: %s", h->shown, curl_multi_strerror(mc));
        if (h->dst_len > 0 || h->spill_len > h->spill_pos) {
            /* These bytes are the caller's whatever the rate says: a window
             * too slow ends the attempt at the next drive(). */
            rate_account(h, stk__now_ns() - mark);
            return 0;
        }
        int queued;
        CURLMsg *msg;
        while ((msg = curl_multi_info_read(h->pair->multi, &queued)) != NULL)
            if (msg->msg == CURLMSG_DONE)
                return finish_attempt(h, msg->data.result);
        mc = curl_multi_poll(h->pair->multi, NULL, 0, POLL_MS, NULL);
        if (mc != CURLM_OK)
            return stk__errf(&h->base.err, STK_EIO, "%s: %s", h->shown, curl_multi_strerror(mc));
        if (h->cfg.cancel != NULL && atomic_load(h->cfg.cancel))
            return stk__errf(&h->base.err, STK_EIO, "%s: cancelled", h->shown);
        uint64_t now = stk__now_ns();
        rate_account(h, now - mark);
        mark = now;
        rc = end_if_slow(h, &ended);
        if (rc < 0 || ended)
            return rc;
    }
}

static ssize_t http_read(struct stk__source *src, void *buf, size_t cap)
{
    struct http_source *h = (struct http_source *)src;
    for (;;) {
        if (h->spill_len > h->spill_pos) {
            size_t n = h->spill_len - h->spill_pos;
            if (n > cap)
                n = cap;
            memcpy(buf, h->spill + h->spill_pos, n);
            h->spill_pos += n;
            return (ssize_t)n;
        }
        if (h->done)
            return 0;
        if (!h->running) {
            int rc = start_attempt(h);
            if (rc < 0)
                return rc;
        }
        h->dst = buf;
        h->dst_cap = cap;
        h->dst_len = 0;
        h->spill_pos = h->spill_len = 0;
        int rc = 0;
        if (h->paused) {
            h->paused = 0;
            /* May call on_body at once with the chunk it held back. */
            if (curl_easy_pause(h->pair->easy, CURLPAUSE_CONT) != CURLE_OK)
                rc = stk__errf(&src->err, STK_EIO, "%s: cannot resume a paused transfer",
                               h->shown);
        }
        if (rc == 0 && h->dst_len == 0)
            rc = drive(h);
        h->dst = NULL;
        if (h->dst_len > 0)
            return (ssize_t)h->dst_len;
        if (rc < 0)
            return rc;
    }
}

static void http_close(struct stk__source *src)
{
    struct http_source *h = (struct http_source *)src;
    if (h->running)
        curl_multi_remove_handle(h->pair->multi, h->pair->easy);
    /* A transfer stopped mid-body leaves its connection unusable; libcurl
     * closes it, and the pair goes back to the pool with the others. */
    stk__curl_pair_put(h->pair); /* the pool resets its options before reuse */
    curl_slist_free_all(h->headers);
    stk__free(h->spill);
    stk__free(h->shown);
    stk__free(h->origin);
    stk__free(h);
}

/* Jump forward with a new Range request (a resume opening a shard at a
 * sample's offset); libarchive's small skips over member data are read
 * through instead. Spilled bytes are consumed first. */
static int64_t http_skip(struct stk__source *src, uint64_t n)
{
    struct http_source *h = (struct http_source *)src;
    if (h->spill_len > h->spill_pos || h->done || n < SKIP_BY_REQUEST_MIN)
        return 0;
    if (h->total >= 0 && h->received + n >= (uint64_t)h->total)
        return 0; /* to or past the end: reading finds out what is there */
    if (h->running) {
        curl_multi_remove_handle(h->pair->multi, h->pair->easy);
        h->running = 0;
    }
    h->paused = 0;
    h->received += n; /* the next attempt asks for Range: bytes=received- */
    return (int64_t)n;
}

static const struct stk__source_ops http_ops = {http_read, http_close, http_skip};

int stk__source_http_open(const char *url, const struct stk__http_request *req,
                          const struct stk__source_config *cfg, struct stk__source **out,
                          struct stk__err *err)
{
    *out = NULL;
    struct http_source *h = stk__calloc(1, sizeof *h);
    const char *display = req != NULL && req->display_url != NULL ? req->display_url : url;
    char *shown = stk__redact_url_dup(display);
    unsigned char *spill = stk__malloc(SPILL_MAX);
    if (h == NULL || shown == NULL || spill == NULL) {
        stk__free(h);
        stk__free(shown);
        stk__free(spill);
        return stk__errf(err, STK_ENOMEM, "out of memory opening an HTTP source");
    }
    h->base.ops = &http_ops;
    h->base.url = shown;
    h->shown = shown;
    h->spill = spill;
    h->url = url;
    h->req = req;
    h->cfg = *cfg;
    h->total = -1;
    h->rng = stk__now_ns() ^ (uint64_t)(uintptr_t)h;
    if (h->rng == 0)
        h->rng = 1;
    CURLSH *share = stk__curl_share(err);
    if (share != NULL)
        h->pair = stk__curl_pair_get(err);
    int rc = h->pair == NULL ? err->code : 0;
    char origin[STK__URL_ORIGIN_MAX];
    int has_user = 0;
    if (rc == 0 && stk__url_origin(url, origin, sizeof origin, &has_user) == 0 &&
        (h->origin = stk__strdup(origin)) == NULL)
        rc = stk__errf(err, STK_ENOMEM, "out of memory opening an HTTP source");
    h->own_redirects = has_user || (req != NULL && (req->n_headers > 0 || req->aws_sigv4 != NULL ||
                                                    req->userpwd != NULL));
    if (rc == 0)
        rc = set_options(h, share);
    h->url = NULL; /* libcurl copied it */
    h->req = NULL;
    if (rc == 0)
        rc = start_attempt(h);
    if (rc < 0) {
        if (h->base.err.code != 0)
            *err = h->base.err;
        http_close(&h->base);
        return rc;
    }
    *out = &h->base;
    return 0;
}
