/* The user name / password table of the SOCKS5 and HTTP proxy inbounds (userpass.h). */
#include "config.h"

#include "supervisor/proto/userpass.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

struct sv_userpass {
    size_t n;        /* users */
    size_t mask;     /* slots - 1 (a power of two, at least 2n) */
    uint32_t *slots; /* user index + 1; 0 = empty */
    char **secret;   /* each user's secret, by user index (copies) */
    size_t *len;     /* their lengths */
    bool no_auth;    /* a client without credentials is user 0 */
};

/* FNV-1a. The keys are the panel's secrets, not the client's choice: a probe costs at most the
 * longest cluster of the table's own keys whatever name a client sends. */
static uint64_t hash_bytes(const uint8_t *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3u;
    return h ^ (h >> 31);
}

void sv_userpass_free(sv_userpass *t)
{
    if (t == NULL)
        return;
    for (size_t i = 0; t->secret != NULL && i < t->n; i++) {
        if (t->secret[i] != NULL)
            OPENSSL_cleanse(t->secret[i], t->len[i]);
        free(t->secret[i]);
    }
    free(t->secret);
    free(t->len);
    free(t->slots);
    free(t);
}

/* Slot of the user named @p name, or of the empty slot where it would go. Names are compared in
 * constant time: a name is a secret too. */
static size_t find_slot(const sv_userpass *t, const uint8_t *name, size_t len)
{
    size_t i = (size_t)hash_bytes(name, len) & t->mask;
    for (;; i = (i + 1) & t->mask) {
        uint32_t u1 = t->slots[i];
        if (u1 == 0 || (t->len[u1 - 1] == len && CRYPTO_memcmp(t->secret[u1 - 1], name, len) == 0))
            return i;
    }
}

static int fill(sv_userpass *t, const sv_user_set *users, sv_error *err)
{
    const char *set = users->tag != NULL ? users->tag : "";
    for (size_t i = 0; i < users->n_users; i++) {
        const sv_user *u = &users->users[i];
        size_t len = u->secret != NULL ? strlen(u->secret) : 0;
        if (len == 0 || len > SV_USERPASS_FIELD_MAX)
            return sv_error_set(err, -EINVAL, "user set %s: user %" PRIu64 " needs a secret of "
                                "1 to %d bytes (its user name and password)", set, u->id,
                                SV_USERPASS_FIELD_MAX);
        if ((t->secret[i] = malloc(len)) == NULL)
            return sv_error_set(err, -ENOMEM, "user set %s: out of memory", set);
        memcpy(t->secret[i], u->secret, len);
        t->len[i] = len;
        size_t s = find_slot(t, (const uint8_t *)u->secret, len);
        if (t->slots[s] != 0)
            return sv_error_set(err, -EINVAL, "user set %s: users %" PRIu64 " and %" PRIu64
                                " have the same secret", set,
                                users->users[t->slots[s] - 1].id, u->id);
        t->slots[s] = (uint32_t)i + 1;
    }
    return 0;
}

int sv_userpass_new(const sv_user_set *users, bool no_auth, sv_userpass **out, sv_error *err)
{
    *out = NULL;
    size_t n = users->n_users;
    const char *set = users->tag != NULL ? users->tag : "";
    if (n > SV_USERS_MAX)
        return sv_error_set(err, -EINVAL, "user set %s: more than %d users", set, SV_USERS_MAX);
    if (no_auth && n != 1)
        return sv_error_set(err, -EINVAL, "user set %s: no_auth needs exactly one user (the one "
                            "clients without credentials are counted as), not %zu", set, n);
    size_t cap = 16;
    while (cap < 2 * n)
        cap <<= 1;
    sv_userpass *t = calloc(1, sizeof *t);
    if (t != NULL) {
        t->n = n;
        t->no_auth = no_auth;
        t->mask = cap - 1;
        t->slots = calloc(cap, sizeof *t->slots);
        t->secret = calloc(n > 0 ? n : 1, sizeof *t->secret);
        t->len = calloc(n > 0 ? n : 1, sizeof *t->len);
    }
    if (t == NULL || t->slots == NULL || t->secret == NULL || t->len == NULL) {
        sv_userpass_free(t);
        return sv_error_set(err, -ENOMEM, "user set %s: out of memory", set);
    }
    int rc = fill(t, users, err);
    if (rc < 0) {
        sv_userpass_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

int sv_userpass_lookup(const sv_userpass *t, const uint8_t *user, size_t ulen,
                       const uint8_t *pass, size_t plen)
{
    if (t == NULL || ulen == 0 || ulen > SV_USERPASS_FIELD_MAX)
        return -1;
    uint32_t u1 = t->slots[find_slot(t, user, ulen)];
    if (u1 == 0 || plen != t->len[u1 - 1] ||
        CRYPTO_memcmp(t->secret[u1 - 1], pass, plen) != 0)
        return -1;
    return (int)(u1 - 1);
}

size_t sv_userpass_count(const sv_userpass *t)
{
    return t != NULL ? t->n : 0;
}

int sv_userpass_anonymous(const sv_userpass *t)
{
    return t != NULL && t->no_auth ? 0 : -1;
}
