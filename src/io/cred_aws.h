/* SPDX-License-Identifier: MIT */
/*
 * cred_aws.h - the AWS default chain's temporary credentials: web identity
 * (EKS IRSA), a profile's role or credential_process, container credentials (ECS, EKS Pod Identity), EC2 IMDSv2.
 */
#ifndef STK_CRED_AWS_H
#define STK_CRED_AWS_H

#include "io/cloud_creds.h"

/* Fetch key id, secret and session token into c (with c->source and
 * c->expires_ms), from the first source configured:
 *   1. $AWS_WEB_IDENTITY_TOKEN_FILE + $AWS_ROLE_ARN: STS
 *      AssumeRoleWithWebIdentity at $AWS_ENDPOINT_URL_STS, else
 *      https://sts.REGION.amazonaws.com (region: c->region);
 *   2. the role_arn or credential_process of the AWS profile
 *      (cred_profile.h);
 *   3. $AWS_CONTAINER_CREDENTIALS_FULL_URI, or http://169.254.170.2 +
 *      $AWS_CONTAINER_CREDENTIALS_RELATIVE_URI, with the Authorization
 *      header from $AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE or
 *      $AWS_CONTAINER_AUTHORIZATION_TOKEN;
 *   4. EC2 instance metadata with an IMDSv2 session token, at
 *      $AWS_EC2_METADATA_SERVICE_ENDPOINT else http://169.254.169.254,
 *      unless $AWS_EC2_METADATA_DISABLED is true; no answer from the default
 *      address, or no session token, means "not on EC2".
 * Return values as stk__cred_gcs_fetch(). */
int stk__cred_aws_fetch(struct stk__cloud_creds *c, struct stk__err *err);

#endif
