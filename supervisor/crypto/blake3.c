/*
 * BLAKE3, written from the specification (https://github.com/BLAKE3-team/BLAKE3-specs, "The
 * BLAKE3 hashing framework", §2): the compression function over 64-byte blocks, 1024-byte
 * chunks chained into a binary tree whose chaining values are merged on a stack as chunks
 * complete, and a root node whose output is extended by its block counter. Portable C, no SIMD.
 */
#include "config.h"

#include <string.h>

#include "supervisor/crypto/blake3.h"

enum {
    CHUNK_START = 1u << 0,
    CHUNK_END = 1u << 1,
    PARENT = 1u << 2,
    ROOT = 1u << 3,
    KEYED_HASH = 1u << 4,
    DERIVE_KEY_CONTEXT = 1u << 5,
    DERIVE_KEY_MATERIAL = 1u << 6,
};

/* The IV is SHA-256's (spec §2.1). */
static const uint32_t IV[8] = {0x6A09E667u, 0xBB67AE85u, 0x3C6EF372u, 0xA54FF53Au,
                               0x510E527Fu, 0x9B05688Cu, 0x1F83D9ABu, 0x5BE0CD19u};

/* Message word permutation applied between rounds (spec §2.2, Table 2). */
static const uint8_t PERM[16] = {2, 6, 3, 10, 7, 0, 4, 13, 1, 11, 12, 5, 9, 14, 15, 8};

static uint32_t rotr(uint32_t x, unsigned n) { return (x >> n) | (x << (32 - n)); }

static uint32_t load32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void store32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static void g(uint32_t *s, int a, int b, int c, int d, uint32_t mx, uint32_t my)
{
    s[a] = s[a] + s[b] + mx;
    s[d] = rotr(s[d] ^ s[a], 16);
    s[c] = s[c] + s[d];
    s[b] = rotr(s[b] ^ s[c], 12);
    s[a] = s[a] + s[b] + my;
    s[d] = rotr(s[d] ^ s[a], 8);
    s[c] = s[c] + s[d];
    s[b] = rotr(s[b] ^ s[c], 7);
}

/* The compression function (spec §2.2): 16 output words; words 0..7 are the chaining value. */
static void compress(const uint32_t cv[8], const uint8_t block[64], uint64_t counter,
                     uint32_t block_len, uint32_t flags, uint32_t out[16])
{
    uint32_t m[16], t[16], s[16];
    for (int i = 0; i < 16; i++)
        m[i] = load32(block + 4 * i);
    for (int i = 0; i < 8; i++)
        s[i] = cv[i];
    s[8] = IV[0];
    s[9] = IV[1];
    s[10] = IV[2];
    s[11] = IV[3];
    s[12] = (uint32_t)counter;
    s[13] = (uint32_t)(counter >> 32);
    s[14] = block_len;
    s[15] = flags;
    for (int r = 0; r < 7; r++) {
        g(s, 0, 4, 8, 12, m[0], m[1]);
        g(s, 1, 5, 9, 13, m[2], m[3]);
        g(s, 2, 6, 10, 14, m[4], m[5]);
        g(s, 3, 7, 11, 15, m[6], m[7]);
        g(s, 0, 5, 10, 15, m[8], m[9]);
        g(s, 1, 6, 11, 12, m[10], m[11]);
        g(s, 2, 7, 8, 13, m[12], m[13]);
        g(s, 3, 4, 9, 14, m[14], m[15]);
        if (r < 6) {
            for (int i = 0; i < 16; i++)
                t[i] = m[PERM[i]];
            memcpy(m, t, sizeof m);
        }
    }
    for (int i = 0; i < 8; i++) {
        out[i] = s[i] ^ s[i + 8];
        out[i + 8] = s[i + 8] ^ cv[i];
    }
}

/* A node not yet compressed: the inputs of its last compression, so the root can be extended. */
typedef struct node {
    uint32_t cv[8];
    uint8_t block[64];
    uint64_t counter;
    uint32_t block_len, flags;
} node;

static void node_cv(const node *n, uint32_t cv[8])
{
    uint32_t out[16];
    compress(n->cv, n->block, n->counter, n->block_len, n->flags, out);
    memcpy(cv, out, 8 * sizeof *cv);
}

static void parent_node(const sv_blake3 *h, const uint32_t left[8], const uint32_t right[8],
                        node *n)
{
    memcpy(n->cv, h->key, sizeof n->cv);
    for (int i = 0; i < 8; i++) {
        store32(n->block + 4 * i, left[i]);
        store32(n->block + 32 + 4 * i, right[i]);
    }
    n->counter = 0;
    n->block_len = 64;
    n->flags = h->flags | PARENT;
}

