/* Trojan server core (PROTOCOLS.md §4): credential table, request and UDP packet parsing. */
#include "config.h"

#include "supervisor/proto/trojan.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

/* ---------------------------------------------------------------------------------------- */
/* Credential table: hex SHA-224 → user index                                                */
/* ---------------------------------------------------------------------------------------- */

/* One slot of the open-addressing table: user index + 1 (0 = empty) and 32 bits of the hash. */
typedef struct trojan_slot {
    uint32_t tag;
    uint32_t user1;
} trojan_slot;

typedef struct trojan_creds {
    size_t n;                             /* users */
    size_t mask;                          /* slots - 1 (a power of two, at least 2n) */
    trojan_slot *slots;
    uint8_t (*hex)[SV_TROJAN_HASH_HEX];   /* each user's password field, by user index */
} trojan_creds;

/*
 * Hash of the whole 56-byte field. The table's keys are digests of secrets the client does not
 * choose, so a probe's cost is bounded by the table's own clusters whatever the query is.
 */
static uint64_t hash_field(const uint8_t *hex)
{
    uint64_t x = 0x243f6a8885a308d3u;
    for (size_t i = 0; i < SV_TROJAN_HASH_HEX; i += 8) {
        uint64_t w;
        memcpy(&w, hex + i, sizeof w);
        x = (x ^ w) * 0x9e3779b97f4a7c15u;
        x ^= x >> 29;
    }
    return x;
}

static void to_hex(const uint8_t *md, size_t len, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < len; i++) {
        out[2 * i] = digits[md[i] >> 4];
        out[2 * i + 1] = digits[md[i] & 15];
    }
}

/* SHA-224 of @p len bytes as 56 hex characters (not NUL-terminated). @return 0 or -EIO. */
static int digest_field(EVP_MD_CTX *ctx, const EVP_MD *md, const void *pw, size_t len, char *out)
{
    uint8_t d[EVP_MAX_MD_SIZE];
    unsigned dl = 0;
    if (EVP_DigestInit_ex2(ctx, md, NULL) != 1 || EVP_DigestUpdate(ctx, pw, len) != 1 ||
        EVP_DigestFinal_ex(ctx, d, &dl) != 1 || dl * 2 != SV_TROJAN_HASH_HEX)
        return -EIO;
    to_hex(d, dl, out);
    return 0;
}

int sv_trojan_password_hex(const void *password, size_t len, char *out)
{
    out[0] = '\0';
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (ctx == NULL)
        return -EIO;
    int rc = digest_field(ctx, EVP_sha224(), password, len, out);
    EVP_MD_CTX_free(ctx);
    if (rc == 0)
        out[SV_TROJAN_HASH_HEX] = '\0';
    else
        out[0] = '\0';
    return rc;
}

int sv_trojan_creds_lookup(const void *creds, const uint8_t *hex)
{
    const trojan_creds *t = creds;
    if (t == NULL)
        return -1;
    uint64_t h = hash_field(hex);
    uint32_t tag = (uint32_t)(h >> 32);
    for (size_t i = (size_t)h & t->mask;; i = (i + 1) & t->mask) {
        const trojan_slot *s = &t->slots[i];
        if (s->user1 == 0)
            return -1;
        if (s->tag == tag && CRYPTO_memcmp(t->hex[s->user1 - 1], hex, SV_TROJAN_HASH_HEX) == 0)
            return (int)(s->user1 - 1);
    }
}

static void creds_free(void *creds)
{
    trojan_creds *t = creds;
    if (t == NULL)
        return;
    if (t->hex != NULL)
        OPENSSL_cleanse(t->hex, t->n * SV_TROJAN_HASH_HEX);
    free(t->hex);
    free(t->slots);
    free(t);
}

