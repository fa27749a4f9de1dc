/*
 * Shadowsocks AEAD server core (SIP004/SIP007), sans-I/O. Wire format: PROTOCOLS.md §2.
 *
 * TCP feed, state by state (one chunk per call at most):
 *   AUTH    needs salt + 18 bytes. Each keyring key in turn: HKDF subkey, open the 2-byte length
 *           (a failed open restores the bytes, so no copy). The first key that opens it names the
 *           user; then the salt goes through the replay filter (-EEXIST); then the length is
 *           checked (1..0x3FFF, else -EPROTO).
 *   HEADER  payload chunks until the target address (§1.1 A) is complete. An address split over
 *           several chunks is collected in c->_addr (SV_DEST_WIRE_MAX bytes, allocated at the
 *           first incomplete part and freed once the address is complete).
 *   RELAY   each payload chunk is handed out as plaintext, in place.
 *
 * Consumption rule: a length chunk is consumed together with its payload when the whole chunk
 * is present. When only the 18 length bytes (plus the salt, first time) are present, they are
 * opened and consumed alone; c->pending_len remembers the length and the next call needs exactly
 * pending_len + 16 bytes. So every consumed byte has been processed, nothing is ever opened twice,
 * and the caller never holds more than salt + SV_SS_NEED_MAX bytes. A length of 0 is refused with
 * -EPROTO like one above 0x3FFF (§2.3: length is 1..0x3FFF).
 */
#include "config.h"

#include "supervisor/proto/shadowsocks.h"

#include <errno.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#define SS_LEN_CHUNK (2 + SV_SS_TAG)

size_t sv_ss_key_len(enum sv_ss_cipher cipher)
{
    switch (cipher) {
    case SV_SS_AES_128_GCM:
        return 16;
    case SV_SS_AES_256_GCM:
    case SV_SS_CHACHA20_POLY1305:
        return 32;
    case SV_SS_2022_AES_128_GCM: /* not AEAD methods: proto/ss2022.c serves them */
    case SV_SS_2022_AES_256_GCM:
    case SV_SS_2022_CHACHA20_POLY1305:
        break;
    }
    return 0;
}

/* EVP_BytesToKey(MD5) of @p password with the MD5 @p md5 and the digest context @p md
 * (a keyring of many users fetches MD5 and makes a context once, not once per key). */
static int password_to_key_md(const EVP_MD *md5, EVP_MD_CTX *md, enum sv_ss_cipher cipher,
                              const char *password, uint8_t *out)
{
    size_t klen = sv_ss_key_len(cipher), have = 0, pwlen = strlen(password);
    uint8_t d[EVP_MAX_MD_SIZE];
    unsigned dlen = 0;
    int rc = 0;
    if (md == NULL)
        return -ENOMEM;
    while (have < klen) {
        if (md5 == NULL || EVP_DigestInit_ex(md, md5, NULL) != 1 ||
            (have > 0 && EVP_DigestUpdate(md, d, dlen) != 1) ||
            EVP_DigestUpdate(md, password, pwlen) != 1 || EVP_DigestFinal_ex(md, d, &dlen) != 1) {
            rc = -EIO;
            break;
        }
        size_t take = klen - have < dlen ? klen - have : dlen;
        memcpy(out + have, d, take);
        have += take;
    }
    OPENSSL_cleanse(d, sizeof d);
    if (rc != 0)
        OPENSSL_cleanse(out, klen);
    return rc;
}

int sv_ss_password_to_key(enum sv_ss_cipher cipher, const char *password, uint8_t *out)
{
    EVP_MD *md5 = EVP_MD_fetch(NULL, "MD5", NULL);
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    int rc = password_to_key_md(md5, md, cipher, password, out);
    EVP_MD_CTX_free(md);
    EVP_MD_free(md5);
    return rc;
}

int sv_ss_keyring_init(sv_ss_keyring *ring, enum sv_ss_cipher cipher, const char *const *passwords,
                       size_t n)
{
    return sv_ss_keyring_init_from(ring, cipher, passwords, n, NULL, NULL);
}

