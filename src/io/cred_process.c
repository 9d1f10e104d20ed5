/* SPDX-License-Identifier: MIT */
/*
 * cred_process.c - run a profile's credential_process and read its answer.
 *
 * As botocore does: the command line is split into words (shlex.split,
 * which command.h's scanner follows) and run directly (command.h's spawn),
 * never through a shell; the exit status decides, and a failure shows the
 * program's standard error. Unlike botocore the run is bounded, as the AWS
 * SDK for Java bounds it: a program that hangs (a prompt on a terminal it
 * does not have) is killed with its process group after 60 s, and more
 * than 64 KiB of output is refused. Standard output holds the secrets: it
 * is wiped, and never quoted in a message.
 */
#include "io/cred_process.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "io/command.h"
#include "io/cred_http.h"
#include "stoker.h"

#define TIMEOUT_MS 60000
#define MAX_OUT 65536
#define MAX_ERR 1024

/* The bound of one run; test builds (-Dtest_hooks=true) may shorten it
 * with $STOKER_CRED_PROCESS_TEST_TIMEOUT_MS so that the kill of a hung
 * program is tested in a second, not a minute. */
static int64_t timeout_ms(void)
{
#ifdef STK_TEST_HOOKS
    const char *v = getenv("STOKER_CRED_PROCESS_TEST_TIMEOUT_MS");
    if (v != NULL && v[0] != '\0')
        return strtol(v, NULL, 10);
#endif
    return TIMEOUT_MS;
}

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The words of command (command.h), as argv; messages name the profile. */
static int split(const char *who, const char *command, char ***argv, struct stk__err *err)
{
    size_t n;
    int rc = stk__split_command(command, argv, &n, err);
    if (rc < 0 && rc != STK_ENOMEM) {
        char why[STK__ERRMSG_MAX];
        snprintf(why, sizeof why, "%s", err->msg);
        stk__errf(err, rc, "%s: credential_process: %s", who, why);
    }
    return rc;
}

static int spawn(const char *who, char **argv, int out[2], int errp[2], pid_t *pid,
                 struct stk__err *err)
{
    if (pipe2(out, O_CLOEXEC) < 0 || pipe2(errp, O_CLOEXEC) < 0)
        return stk__errf(err, STK_EIO, "%s: cannot create a pipe: %s", who, strerror(errno));
    int e = stk__spawn_command(argv, out[1], errp[1], pid);
    close(out[1]);
    close(errp[1]);
    out[1] = errp[1] = -1;
    if (e != 0)
        return stk__errf(err, STK_EINVAL, "%s: cannot run %s: %s", who, argv[0], strerror(e));
    return 0;
}

/* Read both pipes to their end, or until the deadline or the cap. 0, or
 * 1 (timed out) or 2 (too much output). */
static int drain(int out, int errfd, int64_t deadline, char *obuf, size_t *olen, char *ebuf,
                 size_t *elen)
{
    struct pollfd p[2] = {{.fd = out, .events = POLLIN}, {.fd = errfd, .events = POLLIN}};
    while (p[0].fd >= 0 || p[1].fd >= 0) {
        int64_t left = deadline - mono_ms();
        if (left <= 0)
            return 1;
        int r = poll(p, 2, (int)left);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return 1;
        for (int i = 0; i < 2; i++) {
            if (p[i].fd < 0 || p[i].revents == 0)
                continue;
            char scratch[4096];
            char *dst = i == 0 ? obuf + *olen : scratch;
            size_t room = i == 0 ? MAX_OUT - *olen : sizeof scratch;
            ssize_t n = read(p[i].fd, dst, room > 0 ? room : 1);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0) {
                p[i].fd = -1;
                continue;
            }
            if (i == 0 && room == 0)
                return 2;
            if (i == 0) {
                *olen += (size_t)n;
            } else {
                size_t k = *elen + (size_t)n < MAX_ERR ? (size_t)n : MAX_ERR - *elen;
                memcpy(ebuf + *elen, scratch, k);
                *elen += k;
            }
        }
    }
    return 0;
}

