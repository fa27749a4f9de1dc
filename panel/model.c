/*
 * The UniProxy user list (`GET user`, PANEL.md §1.5): its parsers and life cycle (free, clone,
 * equal, digest, shed, restore), the JSON file readers, and the helpers the node body's parser
 * (panel/node_body.c) shares (panel/model_internal.h). Panel bodies are outside bytes: every
 * string and list has a bound, and the first malformed field fails the whole body with its path.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "panel/jsonscan.h"
#include "panel/keys.h"
#include "panel/model.h"
#include "panel/model_internal.h"

char *pn__dup_n(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d != NULL) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

int pn__dup_opt(char **dst, const char *src)
{
    *dst = NULL;
    if (src == NULL)
        return 0;
    *dst = pn__dup_n(src, strlen(src));
    return *dst != NULL ? 0 : -ENOMEM;
}

/* A JSON string (bounded) into a new heap string. */
int pn__take_string(const json_t *v, const char *path, size_t max, char **out, sv_error *err)
{
    if (!json_is_string(v))
        return sv_error_set(err, -EINVAL, "%s: expected a string", path);
    size_t n = json_string_length(v);
    if (n > max)
        return sv_error_set(err, -EMSGSIZE, "%s: longer than %zu bytes", path, max);
    *out = pn__dup_n(json_string_value(v), n);
    return *out != NULL ? 0 : sv_error_set(err, -ENOMEM, "%s: out of memory", path);
}

