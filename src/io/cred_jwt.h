/* SPDX-License-Identifier: MIT */
/*
 * cred_jwt.h - the RS256-signed JWT a service account presents to Google's
 * token endpoint (RFC 7523 "jwt-bearer" grant), signed with libcrypto.
 */
#ifndef STK_CRED_JWT_H
#define STK_CRED_JWT_H

#include <stdint.h>

#include "base/error.h"

/* The assertion "HEADER.CLAIMS.SIGNATURE" (base64url, no padding) with
 * header {"alg":"RS256","typ":"JWT","kid":key_id} and claims iss, scope,
 * aud, iat = now and exp = now + 3600, signed with pem_key (a PKCS#8 or
 * PKCS#1 RSA private key in PEM). A new string (a secret: free with
 * stk__cred_wipe_free), or NULL with err set (naming `who`, never the key). */
char *stk__jwt_rs256(const char *who, const char *pem_key, const char *key_id, const char *iss,
                     const char *scope, const char *aud, int64_t now, struct stk__err *err);

#endif
