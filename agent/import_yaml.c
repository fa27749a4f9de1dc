/*
 * `katana import`: YAML (XrayR's and Xboard-Node's config.yml) into a jansson tree,
 * read with libyaml's event parser so that the mappers read YAML and JSON alike. See
 * ag_import_yaml_load() in import.h for the rules.
 */
#include "agent/import.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <yaml.h>

#define YAML_MAX_DEPTH 64 /* deeper nesting than any agent's config is refused */

typedef struct ystack {
    json_t *node[YAML_MAX_DEPTH]; /* open containers, innermost last (borrowed from root) */
    char *key[YAML_MAX_DEPTH];    /* a mapping's key waiting for its value, or NULL */
    size_t depth;
    json_t *root;
} ystack;

/* Whether @p s (a plain scalar) spells a YAML 1.2 core-schema integer; sets *v. */
static bool scalar_int(const char *s, json_int_t *v)
{
    char *end;
    errno = 0;
    int base = 10;
    const char *p = s;
    if (s[0] == '0' && (s[1] == 'x' || s[1] == 'o') && s[2] != '\0') {
        base = s[1] == 'x' ? 16 : 8;
        p = s + 2;
    } else if ((s[0] == '-' || s[0] == '+') && s[1] >= '0' && s[1] <= '9') {
        p = s;
    } else if (!(s[0] >= '0' && s[0] <= '9')) {
        return false;
    }
    long long n = strtoll(p, &end, base);
    if (*end != '\0' || errno == ERANGE)
        return false;
    *v = (json_int_t)n;
    return true;
}

/* Whether @p s spells a YAML real ([-+]digits[.digits][e[-+]digits], or .5); sets *v. */
static bool scalar_real(const char *s, double *v)
{
    const char *p = s + (s[0] == '-' || s[0] == '+');
    size_t digits = strspn(p, "0123456789");
    p += digits;
    if (*p == '.') {
        size_t frac = strspn(p + 1, "0123456789");
        digits += frac;
        p += 1 + frac;
    }
    if (digits == 0)
        return false;
    if (*p == 'e' || *p == 'E') {
        p += 1 + (p[1] == '-' || p[1] == '+');
        size_t e = strspn(p, "0123456789");
        if (e == 0)
            return false;
        p += e;
    }
    if (*p != '\0')
        return false;
    *v = strtod(s, NULL);
    return true;
}

/* The JSON value of a scalar event: plain scalars resolved, quoted ones strings. */
static json_t *scalar_value(const yaml_event_t *ev)
{
    const char *s = (const char *)ev->data.scalar.value;
    size_t len = ev->data.scalar.length;
    json_int_t i;
    double d;
    if (ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE || strlen(s) != len)
        return json_stringn(s, len);
    if (len == 0 || strcmp(s, "~") == 0 || strcasecmp(s, "null") == 0)
        return json_null();
    if (strcasecmp(s, "true") == 0 || strcasecmp(s, "yes") == 0 || strcasecmp(s, "on") == 0)
        return json_true();
    if (strcasecmp(s, "false") == 0 || strcasecmp(s, "no") == 0 || strcasecmp(s, "off") == 0)
        return json_false();
    if (scalar_int(s, &i))
        return json_integer(i);
    if (scalar_real(s, &d))
        return json_real(d);
    return json_stringn(s, len);
}

static int yerr(sv_error *err, const yaml_event_t *ev, const char *what)
{
    return sv_error_set(err, -EBADMSG, "YAML line %zu column %zu: %s",
                        ev->start_mark.line + 1, ev->start_mark.column + 1, what);
}

