/* SPDX-License-Identifier: MIT */
/*
 * cred_profile.c - resolve an AWS profile to credentials.
 *
 * A profile is resolved as botocore and the Go SDK resolve it: role_arn
 * wins (its source_profile's credentials are resolved the same way and
 * then exchanged at STS), then static keys, then credential_process. A
 * role chain is followed at most 8 profiles deep, which also ends a cycle;
 * a profile whose source_profile is itself uses its own keys, as the SDKs
 * allow. Both files are read anew at each resolution (they are small), so
 * an edited file takes effect at the next refresh.
 */
#include "io/cred_profile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "io/aws_config.h"
#include "io/cred_http.h"
#include "io/cred_process.h"
#include "io/cred_sts.h"
#include "stoker.h"

#define MAX_DEPTH 8

static const char *env(const char *name)
{
    const char *v = getenv(name);
    return v != NULL && v[0] != '\0' ? v : NULL;
}

/* "profile [name] (FILE)": the file that defines it. */
static void describe(const struct stk__aws_config *cfg, const char *name, char *buf, size_t cap)
{
    int kind = stk__aws_ini_has(&cfg->file[STK__AWS_CREDENTIALS], name) ? STK__AWS_CREDENTIALS
                                                                        : STK__AWS_CONFIG;
    snprintf(buf, cap, "profile [%.100s] (%.300s)", name, cfg->path[kind]);
}

static int missing(const struct stk__aws_config *cfg, const char *name, struct stk__err *err)
{
    return stk__errf(err, STK_EINVAL,
                     "no profile [%.100s] in the AWS credentials file (%.300s) or config file "
                     "(%.300s)",
                     name, cfg->path[STK__AWS_CREDENTIALS][0] ? cfg->path[1] : "none",
                     cfg->path[STK__AWS_CONFIG][0] ? cfg->path[0] : "none");
}

static int resolve(const struct stk__aws_config *cfg, const char *name, unsigned depth,
                   int use_role, int fetch, struct stk__cloud_creds *c, struct stk__err *err);

