/* SPDX-License-Identifier: MIT */
/*
 * cred_process.h - AWS credentials from a profile's credential_process: a
 * program the user names that prints them as JSON (AWS SSO helpers,
 * aws-vault, vendors' token brokers).
 */
#ifndef STK_CRED_PROCESS_H
#define STK_CRED_PROCESS_H

#include "io/cloud_creds.h"

/* Run command (split into words as the AWS CLI does, shlex-style; no
 * shell) with standard input from /dev/null, for at most 60 s and 64 KiB
 * of output, and read its JSON: Version 1, AccessKeyId, SecretAccessKey,
 * optional SessionToken and Expiration (RFC 3339; none: the credentials do
 * not expire). `who` names the profile and file in messages and becomes
 * c->source. 1 with c filled, or <0 with err naming `who`, the program and
 * its exit status and first line of standard error (never its output). */
int stk__cred_process_run(const char *who, const char *command, struct stk__cloud_creds *c,
                          struct stk__err *err);

#endif
