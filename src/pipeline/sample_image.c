/* SPDX-License-Identifier: MIT */
/*
 * sample_image.c - the sample side of the image transform (see
 * sample_image.h): labels, required members, the image member, and the
 * sample's name in front of whatever image/ says went wrong.
 */
#include "pipeline/sample_image.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

int stk__sample_rules_init(struct stk__sample_rules *r, const struct stk_options *o,
                           struct stk__err *err) {
    memset(r, 0, sizeof *r);
    /* Not txt: a caption that happens to be a number is no label. */
    const char *exts = o->label_exts ? o->label_exts : "cls";
    while (*exts) {
        size_t n = strcspn(exts, ",");
        if (n == 0 || n >= sizeof r->label_exts[0] || r->n_label_exts == STK__MAX_LABEL_EXTS)
            return stk__errf(err, STK_EINVAL,
                             "label_exts must be up to %d comma-separated "
                             "extensions of up to 15 characters",
                             STK__MAX_LABEL_EXTS);
        memcpy(r->label_exts[r->n_label_exts++], exts, n);
        exts += n + (exts[n] == ',');
    }
    if (o->label_json_field != NULL) {
        if (strlen(o->label_json_field) >= sizeof r->label_json_field)
            return stk__errf(err, STK_EINVAL, "label_json_field is too long");
        snprintf(r->label_json_field, sizeof r->label_json_field, "%s", o->label_json_field);
    }
    return stk__member_rules_init(&r->members, o->require_members, err);
}

int stk__sample_rules_labelled(const struct stk__sample_rules *r) {
    return r->n_label_exts > 0 || r->label_json_field[0] != '\0';
}

static int find_label(const struct stk__sample_rules *r, const struct stk__sample *s,
                      int64_t *label, struct stk__err *err) {
    char shown[STK__SHOWN_MAX]; /* the key, for messages */
    if (r->label_json_field[0] != '\0') {
        const struct stk_member *m = stk__sample_member(s, "json");
        if (m == NULL)
            return stk__errf(err, STK_ELABEL, "%s: sample '%s' has no json member for its label",
                             s->pub.url, stk__shown(shown, sizeof shown, s->pub.key));
        cJSON *root = cJSON_ParseWithLength((const char *)m->data, m->size);
        const cJSON *field = cJSON_GetObjectItemCaseSensitive(root, r->label_json_field);
        int ok = cJSON_IsNumber(field) && field->valuedouble == floor(field->valuedouble) &&
                 fabs(field->valuedouble) < 9e15;
        if (ok)
            *label = (int64_t)field->valuedouble;
        cJSON_Delete(root);
        if (!ok)
            return stk__errf(err, STK_ELABEL, "%s: sample '%s': json has no integer field '%s'",
                             s->pub.url, stk__shown(shown, sizeof shown, s->pub.key),
                             r->label_json_field);
        return 0;
    }
    for (int i = 0; i < r->n_label_exts; i++) {
        const struct stk_member *m = stk__sample_member(s, r->label_exts[i]);
        if (m == NULL)
            continue;
        if (stk__member_int(m, label) < 0)
            return stk__errf(err, STK_ELABEL, "%s: sample '%s': %s member is not an integer",
                             s->pub.url, stk__shown(shown, sizeof shown, s->pub.key),
                             r->label_exts[i]);
        return 0;
    }
    if (r->n_label_exts == 0) { /* unlabelled data */
        *label = -1;
        return 0;
    }
    return stk__errf(err, STK_ELABEL,
                     "%s: sample '%s' has no label member (%s%s%s); for unlabelled data set "
                     "label_exts=\"\"",
                     s->pub.url, stk__shown(shown, sizeof shown, s->pub.key), r->label_exts[0],
                     r->n_label_exts > 1 ? ", " : "", r->n_label_exts > 1 ? r->label_exts[1] : "");
}

static const struct stk_member *find_image(const struct stk__sample *s) {
    for (size_t i = 0; i < STK__N_IMAGE_EXTS; i++) {
        const struct stk_member *m = stk__sample_member(s, stk__image_exts[i]);
        if (m != NULL)
            return m;
    }
    return NULL;
}

/* The sample's image member, or NULL with an error naming the sample. */
static const struct stk_member *image_member(const struct stk__sample *s, struct stk__err *err) {
    const struct stk_member *m = find_image(s);
    char shown[STK__SHOWN_MAX];
    if (m == NULL)
        stk__errf(err, STK_EDECODE, "%s: sample '%s' has no jpg, jpeg or png member", s->pub.url,
                  stk__shown(shown, sizeof shown, s->pub.key));
    return m;
}

/* Put the sample's URL, key and member in front of err's message. */
static int name_member(int rc, const struct stk__sample *s, const struct stk_member *m,
                       struct stk__err *err) {
    char why[STK__ERRMSG_MAX], key[STK__SHOWN_MAX], ext[STK__SHOWN_MAX];
    snprintf(why, sizeof why, "%s", err->msg);
    return stk__errf(err, rc, "%s: sample '%s' member %s: %s", s->pub.url,
                     stk__shown(key, sizeof key, s->pub.key), stk__shown(ext, sizeof ext, m->ext),
                     why);
}

/* The sample's label, its required members, then its image member: NULL
 * with err set when any of them is missing or bad. */
static const struct stk_member *checked_image(const struct stk__sample_rules *r,
                                              const struct stk__sample *s, int64_t *label,
                                              struct stk__err *err) {
    int rc = find_label(r, s, label, err);
    if (rc == 0)
        rc = stk__members_check(&r->members, s, err);
    return rc < 0 ? NULL : image_member(s, err);
}

int stk__sample_transform(struct stk__image_worker *w, const struct stk__sample_rules *r,
                          const struct stk__image_config *cfg, const struct stk__sample *s,
                          uint64_t key, void *out, int64_t *label, struct stk__err *err) {
    const struct stk_member *m = checked_image(r, s, label, err);
    if (m == NULL)
        return err->code;
    int rc = stk__image_transform(w, cfg, m->data, m->size, key, out, err);
    return rc < 0 ? name_member(rc, s, m, err) : 0;
}

int stk__sample_check(struct stk__image_worker *w, const struct stk__sample_rules *r,
                      const struct stk__sample *s, int64_t *label, struct stk__err *err) {
    const struct stk_member *m = checked_image(r, s, label, err);
    if (m == NULL)
        return err->code;
    int rc = stk__image_check(w, m->data, m->size, err);
    return rc < 0 ? name_member(rc, s, m, err) : 0;
}
