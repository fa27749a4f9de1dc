/*
 * Shadowsocks AEAD (SIP004/SIP007) server core, sans-I/O. Wire format: PROTOCOLS.md §2.
 * TCP: the runtime feeds client bytes; the core authenticates the first length chunk by trial
 * decryption over the keyring, parses the target address from the reassembled plaintext stream,
 * and decrypts each chunk IN PLACE in the caller's buffer. Downstream data is sealed in place.
 */
#ifndef SV_PROTO_SHADOWSOCKS_H
#define SV_PROTO_SHADOWSOCKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <openssl/evp.h>

#include "supervisor/crypto/aead.h"
#include "supervisor/crypto/replay.h"
#include "supervisor/proto/core.h"

#define SV_SS_KEY_MAX 32
#define SV_SS_SALT_MAX 32
#define SV_SS_TAG 16
#define SV_SS_CHUNK_MAX 0x3FFF /**< largest payload of one chunk (§2.3) */
/** Bytes to reserve before a payload for sv_ss_tcp_seal(): salt + sealed length. */
#define SV_SS_SEAL_HEAD (SV_SS_SALT_MAX + 2 + SV_SS_TAG)
/** Bytes to reserve after a payload for its tag. */
#define SV_SS_SEAL_TAIL SV_SS_TAG
/** Most bytes the core ever needs buffered to make progress: a full chunk. */
#define SV_SS_NEED_MAX (2 + SV_SS_TAG + SV_SS_CHUNK_MAX + SV_SS_TAG)

/** Master keys of one inbound's users, indexed like the user table. Immutable once built. */
typedef struct sv_ss_keyring {
    enum sv_ss_cipher cipher;
    size_t n;
    uint8_t (*keys)[SV_SS_KEY_MAX]; /**< n master keys (only key_len bytes of each are used) */
} sv_ss_keyring;

/** Key (= salt) length of a method: 16 or 32. */
size_t sv_ss_key_len(enum sv_ss_cipher cipher);

/**
 * Derive a master key from a password: EVP_BytesToKey(MD5, no salt, 1 round) (§2.2).
 * @param out  key_len bytes; zeroed on failure, never a usable key then
 * @return 0, -ENOMEM, or -EIO when OpenSSL cannot compute MD5 (e.g. a FIPS-only provider
 *         configuration): the caller must refuse the user, not serve it with a zero key.
 */
int sv_ss_password_to_key(enum sv_ss_cipher cipher, const char *password, uint8_t *out);

/**
 * Build a keyring from @p n passwords. Free with sv_ss_keyring_deinit().
 * @return 0, -EINVAL (unknown cipher), or sv_ss_password_to_key()'s -ENOMEM/-EIO; on failure the
 *         ring holds no keys.
 */
int sv_ss_keyring_init(sv_ss_keyring *ring, enum sv_ss_cipher cipher, const char *const *passwords,
                       size_t n);
/**
 * sv_ss_keyring_init() that copies the key of user i from @p was (index @p from[i]) when
 * @p from[i] >= 0 and @p was has the same cipher, instead of deriving it (a reload
 * that changes one user of 50 000 derives one key). @p was and @p from may be NULL.
 * @return as sv_ss_keyring_init().
 */
int sv_ss_keyring_init_from(sv_ss_keyring *ring, enum sv_ss_cipher cipher,
                            const char *const *passwords, size_t n, const sv_ss_keyring *was,
                            const int *from);
/** Free the keys of a keyring and zero it. Idempotent. */
void sv_ss_keyring_deinit(sv_ss_keyring *ring);

/**
 * The order in which a trial decryption tries a keyring's users after its hint: most
 * recently matched first (a doubly linked list over the indices; a match moves to the front in
 * O(1)). Mutable: owned by one thread (a worker keeps one per listener and keyring), never
 * shared. Built for a keyring of exactly n users; a trial ignores an order of another size.
 */
typedef struct sv_order { /* proto_ext.h's struct sv_order */
    uint32_t *next, *prev; /**< n links each; n = the end of the list */
    uint32_t head;         /**< the most recently matched user (n when empty) */
    size_t n;
} sv_ss_order;

/**
 * Make @p o the order 0, 1, ..., n-1 over @p n users (n < UINT32_MAX).
 * @return 0, -ENOMEM or -EINVAL (too many users); on failure @p o is empty (n = 0).
 */
int sv_ss_order_init(sv_ss_order *o, size_t n);
/** Free @p o's links and zero it. Idempotent. */
void sv_ss_order_deinit(sv_ss_order *o);
/** Move user @p i (< o->n, else nothing) to the front of @p o. O(1). */
void sv_ss_order_touch(sv_ss_order *o, size_t i);
/** The first user of @p o, or o->n when it is empty. */
size_t sv_ss_order_first(const sv_ss_order *o);
/** The user after @p i (< o->n) in @p o, or o->n at the end. */
size_t sv_ss_order_next(const sv_ss_order *o, size_t i);