int sv_ss_keyring_init_from(sv_ss_keyring *ring, enum sv_ss_cipher cipher,
                            const char *const *passwords, size_t n, const sv_ss_keyring *was,
                            const int *from)
{
    ring->cipher = cipher;
    ring->n = 0;
    ring->keys = NULL;
    if (sv_ss_key_len(cipher) == 0)
        return -EINVAL;
    if (n == 0)
        return 0;
    ring->keys = calloc(n, sizeof *ring->keys);
    if (ring->keys == NULL)
        return -ENOMEM;
    ring->n = n;
    EVP_MD *md5 = EVP_MD_fetch(NULL, "MD5", NULL);
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    int rc = 0;
    bool reuse = was != NULL && from != NULL && was->cipher == cipher;
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (reuse && from[i] >= 0 && (size_t)from[i] < was->n)
            memcpy(ring->keys[i], was->keys[from[i]], sizeof ring->keys[i]);
        else
            rc = password_to_key_md(md5, md, cipher, passwords[i], ring->keys[i]);
    }
    EVP_MD_CTX_free(md);
    EVP_MD_free(md5);
    if (rc != 0)
        sv_ss_keyring_deinit(ring);
    return rc;
}

void sv_ss_keyring_deinit(sv_ss_keyring *ring)
{
    if (ring->keys != NULL)
        OPENSSL_cleanse(ring->keys, ring->n * sizeof *ring->keys);
    free(ring->keys);
    ring->keys = NULL;
    ring->n = 0;
}

int sv_ss_tcp_init(sv_ss_tcp *c, enum sv_ss_cipher cipher)
{
    if (sv_ss_key_len(cipher) == 0)
        return -EINVAL;
    c->state = SV_SS_AUTH;
    c->cipher = cipher;
    c->user = -1;
    c->salt_sent = false;
    c->pending_len = 0;
    c->scanned = false;
    c->scan_user = -1;
    c->guide = sv_ss_guide_make(-1, NULL, 0);
    c->_addr_len = 0;
    c->_addr = NULL;
    return 0;
}

static int ss_trial(const sv_ss_keyring *ring, sv_ss_guide *g, const uint8_t *salt, sv_aead *a,
                    uint8_t *ct, size_t n);

void sv_ss_tcp_scan_result(sv_ss_tcp *c, int user)
{
    c->scanned = true;
    c->scan_user = user >= 0 ? user : -1;
}

int sv_ss_scan(const sv_ss_keyring *ring, const uint8_t *in, size_t n, unsigned *trials)
{
    size_t sl = sv_ss_key_len(ring->cipher);
    if (sl == 0 || in == NULL)
        return -EINVAL;
    if (n < sl + SV_SS_TAG)
        return -EPROTO;
    uint8_t *copy = malloc(n);
    if (copy == NULL)
        return -ENOMEM;
    memcpy(copy, in, n);
    sv_aead a = {0};
    sv_ss_guide g = {.hint = -1};
    int found = ss_trial(ring, &g, copy, &a, copy + sl, n - sl - SV_SS_TAG);
    sv_aead_deinit(&a);
    if (trials != NULL)
        *trials = g.trials;
    OPENSSL_cleanse(copy, n);
    free(copy);
    return found;
}

void sv_ss_tcp_deinit(sv_ss_tcp *c)
{
    sv_aead_deinit(&c->open);
    sv_aead_deinit(&c->seal);
    free(c->_addr);
    c->_addr = NULL;
    c->_addr_len = 0;
}

static ssize_t ss_fail(sv_ss_tcp *c, ssize_t err)
{
    c->state = SV_SS_FAILED;
    c->pending_len = 0;
    return err;
}

/* Open the 2-byte length chunk at @p p in place and remember the length. */
static int ss_open_length(sv_ss_tcp *c, uint8_t *p)
{
    if (sv_aead_open(&c->open, p, 2) != 0)
        return -EBADMSG;
    unsigned len = (unsigned)p[0] << 8 | p[1];
    if (len == 0 || len > SV_SS_CHUNK_MAX)
        return -EPROTO;
    c->pending_len = (uint16_t)len;
    return 0;
}

int sv_ss_order_init(sv_ss_order *o, size_t n)
{
    memset(o, 0, sizeof *o);
    if (n >= UINT32_MAX)
        return -EINVAL;
    if (n == 0)
        return 0;
    o->next = malloc(n * sizeof *o->next);
    o->prev = malloc(n * sizeof *o->prev);
    if (o->next == NULL || o->prev == NULL) {
        sv_ss_order_deinit(o);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        o->next[i] = (uint32_t)(i + 1);
        o->prev[i] = i == 0 ? (uint32_t)n : (uint32_t)(i - 1);
    }
    o->head = 0;
    o->n = n;
    return 0;
}

void sv_ss_order_deinit(sv_ss_order *o)
{
    free(o->next);
    free(o->prev);
    memset(o, 0, sizeof *o);
}