/* Put @p v (a new reference, consumed) where the innermost container expects it. */
static int place(ystack *st, json_t *v, const yaml_event_t *ev, sv_error *err)
{
    if (v == NULL)
        return sv_error_set(err, -ENOMEM, "out of memory");
    if (st->depth == 0) {
        if (st->root != NULL) {
            json_decref(v);
            return yerr(err, ev, "a second value at the top");
        }
        st->root = v;
        return 0;
    }
    json_t *top = st->node[st->depth - 1];
    if (json_is_array(top))
        return json_array_append_new(top, v) == 0 ? 0 : sv_error_set(err, -ENOMEM, "no memory");
    char *key = st->key[st->depth - 1];
    if (key == NULL) {
        bool ok = json_is_string(v) || json_is_integer(v) || json_is_true(v) || json_is_null(v) ||
                  json_is_false(v) || json_is_real(v);
        json_decref(v);
        if (!ok)
            return yerr(err, ev, "a mapping key must be a scalar");
        key = strndup((const char *)ev->data.scalar.value, ev->data.scalar.length);
        if (key == NULL)
            return sv_error_set(err, -ENOMEM, "out of memory");
        st->key[st->depth - 1] = key;
        return 0;
    }
    st->key[st->depth - 1] = NULL;
    int rc = 0;
    if (json_object_get(top, key) != NULL) {
        json_decref(v);
        rc = yerr(err, ev, "a key is defined twice in one mapping");
    } else if (json_object_set_new(top, key, v) != 0) { /* v is taken even on failure */
        rc = yerr(err, ev, "a key that is not UTF-8");
    }
    free(key);
    return rc;
}

/* Open a sequence or mapping: placed in its parent, then pushed. */
static int open_container(ystack *st, json_t *c, const yaml_event_t *ev, sv_error *err)
{
    if (st->depth == YAML_MAX_DEPTH) {
        json_decref(c);
        return yerr(err, ev, "nested deeper than 64 levels");
    }
    if (st->depth > 0 && json_is_object(st->node[st->depth - 1]) &&
        st->key[st->depth - 1] == NULL) {
        json_decref(c);
        return yerr(err, ev, "a mapping key must be a scalar");
    }
    json_incref(c);
    int rc = place(st, c, ev, err);
    if (rc != 0) {
        json_decref(c);
        return rc;
    }
    st->node[st->depth] = c;
    st->key[st->depth++] = NULL;
    json_decref(c); /* the parent (or root) holds it */
    return 0;
}

/* One event; *done set at the end of the first document. */
static int on_event(ystack *st, const yaml_event_t *ev, bool *done, sv_error *err)
{
    switch (ev->type) {
    case YAML_SCALAR_EVENT: {
        json_t *v = scalar_value(ev);
        if (v == NULL) /* json_stringn() refuses what is not UTF-8 */
            return yerr(err, ev, "a value that is not UTF-8");
        return place(st, v, ev, err);
    }
    case YAML_SEQUENCE_START_EVENT:
        return open_container(st, json_array(), ev, err);
    case YAML_MAPPING_START_EVENT:
        return open_container(st, json_object(), ev, err);
    case YAML_SEQUENCE_END_EVENT:
    case YAML_MAPPING_END_EVENT:
        if (st->depth > 0)
            st->depth--;
        return 0;
    case YAML_ALIAS_EVENT:
        return yerr(err, ev, "aliases (*name) are not supported: write the value out");
    case YAML_DOCUMENT_END_EVENT:
    case YAML_STREAM_END_EVENT:
        *done = true;
        return 0;
    default:
        return 0;
    }
}

int ag_import_yaml_load(const char *text, size_t len, json_t **out, sv_error *err)
{
    yaml_parser_t p;
    ystack st = {0};
    bool done = false;
    int rc = 0;
    *out = NULL;
    if (!yaml_parser_initialize(&p))
        return sv_error_set(err, -ENOMEM, "out of memory");
    yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
    while (rc == 0 && !done) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&p, &ev)) {
            rc = sv_error_set(err, -EBADMSG, "YAML line %zu column %zu: %s",
                              p.problem_mark.line + 1, p.problem_mark.column + 1,
                              p.problem != NULL ? p.problem : "malformed");
            break;
        }
        rc = on_event(&st, &ev, &done, err);
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&p);
    for (size_t i = 0; i < YAML_MAX_DEPTH; i++)
        free(st.key[i]);
    if (rc != 0) {
        json_decref(st.root);
        return rc;
    }
    *out = st.root != NULL ? st.root : json_null();
    return 0;
}
