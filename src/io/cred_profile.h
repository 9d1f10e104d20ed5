/* SPDX-License-Identifier: MIT */
/*
 * cred_profile.h - the credentials of an AWS profile ($AWS_PROFILE, else
 * "default") in the shared config and credentials files (aws_config.h):
 * static keys, a role assumed through STS, or a credential_process.
 */
#ifndef STK_CRED_PROFILE_H
#define STK_CRED_PROFILE_H

#include "io/cloud_creds.h"

enum stk__profile_kind {
    STK__PROFILE_NONE = 0,     /* no such profile, or one without credentials */
    STK__PROFILE_STATIC = 1,   /* aws_access_key_id + aws_secret_access_key */
    STK__PROFILE_TEMPORARY = 2 /* role_arn or credential_process: fetch them */
};

/* What the profile holds, in the order botocore and the Go SDK resolve a
 * profile: role_arn first, then static keys, then credential_process. For
 * STK__PROFILE_STATIC, c gets the keys (and token) and c->source; the
 * others leave the credentials alone. The profile's region, if it has one,
 * goes into c->region unless $AWS_REGION or $AWS_DEFAULT_REGION is set.
 * <0 with err naming the file when a file named by a variable cannot be
 * read, a file is malformed, $AWS_PROFILE names a profile neither file
 * has, or a profile has half a key pair. Reads the environment and the
 * files; no network, no process. */
int stk__cred_profile_kind(struct stk__cloud_creds *c, struct stk__err *err);

/* Fetch the temporary credentials of a STK__PROFILE_TEMPORARY profile into
 * c (key id, secret, token, expires_ms, source):
 *  - role_arn with source_profile: the source profile's credentials
 *    (static keys, credential_process or, chained, another role; at most 8
 *    deep; a profile may name itself to use its own keys), then STS
 *    AssumeRole signed with them (role_session_name, external_id), at
 *    $AWS_ENDPOINT_URL_STS or the regional endpoint of $AWS_REGION,
 *    $AWS_DEFAULT_REGION or the profile's region;
 *  - role_arn with web_identity_token_file: AssumeRoleWithWebIdentity;
 *  - credential_process: cred_process.h.
 * credential_source and mfa_serial are refused by name. 1 with c filled,
 * 0 when the profile has nothing temporary, <0 with err naming the
 * profile. */
int stk__cred_profile_fetch(struct stk__cloud_creds *c, struct stk__err *err);

#endif
