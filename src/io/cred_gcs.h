/* SPDX-License-Identifier: MIT */
/*
 * cred_gcs.h - Google Application Default Credentials after the explicit
 * variables: a key file, the gcloud ADC file, the metadata server.
 */
#ifndef STK_CRED_GCS_H
#define STK_CRED_GCS_H

#include "io/cloud_creds.h"

/* Fetch an OAuth 2 access token into c->bearer (with c->source and
 * c->expires_ms), trying in Google's order:
 *   1. $GOOGLE_APPLICATION_CREDENTIALS: a service_account key file (an
 *      RS256 JWT assertion exchanged at its token_uri) or an
 *      authorized_user file (its refresh token exchanged at token_uri);
 *   2. the gcloud ADC file, $CLOUDSDK_CONFIG/application_default_credentials.json
 *      or ~/.config/gcloud/application_default_credentials.json, same types;
 *   3. the metadata server (Compute Engine, GKE Workload Identity, Vertex
 *      AI, Cloud Run): $GCE_METADATA_HOST, else 169.254.169.254 unless
 *      $NO_GCE_CHECK is true; no answer from the default host, or one without
 *      "Metadata-Flavor: Google", means "not on Google Cloud".
 * 1 with c filled; 0 when no source exists (c->source says what was
 * tried); <0 with err naming the source: STK_EIO when it gave no answer or
 * a transient one (worth asking again), STK_EACCESS when it refused,
 * STK_EINVAL for a file that cannot work (an unsupported type). */
int stk__cred_gcs_fetch(struct stk__cloud_creds *c, struct stk__err *err);

#endif
