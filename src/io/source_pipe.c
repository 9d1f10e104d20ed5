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
 */
#include "source_pipe.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "alloc.h"
#include "command.h"
#include "redact.h"
#include "stoker.h"

extern char **environ;

/* How often a blocked read looks at the cancel flag. */
#define CANCEL_POLL_MS 100

struct pipe_source {
    struct stk__source base;
    const atomic_int *cancel;
    char *shown; /* the URL redacted (redact.h), base.url: messages never show secrets */
    pid_t pid;           /* 0 once reaped */
    int fd;
};

int stk__split_command(const char *cmd, char ***words, size_t *count, struct stk__err *err)
{
    *words = NULL;
    *count = 0;
    size_t len = strlen(cmd);
    /* Pointers then characters in one block: words never outgrow the
     * command, and each needs at most one NUL. */
    size_t ptr_bytes = (STK__PIPE_MAX_ARGS + 1) * sizeof(char *);
    char **argv = stk__malloc(ptr_bytes + 2 * len + 2);
    if (argv == NULL)
        return stk__errf(err, STK_ENOMEM, "out of memory splitting a pipe: command");
    char *w = (char *)argv + ptr_bytes;
    size_t n = 0, wlen;
    const char *p = cmd, *start;
    char quote;
    int r;
    while ((r = stk__command_word(p, &start, &p, w, &wlen, &quote)) != 0) {
        if (r < 0 || n == STK__PIPE_MAX_ARGS) {
            stk__free(argv);
            /* The command itself is not named: it may hold secrets, and the
             * caller names it redacted. */
            if (r < 0)
                return stk__errf(err, STK_EINVAL, "unterminated %c quote", quote);
            return stk__errf(err, STK_EINVAL, "more than %d arguments", STK__PIPE_MAX_ARGS);
        }
        argv[n++] = w;
        w[wlen] = '\0';
        w += wlen + 1;
    }
    if (n == 0) {
        stk__free(argv);
        return stk__errf(err, STK_EINVAL, "pipe: URL without a command");
    }
    argv[n] = NULL;
    *words = argv;
    *count = n;
    return 0;
}

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

static ssize_t pipe_read(struct stk__source *src, void *buf, size_t cap)
{
    struct pipe_source *s = (struct pipe_source *)src;
    if (s->pid == 0)
        return 0;
    for (;;) {
        if (s->cancel != NULL) {
            struct pollfd pfd = {s->fd, POLLIN, 0};
            int r = poll(&pfd, 1, CANCEL_POLL_MS);
            if (atomic_load(s->cancel))
                return stk__errf(&src->err, STK_EIO, "%s: cancelled", s->shown);
            if (r == 0 || (r < 0 && errno == EINTR))
                continue;
        }
        ssize_t n = read(s->fd, buf, cap);
        if (n > 0)
            return n;
        if (n == 0) {
            int rc = reap(s);
            return rc < 0 ? rc : 0;
        }
        if (errno != EINTR)
            return stk__errf(&src->err, STK_EIO, "%s: read failed at offset %llu: %s", s->shown,
                             (unsigned long long)src->bytes_read, strerror(errno));
    }
}

static void pipe_close(struct stk__source *src)
{
    struct pipe_source *s = (struct pipe_source *)src;
    if (s->fd >= 0)
        close(s->fd);
    if (s->pid > 0) {
        kill(-s->pid, SIGKILL);
        (void)reap(s);
    }
    stk__free(s->shown);
    stk__free(s);
}

static const struct stk__source_ops pipe_ops = {pipe_read, pipe_close, NULL};

int stk__source_pipe_open(const char *url, const struct stk__source_config *cfg,
                          struct stk__source **out, struct stk__err *err)
{
    *out = NULL;
    char **argv = NULL;
    size_t argc;
    struct pipe_source *s = NULL;
    int fds[2] = {-1, -1};
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    int have_fa = 0, have_attr = 0, rc;
    char *shown = stk__redact_url_dup(url);
    if (shown == NULL)
        return stk__errf(err, STK_ENOMEM, "out of memory opening a pipe: source");
    if (!cfg->allow_pipe) {
        rc = stk__errf(err, STK_EINVAL, "%s: pipe: URLs are disabled; set allow_pipe "
                       "(stoker --allow-pipe) to run commands", shown);
        goto out;
    }
    rc = stk__split_command(url + 5, &argv, &argc, err);
    if (rc < 0) {
        if (rc != STK_ENOMEM) {
            char why[STK__ERRMSG_MAX];
            snprintf(why, sizeof why, "%s", err->msg);
            stk__errf(err, rc, "%s: %s", shown, why);
        }
        goto out;
    }
    s = stk__calloc(1, sizeof *s);
    if (s == NULL) {
        rc = stk__errf(err, STK_ENOMEM, "out of memory opening %s", shown);
        goto out;
    }
    s->fd = -1;
    if (pipe2(fds, O_CLOEXEC) < 0) {
        rc = stk__errf(err, STK_EIO, "%s: cannot create a pipe: %s", shown, strerror(errno));
        goto out;
    }
    int e = posix_spawn_file_actions_init(&fa);
    have_fa = e == 0;
    if (e == 0)
        e = posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    if (e == 0)
        e = posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    if (e == 0)
        e = posix_spawnattr_init(&attr);
    have_attr = have_fa && e == 0;
    /* Own process group, so closing early can kill what it started too;
     * default signal handling, whatever the host process changed. */
    sigset_t all;
    sigemptyset(&all);
    sigaddset(&all, SIGPIPE);
    if (e == 0)
        e = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF);
    if (e == 0)
        e = posix_spawnattr_setpgroup(&attr, 0);
    if (e == 0)
        e = posix_spawnattr_setsigdefault(&attr, &all);
    pid_t pid = 0;
    if (e == 0)
        e = posix_spawnp(&pid, argv[0], &fa, &attr, argv, environ);
    if (e != 0) {
        /* Not argv[0] alone: the redacted command is all that may be shown. */
        rc = stk__errf(err, e == ENOENT ? STK_ENOENT : STK_EIO, "%s: cannot run the command: %s",
                       shown, strerror(e));
        goto out;
    }
    s->base.ops = &pipe_ops;
    s->base.url = shown;
    s->shown = shown;
    shown = NULL;
    s->cancel = cfg->cancel;
    s->pid = pid;
    s->fd = fds[0];
    fds[0] = -1;
    *out = &s->base;
    s = NULL;
    rc = 0;
out:
    if (have_attr)
        posix_spawnattr_destroy(&attr);
    if (have_fa)
        posix_spawn_file_actions_destroy(&fa);
    if (fds[0] >= 0)
        close(fds[0]);
    if (fds[1] >= 0)
        close(fds[1]);
    stk__free(s);
    stk__free(argv);
    stk__free(shown);
    return rc;
}