/* The last block of the current chunk as a node (zero-padded; CHUNK_END set). */
static void chunk_node(const sv_blake3 *h, node *n)
{
    memcpy(n->cv, h->cv, sizeof n->cv);
    memset(n->block, 0, sizeof n->block);
    memcpy(n->block, h->block, h->block_len);
    n->counter = h->chunk_counter;
    n->block_len = h->block_len;
    n->flags = h->flags | CHUNK_END | (h->blocks_done == 0 ? CHUNK_START : 0);
}

static void init_with(sv_blake3 *h, const uint32_t key[8], uint32_t flags)
{
    memset(h, 0, sizeof *h);
    memcpy(h->key, key, sizeof h->key);
    memcpy(h->cv, key, sizeof h->cv);
    h->flags = flags;
}

void sv_blake3_init(sv_blake3 *h) { init_with(h, IV, 0); }

void sv_blake3_init_keyed(sv_blake3 *h, const uint8_t key[SV_BLAKE3_KEY_LEN])
{
    uint32_t k[8];
    for (int i = 0; i < 8; i++)
        k[i] = load32(key + 4 * i);
    init_with(h, k, KEYED_HASH);
}

void sv_blake3_init_derive_key(sv_blake3 *h, const char *context)
{
    sv_blake3 ctx;
    uint8_t ck[32];
    uint32_t k[8];
    init_with(&ctx, IV, DERIVE_KEY_CONTEXT);
    sv_blake3_update(&ctx, context, strlen(context));
    sv_blake3_final(&ctx, ck, sizeof ck);
    for (int i = 0; i < 8; i++)
        k[i] = load32(ck + 4 * i);
    init_with(h, k, DERIVE_KEY_MATERIAL);
}

/* A chunk is complete and more input follows: push its chaining value, merging every pair of
 * equal-sized subtrees (as many merges as trailing zero bits of the new chunk count). */
static void finish_chunk(sv_blake3 *h)
{
    node n;
    uint32_t cv[8];
    chunk_node(h, &n);
    node_cv(&n, cv);
    uint64_t total = ++h->chunk_counter;
    while ((total & 1) == 0) {
        node p;
        parent_node(h, h->stack[--h->stack_len], cv, &p);
        node_cv(&p, cv);
        total >>= 1;
    }
    memcpy(h->stack[h->stack_len++], cv, sizeof cv);
    memcpy(h->cv, h->key, sizeof h->cv);
    h->block_len = 0;
    h->blocks_done = 0;
}

void sv_blake3_update(sv_blake3 *h, const void *in, size_t n)
{
    const uint8_t *p = in;
    while (n > 0) {
        if (h->block_len == SV_BLAKE3_BLOCK_LEN) {
            /* A full block is compressed only once more input shows it is not the last one. */
            if (h->blocks_done == SV_BLAKE3_CHUNK_LEN / SV_BLAKE3_BLOCK_LEN - 1) {
                finish_chunk(h);
            } else {
                uint32_t out[16];
                compress(h->cv, h->block, h->chunk_counter, SV_BLAKE3_BLOCK_LEN,
                         h->flags | (h->blocks_done == 0 ? CHUNK_START : 0), out);
                memcpy(h->cv, out, sizeof h->cv);
                h->blocks_done++;
                h->block_len = 0;
            }
        }
        size_t take = SV_BLAKE3_BLOCK_LEN - h->block_len;
        if (take > n)
            take = n;
        memcpy(h->block + h->block_len, p, take);
        h->block_len = (uint8_t)(h->block_len + take);
        p += take;
        n -= take;
    }
}

void sv_blake3_final(const sv_blake3 *h, uint8_t *out, size_t n)
{
    node root;
    chunk_node(h, &root);
    for (int i = h->stack_len - 1; i >= 0; i--) {
        uint32_t cv[8];
        node_cv(&root, cv);
        parent_node(h, h->stack[i], cv, &root);
    }
    for (uint64_t counter = 0; n > 0; counter++) {
        uint32_t words[16];
        uint8_t block[64];
        compress(root.cv, root.block, counter, root.block_len, root.flags | ROOT, words);
        for (int i = 0; i < 16; i++)
            store32(block + 4 * i, words[i]);
        size_t take = n < sizeof block ? n : sizeof block;
        memcpy(out, block, take);
        out += take;
        n -= take;
    }
}

void sv_blake3_derive_key(const char *context, const void *material, size_t n, uint8_t *out,
                          size_t n_out)
{
    sv_blake3 h;
    sv_blake3_init_derive_key(&h, context);
    sv_blake3_update(&h, material, n);
    sv_blake3_final(&h, out, n_out);
}

void sv_blake3_hash(const void *in, size_t n, uint8_t *out, size_t n_out)
{
    sv_blake3 h;
    sv_blake3_init(&h);
    sv_blake3_update(&h, in, n);
    sv_blake3_final(&h, out, n_out);
}