void sv_ss_order_touch(sv_ss_order *o, size_t i)
{
    uint32_t n = (uint32_t)o->n, u = (uint32_t)i;
    if (i >= o->n || o->head == u)
        return;
    /* unlink u (it is not the head, so it has a predecessor) */
    o->next[o->prev[u]] = o->next[u];
    if (o->next[u] != n)
        o->prev[o->next[u]] = o->prev[u];
    /* push it at the front */
    o->next[u] = o->head;
    o->prev[u] = n;
    o->prev[o->head] = u;
    o->head = u;
}

size_t sv_ss_order_first(const sv_ss_order *o) { return o->n > 0 ? o->head : 0; }

size_t sv_ss_order_next(const sv_ss_order *o, size_t i) { return o->next[i]; }

/* Trial opens of at most this many bytes go through a copy (a failure then costs no restore). */
#define SS_TRIAL_COPY 16

/*
 * Trial decryption (§2.3, §2.4): the first key, in @p g's order, whose subkey under @p salt opens
 * the @p n ciphertext bytes at @p ct (and their tag) in place with @p a. A failed open leaves
 * the bytes as they were. The salt's HKDF half is computed once, and the subkeys of up to
 * SV_SS_KDF_LANES keys together; each key's tag is checked alone (sv_aead_check_first) where the
 * CPU can, and only a match is opened with EVP; else the cipher is chosen once, then only
 * re-keyed. @return the keyring index, -EBADMSG when no key
 * opens them, -EAGAIN when @p g's limit stopped the walk first, or -ENOMEM/-EINVAL.
 */
/* The key after @p i in a trial's walk (ss_trial): the hint first, then @p order (or index
 * order) from its start, skipping the hint. Clears *@p hinted once past the hint. */
static size_t trial_next(size_t i, bool *hinted, int hint, const sv_ss_order *order)
{
    if (*hinted) { /* the hint missed: walk the rest from the start */
        *hinted = false;
        i = order != NULL ? sv_ss_order_first(order) : 0;
    } else {
        i = order != NULL ? sv_ss_order_next(order, i) : i + 1;
    }
    if (i == (size_t)hint)
        i = order != NULL ? sv_ss_order_next(order, i) : i + 1;
    return i;
}

static int ss_trial(const sv_ss_keyring *ring, sv_ss_guide *g, const uint8_t *salt, sv_aead *a,
                    uint8_t *ct, size_t n)
{
    size_t sl = sv_ss_key_len(ring->cipher);
    int hint = g != NULL && g->hint >= 0 && (size_t)g->hint < ring->n ? g->hint : -1;
    sv_ss_order *order = g != NULL && g->order != NULL && g->order->n == ring->n ? g->order : NULL;
    sv_ss_kdf kdf;
    uint8_t subs[SV_SS_KDF_LANES][SV_SS_KDF_MAX];
    const uint8_t *keys[SV_SS_KDF_LANES];
    size_t users[SV_SS_KDF_LANES];
    int found = -1, rc = 0;
    unsigned tried = 0;
    sv_ss_kdf_init(&kdf, salt, sl);
    size_t i = hint >= 0 ? (size_t)hint : order != NULL ? sv_ss_order_first(order) : 0;
    bool hinted = hint >= 0;
    uint8_t copy[SS_TRIAL_COPY];
    unsigned limit = g != NULL ? g->limit : 0;
    bool keyed = false, checks = true;
    while (i < ring->n && found < 0 && rc == 0 && (limit == 0 || tried < limit)) {
        /* the next keys of the walk, their subkeys derived together: the hint alone, then up
         * to SV_SS_KDF_LANES at a time (never past the limit) */
        size_t batch = 0, room = hinted ? 1 : SV_SS_KDF_LANES;
        if (limit != 0 && limit - tried < room)
            room = limit - tried;
        for (; batch < room && i < ring->n; i = trial_next(i, &hinted, hint, order)) {
            users[batch] = i;
            keys[batch++] = ring->keys[i];
        }
        sv_ss_kdf_derive_many(&kdf, keys, batch, subs);
        for (size_t b = 0; b < batch && found < 0 && rc == 0; b++) {
            const uint8_t *sub = subs[b];
            tried++;
            /* the tag alone first where the CPU computes it cheaply; a match is opened with EVP */
            int check = checks ? sv_aead_check_first(ring->cipher, sub, ct, n) : -ENOTSUP;
            checks = check != -ENOTSUP;
            if (check == 0)
                continue;
            rc = keyed ? sv_aead_rekey(a, sub) : sv_aead_init(a, ring->cipher, sub, false);
            keyed = rc == 0;
            bool opened = rc == 0 && (n <= sizeof copy ? sv_aead_open_to(a, ct, n, copy)
                                                       : sv_aead_open(a, ct, n)) == 0;
            if (opened) {
                if (n <= sizeof copy)
                    memcpy(ct, copy, n);
                found = (int)users[b];
            }
        }
    }
    OPENSSL_cleanse(subs, sizeof subs);
    OPENSSL_cleanse(&kdf, sizeof kdf);
    OPENSSL_cleanse(copy, sizeof copy);
    if (g != NULL)
        g->trials = tried;
    if (rc != 0)
        return rc;
    if (found < 0)
        return i < ring->n ? -EAGAIN : -EBADMSG;
    if (order != NULL)
        sv_ss_order_touch(order, (size_t)found);
    return found;
}