/* Wait for pid until the deadline (mono_ms()), then kill its group. */
static int reap(pid_t pid, int64_t deadline, int *status)
{
    for (;;) {
        pid_t r = waitpid(pid, status, WNOHANG);
        if (r == pid)
            return 0;
        if (r < 0 && errno != EINTR)
            return -1;
        if (mono_ms() >= deadline) {
            kill(-pid, SIGKILL);
            while (waitpid(pid, status, 0) < 0 && errno == EINTR)
                ;
            return 1;
        }
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
}

static const char *string(const cJSON *obj, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    return cJSON_IsString(v) && v->valuestring[0] != '\0' ? v->valuestring : NULL;
}

static int parse(const char *who, const char *json, struct stk__cloud_creds *c,
                 struct stk__err *err)
{
    cJSON *doc = cJSON_Parse(json);
    const cJSON *version = cJSON_GetObjectItemCaseSensitive(doc, "Version");
    const char *id = string(doc, "AccessKeyId"), *secret = string(doc, "SecretAccessKey");
    const char *token = string(doc, "SessionToken"), *expiration = string(doc, "Expiration");
    int64_t expires = expiration != NULL ? stk__cred_parse_time(expiration) : 0;
    int rc = 1;
    if (doc == NULL || !cJSON_IsObject(doc))
        rc = stk__errf(err, STK_EFORMAT, "%s: the program printed no JSON object", who);
    else if (!cJSON_IsNumber(version) || version->valuedouble != 1)
        rc = stk__errf(err, STK_EFORMAT,
                       "%s: the program printed an unsupported Version (supported: 1)", who);
    else if (id == NULL || secret == NULL)
        rc = stk__errf(err, STK_EFORMAT,
                       "%s: the program printed no AccessKeyId or SecretAccessKey", who);
    else if (expires < 0)
        rc = stk__errf(err, STK_EFORMAT,
                       "%s: the program printed an Expiration that is not an RFC 3339 "
                       "UTC time",
                       who);
    else if (stk__cred_copy(c->key_id, sizeof c->key_id, id) < 0 ||
             stk__cred_copy(c->secret, sizeof c->secret, secret) < 0 ||
             stk__cred_copy(c->token, sizeof c->token, token != NULL ? token : "") < 0)
        rc = stk__errf(err, STK_EFORMAT, "%s: a credential the program printed is too long", who);
    else
        c->expires_ms = expires * 1000;
    for (cJSON *item = doc != NULL ? doc->child : NULL; item != NULL; item = item->next)
        if (cJSON_IsString(item))
            stk__cred_wipe(item->valuestring, strlen(item->valuestring));
    cJSON_Delete(doc);
    return rc;
}

int stk__cred_process_run(const char *who, const char *command, struct stk__cloud_creds *c,
                          struct stk__err *err)
{
    snprintf(c->source, sizeof c->source, "%s", who);
    char **argv = NULL;
    char *obuf = stk__malloc(MAX_OUT + 1), ebuf[MAX_ERR + 1];
    int out[2] = {-1, -1}, errp[2] = {-1, -1};
    size_t olen = 0, elen = 0;
    pid_t pid = 0;
    int rc = obuf == NULL ? stk__errf(err, STK_ENOMEM, "out of memory")
                          : split(who, command, &argv, err);
    if (rc == 0)
        rc = spawn(who, argv, out, errp, &pid, err);
    if (rc < 0)
        goto out;
    int status = 0;
    int64_t limit = timeout_ms();
    int64_t deadline = mono_ms() + limit; /* for the whole run */
    int cut = drain(out[0], errp[0], deadline, obuf, &olen, ebuf, &elen);
    int killed = reap(pid, cut ? 0 : deadline, &status);
    ebuf[elen] = '\0';
    ebuf[strcspn(ebuf, "\r\n")] = '\0';
    obuf[olen] = '\0';
    if (killed < 0)
        rc = stk__errf(err, STK_EIO, "%s: cannot wait for %s: %s", who, argv[0], strerror(errno));
    else if (cut == 2)
        rc = stk__errf(err, STK_ELIMIT, "%s: %s printed more than %d bytes; it was killed", who,
                       argv[0], MAX_OUT);
    else if (cut == 1 || killed == 1)
        rc = stk__errf(err, STK_EACCESS, "%s: %s did not finish within %g s; it was killed", who,
                       argv[0], (double)limit / 1000);
    else if (WIFSIGNALED(status))
        rc = stk__errf(err, STK_EACCESS, "%s: %s was killed by signal %d%s%.300s", who, argv[0],
                       WTERMSIG(status), ebuf[0] ? ": " : "", ebuf);
    else if (WEXITSTATUS(status) != 0)
        rc = stk__errf(err, STK_EACCESS, "%s: %s exited with status %d%s%.300s", who, argv[0],
                       WEXITSTATUS(status), ebuf[0] ? ": " : "", ebuf);
    else
        rc = parse(who, obuf, c, err);
out:
    for (int i = 0; i < 2; i++) {
        if (out[i] >= 0)
            close(out[i]);
        if (errp[i] >= 0)
            close(errp[i]);
    }
    if (obuf != NULL)
        stk__cred_wipe(obuf, MAX_OUT + 1);
    stk__free(obuf);
    stk__free(argv);
    return rc;
}