/**
 * How one trial decryption walks a keyring (to identify a returning client in one
 * trial): the hint first, then every other user in @p order (or in index order when NULL). A
 * hint is only a first guess: a wrong one costs one trial, the walk still finds the right user.
 */
typedef struct sv_ss_guide {
    int hint;           /**< keyring index to try first, or -1 */
    sv_ss_order *order; /**< borrowed; the matched user moves to its front; may be NULL */
    unsigned limit;     /**< most keys to try (the first guesses); 0 = every key. A trial cut
                             by it says -EAGAIN: the caller runs sv_ss_scan() elsewhere (a
                             full scan never runs on a worker's loop) */
    unsigned trials;    /**< out: keys tried by the last trial decryption */
} sv_ss_guide;

/** The guide that tries @p hint first (-1: none), then the others in @p order (borrowed; NULL:
 *  index order), at most @p limit keys (0: all); its trials count starts at 0. */
static inline sv_ss_guide sv_ss_guide_make(int hint, sv_ss_order *order, unsigned limit)
{
    return (sv_ss_guide){.hint = hint, .order = order, .limit = limit};
}

/**
 * A full trial decryption of one first chunk or datagram, for a scan run off the worker loop:
 * every key of @p ring in index order, until one opens the AEAD of @p in.
 * Thread-safe: reads @p ring and @p in only (works on a copy, with its own cipher context).
 * @param in  salt ‖ ciphertext ‖ tag: a TCP connection's salt and length chunk (the bytes of
 *            SV_FX_SCAN), or a whole UDP datagram
 * @param n   bytes at @p in (> salt + tag)
 * @param trials  receives the keys tried (may be NULL)
 * @return the keyring index of the first key that opens it, -EBADMSG when none does, -EPROTO
 *         when @p n is too short, -ENOMEM or -EINVAL.
 */
int sv_ss_scan(const sv_ss_keyring *ring, const uint8_t *in, size_t n, unsigned *trials);

enum sv_ss_state { SV_SS_AUTH = 0, SV_SS_HEADER, SV_SS_RELAY, SV_SS_FAILED };

/** Server-side TCP state for one connection (in every connection: fields ordered so that no
 *  padding is left). Zero it, then sv_ss_tcp_init(). */
typedef struct sv_ss_tcp {
    enum sv_ss_state state;
    enum sv_ss_cipher cipher;
    int user;                  /**< index into the keyring once authenticated, else -1 */
    int scan_user;
    sv_aead open;              /**< client→server direction */
    sv_aead seal;              /**< server→client direction */
    bool salt_sent;            /**< the seal direction is keyed: its salt went out */
    bool scanned;              /**< a scan's answer came (sv_ss_tcp_scan_result): AUTH tries
                                    scan_user alone, or fails when it is -1 */
    uint16_t pending_len;      /**< payload length of a chunk whose length was opened, 0 = none */
    uint16_t _addr_len;        /**< private: plaintext bytes of an address split over chunks */
    sv_ss_guide guide;         /**< how AUTH walks the keyring: no hint and index order after
                                    init; the caller may set both before the first feed */
    void (*rng)(uint8_t *buf, size_t n); /**< salt source; NULL = OpenSSL RAND_bytes */
    uint8_t *_addr;            /**< private: those bytes, SV_DEST_WIRE_MAX allocated only while
                                    an address is split (no idle buffer), else NULL */
} sv_ss_tcp;

/** Prepare @p c for a new connection; allocates nothing (the keys come with the salts; an address
 * split over chunks gets a buffer until it is complete). @return 0, or -EINVAL for an unknown
 * cipher. */
int sv_ss_tcp_init(sv_ss_tcp *c, enum sv_ss_cipher cipher);
/** Forget the keys and free a split address's buffer. Idempotent. */
void sv_ss_tcp_deinit(sv_ss_tcp *c);

/**
 * The answer of the scan that sv_ss_tcp_feed() asked for with -EAGAIN: @p user is
 * the keyring index sv_ss_scan() found, or -1 (none found, or the scan was refused: over the
 * budget). The next feed, with the same bytes, tries that one key (so a wrong answer costs one
 * trial and fails the client, never names a wrong user) or fails with -EBADMSG at once.
 */
void sv_ss_tcp_scan_result(sv_ss_tcp *c, int user);

/** What one sv_ss_tcp_feed() call produced. */
typedef struct sv_ss_out {
    bool authenticated;   /**< this call identified the user (c->user is set) */
    bool open;            /**< this call parsed the target address: dest is valid */
    sv_dest dest;
    uint8_t *data;        /**< plaintext for the outbound, inside the caller's buffer; may be NULL */
    size_t len;
} sv_ss_out;