/* AUTH: find the user whose key opens the first length chunk. @return bytes consumed, 0, -err. */
static ssize_t ss_auth(sv_ss_tcp *c, const sv_ss_keyring *ring, sv_replay *replay, uint8_t *p,
                       size_t n)
{
    size_t sl = sv_ss_key_len(c->cipher);
    if (n < sl + SS_LEN_CHUNK)
        return 0;
    int user;
    if (c->scanned) { /* the scan's answer: that key alone (a wrong one fails, never misnames);
                         a match moves to the front of the order, as one found here does */
        sv_ss_guide once = {.hint = c->scan_user, .order = c->guide.order, .limit = 1};
        user = c->scan_user < 0 ? -EBADMSG : ss_trial(ring, &once, p, &c->open, p + sl, 2);
        c->guide.trials = 0; /* the scan's lookup was counted; its check is no new one */
        if (user == -EAGAIN)
            user = -EBADMSG;
    } else {
        user = ss_trial(ring, &c->guide, p, &c->open, p + sl, 2);
    }
    if (user < 0)
        return user;
    c->user = user;
    if (replay != NULL && !sv_replay_add(replay, p, sl))
        return -EEXIST;
    unsigned len = (unsigned)p[sl] << 8 | p[sl + 1];
    if (len == 0 || len > SV_SS_CHUNK_MAX)
        return -EPROTO;
    c->pending_len = (uint16_t)len;
    c->state = SV_SS_HEADER;
    return (ssize_t)(sl + SS_LEN_CHUNK);
}

/* HEADER: take the target address from the plaintext @p pl, possibly completing a split one. */
static int ss_header(sv_ss_tcp *c, uint8_t *pl, size_t plen, sv_ss_out *out)
{
    size_t have = c->_addr_len;
    const uint8_t *src = pl;
    size_t srcn = plen;
    if (have > 0) {
        size_t take = plen < SV_DEST_WIRE_MAX - have ? plen : SV_DEST_WIRE_MAX - have;
        memcpy(c->_addr + have, pl, take);
        c->_addr_len = (uint16_t)(have + take);
        src = c->_addr;
        srcn = c->_addr_len;
    }
    ssize_t r = sv_dest_parse(src, srcn, &out->dest);
    if (r < 0)
        return -EPROTO;
    if (r == 0) {
        /* Incomplete: srcn < the address length <= SV_DEST_WIRE_MAX, so it fits. */
        if (have == 0) {
            if (c->_addr == NULL && (c->_addr = malloc(SV_DEST_WIRE_MAX)) == NULL)
                return -ENOMEM;
            memcpy(c->_addr, pl, plen);
            c->_addr_len = (uint16_t)plen;
        }
        return 0;
    }
    size_t used = (size_t)r - have; /* the earlier part was incomplete, so r > have */
    free(c->_addr); /* out->dest holds its own copy of the address */
    c->_addr = NULL;
    c->_addr_len = 0;
    c->state = SV_SS_RELAY;
    out->dest.network = SV_NET_TCP;
    out->open = true;
    if (plen > used) {
        out->data = pl + used;
        out->len = plen - used;
    }
    return 0;
}

/* Open the pending payload at @p p in place and hand it out. */
static int ss_open_payload(sv_ss_tcp *c, uint8_t *p, sv_ss_out *out)
{
    size_t len = c->pending_len;
    if (sv_aead_open(&c->open, p, len) != 0)
        return -EBADMSG;
    c->pending_len = 0;
    if (c->state == SV_SS_HEADER)
        return ss_header(c, p, len, out);
    out->data = p;
    out->len = len;
    return 0;
}

