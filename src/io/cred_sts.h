/* SPDX-License-Identifier: MIT */
/*
 * cred_sts.h - AWS STS, which turns one identity into a role's temporary
 * credentials: AssumeRoleWithWebIdentity (EKS IRSA, a profile's
 * web_identity_token_file) and AssumeRole (a profile's role_arn with a
 * source_profile), and the answer checks every AWS source shares.
 */
#ifndef STK_CRED_STS_H
#define STK_CRED_STS_H

#include "io/cloud_creds.h"

/* The STS URL the AWS SDKs use: $AWS_ENDPOINT_URL_STS, else the regional
 * https://sts.REGION.amazonaws.com/ (their default since 2024). */
void stk__cred_sts_url(const char *region, char *url, size_t cap);

/* AssumeRoleWithWebIdentity of role with the JWT in token_file
 * (session name $AWS_ROLE_SESSION_NAME, else "stoker"); sets c->source.
 * 1 with key id, secret, session token and expires_ms in c, or <0 with err
 * naming the source (STK_EIO: no answer, worth another try). */
int stk__cred_sts_web_identity(const char *token_file, const char *role, const char *region,
                               struct stk__cloud_creds *c, struct stk__err *err);

/* AssumeRole of role, signed (SigV4, service sts, region) with the key id,
 * secret and session token of *from; session names the session and
 * external_id (NULL: none) is sent as ExternalId. `who` (c->source is set
 * to it) names the profile in messages. Returns as above. */
int stk__cred_sts_assume_role(const char *who, const char *role, const char *session,
                              const char *external_id, const char *region,
                              const struct stk__cloud_creds *from, struct stk__cloud_creds *c,
                              struct stk__err *err);

/* Copy the four fields of an answer into c; 1, or STK_EHTTP naming who
 * when one lacks or Expiration is not an RFC 3339 UTC time. */
int stk__cred_aws_take(const char *who, const char *id, const char *secret, const char *token,
                       const char *expiration, struct stk__cloud_creds *c, struct stk__err *err);

/* An answer other than 200 as an error: STK_EIO when transient (429,
 * 5xx), STK_EACCESS when refused (400, 401, 403), else STK_EHTTP. */
int stk__cred_aws_status_error(const char *who, const char *url, long status, struct stk__err *err);

#endif