/**
 * Feed client bytes. Processes at most one chunk per call (the salt and the first chunk
 * together on the first call) and decrypts in place, so @p p is modified.
 * @param ring    keys to try (borrowed for the call)
 * @param replay  salt filter, checked only after the first chunk authenticated; may be NULL
 * @return bytes consumed (0 = need more bytes: keep them and call again with more; the core never
 *         needs more than SV_SS_SALT_MAX + SV_SS_NEED_MAX buffered);
 *         -EBADMSG: authentication failed (wrong key / probe, or corrupt chunk later);
 *         -EPROTO: bad length (> 0x3FFF) or bad address; -EEXIST: replayed salt; -ENOMEM:
 *         no buffer for an address split over chunks.
 *         After an error the core is in SV_SS_FAILED and takes no more input. But -EAGAIN:
 *         c->guide.limit keys did not open the first chunk and the others were not tried;
 *         nothing consumed, the core still in SV_SS_AUTH: scan the salt and length chunk (the
 *         first salt + 18 bytes) with sv_ss_scan(), give the answer to
 *         sv_ss_tcp_scan_result(), and feed the same bytes again.
 */
ssize_t sv_ss_tcp_feed(sv_ss_tcp *c, const sv_ss_keyring *ring, sv_replay *replay, uint8_t *p,
                       size_t n, sv_ss_out *out);

/**
 * Seal @p len payload bytes (1..SV_SS_CHUNK_MAX) in place for the client. The payload is at
 * buf + SV_SS_SEAL_HEAD and buf has SV_SS_SEAL_TAIL spare bytes after it. On the first call the
 * salt is written too. Needs c->user >= 0 (the user's key is taken from @p ring).
 * @param wire  receives the start of the wire bytes inside buf
 * @return the wire length, or -EINVAL.
 */
ssize_t sv_ss_tcp_seal(sv_ss_tcp *c, const sv_ss_keyring *ring, uint8_t *buf, size_t len,
                       uint8_t **wire);

/** Wire bytes sv_ss_tcp_seal_to() needs at most for @p len payload bytes. */
#define SV_SS_SEALED_MAX(len)                                                                      \
    (SV_SS_SALT_MAX + ((len) + SV_SS_CHUNK_MAX - 1) / SV_SS_CHUNK_MAX * (2 + 2 * SV_SS_TAG) + (len))

/**
 * Seal @p len payload bytes (any length > 0) from @p in into @p out as consecutive chunks of at
 * most SV_SS_CHUNK_MAX, preceded by the salt on the first call: the same wire as calling
 * sv_ss_tcp_seal() once per chunk, without copying the payload. Needs c->user >= 0.
 * @return the wire length, -EMSGSIZE when @p cap < SV_SS_SEALED_MAX(len) would be needed, or
 *         -EINVAL.
 */
ssize_t sv_ss_tcp_seal_to(sv_ss_tcp *c, const sv_ss_keyring *ring, const uint8_t *in, size_t len,
                          uint8_t *out, size_t cap);

/**
 * Open one client datagram in place (§2.4): trial decryption over the keyring.
 * @param user     receives the keyring index
 * @param dest     receives the destination
 * @param payload  receives the payload start inside @p pkt
 * @return payload length (>= 0); -EBADMSG when no key opens it; -EPROTO for a bad address or a
 *         packet shorter than salt + tag.
 */
ssize_t sv_ss_udp_open(const sv_ss_keyring *ring, uint8_t *pkt, size_t n, int *user,
                       sv_dest *dest, uint8_t **payload);

/**
 * Seal one reply datagram: salt | AEAD(address of @p from ‖ payload) into @p out.
 * @return wire length, or -EMSGSIZE when @p cap is too small.
 */
ssize_t sv_ss_udp_seal(enum sv_ss_cipher cipher, const uint8_t *key, const sv_dest *from,
                       const uint8_t *payload, size_t n, uint8_t *out, size_t cap,
                       void (*rng)(uint8_t *buf, size_t n));

/**
 * sv_ss_udp_open() / sv_ss_udp_seal() with a caller-owned cipher context @p ctx (zeroed the first
 * time, re-keyed on every call, freed by the caller with sv_aead_deinit()), so the per-datagram
 * path allocates nothing. Same results and errors.
 */
ssize_t sv_ss_udp_open_ctx(const sv_ss_keyring *ring, uint8_t *pkt, size_t n, int *user,
                           sv_dest *dest, uint8_t **payload, sv_aead *ctx);
/**
 * sv_ss_udp_open_ctx() walking the keyring as @p guide says (hint, then its order; NULL = index
 * order), which records the keys tried in guide->trials. Same results and errors, and -EAGAIN
 * when guide->limit keys did not open it and the others were not tried (the datagram is as it
 * was: scan it with sv_ss_scan(), then open it again with the answer as the hint and a limit
 * of 1).
 */
ssize_t sv_ss_udp_open_guided(const sv_ss_keyring *ring, sv_ss_guide *guide, uint8_t *pkt,
                              size_t n, int *user, sv_dest *dest, uint8_t **payload, sv_aead *ctx);
ssize_t sv_ss_udp_seal_ctx(enum sv_ss_cipher cipher, const uint8_t *key, const sv_dest *from,
                           const uint8_t *payload, size_t n, uint8_t *out, size_t cap,
                           void (*rng)(uint8_t *buf, size_t n), sv_aead *ctx);

#endif
