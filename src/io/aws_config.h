/* SPDX-License-Identifier: MIT */
/*
 * aws_config.h - the AWS shared config and credentials files, read as the
 * AWS CLI (botocore, Python's configparser) reads them.
 *
 * Both are INI files. Lines whose first non-blank is '#' or ';' are
 * comments (there are no comments after a value: "k = v # x" has the value
 * "v # x"). "[name]" opens a section; "key = value" or "key: value" sets a
 * key (lowercased; both sides trimmed) of the open section; a line indented
 * deeper than its key's line continues the value (joined with '\n'), which
 * is how "s3 =\n  max_concurrent_requests = 20" nests. In the config file
 * "[profile NAME]" (NAME may be quoted) and "[default]" are profiles and
 * other sections (sso-session, services) are not; in the credentials file
 * every section is a profile of its exact name (no trimming: the CLI does
 * not find "[ dev ]" as "dev" either). A second section naming the same
 * profile under another header ("[default]", "[profile default]")
 * replaces the first. A key outside a section, a line that is neither, the
 * same section header twice or a key set twice in one section is an error
 * naming the file and line, as the CLI refuses such a file.
 */
#ifndef STK_AWS_CONFIG_H
#define STK_AWS_CONFIG_H

#include <stddef.h>

#include "base/error.h"

enum stk__aws_file {
    STK__AWS_CONFIG = 0,     /* ~/.aws/config: "[profile x]" */
    STK__AWS_CREDENTIALS = 1 /* ~/.aws/credentials: "[x]" */
};

/* A key of a profile; key NULL marks the profile's section itself (a
 * profile may have no keys), its value then being the section's header as
 * written. Pointers into the file's parsed text. */
struct stk__aws_entry {
    const char *profile;
    const char *key;
    const char *value;
};

/* One parsed file. Holds secrets: stk__aws_ini_free() wipes them. */
struct stk__aws_ini {
    char *text; /* the profile names, keys and values, NUL-separated */
    size_t text_len;
    struct stk__aws_entry *entries;
    size_t count, cap;
};

/* Parse len bytes of data (need not be NUL-terminated) as a file of kind;
 * path names it in messages. 0 with *ini filled (free it with
 * stk__aws_ini_free()), or STK_EINVAL naming path:line and what is wrong
 * (never a value), or STK_ENOMEM; *ini is empty on failure. Does no I/O. */
int stk__aws_ini_parse(const char *data, size_t len, enum stk__aws_file kind, const char *path,
                       struct stk__aws_ini *ini, struct stk__err *err);

/* The value of key in profile, or NULL. */
const char *stk__aws_ini_get(const struct stk__aws_ini *ini, const char *profile, const char *key);

/* 1 if the file has a section for profile. */
int stk__aws_ini_has(const struct stk__aws_ini *ini, const char *profile);

/* Wipe and free; a zeroed or freed one is fine. */
void stk__aws_ini_free(struct stk__aws_ini *ini);

/* Both files of the environment, as the CLI finds them:
 * $AWS_CONFIG_FILE (default ~/.aws/config) and $AWS_SHARED_CREDENTIALS_FILE
 * (default ~/.aws/credentials). A key set in both has the credentials
 * file's value. */
struct stk__aws_config {
    struct stk__aws_ini file[2]; /* indexed by enum stk__aws_file */
    char path[2][1024];
    const char *profile; /* $AWS_PROFILE, else "default" */
    int profile_named;   /* $AWS_PROFILE was set */
};

/* Read both files. A missing file is no error unless its variable names
 * it; an unreadable or malformed one is (STK_EINVAL naming it). Reads the
 * environment. Free with stk__aws_config_free(), also after a failure. */
int stk__aws_config_load(struct stk__aws_config *cfg, struct stk__err *err);

/* The value of key in profile (credentials file first), or NULL; *from
 * (may be NULL) gets the path of the file that set it. */
const char *stk__aws_config_get(const struct stk__aws_config *cfg, const char *profile,
                                const char *key, const char **from);

/* 1 if either file has profile. */
int stk__aws_config_has(const struct stk__aws_config *cfg, const char *profile);

void stk__aws_config_free(struct stk__aws_config *cfg);

#endif