ssize_t sv_ss_tcp_feed(sv_ss_tcp *c, const sv_ss_keyring *ring, sv_replay *replay, uint8_t *p,
                       size_t n, sv_ss_out *out)
{
    out->authenticated = false;
    out->open = false;
    out->data = NULL;
    out->len = 0;
    if (c->state == SV_SS_FAILED)
        return -EINVAL;
    if (ring == NULL || ring->cipher != c->cipher || (p == NULL && n > 0))
        return ss_fail(c, -EINVAL);
    size_t off = 0;
    if (c->state == SV_SS_AUTH) {
        ssize_t r = ss_auth(c, ring, replay, p, n);
        if (r == -EAGAIN)
            return r; /* a scan elsewhere, then the same bytes again */
        if (r <= 0)
            return r == 0 ? 0 : ss_fail(c, r);
        out->authenticated = true;
        off = (size_t)r;
    } else if (c->pending_len == 0) {
        if (n < SS_LEN_CHUNK)
            return 0;
        int rc = ss_open_length(c, p);
        if (rc != 0)
            return ss_fail(c, rc);
        off = SS_LEN_CHUNK;
    }
    size_t need = (size_t)c->pending_len + SV_SS_TAG;
    if (n - off < need)
        return (ssize_t)off; /* 0, or the length chunk consumed alone */
    int rc = ss_open_payload(c, p + off, out);
    if (rc != 0)
        return ss_fail(c, rc);
    return (ssize_t)(off + need);
}

static int ss_random(uint8_t *buf, size_t n, void (*rng)(uint8_t *buf, size_t n))
{
    if (rng != NULL) {
        rng(buf, n);
        return 0;
    }
    return RAND_bytes(buf, (int)n) == 1 ? 0 : -EIO;
}

/* First downstream chunk: pick the server salt into @p salt (where the wire carries it; issue
 * 13: no room for it in every connection) and key the seal direction. */
static int ss_seal_start(sv_ss_tcp *c, const uint8_t *master, uint8_t *salt)
{
    size_t sl = sv_ss_key_len(c->cipher);
    uint8_t sub[SV_SS_KEY_MAX];
    int rc = ss_random(salt, sl, c->rng);
    if (rc == 0)
        rc = sv_ss_subkey(master, sl, salt, sub);
    if (rc == 0)
        rc = sv_aead_init(&c->seal, c->cipher, sub, true);
    OPENSSL_cleanse(sub, sizeof sub);
    return rc;
}

ssize_t sv_ss_tcp_seal(sv_ss_tcp *c, const sv_ss_keyring *ring, uint8_t *buf, size_t len,
                       uint8_t **wire)
{
    if (ring == NULL || buf == NULL || ring->cipher != c->cipher || c->user < 0 ||
        (size_t)c->user >= ring->n || len == 0 || len > SV_SS_CHUNK_MAX)
        return -EINVAL;
    uint8_t *pl = buf + SV_SS_SEAL_HEAD;
    uint8_t *start = pl - SS_LEN_CHUNK;
    if (!c->salt_sent) {
        start -= sv_ss_key_len(c->cipher);
        if (ss_seal_start(c, ring->keys[c->user], start) != 0)
            return -EINVAL;
    }
    uint8_t *lp = pl - SS_LEN_CHUNK;
    lp[0] = (uint8_t)(len >> 8);
    lp[1] = (uint8_t)(len & 0xff);
    if (sv_aead_seal(&c->seal, lp, 2) != 0 || sv_aead_seal(&c->seal, pl, len) != 0)
        return -EINVAL;
    c->salt_sent = true;
    *wire = start;
    return (ssize_t)(pl + len + SV_SS_TAG - start);
}

ssize_t sv_ss_udp_open(const sv_ss_keyring *ring, uint8_t *pkt, size_t n, int *user,
                       sv_dest *dest, uint8_t **payload)
{
    sv_aead a = {0};
    ssize_t r = sv_ss_udp_open_ctx(ring, pkt, n, user, dest, payload, &a);
    sv_aead_deinit(&a);
    return r;
}

ssize_t sv_ss_udp_open_ctx(const sv_ss_keyring *ring, uint8_t *pkt, size_t n, int *user,
                           sv_dest *dest, uint8_t **payload, sv_aead *ctx)
{
    return sv_ss_udp_open_guided(ring, NULL, pkt, n, user, dest, payload, ctx);
}

