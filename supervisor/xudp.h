/*
 * The XUDP GlobalID table of one worker (PROTOCOLS-2.md §5.3 items 3 and 5): which UDP
 * association carries the XUDP session a client named with an 8-byte GlobalID, so that a New
 * frame with that GlobalID on another Mux.Cool connection re-attaches it (same outbound socket,
 * same port the remote peers talk to) instead of opening a new one.
 *
 * Keys are (listener, user, GlobalID): a GlobalID is only meaningful to the user that sent it,
 * and an association keeps the inbound settings it was opened with. An association is attached
 * (a live mux session carries it) or detached (its connection ended; kept SV_XUDP_KEEP_MS for a
 * reconnecting client, then expired). Attached entries are bounded by the sessions of the
 * worker's connections; detached ones by SV_XUDP_DETACHED_MAX per worker (the oldest goes
 * first). Per worker because an association's sockets live on its worker's loop: a client whose
 * new connection lands on another worker gets a new association (README "XUDP").
 *
 * Sans-I/O: no clock (times are given), no log; entries point at opaque associations.
 */
#ifndef SV_XUDP_H
#define SV_XUDP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SV_XUDP_GID_LEN 8
#define SV_XUDP_KEEP_MS 60000u    /**< a detached association waits this long (§5.3 item 5) */
#define SV_XUDP_DETACHED_MAX 256u /**< detached associations per worker */

/** The identity of an XUDP session. */
typedef struct sv_xudp_key {
    const void *listener; /**< the worker listener it came in on (compared as a pointer) */
    uint64_t user;        /**< the principal's user id */
    uint8_t gid[SV_XUDP_GID_LEN];
} sv_xudp_key;

typedef struct sv_xudp_entry {
    sv_xudp_key key;
    void *assoc;       /**< the association (not owned) */
    bool detached;
    uint64_t since_ms; /**< detached at (the caller's clock, ms) */
} sv_xudp_entry;

/** One worker's table: zero-initialise it; sv_xudp_table_free() at the end. */
typedef struct sv_xudp_table {
    sv_xudp_entry *v;
    size_t n, cap;
    size_t n_detached;
    size_t max_detached; /**< 0 = SV_XUDP_DETACHED_MAX (tests set a smaller bound) */
} sv_xudp_table;

/** Is @p gid (8 bytes) all zeros, i.e. "no GlobalID: never re-attached" (§5.3 item 3)? */
bool sv_xudp_gid_none(const uint8_t *gid);

/**
 * Record @p assoc, attached, under @p key. The caller looked the key up first (sv_xudp_find);
 * a second entry with one key is never made.
 * @return 0, or -ENOMEM (the association is then served without re-attach).
 */
int sv_xudp_add(sv_xudp_table *t, const sv_xudp_key *key, void *assoc);

/** The entry of @p key (attached or detached), or NULL. Valid until the table changes. */
sv_xudp_entry *sv_xudp_find(sv_xudp_table *t, const sv_xudp_key *key);

/**
 * Mark @p assoc detached at @p now_ms (its connection ended). When that makes more detached
 * entries than the bound, the oldest detached one leaves the table and is returned: the caller
 * closes it. @return that association, or NULL (also when @p assoc is not in the table).
 */
void *sv_xudp_detach(sv_xudp_table *t, void *assoc, uint64_t now_ms);

/** Mark the entry of @p assoc attached again (a New frame with its GlobalID). */
void sv_xudp_attach(sv_xudp_table *t, void *assoc);

/** Forget @p assoc (it closes). Unknown associations are ignored. */
void sv_xudp_remove(sv_xudp_table *t, void *assoc);

/**
 * Take out one detached entry older than SV_XUDP_KEEP_MS at @p now_ms.
 * @return its association (the caller closes it), or NULL when none has expired.
 */
void *sv_xudp_expired(sv_xudp_table *t, uint64_t now_ms);

/** Free the table's memory (not the associations). */
void sv_xudp_table_free(sv_xudp_table *t);

#endif