/* Digits only (a panel sends "60" or "28004"); rejects signs, blanks and overflow. */
static bool parse_digits(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    if (*s == '\0' || strlen(s) > 20)
        return false;
    for (; *s != '\0'; s++) {
        if (*s < '0' || *s > '9')
            return false;
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

/*
 * A non-negative integer no larger than max, from a JSON integer or (when strings are allowed)
 * a numeric string. The caller handles null/absent itself.
 */
int pn__get_uint(const json_t *v, const char *path, uint64_t max, bool allow_string,
                 uint64_t *out, sv_error *err)
{
    uint64_t u;
    if (json_is_integer(v)) {
        json_int_t i = json_integer_value(v);
        if (i < 0)
            return sv_error_set(err, -EINVAL, "%s: must not be negative", path);
        u = (uint64_t)i;
    } else if (allow_string && json_is_string(v)) {
        if (!parse_digits(json_string_value(v), &u))
            return sv_error_set(err, -EINVAL, "%s: expected a number", path);
    } else {
        return sv_error_set(err, -EINVAL, "%s: expected an integer", path);
    }
    if (u > max)
        return sv_error_set(err, -EINVAL, "%s: must be at most %llu", path,
                            (unsigned long long)max);
    *out = u;
    return 0;
}

static const char *const users_keys[] = {"users", NULL};
static const char *const user_keys[] = {"id", "uuid", "speed_limit", "device_limit", NULL};

/* With PN_PARSE_STRICT, every key of obj must be in known; prefix names obj ("" at the top). */
int pn__check_keys(const json_t *obj, unsigned flags, const char *prefix,
                   const char *const *known, sv_error *err)
{
    return pn_keys_check(obj, prefix, known, (flags & PN_PARSE_STRICT) != 0, NULL, NULL, err);
}

/* ------------------------------------------------------------------------------------------ */
/* users                                                                                        */
/* ------------------------------------------------------------------------------------------ */

/* Which member of a user object a key names (PANEL.md §1.5). */
enum user_field { UF_ID, UF_UUID, UF_SPEED, UF_DEVICES, UF_OTHER };

static enum user_field user_field_of(const char *key)
{
    for (int f = UF_ID; f < UF_OTHER; f++)
        if (strcmp(key, user_keys[f]) == 0)
            return (enum user_field)f;
    return UF_OTHER;
}

/* One user object, in a single pass over its members (a list of 1 000 000 users is
 * parsed on every pull): the field path of an error ("users[7].uuid") is written only when
 * there is an error. */
static int parse_user(const json_t *v, size_t idx, unsigned flags, pn_user *u, sv_error *err)
{
    const json_t *field[UF_OTHER] = {0};
    const char *key;
    json_t *m;
    if (!json_is_object(v))
        return sv_error_set(err, -EINVAL, "users[%zu]: expected an object", idx);
    json_object_foreach((json_t *)v, key, m) {
        enum user_field f = user_field_of(key);
        if (f != UF_OTHER)
            field[f] = m;
        else if (flags & PN_PARSE_STRICT)
            return sv_error_set(err, -EINVAL, "users[%zu].%.64s: unknown key", idx, key);
    }
    char path[64];
    int rc;
    uint64_t x;
    enum user_field bad = UF_ID;
    if (field[UF_ID] == NULL || json_is_null(field[UF_ID]))
        return sv_error_set(err, -EINVAL, "users[%zu].id: missing", idx);
    if (field[UF_UUID] == NULL || json_is_null(field[UF_UUID]))
        return sv_error_set(err, -EINVAL, "users[%zu].uuid: missing", idx);
    /* each check below runs again with its path once it failed without one */
    rc = pn__get_uint(field[UF_ID], "", INT64_MAX, false, &u->id, NULL);
    if (rc == 0 && u->id == 0) /* panels number users from 1; 0 is no user (PANEL.md §1.5) */
        return sv_error_set(err, -EINVAL, "users[%zu].id: must be positive", idx);
    if (rc == 0) {
        bad = UF_UUID;
        rc = pn__take_string(field[UF_UUID], "", PN_UUID_MAX, &u->uuid, NULL);
        if (rc == 0 && u->uuid[0] == '\0')
            return sv_error_set(err, -EINVAL, "users[%zu].uuid: empty", idx);
    }
    /* Mbps; the bound keeps Mbps × 125000 inside 64 bits. */
    if (rc == 0 && field[UF_SPEED] != NULL && !json_is_null(field[UF_SPEED])) {
        bad = UF_SPEED;
        rc = pn__get_uint(field[UF_SPEED], "", UINT64_MAX / 125000, false, &u->speed_limit, NULL);
    }
    if (rc == 0 && field[UF_DEVICES] != NULL && !json_is_null(field[UF_DEVICES])) {
        bad = UF_DEVICES;
        rc = pn__get_uint(field[UF_DEVICES], "", UINT32_MAX, false, &x, NULL);
        u->device_limit = (uint32_t)x;
    }
    if (rc == 0)
        return 0;
    if (rc == -ENOMEM)
        return sv_error_set(err, rc, "users[%zu].%s: out of memory", idx, user_keys[bad]);
    snprintf(path, sizeof path, "users[%zu].%s", idx, user_keys[bad]);
    static const uint64_t max[UF_OTHER] = {INT64_MAX, 0, UINT64_MAX / 125000, UINT32_MAX};
    return bad == UF_UUID ? pn__take_string(field[UF_UUID], path, PN_UUID_MAX, &u->uuid, err)
                          : pn__get_uint(field[bad], path, max[bad], false, &x, err);
}

/* pn_users_parse() of @p body, whose users array is @p src's when it splits the body. */
static int parse_users(const json_t *body, pn_json_body *src, unsigned flags, pn_users *out,
                       sv_error *err)
{
    memset(out, 0, sizeof *out);
    if (!json_is_object(body))
        return sv_error_set(err, -EINVAL, "users: expected an object {\"users\": [...]}");
    int rc = pn__check_keys(body, flags, "", users_keys, err);
    if (rc != 0)
        return rc;
    const json_t *list = json_object_get(body, "users");
    if (list == NULL || json_is_null(list))
        return sv_error_set(err, -EINVAL, "users: missing");
    if (!json_is_array(list))
        return sv_error_set(err, -EINVAL, "users: expected an array");
    size_t n = src != NULL && src->open != 0 ? src->n : json_array_size(list);
    if (n > PN_USERS_MAX)
        return sv_error_set(err, -EMSGSIZE, "users: more than %u users", PN_USERS_MAX);
    if (n == 0)
        return 0;
    out->users = calloc(n, sizeof *out->users);
    if (out->users == NULL)
        return sv_error_set(err, -ENOMEM, "users: out of memory");
    out->n = n;
    for (size_t i = 0; i < n && rc == 0; i++) {
        const json_t *v;
        json_t *own;
        rc = pn_json_body_at(list, src, i, "users", &v, &own, err);
        if (rc == 0)
            rc = parse_user(v, i, flags, &out->users[i], err);
        json_decref(own);
    }
    if (rc != 0)
        pn_users_free(out);
    return rc;
}

int pn_users_parse(const json_t *body, unsigned flags, pn_users *out, sv_error *err)
{
    return parse_users(body, NULL, flags, out, err);
}

int pn_users_parse_text(const char *text, size_t len, unsigned flags, pn_users *out,
                        sv_error *err)
{
    sv_error why = {0};
    memset(out, 0, sizeof *out);
    if (pn_json_check(text, len, &why) != 0) /* before any user is built */
        return sv_error_set(err, -EBADMSG, "%s", why.msg);
    int rc = pn_users_scan(text, len, out);
    if (rc <= 0)
        return rc == 0 ? 0 : sv_error_set(err, rc, "users: out of memory");
    pn_json_body b;
    rc = pn_json_body_load(&b, text, len, "users", err);
    if (rc == 0)
        rc = parse_users(b.root, &b, flags, out, err);
    pn_json_body_free(&b);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* users body from text, without a JSON tree                                                   */
/* ------------------------------------------------------------------------------------------ */

/* A cursor over a users body. Every step either advances or gives up (false): the body is then
 * left to json_loadb() + pn_users_parse(), which also say what is wrong with it. */
typedef struct scan {
    const char *p, *end;
} scan;

static void scan_ws(scan *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
        s->p++;
}

/* Skip white space, then take @p c. */
static bool scan_char(scan *s, char c)
{
    scan_ws(s);
    if (s->p == s->end || *s->p != c)
        return false;
    s->p++;
    return true;
}

/* A string of printable ASCII without escapes, 1..max bytes: [*str, *str + *n). */
static bool scan_plain_string(scan *s, size_t max, const char **str, size_t *n)
{
    if (!scan_char(s, '"'))
        return false;
    const char *b = s->p;
    while (s->p < s->end && *s->p != '"') {
        unsigned char c = (unsigned char)*s->p;
        if (c < 0x20 || c > 0x7e || c == '\\' || (size_t)(s->p - b) >= max)
            return false;
        s->p++;
    }
    if (s->p == s->end || s->p == b)
        return false;
    *str = b;
    *n = (size_t)(s->p - b);
    s->p++;
    return true;
}

/* A JSON integer of at most 19 digits, no sign, at most @p max; or null (*null set) when
 * @p null_ok. */
static bool scan_uint(scan *s, uint64_t max, bool null_ok, uint64_t *out, bool *null)
{
    scan_ws(s);
    *null = false;
    if (null_ok && s->end - s->p >= 4 && memcmp(s->p, "null", 4) == 0) {
        s->p += 4;
        *null = true;
        *out = 0;
    } else {
        const char *b = s->p;
        uint64_t v = 0;
        while (s->p < s->end && *s->p >= '0' && *s->p <= '9' && s->p - b < 19)
            v = v * 10 + (uint64_t)(*s->p++ - '0');
        if (s->p == b || (*b == '0' && s->p - b > 1) || v > max)
            return false;
        *out = v;
    }
    /* what follows a number or null: not more of a token (a fraction, exponent, 20th digit) */
    return s->p == s->end || (*s->p != '\0' && strchr(" \t\n\r,}]", *s->p) != NULL);
}

/* One user object into @p u (uuid allocated). @return 0, 1 (not for this scanner), -ENOMEM. */
static int scan_user(scan *s, pn_user *u)
{
    if (!scan_char(s, '{'))
        return 1;
    bool seen[UF_OTHER] = {false};
    if (!scan_char(s, '}')) {
        do {
            const char *key, *str = NULL;
            size_t klen, n = 0;
            if (!scan_plain_string(s, 16, &key, &klen) || !scan_char(s, ':'))
                return 1;
            enum user_field f = UF_OTHER;
            for (int k = UF_ID; k < UF_OTHER; k++)
                if (strlen(user_keys[k]) == klen && memcmp(user_keys[k], key, klen) == 0)
                    f = (enum user_field)k;
            if (f == UF_OTHER || seen[f])
                return 1; /* unknown keys (refused when strict) and duplicates: jansson's */
            seen[f] = true;
            uint64_t x;
            bool null;
            switch (f) {
            case UF_ID: /* 0 too goes to the reference parser, which names it */
                if (!scan_uint(s, INT64_MAX, false, &u->id, &null) || u->id == 0)
                    return 1;
                break;
            case UF_UUID:
                if (!scan_plain_string(s, PN_UUID_MAX, &str, &n))
                    return 1;
                if ((u->uuid = pn__dup_n(str, n)) == NULL)
                    return -ENOMEM;
                break;
            case UF_SPEED:
                if (!scan_uint(s, UINT64_MAX / 125000, true, &u->speed_limit, &null))
                    return 1;
                break;
            case UF_DEVICES:
                if (!scan_uint(s, UINT32_MAX, true, &x, &null))
                    return 1;
                u->device_limit = (uint32_t)x;
                break;
            case UF_OTHER:
                return 1;
            }
        } while (scan_char(s, ','));
        if (!scan_char(s, '}'))
            return 1;
    }
    return seen[UF_ID] && seen[UF_UUID] ? 0 : 1;
}

int pn_users_scan(const char *body, size_t len, pn_users *out)
{
    memset(out, 0, sizeof *out);
    scan s = {body, body + len};
    const char *key;
    size_t klen, cap = 0;
    if (!scan_char(&s, '{') || !scan_plain_string(&s, 8, &key, &klen) || klen != 5 ||
        memcmp(key, "users", 5) != 0 || !scan_char(&s, ':') || !scan_char(&s, '['))
        return 1;
    int rc = 1;
    if (scan_char(&s, ']'))
        goto close;
    do {
        if (out->n == cap) {
            /* a user is at least 18 bytes ({"id":1,"uuid":"x"}): no larger guess than that */
            size_t guess = cap == 0 ? len / 64 + 1 : 2 * cap;
            if (guess > PN_USERS_MAX)
                guess = PN_USERS_MAX;
            if (guess <= cap) {
                rc = 1; /* more than PN_USERS_MAX: pn_users_parse() says so */
                goto out;
            }
            pn_user *grown = realloc(out->users, guess * sizeof *grown);
            if (grown == NULL) {
                rc = -ENOMEM;
                goto out;
            }
            out->users = grown;
            cap = guess;
        }
        pn_user *u = &out->users[out->n];
        memset(u, 0, sizeof *u);
        out->n++;
        if ((rc = scan_user(&s, u)) != 0)
            goto out;
    } while (scan_char(&s, ','));
    rc = 1;
    if (!scan_char(&s, ']'))
        goto out;
close:
    if (scan_char(&s, '}')) {
        scan_ws(&s);
        if (s.p == s.end)
            rc = 0;
    }
out:
    if (rc != 0) {
        pn_users_free(out);
    } else if (out->n < cap) { /* give back the guess's slack (n > 0 here) */
        pn_user *fit = realloc(out->users, out->n * sizeof *fit);
        if (fit != NULL)
            out->users = fit;
    }
    return rc;
}

void pn_users_free(pn_users *users)
{
    if (users == NULL)
        return;
    for (size_t i = 0; users->users != NULL && i < users->n; i++)
        free(users->users[i].uuid);
    free(users->users);
    memset(users, 0, sizeof *users);
}

/* ------------------------------------------------------------------------------------------ */
/* clone / equal                                                                                */
/* ------------------------------------------------------------------------------------------ */

int pn_users_clone(pn_users *dst, const pn_users *src)
{
    memset(dst, 0, sizeof *dst);
    dst->shed = src->shed;
    memcpy(dst->digest, src->digest, sizeof dst->digest);
    if (src->users == NULL) { /* shed whole: the count and the digest are the list */
        dst->n = src->n;
        return 0;
    }
    if (src->n == 0)
        return 0;
    dst->users = calloc(src->n, sizeof *dst->users);
    if (dst->users == NULL)
        return -ENOMEM;
    dst->n = src->n;
    for (size_t i = 0; i < src->n; i++) {
        dst->users[i] = src->users[i];
        if (pn__dup_opt(&dst->users[i].uuid, src->users[i].uuid) != 0) {
            pn_users_free(dst);
            return -ENOMEM;
        }
    }
    return 0;
}

static bool str_eq(const char *a, const char *b)
{
    if (a == NULL || b == NULL)
        return a == b;
    return strcmp(a, b) == 0;
}

bool pn_users_equal(const pn_users *a, const pn_users *b)
{
    if (a->n != b->n)
        return false;
    if (a->shed || b->shed) {
        uint8_t da[PN_USERS_DIGEST], db[PN_USERS_DIGEST];
        if (a->shed)
            memcpy(da, a->digest, sizeof da);
        else if (pn_users_digest(a, da) != 0)
            return false;
        if (b->shed)
            memcpy(db, b->digest, sizeof db);
        else if (pn_users_digest(b, db) != 0)
            return false;
        return memcmp(da, db, sizeof da) == 0;
    }
    for (size_t i = 0; i < a->n; i++) {
        const pn_user *x = &a->users[i], *y = &b->users[i];
        if (x->id != y->id || x->speed_limit != y->speed_limit ||
            x->device_limit != y->device_limit || !str_eq(x->uuid, y->uuid))
            return false;
    }
    return true;
}

/* ------------------------------------------------------------------------------------------ */
/* digest, shed, refill                                                                         */
/* ------------------------------------------------------------------------------------------ */

static void put_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

int pn_users_digest(const pn_users *users, uint8_t out[PN_USERS_DIGEST])
{
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    unsigned len = 0;
    uint8_t rec[32];
    int ok = ctx != NULL && EVP_DigestInit_ex2(ctx, EVP_sha256(), NULL) == 1;
    put_le64(rec, users->n);
    ok = ok && EVP_DigestUpdate(ctx, rec, 8) == 1;
    for (size_t i = 0; ok && i < users->n; i++) {
        const pn_user *u = &users->users[i];
        size_t ulen = u->uuid != NULL ? strlen(u->uuid) : 0;
        put_le64(rec, u->id);
        put_le64(rec + 8, u->speed_limit);
        put_le64(rec + 16, u->device_limit);
        put_le64(rec + 24, ulen); /* the uuid's length frames it */
        ok = EVP_DigestUpdate(ctx, rec, sizeof rec) == 1 &&
             (ulen == 0 || EVP_DigestUpdate(ctx, u->uuid, ulen) == 1);
    }
    ok = ok && EVP_DigestFinal_ex(ctx, out, &len) == 1 && len == PN_USERS_DIGEST;
    int rc = ctx == NULL ? -ENOMEM : ok ? 0 : -EIO;
    EVP_MD_CTX_free(ctx);
    return rc;
}

int pn_users_shed(pn_users *users, bool keep_limits)
{
    if (users->shed)
        return 0;
    int rc = pn_users_digest(users, users->digest);
    if (rc != 0)
        return rc;
    for (size_t i = 0; i < users->n; i++) {
        free(users->users[i].uuid);
        users->users[i].uuid = NULL;
    }
    if (!keep_limits) {
        free(users->users);
        users->users = NULL;
    }
    users->shed = true;
    return 0;
}

int pn_users_restore(pn_users *shed, pn_users *candidate)
{
    uint8_t digest[PN_USERS_DIGEST];
    if (!shed->shed || candidate->shed)
        return -EINVAL;
    int rc = pn_users_digest(candidate, digest);
    if (rc != 0)
        return rc;
    if (candidate->n != shed->n || memcmp(digest, shed->digest, sizeof digest) != 0)
        return -ESTALE;
    pn_users_free(shed);
    *shed = *candidate;
    memset(candidate, 0, sizeof *candidate);
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* files                                                                                        */
/* ------------------------------------------------------------------------------------------ */

/* Read at most max bytes; one byte more means "too big" (st_size is not trusted: /proc). */
static int read_bounded(int fd, size_t max, char **out, size_t *len)
{
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    if (buf == NULL)
        return -ENOMEM;
    for (;;) {
        if (n == cap) {
            if (cap > max) {
                free(buf);
                return -EMSGSIZE;
            }
            size_t ncap = cap * 2 > max + 1 ? max + 1 : cap * 2;
            char *nb = realloc(buf, ncap);
            if (nb == NULL) {
                free(buf);
                return -ENOMEM;
            }
            buf = nb;
            cap = ncap;
        }
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int e = -errno;
            free(buf);
            return e;
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    if (n > max) {
        free(buf);
        return -EMSGSIZE;
    }
    *out = buf;
    *len = n;
    return 0;
}

/* What a non-regular file is, for the error text. */
static const char *file_kind(mode_t mode)
{
    if (S_ISFIFO(mode))
        return "a FIFO";
    if (S_ISDIR(mode))
        return "a directory";
    if (S_ISCHR(mode))
        return "a character device";
    if (S_ISBLK(mode))
        return "a block device";
    if (S_ISSOCK(mode))
        return "a socket";
    return "a special file";
}

int pn_read_file(const char *path, size_t max_bytes, char **buf, size_t *len, sv_error *err)
{
    *buf = NULL;
    *len = 0;
    /* O_NONBLOCK: opening a FIFO must not wait for a writer; no effect on a file */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return sv_error_set(err, -errno, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return sv_error_set(err, -e, "%s: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return sv_error_set(err, -EINVAL, "%s: %s, not a regular file", path,
                            file_kind(st.st_mode));
    }
    int rc = 0;
    if ((uint64_t)st.st_size > max_bytes)
        rc = -EMSGSIZE;
    else
        rc = read_bounded(fd, max_bytes, buf, len);
    close(fd);
    if (rc == -EMSGSIZE)
        return sv_error_set(err, rc, "%s: file is larger than %zu bytes", path, max_bytes);
    if (rc != 0)
        return sv_error_set(err, rc, "%s: %s", path, strerror(-rc));
    return 0;
}

int pn_json_parse_text(const char *path, const char *buf, size_t len, json_t **out,
                       sv_error *err)
{
    json_error_t jerr;
    *out = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
    char *near = *out == NULL ? strstr(jerr.text, " near '") : NULL;
    if (near != NULL)
        *near = '\0'; /* jansson quotes the token there, maybe a password: log no secrets (#5) */
    if (*out == NULL)
        return sv_error_set(err, -EINVAL, "%s: line %d, column %d: %s", path, jerr.line,
                            jerr.column, jerr.text);
    return 0;
}

int pn_json_load_file(const char *path, size_t max_bytes, json_t **out, sv_error *err)
{
    char *buf = NULL;
    size_t len = 0;
    *out = NULL;
    int rc = pn_read_file(path, max_bytes, &buf, &len, err);
    if (rc == 0)
        rc = pn_json_parse_text(path, buf, len, out, err);
    free(buf);
    return rc;
}

char *pn_users_body(const pn_users *u)
{
    json_t *list = json_array(), *body = json_object();
    int rc = list != NULL && body != NULL ? 0 : -1;
    for (size_t i = 0; rc == 0 && i < u->n; i++)
        rc = json_array_append_new(list, json_pack("{s:I, s:s, s:I, s:I}", "id",
                                                   (json_int_t)u->users[i].id, "uuid",
                                                   u->users[i].uuid, "speed_limit",
                                                   (json_int_t)u->users[i].speed_limit,
                                                   "device_limit",
                                                   (json_int_t)u->users[i].device_limit));
    char *text = NULL;
    if (rc == 0 && json_object_set(body, "users", list) == 0)
        text = json_dumps(body, JSON_COMPACT);
    json_decref(list);
    json_decref(body);
    return text;
}