/* Insert user @p u. @return 0, or the index + 1 of a user with the same field. */
static uint32_t creds_insert(trojan_creds *t, uint32_t u)
{
    uint64_t h = hash_field(t->hex[u]);
    uint32_t tag = (uint32_t)(h >> 32);
    size_t i = (size_t)h & t->mask;
    for (; t->slots[i].user1 != 0; i = (i + 1) & t->mask) {
        const trojan_slot *s = &t->slots[i];
        if (s->tag == tag && memcmp(t->hex[s->user1 - 1], t->hex[u], SV_TROJAN_HASH_HEX) == 0)
            return s->user1;
    }
    t->slots[i].tag = tag;
    t->slots[i].user1 = u + 1;
    return 0;
}

static int creds_fill(trojan_creds *t, const sv_user_set *users, sv_error *err)
{
    const char *set = users->tag != NULL ? users->tag : "";
    EVP_MD *md = EVP_MD_fetch(NULL, "SHA2-224", NULL);
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    int rc = 0;
    if (md == NULL || ctx == NULL)
        rc = sv_error_set(err, -EIO, "user set %s: SHA-224 is not available", set);
    for (size_t i = 0; i < users->n_users && rc == 0; i++) {
        const sv_user *u = &users->users[i];
        if (u->secret == NULL || u->secret[0] == '\0') {
            rc = sv_error_set(err, -EINVAL, "user set %s: user %" PRIu64 " has an empty secret",
                              set, u->id);
        } else if (digest_field(ctx, md, u->secret, strlen(u->secret), (char *)t->hex[i]) < 0) {
            rc = sv_error_set(err, -EIO, "user set %s: SHA-224 failed", set);
        } else {
            uint32_t dup = creds_insert(t, (uint32_t)i);
            if (dup != 0)
                rc = sv_error_set(err, -EINVAL,
                                  "user set %s: users %" PRIu64 " and %" PRIu64
                                  " have the same password",
                                  set, users->users[dup - 1].id, u->id);
        }
    }
    EVP_MD_CTX_free(ctx);
    EVP_MD_free(md);
    return rc;
}