ssize_t sv_ss_udp_open_guided(const sv_ss_keyring *ring, sv_ss_guide *guide, uint8_t *pkt,
                              size_t n, int *user, sv_dest *dest, uint8_t **payload, sv_aead *ctx)
{
    size_t sl = sv_ss_key_len(ring->cipher);
    if (sl == 0)
        return -EINVAL;
    if (n < sl + SV_SS_TAG)
        return -EPROTO;
    size_t clen = n - sl - SV_SS_TAG;
    uint8_t *ct = pkt + sl;
    int found = ss_trial(ring, guide, pkt, ctx, ct, clen);
    if (found < 0)
        return found;
    ssize_t r = sv_dest_parse(ct, clen, dest);
    if (r <= 0)
        return -EPROTO;
    dest->network = SV_NET_UDP;
    *user = found;
    *payload = ct + r;
    return (ssize_t)(clen - (size_t)r);
}

/* The payload may already sit inside @p out (sealing in place): it is moved first. */
ssize_t sv_ss_udp_seal(enum sv_ss_cipher cipher, const uint8_t *key, const sv_dest *from,
                       const uint8_t *payload, size_t n, uint8_t *out, size_t cap,
                       void (*rng)(uint8_t *buf, size_t n))
{
    sv_aead a = {0};
    ssize_t r = sv_ss_udp_seal_ctx(cipher, key, from, payload, n, out, cap, rng, &a);
    sv_aead_deinit(&a);
    return r;
}

ssize_t sv_ss_udp_seal_ctx(enum sv_ss_cipher cipher, const uint8_t *key, const sv_dest *from,
                           const uint8_t *payload, size_t n, uint8_t *out, size_t cap,
                           void (*rng)(uint8_t *buf, size_t n), sv_aead *ctx)
{
    size_t sl = sv_ss_key_len(cipher);
    if (sl == 0 || key == NULL || from == NULL || out == NULL || (payload == NULL && n > 0))
        return -EINVAL;
    uint8_t addr[SV_DEST_WIRE_MAX], sub[SV_SS_KEY_MAX];
    size_t al = sv_dest_encode(from, addr);
    if (cap < sl + al + SV_SS_TAG || n > cap - sl - al - SV_SS_TAG)
        return -EMSGSIZE;
    if (n > 0)
        memmove(out + sl + al, payload, n);
    memcpy(out + sl, addr, al);
    int rc = ss_random(out, sl, rng);
    if (rc == 0)
        rc = sv_ss_subkey(key, sl, out, sub);
    if (rc == 0)
        rc = sv_aead_init(ctx, cipher, sub, true);
    if (rc == 0)
        rc = sv_aead_seal(ctx, out + sl, al + n);
    OPENSSL_cleanse(sub, sizeof sub);
    return rc != 0 ? rc : (ssize_t)(sl + al + n + SV_SS_TAG);
}

ssize_t sv_ss_tcp_seal_to(sv_ss_tcp *c, const sv_ss_keyring *ring, const uint8_t *in, size_t len,
                          uint8_t *out, size_t cap)
{
    if (ring == NULL || in == NULL || out == NULL || ring->cipher != c->cipher || c->user < 0 ||
        (size_t)c->user >= ring->n || len == 0)
        return -EINVAL;
    size_t chunks = (len + SV_SS_CHUNK_MAX - 1) / SV_SS_CHUNK_MAX;
    size_t sl = c->salt_sent ? 0 : sv_ss_key_len(c->cipher);
    if (len > SIZE_MAX / 4 || cap < sl + chunks * (SS_LEN_CHUNK + SV_SS_TAG) + len)
        return -EMSGSIZE;
    uint8_t *w = out;
    if (!c->salt_sent) {
        if (ss_seal_start(c, ring->keys[c->user], w) != 0)
            return -EINVAL;
        w += sl;
        c->salt_sent = true;
    }
    for (size_t off = 0; off < len;) {
        size_t n = len - off < SV_SS_CHUNK_MAX ? len - off : SV_SS_CHUNK_MAX;
        w[0] = (uint8_t)(n >> 8);
        w[1] = (uint8_t)(n & 0xff);
        if (sv_aead_seal(&c->seal, w, 2) != 0 ||
            sv_aead_seal_to(&c->seal, in + off, n, w + SS_LEN_CHUNK) != 0)
            return -EINVAL;
        w += SS_LEN_CHUNK + n + SV_SS_TAG;
        off += n;
    }
    return (ssize_t)(w - out);
}
