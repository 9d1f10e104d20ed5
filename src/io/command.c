/* SPDX-License-Identifier: MIT */
/*
 * command.c - a command line run without a shell: its words, its start.
 */
#include "io/command.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>

#include "base/alloc.h"
#include "stoker.h"

extern char **environ;

static int is_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

int stk__command_word(const char *p, const char **start, const char **end, char *out,
                      size_t *len, char *quote)
{
    size_t n = 0;
    while (is_blank(*p))
        p++;
    *start = p;
    *end = p;
    *len = 0;
    if (*p == '\0')
        return 0;
    while (*p != '\0' && !is_blank(*p)) {
        if (*p != '\'' && *p != '"') {
            if (*p == '\\' && p[1] != '\0')
                p++;
            out[n++] = *p++;
            continue;
        }
        char q = *p++;
        while (*p != '\0' && *p != q) {
            if (q == '"' && *p == '\\' && (p[1] == '"' || p[1] == '\\'))
                p++;
            out[n++] = *p++;
        }
        if (*p == '\0') {
            *quote = q;
            *end = p;
            *len = n;
            return -1;
        }
        p++;
    }
    *end = p;
    *len = n;
    return 1;
}

int stk__split_command(const char *cmd, char ***words, size_t *count, struct stk__err *err)
{
    *words = NULL;
    *count = 0;
    size_t len = strlen(cmd);
    /* Pointers then characters in one block: words never outgrow the
     * command, and each needs at most one NUL. */
    size_t ptr_bytes = (STK__COMMAND_MAX_WORDS + 1) * sizeof(char *);
    char **argv = stk__malloc(ptr_bytes + 2 * len + 2);
    if (argv == NULL)
        return stk__errf(err, STK_ENOMEM, "out of memory splitting a command");
    char *w = (char *)argv + ptr_bytes;
    size_t n = 0, wlen;
    const char *p = cmd, *start;
    char quote = 0;
    int r;
    while ((r = stk__command_word(p, &start, &p, w, &wlen, &quote)) != 0) {
        if (r < 0 || n == STK__COMMAND_MAX_WORDS) {
            stk__free(argv);
            /* The command itself is not named: it may hold secrets, and the
             * caller names it redacted. */
            if (r < 0)
                return stk__errf(err, STK_EINVAL, "unterminated %c quote", quote);
            return stk__errf(err, STK_EINVAL, "more than %d arguments", STK__COMMAND_MAX_WORDS);
        }
        argv[n++] = w;
        w[wlen] = '\0';
        w += wlen + 1;
    }
    if (n == 0) {
        stk__free(argv);
        return stk__errf(err, STK_EINVAL, "the command is empty");
    }
    argv[n] = NULL;
    *words = argv;
    *count = n;
    return 0;
}

int stk__spawn_command(char *const argv[], int out_fd, int err_fd, pid_t *pid)
{
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    int e = posix_spawn_file_actions_init(&fa);
    if (e != 0)
        return e;
    e = posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    if (e == 0)
        e = posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
    if (e == 0 && err_fd >= 0)
        e = posix_spawn_file_actions_adddup2(&fa, err_fd, 2);
    int have_attr = e == 0 && (e = posix_spawnattr_init(&attr)) == 0;
    sigset_t dfl;
    sigemptyset(&dfl);
    sigaddset(&dfl, SIGPIPE);
    if (have_attr)
        e = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF);
    if (e == 0 && have_attr)
        e = posix_spawnattr_setpgroup(&attr, 0);
    if (e == 0 && have_attr)
        e = posix_spawnattr_setsigdefault(&attr, &dfl);
    if (e == 0)
        e = posix_spawnp(pid, argv[0], &fa, &attr, argv, environ);
    if (have_attr)
        posix_spawnattr_destroy(&attr);
    posix_spawn_file_actions_destroy(&fa);
    return e;
}
