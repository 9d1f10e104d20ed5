/* SPDX-License-Identifier: MIT */
/*
 * source_pipe.c - a shard read from a program's standard output.
 *
 * "pipe:curl -s https://host/shard.tar" runs the program directly with
 * posix_spawnp (no shell: the URL list is data, and a shell would turn a
 * stray ';' or '$(...)' in it into code), standard input from /dev/null,
 * standard error inherited. The exit status is checked at end of stream,
 * so a program that fails after writing part of a shard is an error, not
 * a short shard. Closing early kills the program's process group (it runs
 * in its own) and reaps it, so no zombie or orphan writer is left.
 *
 * Stalls. A program can stop writing without exiting (a hung download, a
 * prompt for a password on a terminal it does not have). The rules of the
 * HTTP source apply (source_http.c): no byte for io_timeout_ms, or less
 * than io_min_rate bytes a second over a window of io_timeout_ms of the
 * reader's own waiting (retry.h), ends the attempt. Its process group is
 * killed and the command run again after a backoff, its first bytes (those
 * already handed to the reader) read and dropped, as a server that ignores
 * Range is; io_retries bounds the failed attempts in a row, and the last
 * failure names the redacted command. A command that exits with an error
 * is not run again: it said what went wrong.
 */
#include "io/source_pipe.h"

#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/alloc.h"
#include "io/command.h"
#include "io/redact.h"
#include "io/retry.h"
#include "stoker.h"
#include "base/threads.h"

/* How often a blocked read looks at the cancel flag and the clock. */
#define POLL_MS 100

struct pipe_source {
    struct stk__source base;
    struct stk__source_config cfg;
    char *shown; /* the URL redacted (redact.h), base.url: messages never show secrets */
    char **argv; /* the command split into words, to run it again */
    pid_t pid;           /* 0 once reaped */
    int fd;
    uint64_t delivered; /* bytes handed to the reader, by every attempt */
    uint64_t received;  /* bytes of this attempt's output */
    unsigned failures;  /* failed attempts in a row */
    struct stk__rate_window rate;
    uint64_t rng; /* backoff jitter */
};

/* Wait for the program and turn its end into 0 or an error. */
static int reap(struct pipe_source *s)
{
    int status;
    pid_t r;
    do
        r = waitpid(s->pid, &status, 0);
    while (r < 0 && errno == EINTR);
    s->pid = 0;
    if (r < 0)
        return stk__errf(&s->base.err, STK_EIO, "%s: cannot wait for the command: %s", s->shown,
                         strerror(errno));
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 0;
    if (WIFEXITED(status))
        return stk__errf(&s->base.err, STK_EIO, "%s: command exited with status %d", s->shown,
                         WEXITSTATUS(status));
    return stk__errf(&s->base.err, STK_EIO, "%s: command killed by signal %d", s->shown,
                     WTERMSIG(status));
}

/* Kill the running attempt's process group and reap it. */
static void stop_command(struct pipe_source *s)
{
    if (s->fd >= 0)
        close(s->fd);
    s->fd = -1;
    if (s->pid > 0) {
        kill(-s->pid, SIGKILL);
        (void)reap(s);
    }
}

/* Start the command with its standard output on a new pipe (s->fd). */
static int spawn(struct pipe_source *s, struct stk__err *err)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) < 0)
        return stk__errf(err, STK_EIO, "%s: cannot create a pipe: %s", s->shown, strerror(errno));
    pid_t pid = 0;
    int e = stk__spawn_command(s->argv, fds[1], -1, &pid);
    close(fds[1]);
    if (e != 0) {
        close(fds[0]);
        /* Not argv[0] alone: the redacted command is all that may be shown. */
        return stk__errf(err, e == ENOENT ? STK_ENOENT : STK_EIO, "%s: cannot run the command: %s",
                         s->shown, strerror(e));
    }
    s->pid = pid;
    s->fd = fds[0];
    s->received = 0;
    unsigned timeout = s->cfg.io_timeout_ms ? s->cfg.io_timeout_ms : STK__IO_TIMEOUT_MS;
    stk__rate_init(&s->rate, (uint64_t)timeout * 1000000u, s->cfg.io_min_rate);
    return 0;
}

/* The attempt failed for `problem` (a stall, a drip): kill it, then run the
 * command again after a backoff, or fail once io_retries are spent. */
static int retry(struct pipe_source *s, const char *problem)
{
    stop_command(s);
    s->failures++;
    if (s->failures > s->cfg.io_retries)
        return stk__errf(&s->base.err, STK_EIO, "%s: %s; the command was killed (%u attempt%s)",
                         s->shown, problem, s->failures, s->failures == 1 ? "" : "s");
    s->rng ^= s->rng << 13; /* xorshift64: jitter only needs to differ between readers */
    s->rng ^= s->rng >> 7;
    s->rng ^= s->rng << 17;
    unsigned base = s->cfg.io_backoff_ms ? s->cfg.io_backoff_ms : STK__IO_BACKOFF_MS;
    if (s->cfg.counters != NULL) {
        atomic_fetch_add(&s->cfg.counters->retries, 1);
        if (s->delivered > 0)
            atomic_fetch_add(&s->cfg.counters->resumes, 1);
    }
    if (stk__sleep_unless(s->cfg.cancel, stk__backoff_ms(s->failures, base, 0, s->rng)))
        return stk__errf(&s->base.err, STK_EIO, "%s: cancelled", s->shown);
    return spawn(s, &s->base.err);
}