static int creds_new(const sv_inbound_spec *in, const sv_user_set *users, void **out,
                     sv_error *err)
{
    (void)in;
    *out = NULL;
    size_t n = users->n_users;
    if (n > SV_USERS_MAX)
        return sv_error_set(err, -EINVAL, "user set %s: more than %d users",
                            users->tag != NULL ? users->tag : "", SV_USERS_MAX);
    size_t cap = 16;
    while (cap < 2 * n)
        cap <<= 1;
    trojan_creds *t = calloc(1, sizeof *t);
    if (t != NULL) {
        t->n = n;
        t->mask = cap - 1;
        t->slots = calloc(cap, sizeof *t->slots);
        t->hex = calloc(n > 0 ? n : 1, sizeof *t->hex);
    }
    if (t == NULL || t->slots == NULL || t->hex == NULL) {
        creds_free(t);
        return sv_error_set(err, -ENOMEM, "user set %s: out of memory",
                            users->tag != NULL ? users->tag : "");
    }
    int rc = creds_fill(t, users, err);
    if (rc < 0) {
        creds_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Per-connection state and feed                                                             */
/* ---------------------------------------------------------------------------------------- */

enum trojan_phase { PH_REQUEST = 0, PH_CONNECT, PH_UDP, PH_FAILED };

typedef struct trojan_conn {
    enum trojan_phase phase;
    int error; /* PH_FAILED: the error that ended the connection */
} trojan_conn;

static int conn_init(void *state, const sv_inbound_spec *in)
{
    (void)in;
    trojan_conn *c = state;
    c->phase = PH_REQUEST;
    c->error = 0;
    return 0;
}

static void conn_deinit(void *state)
{
    (void)state;
}

static bool is_lower_hex(uint8_t b)
{
    return (b >= '0' && b <= '9') || (b >= 'a' && b <= 'f');
}

/*
 * Check "CR LF" at @p p[0..1] as far as @p n bytes go.
 * @return 2 when both are there and right, 0 when short, -EPROTO when a byte is wrong.
 */
static int check_crlf(const uint8_t *p, size_t n)
{
    if ((n > 0 && p[0] != '\r') || (n > 1 && p[1] != '\n'))
        return -EPROTO;
    return n >= 2 ? 2 : 0;
}

/*
 * Parse the request header (§4.2), checking each field as soon as its bytes are there, in wire
 * order, so that whole and piecewise input fail with the same error.
 * @return header length; 0 when more bytes are needed; -EPROTO, -EACCES or -EPROTONOSUPPORT.
 */
static ssize_t parse_request(const void *creds, const uint8_t *p, size_t n, int *user,
                             uint8_t *cmd, sv_dest *d)
{
    size_t k = n < SV_TROJAN_HASH_HEX ? n : SV_TROJAN_HASH_HEX;
    for (size_t i = 0; i < k; i++)
        if (!is_lower_hex(p[i]))
            return -EPROTO;
    if (n < SV_TROJAN_HASH_HEX)
        return 0;
    *user = sv_trojan_creds_lookup(creds, p);
    if (*user < 0)
        return -EACCES;
    size_t at = SV_TROJAN_HASH_HEX;
    int r = check_crlf(p + at, n - at);
    if (r <= 0)
        return r;
    at += 2;
    if (n == at)
        return 0;
    *cmd = p[at++];
    if (*cmd != SV_TROJAN_CONNECT && *cmd != SV_TROJAN_UDP_ASSOCIATE)
        return -EPROTONOSUPPORT;
    ssize_t a = sv_dest_parse(p + at, n - at, d);
    if (a <= 0)
        return a;
    at += (size_t)a;
    r = check_crlf(p + at, n - at);
    if (r <= 0)
        return r;
    return (ssize_t)(at + 2);
}

/*
 * Parse one UDP packet (§4.3) at the start of @p p.
 * @return its wire length with @p d, @p off and @p len (payload) set; 0 when incomplete;
 *         -EPROTO (address, CRLF) or -EMSGSIZE (length above SV_TROJAN_UDP_PAYLOAD_MAX).
 */
static ssize_t parse_packet(const uint8_t *p, size_t n, sv_dest *d, size_t *off, size_t *len)
{
    ssize_t a = sv_dest_parse(p, n, d);
    if (a <= 0)
        return a;
    size_t at = (size_t)a;
    if (n < at + 2)
        return 0;
    size_t l = (size_t)p[at] << 8 | p[at + 1];
    if (l > SV_TROJAN_UDP_PAYLOAD_MAX)
        return -EMSGSIZE;
    at += 2;
    int r = check_crlf(p + at, n - at);
    if (r <= 0)
        return r;
    at += 2;
    if (n - at < l)
        return 0;
    *off = at;
    *len = l;
    return (ssize_t)(at + l);
}

static ssize_t fail(trojan_conn *c, sv_effects *fx, int error, enum sv_probe_policy policy,
                    uint8_t *data, size_t len)
{
    c->phase = PH_FAILED;
    c->error = error;
    sv_effect *e = sv_effects_push(fx, SV_FX_ERROR);
    if (e != NULL) {
        e->error = error;
        e->policy = policy;
        e->data = data;
        e->len = len;
    }
    return error;
}

/* Emit whole UDP packets from @p p + @p at while @p fx has room. @return bytes consumed. */
static ssize_t feed_packets(trojan_conn *c, uint8_t *p, size_t n, size_t at, sv_effects *fx)
{
    while (fx->n < SV_EFFECTS_MAX) {
        sv_dest d;
        size_t off = 0, len = 0;
        ssize_t r = parse_packet(p + at, n - at, &d, &off, &len);
        if (r < 0)
            return fail(c, fx, (int)r, SV_PROBE_CLOSE, NULL, 0);
        if (r == 0)
            break;
        sv_effect *e = sv_effects_push(fx, SV_FX_DATAGRAM);
        e->dest = d;
        e->dest.network = SV_NET_UDP;
        e->data = p + at + off;
        e->len = len;
        at += (size_t)r;
    }
    return (ssize_t)at;
}

static void push_data(sv_effects *fx, uint8_t *p, size_t n)
{
    if (n > 0) {
        sv_effect *e = sv_effects_push(fx, SV_FX_TO_OUTBOUND);
        e->data = p;
        e->len = n;
    }
}

static ssize_t conn_feed(void *state, const void *creds, uint8_t *p, size_t n, sv_effects *fx)
{
    trojan_conn *c = state;
    fx->n = 0;
    switch (c->phase) {
    case PH_FAILED:
        return fail(c, fx, c->error, SV_PROBE_CLOSE, NULL, 0);
    case PH_CONNECT:
        push_data(fx, p, n);
        return (ssize_t)n;
    case PH_UDP:
        return feed_packets(c, p, n, 0, fx);
    case PH_REQUEST:
        break;
    }

    int user = -1;
    uint8_t cmd = 0;
    sv_dest d;
    ssize_t h = parse_request(creds, p, n, &user, &cmd, &d);
    if (h < 0)
        return fail(c, fx, (int)h, SV_PROBE_FALLBACK, p, n);
    if (h == 0)
        return 0;
    sv_effect *e = sv_effects_push(fx, SV_FX_AUTHENTICATED);
    e->principal = user;
    e = sv_effects_push(fx, SV_FX_OPEN);
    e->dest = d;
    e->dest.network = cmd == SV_TROJAN_CONNECT ? SV_NET_TCP : SV_NET_UDP;
    if (cmd == SV_TROJAN_CONNECT) {
        c->phase = PH_CONNECT;
        push_data(fx, p + h, n - (size_t)h);
        return (ssize_t)n;
    }
    c->phase = PH_UDP;
    return feed_packets(c, p, n, (size_t)h, fx);
}

/* ---------------------------------------------------------------------------------------- */
/* Downstream                                                                                */
/* ---------------------------------------------------------------------------------------- */

/* Wire length of @p d in address style A, or 0 when it cannot be encoded. */
static size_t dest_wire_len(const sv_dest *d)
{
    switch (d->atyp) {
    case SV_ATYP_IPV4:
        return 1 + 4 + 2;
    case SV_ATYP_IPV6:
        return 1 + 16 + 2;
    case SV_ATYP_DOMAIN: {
        size_t hl = strnlen(d->host, sizeof d->host);
        return hl >= 1 && hl <= 255 ? 1 + 1 + hl + 2 : 0;
    }
    default:
        return 0;
    }
}

static ssize_t frame_datagram(void *state, const void *creds, uint32_t stream,
                              const sv_dest *from, const uint8_t *payload, size_t len,
                              uint8_t *out, size_t cap)
{
    (void)state, (void)creds, (void)stream;
    size_t alen = dest_wire_len(from);
    if (alen == 0 || len > SV_TROJAN_UDP_PAYLOAD_MAX)
        return -EINVAL;
    size_t total = alen + 2 + 2 + len;
    if (cap < total)
        return -EMSGSIZE;
    uint8_t addr[SV_DEST_WIRE_MAX];
    sv_dest_encode(from, addr);
    memcpy(out, addr, alen);
    out[alen] = (uint8_t)(len >> 8);
    out[alen + 1] = (uint8_t)(len & 0xff);
    out[alen + 2] = '\r';
    out[alen + 3] = '\n';
    memmove(out + alen + 4, payload, len);
    return (ssize_t)total;
}

static const sv_proto_ext_datagram trojan_datagram = {.frame_datagram = frame_datagram};

const sv_proto_ops sv_trojan_ops = {
    .name = "trojan",
    .creds_new = creds_new,
    .creds_free = creds_free,
    .state_size = sizeof(trojan_conn),
    .init = conn_init,
    .deinit = conn_deinit,
    .feed = conn_feed,
    .carry_max = SV_TROJAN_CARRY_MAX,
    .frame = sv_frame_copy,
    .frame_max = sv_frame_copy_max,
    .ext =
        {
            [SV_PROTO_CAP_DATAGRAM] = &trojan_datagram,
        },
};
