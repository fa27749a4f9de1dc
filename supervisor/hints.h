/*
 * Who a new client probably is (hints.c): each worker listener's IP hints and
 * most-recently-matched order over its handler's users, learnt at each login, shared with the
 * other workers, and exported / imported across a restart (sv_hints_export, sv_hints_import).
 */
#ifndef SV_HINTS_H
#define SV_HINTS_H

#include "supervisor/shared.h"

/* ---- hints across a restart (sv_hints_export, sv_hints_import) ------------------- */

/** Where the workers add their hints for sv_hints_export(): shared by the caller and each
 *  message posted, freed by the last reference (sv__hints_release). */
struct sv_hints_out {
    pthread_mutex_t mu;  /**< guards everything below; cv: a worker answered */
    pthread_cond_t cv;
    unsigned refs;       /**< the caller's and each message's not yet handled */
    unsigned answered;   /**< workers that added theirs */
    bool closed;         /**< the caller took the result: later answers add nothing */
    bool short_of_memory; /**< a worker could not add all of its hints */
    sv_ip_hint *v;       /**< malloc'ed, grown by the workers */
    size_t n, cap;
};

/** One hint for a listener's tables: its user by index in the message's handler. */
typedef struct sv_hint_row {
    uint8_t ip[16];
    int32_t idx;
    uint32_t age_s;
} sv_hint_row;

/** The hints for one listener, shared (read-only) by the messages to every worker. */
struct sv_hints_in {
    _Atomic unsigned refs;
    size_t n;
    bool matched; /**< just matched on another worker: each row's user also moves to
                       the front of the listener's order, as a match there would move it */
    sv_hint_row rows[];
};

/**
 * Add every live hint of @p w's listeners whose user the listener's handler still admits (same
 * index, same principal) to @p out, as (inbound tag, IP, user id, age); sets short_of_memory
 * when not all fit. Worker thread (SV_MSG_HINTS_EXPORT). (hints.c)
 */
void sv__hints_export_worker(sv_worker *w, sv_hints_out *out);
/**
 * Put @p in's hints (indexes into @p h) in @p l's table, each as learnt age_s seconds ago, when
 * @p l still serves @p h and keeps hints (two users or more); with in->matched their users also
 * move to the front of @p l's order. Worker thread (SV_MSG_HINTS_IMPORT). (hints.c)
 */
void sv__hints_import_listener(sv_wlistener *l, const sv_handler *h, const sv_hints_in *in);
/** Drop one reference on each of @p out and @p in (any thread; either may be NULL); the last
 *  frees it. (hints.c) */
void sv__hints_release(sv_hints_out *out, sv_hints_in *in);


/**
 * How a new client of @p l served by @p h is identified: *@p hint is the index in
 * @p h of the user who last authenticated from @p client's IP on this worker (-1: none, or that
 * user is no longer at that index), *@p order the worker's most recently matched order of @p h's
 * users (built at the first use after a handler swap; NULL when @p h is not the listener's
 * current handler, has fewer than two users, or memory is short: index order then).
 */
void sv__wl_guide(sv_wlistener *l, const sv_handler *h, const struct sockaddr *client, int *hint,
                  sv_order **order);
/** sv__wl_guide() as a datagram core's guide @p g: its hint and order, limit SV_SS_GUESSES. */
void sv__wl_dgram_guide(sv_wlistener *l, const sv_handler *h, const struct sockaddr *client,
                        sv_dgram_guide *g);

/** User @p idx of @p h authenticated from @p client on @p l: remember it for the IP,
 *  when @p h is still @p l's handler; when that is new to @p l's table (a new IP, another user
 *  of the IP, or an expired entry), tell the same listener of every other worker
 *  (sv_shared.peers: an SV_MSG_HINTS_IMPORT of one row, `matched`). A refresh stays local, so
 *  the other workers' copies expire an hour after they were told. */
void sv__wl_learn(sv_wlistener *l, const sv_handler *h, const struct sockaddr *client, int idx);

/**
 * @p l has a new handler: forget the hints whose user is not at the same index in it (the same
 * principal), so that every hint's principal is one the handler holds and no freed principal's
 * address can come back as another user's. Worker thread. (hints.c)
 */
void sv__wl_swapped(sv_wlistener *l);

#endif