/* Wait until the command's output is readable: 0, or a negative code once
 * the attempt failed for good. Only this waiting counts for the stall and
 * rate limits, so a reader that takes its time never makes a command slow. */
static int wait_readable(struct pipe_source *s)
{
    unsigned timeout = s->cfg.io_timeout_ms ? s->cfg.io_timeout_ms : STK__IO_TIMEOUT_MS;
    uint64_t quiet_ns = 0;
    for (;;) {
        struct pollfd pfd = {s->fd, POLLIN, 0};
        uint64_t start = stk__now_ns();
        int r = poll(&pfd, 1, POLL_MS);
        uint64_t waited = stk__now_ns() - start, rate;
        if (s->cfg.cancel != NULL && atomic_load(s->cfg.cancel))
            return stk__errf(&s->base.err, STK_EIO, "%s: cancelled", s->shown);
        if (r < 0 && errno != EINTR)
            return stk__errf(&s->base.err, STK_EIO, "%s: cannot wait for the command: %s",
                             s->shown, strerror(errno));
        char problem[160];
        quiet_ns = r > 0 ? 0 : quiet_ns + waited;
        int slow = stk__rate_add(&s->rate, waited, 0, &rate);
        if (quiet_ns >= (uint64_t)timeout * 1000000u) { /* a stall, not just slow */
            snprintf(problem, sizeof problem,
                     "no output for %.1f s (io_timeout_ms) at byte %" PRIu64, timeout / 1000.0,
                     s->delivered);
        } else if (slow) {
            snprintf(problem, sizeof problem,
                     "too slow: %" PRIu64 " bytes/s over %.1f s of waiting, below io_min_rate "
                     "%u bytes/s",
                     rate, (double)s->rate.window_ns / 1e9, s->cfg.io_min_rate);
        } else {
            if (r > 0)
                return 0;
            continue;
        }
        int rc = retry(s, problem);
        if (rc < 0)
            return rc;
        quiet_ns = 0;
    }
}

static ssize_t pipe_read(struct stk__source *src, void *buf, size_t cap)
{
    struct pipe_source *s = (struct pipe_source *)src;
    for (;;) {
        if (s->pid == 0)
            return 0;
        int rc = wait_readable(s);
        if (rc < 0)
            return rc;
        ssize_t n = read(s->fd, buf, cap);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return stk__errf(&src->err, STK_EIO, "%s: read failed at offset %" PRIu64 ": %s",
                             s->shown, s->delivered, strerror(errno));
        if (n == 0) {
            if (s->received < s->delivered)
                return stk__errf(&src->err, STK_ETRUNC,
                                 "%s: run again after a stall, the command wrote %" PRIu64
                                 " bytes, fewer than the %" PRIu64 " already read",
                                 s->shown, s->received, s->delivered);
            rc = reap(s);
            return rc < 0 ? rc : 0;
        }
        uint64_t rate;
        (void)stk__rate_add(&s->rate, 0, (uint64_t)n, &rate); /* judged while waiting */
        s->received += (uint64_t)n;
        /* An attempt after the first repeats bytes the reader already has. */
        if (s->received <= s->delivered)
            continue;
        size_t fresh = (size_t)(s->received - s->delivered);
        if (fresh < (size_t)n)
            memmove(buf, (char *)buf + ((size_t)n - fresh), fresh);
        if (fresh > 0)
            s->failures = 0; /* progress: only failures in a row count */
        s->delivered += fresh;
        return (ssize_t)fresh;
    }
}

static void pipe_close(struct stk__source *src)
{
    struct pipe_source *s = (struct pipe_source *)src;
    stop_command(s);
    stk__free(s->argv);
    stk__free(s->shown);
    stk__free(s);
}

static const struct stk__source_ops pipe_ops = {pipe_read, pipe_close, NULL};

int stk__source_pipe_open(const char *url, const struct stk__source_config *cfg,
                          struct stk__source **out, struct stk__err *err)
{
    *out = NULL;
    size_t argc;
    struct pipe_source *s = NULL;
    int rc;
    char *shown = stk__redact_url_dup(url);
    if (shown == NULL)
        return stk__errf(err, STK_ENOMEM, "out of memory opening a pipe: source");
    if (!cfg->allow_pipe) {
        rc = stk__errf(err, STK_EINVAL, "%s: pipe: URLs are disabled; set allow_pipe "
                       "(stoker --allow-pipe) to run commands", shown);
        stk__free(shown);
        return rc;
    }
    s = stk__calloc(1, sizeof *s);
    if (s == NULL) {
        rc = stk__errf(err, STK_ENOMEM, "out of memory opening %s", shown);
        stk__free(shown);
        return rc;
    }
    s->base.ops = &pipe_ops;
    s->base.url = shown;
    s->shown = shown;
    s->cfg = *cfg;
    s->fd = -1;
    s->rng = ((uint64_t)getpid() << 32) ^ stk__now_ns() ^ (uint64_t)(uintptr_t)s;
    s->rng |= 1; /* xorshift never leaves 0 */
    rc = stk__split_command(url + 5, &s->argv, &argc, err);
    if (rc < 0 && rc != STK_ENOMEM) {
        char why[STK__ERRMSG_MAX];
        snprintf(why, sizeof why, "%s", err->msg);
        stk__errf(err, rc, "%s: %s", shown, why);
    }
    if (rc == 0)
        rc = spawn(s, err);
    if (rc < 0) {
        pipe_close(&s->base);
        return rc;
    }
    *out = &s->base;
    return 0;
}