static int assume_role(const struct stk__aws_config *cfg, const char *name, const char *role,
                       unsigned depth, struct stk__cloud_creds *c, struct stk__err *err)
{
    char who[700];
    describe(cfg, name, who, sizeof who);
    const char *source = stk__aws_config_get(cfg, name, "source_profile", NULL);
    static const char *const refused[] = {"credential_source", "web_identity_token_file",
                                          "mfa_serial"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        if (stk__aws_config_get(cfg, name, refused[i], NULL) != NULL)
            return stk__errf(err, STK_EINVAL,
                             "%s: role_arn with %s is not supported; use source_profile", who,
                             refused[i]);
    if (source == NULL)
        return stk__errf(err, STK_EINVAL, "%s: role_arn without source_profile", who);
    if (depth + 1 >= MAX_DEPTH)
        return stk__errf(err, STK_EINVAL,
                         "%s: the role_arn/source_profile chain is longer than %d profiles (a "
                         "cycle?)",
                         who, MAX_DEPTH);
    struct stk__cloud_creds *from = stk__calloc(1, sizeof *from);
    if (from == NULL)
        return stk__errf(err, STK_ENOMEM, "out of memory");
    /* A profile that names itself: its own keys, not its role again. */
    int rc = resolve(cfg, source, depth + 1, strcmp(source, name) != 0, 1, from, err);
    if (rc == STK__PROFILE_NONE)
        rc = stk__errf(err, STK_EINVAL, "%s: its source_profile [%.100s] has no credentials", who,
                       source);
    if (rc > 0) {
        const char *region = env("AWS_REGION");
        if (region == NULL)
            region = env("AWS_DEFAULT_REGION");
        if (region == NULL)
            region = stk__aws_config_get(cfg, cfg->profile, "region", NULL);
        if (region == NULL || region[0] == '\0')
            region = "us-east-1";
        char session[64];
        const char *named = stk__aws_config_get(cfg, name, "role_session_name", NULL);
        snprintf(session, sizeof session, "stoker-%lld", (long long)time(NULL));
        char what[sizeof c->source];
        snprintf(what, sizeof what, "role %.150s of %.250s, source_profile [%.60s], via STS", role,
                 who, source);
        rc = stk__cred_sts_assume_role(what, role, named != NULL ? named : session,
                                       stk__aws_config_get(cfg, name, "external_id", NULL), region,
                                       from, c, err);
        rc = rc > 0 ? STK__PROFILE_TEMPORARY : rc;
    }
    stk__cred_wipe(from, sizeof *from);
    stk__free(from);
    return rc;
}

/* The kind of profile `name`; with fetch, its credentials in c. use_role 0
 * skips role_arn (a profile that is its own source_profile). */
static int resolve(const struct stk__aws_config *cfg, const char *name, unsigned depth,
                   int use_role, int fetch, struct stk__cloud_creds *c, struct stk__err *err)
{
    if (!stk__aws_config_has(cfg, name))
        return depth == 0 && !cfg->profile_named ? STK__PROFILE_NONE : missing(cfg, name, err);
    char who[700];
    describe(cfg, name, who, sizeof who);
    const char *role = use_role ? stk__aws_config_get(cfg, name, "role_arn", NULL) : NULL;
    if (role != NULL)
        return fetch ? assume_role(cfg, name, role, depth, c, err) : STK__PROFILE_TEMPORARY;
    const char *from_id = NULL, *from_secret = NULL;
    const char *id = stk__aws_config_get(cfg, name, "aws_access_key_id", &from_id);
    const char *secret = stk__aws_config_get(cfg, name, "aws_secret_access_key", &from_secret);
    if (id != NULL || secret != NULL) {
        if (id == NULL || secret == NULL)
            return stk__errf(err, STK_EINVAL,
                             "%s: set both aws_access_key_id and aws_secret_access_key", who);
        const char *token = stk__aws_config_get(cfg, name, "aws_session_token", NULL);
        if (stk__cred_copy(c->key_id, sizeof c->key_id, id) < 0 ||
            stk__cred_copy(c->secret, sizeof c->secret, secret) < 0 ||
            stk__cred_copy(c->token, sizeof c->token, token != NULL ? token : "") < 0)
            return stk__errf(err, STK_EINVAL, "%s: a key is too long", who);
        snprintf(c->source, sizeof c->source, "AWS %s file %.300s, profile [%.100s]",
                 from_id == cfg->path[STK__AWS_CONFIG] ? "config" : "credentials", from_id, name);
        return STK__PROFILE_STATIC;
    }
    const char *command = stk__aws_config_get(cfg, name, "credential_process", NULL);
    if (command == NULL)
        return STK__PROFILE_NONE;
    if (!fetch)
        return STK__PROFILE_TEMPORARY;
    char what[sizeof c->source];
    snprintf(what, sizeof what, "credential_process of %.450s", who);
    int rc = stk__cred_process_run(what, command, c, err);
    return rc > 0 ? STK__PROFILE_TEMPORARY : rc;
}

int stk__cred_profile_kind(struct stk__cloud_creds *c, struct stk__err *err)
{
    struct stk__aws_config cfg;
    int rc = stk__aws_config_load(&cfg, err);
    const char *region = rc == 0 ? stk__aws_config_get(&cfg, cfg.profile, "region", NULL) : NULL;
    if (region != NULL && env("AWS_REGION") == NULL && env("AWS_DEFAULT_REGION") == NULL &&
        stk__cred_copy(c->region, sizeof c->region, region) < 0)
        rc = stk__errf(err, STK_EINVAL, "profile [%.100s]: region is too long", cfg.profile);
    if (rc == 0)
        rc = resolve(&cfg, cfg.profile, 0, 1, 0, c, err);
    stk__aws_config_free(&cfg);
    return rc;
}

int stk__cred_profile_fetch(struct stk__cloud_creds *c, struct stk__err *err)
{
    struct stk__aws_config cfg;
    int rc = stk__aws_config_load(&cfg, err);
    if (rc == 0)
        rc = resolve(&cfg, cfg.profile, 0, 1, 1, c, err);
    stk__aws_config_free(&cfg);
    if (rc == STK__PROFILE_STATIC) { /* not temporary: cloud_creds.c uses them directly */
        stk__cred_wipe(c->key_id, sizeof c->key_id);
        stk__cred_wipe(c->secret, sizeof c->secret);
        stk__cred_wipe(c->token, sizeof c->token);
        rc = STK__PROFILE_NONE;
    }
    return rc == STK__PROFILE_TEMPORARY ? 1 : rc;
}
